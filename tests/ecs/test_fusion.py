"""Fused steps and K-step runs give the same results as plain steps."""

import numpy as np
import pytest
import torch
import warp as wp

import ecs
import envs
from ecs.fusion import CPU_BLOCK


def _snapshot(sim: ecs.BatchSim) -> dict[str, np.ndarray]:
    out = {f"obs/{k}": v.cpu().clone().numpy() for k, v in sim.obs.items()}
    out.update({f"final/{k}": v.cpu().clone().numpy() for k, v in sim.final_obs.items()})
    out["rewards"] = sim.rewards.cpu().clone().numpy()
    out["terminated"] = sim.terminated.cpu().clone().numpy()
    out["truncated"] = sim.truncated.cpu().clone().numpy()
    out.update({f"state/{k}": v for k, v in sim.state_dict()["arrays"].items() if k != "singleton/reset"})
    return out


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _random_actions(sim: ecs.BatchSim, steps: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for key, space in sim.action_space.items():
        buf = sim.actions[key]
        low, n = int(space.start), int(space.n)
        out[key] = torch.randint(low, low + n, (steps, *buf.shape), generator=g).to(buf.dtype)
    return out


@pytest.mark.parametrize("schedule_seed", [None, 3])
def test_fused_cartpole_steps_are_bit_identical_to_unfused(device, schedule_seed):
    env = envs.make("cartpole", max_episode_steps=40)
    fused = ecs.BatchSim(env, 48, device=device, fuse=True, schedule_seed=schedule_seed)
    plain = ecs.BatchSim(env, 48, device=device, fuse=False)
    assert fused.fused and not plain.fused
    actions = _random_actions(plain, 300, seed=1)
    ended = 0
    for i in range(300):
        for sim in (fused, plain):
            sim.actions["push"].copy_(actions["push"][i])
            sim.step()
        ended += int((plain.terminated | plain.truncated).sum())
        _assert_same(_snapshot(fused), _snapshot(plain))
    assert ended > 100  # resets, terminations and truncations were exercised


@pytest.mark.parametrize("fuse", [True, False])
def test_run_k_equals_k_steps(device, fuse):
    env = envs.make("cartpole", max_episode_steps=25)
    runner = ecs.BatchSim(env, 16, device=device, fuse=fuse)
    stepper = ecs.BatchSim(env, 16, device=device, fuse=False)
    actions = _random_actions(stepper, 60, seed=2)
    # Constant actions.
    for sim in (runner, stepper):
        sim.actions["push"].copy_(actions["push"][0])
    runner.run(30)
    for _ in range(30):
        stepper.step()
    _assert_same(_snapshot(runner), _snapshot(stepper))
    # Per-step actions, with the staging buffer growing and shrinking.
    for k, start in ((5, 0), (40, 5), (3, 45)):
        runner.run(k, {"push": actions["push"][start : start + k]})
        for i in range(start, start + k):
            stepper.actions["push"].copy_(actions["push"][i])
            stepper.step()
        _assert_same(_snapshot(runner), _snapshot(stepper))


@wp.kernel
def keep_score(world_score_out: wp.array(dtype=wp.float32)):
    """A raw kernel: its own launch shape, so the env cannot be fused."""
    world = wp.tid()
    world_score_out[world] = world_score_out[world] * 1.0


def _foraging_with_a_raw_kernel() -> ecs.EnvSpec:
    env = envs.make("foraging")
    env.systems = [*env.systems, ecs.System(keep_score, ecs.Phase.REWARD, dim="world")]
    return env


def test_run_k_on_an_env_with_raw_kernels(device):
    """An env with a raw kernel cannot be fused; run(k) loops over the captured step."""
    env = _foraging_with_a_raw_kernel()
    with pytest.raises(ecs.EcsError, match=r"cannot be fused: system 'keep_score' is a raw kernel"):
        ecs.BatchSim(env, 4, device=device, fuse=True)
    runner = ecs.BatchSim(env, 6, device=device)
    stepper = ecs.BatchSim(env, 6, device=device)
    assert not runner.fused
    actions = _random_actions(stepper, 50, seed=3)
    runner.run(50, actions)
    for i in range(50):
        stepper.step({k: v[i] for k, v in actions.items()})
    _assert_same(_snapshot(runner), _snapshot(stepper))


def test_fused_foraging_is_bit_identical_to_unfused(device):
    """Foraging spawns, despawns, reads other archetypes and writes shaped observations, all from
    @wp.func systems: fused steps and K-step runs equal unfused steps, and equal the same env with
    a raw kernel added that changes nothing."""
    env = envs.make("foraging", max_episode_steps=30, food_spawn_prob=0.6, poison_spawn_prob=0.4)
    fused = ecs.BatchSim(env, 24, device=device, seed=2)
    plain = ecs.BatchSim(env, 24, device=device, seed=2, fuse=False)
    assert fused.fused and not plain.fused
    actions = _random_actions(plain, 120, seed=8)
    ended = eaten = 0
    for i in range(60):
        for sim in (fused, plain):
            sim.step({k: v[i] for k, v in actions.items()})
        _assert_same(_snapshot(fused), _snapshot(plain))
        ended += int((plain.terminated | plain.truncated).sum())
        eaten += int((plain.rewards != 0).sum())
    fused.run(60, {k: v[60:] for k, v in actions.items()})
    for i in range(60, 120):
        plain.step({k: v[i] for k, v in actions.items()})
    _assert_same(_snapshot(fused), _snapshot(plain))
    assert ended >= 24 and eaten > 20


def test_run_validates_every_step_first(device):
    env = envs.make("cartpole")
    sim = ecs.BatchSim(env, 8, device=device)
    twin = ecs.BatchSim(env, 8, device=device)
    actions = _random_actions(sim, 10, seed=4)
    actions["push"][7, 5] = 3  # step 7 of world 5 is out of range
    # The error names the call, the step inside it, the world and the staged value (not sim.actions).
    with pytest.raises(
        ecs.ActionError,
        match=r"run\(10, actions\): actions\['push'\]\[7\] \(step 7 of the run\) of world 5 is 3.*call run\(\) again",
    ):
        sim.run(10, actions)
        sim.check()
    _assert_same(_snapshot(sim), _snapshot(twin))  # no world advanced, not even for steps 0..6
    with pytest.raises(ecs.EcsError, match="k must be an int >= 1"):
        sim.run(0)
    with pytest.raises(ecs.ActionError, match=r"shape \(4, 8\)"):
        sim.run(4, {"push": torch.zeros(3, 8, dtype=torch.int32)})
    with pytest.raises(ecs.ActionError, match=r"dtype torch\.int32"):
        sim.run(4, {"push": torch.zeros(4, 8, dtype=torch.int64)})
    with pytest.raises(ecs.ActionError, match="exactly the keys"):
        sim.run(4, {})
    _assert_same(_snapshot(sim), _snapshot(twin))


@pytest.mark.parametrize("threads", [2, 3])
def test_threaded_cpu_chunks_match_plain_steps(threads):
    """World chunks on several CPU threads give the same worlds as one serial step."""
    env = envs.make("cartpole", max_episode_steps=20)
    chunked = ecs.BatchSim(env, 37, device="cpu", cpu_threads=threads, params={"force_mag": [10.0, 12.0, 9.0]})
    plain = ecs.BatchSim(env, 37, device="cpu", fuse=False, params={"force_mag": [10.0, 12.0, 9.0]})
    actions = _random_actions(plain, 80, seed=5)
    for i in range(40):
        for sim in (chunked, plain):
            sim.actions["push"].copy_(actions["push"][i])
            sim.step()
        _assert_same(_snapshot(chunked), _snapshot(plain))
    chunked.run(30, {"push": actions["push"][40:70]})
    for i in range(40, 70):
        plain.actions["push"].copy_(actions["push"][i])
        plain.step()
    _assert_same(_snapshot(chunked), _snapshot(plain))
    chunked.run(10)  # held actions, more steps than were staged
    for _ in range(10):
        plain.step()
    _assert_same(_snapshot(chunked), _snapshot(plain))
    chunked.actions["push"][30] = 9  # a bad action in the last chunk stops every chunk
    with pytest.raises(ecs.ActionError, match="world 30"):
        chunked.step()
    chunked.actions["push"][30] = int(plain.actions["push"][30])
    _assert_same(_snapshot(chunked), _snapshot(plain))


def test_cpu_threads_is_checked():
    with pytest.raises(ecs.EcsError, match="cpu_threads"):
        ecs.BatchSim(envs.make("cartpole"), 4, device="cpu", cpu_threads=0)


def test_find_nan_names_the_system_even_when_fused():
    sim = ecs.BatchSim(envs.make("cartpole"), 8, device="cpu")
    assert sim.fused
    sim.find_nan(3)  # all finite: returns quietly
    sim.params["force_mag"][0] = float("nan")
    with pytest.raises(ecs.EcsError, match=r"after system 'step_cartpole' \(PHYSICS\).*world 0"):
        sim.find_nan(1)
    assert sim.fused


def test_find_nan_reports_out_of_range_values():
    sim = ecs.BatchSim(envs.make("cartpole", x_threshold=100.0), 4, device="cpu")
    sim.actions["push"].fill_(1)
    sim.find_nan(3, bounds={"singleton/cart_position": (-5.0, 5.0)})  # in range: quiet
    with pytest.raises(ecs.EcsError, match=r"outside \[-0\.06, 0\.06\] after system 'step_cartpole'.*in world \d"):
        for _ in range(50):  # pushed right, every cart leaves [-0.06, 0.06] within a few steps
            sim.find_nan(1, bounds={"singleton/cart_position": (-0.06, 0.06)})
    with pytest.raises(ecs.EcsError, match="unknown arrays"):
        sim.find_nan(1, bounds={"singleton/nope": (0, 1)})
    spawned = ecs.BatchSim(envs.make("foraging"), 4, device="cpu")
    spawned.find_nan(5, bounds={"table/food/age": (0, 10_000)})  # live rows only


def test_run_accepts_numpy_actions_per_step():
    env = envs.make("cartpole")
    runner = ecs.BatchSim(env, 4, device="cpu")
    stepper = ecs.BatchSim(env, 4, device="cpu")
    actions = np.array([[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 1, 1]], dtype=np.int32)
    runner.run(3, {"push": actions})
    for row in actions:
        stepper.step({"push": row})
    _assert_same(_snapshot(runner), _snapshot(stepper))


# -- an env with a per-entity system, over several of the fused CPU kernel's world blocks --------


@ecs.component
class Bead:
    """A per-entity value that decays towards the world's drive."""

    value: wp.float32


@ecs.component(singleton=True)
class Drive:
    """Action: 0, 1 or 2."""

    value: wp.int32


@ecs.component(singleton=True)
class Level:
    """Observation: a per-world value that grows with the drive."""

    value: wp.float32


@wp.func
def slide_bead(world_drive_in: wp.int32, bead_out: wp.float32):
    return bead_out * 0.75 + float(world_drive_in)


@wp.func
def raise_level(gain: wp.float32, world_drive_in: wp.int32, world_level_out: wp.float32):
    return world_level_out + gain * float(world_drive_in)


@wp.func
def judge_level(world_level_in: wp.float32, world_reward_out: wp.float32, world_terminated_out: wp.bool):
    return world_level_in, world_level_in > 6.0


@wp.func
def reset_level(world_rng_out: wp.uint32, world_level_out: wp.float32):
    state = world_rng_out
    return state, wp.randf(state, 0.0, 2.0)


@wp.func
def reset_bead(world: wp.int32, row: wp.int32, bead_out: wp.float32):
    return float(world % 7 + row)


def _bead_env() -> ecs.EnvSpec:
    return ecs.EnvSpec(
        name="fusion_beads",
        config=None,
        archetypes=[ecs.Archetype("bead", (Bead,), capacity=3)],
        singletons=[Drive, Level],
        systems=[
            ecs.System(slide_bead, ecs.Phase.PHYSICS),
            ecs.System(raise_level, ecs.Phase.PHYSICS),
            ecs.System(judge_level, ecs.Phase.REWARD),
            ecs.System(reset_level, ecs.Phase.RESET),
            ecs.System(reset_bead, ecs.Phase.RESET),
        ],
        actions={"drive": ecs.Action(Drive, low=0, high=2)},
        observations={"level": ecs.Observation(Level)},
        max_episode_steps=9,
        params=[ecs.Param("gain", wp.float32, [0.5, 1.0, 1.5])],
    )


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("make_env", [_bead_env, lambda: envs.make("cartpole", max_episode_steps=30)])
def test_fused_run_on_cpu_threads_and_world_blocks(make_env, threads):
    """On CPU a thread steps its worlds block by block, K times: over 3 blocks and a part (1
    thread), or 2 blocks and parts (2 threads), or a block and a part each (3), run(k) equals
    K plain steps."""
    env = make_env()
    n = 3 * CPU_BLOCK + 37
    runner = ecs.BatchSim(env, n, device="cpu", fuse=True, cpu_threads=threads)
    stepper = ecs.BatchSim(env, n, device="cpu", fuse=False)
    assert runner.fused
    if env.archetypes:  # some live beads, different in every world
        alive = (np.arange(n)[:, None] + np.arange(3)[None, :]) % 4 != 0
        for sim in (runner, stepper):
            sim.tensor("bead", "alive").copy_(torch.from_numpy(alive.astype(np.int32)))
            sim.tensor("bead", "bead").copy_(torch.from_numpy(np.tile(np.arange(3.0, dtype=np.float32), (n, 1))))
    actions = _random_actions(stepper, 60, seed=7)
    runner.run(40, {key: a[:40] for key, a in actions.items()})
    for i in range(40):
        stepper.step({key: a[i] for key, a in actions.items()})
    _assert_same(_snapshot(runner), _snapshot(stepper))
    runner.run(20)  # held actions
    for _ in range(20):
        stepper.step()
    _assert_same(_snapshot(runner), _snapshot(stepper))


@pytest.mark.parametrize("make_env", [_bead_env, lambda: envs.make("cartpole", max_episode_steps=30)])
def test_cuda_form_of_the_fused_kernel_matches_plain_steps(make_env, monkeypatch):
    """The CUDA kernel (a thread per world, K steps in registers) is plain Warp code: run on the
    CPU, its steps and K-step runs equal the unfused steps."""
    from ecs import executors, fusion

    def cuda_form(*args, **kwargs):
        return fusion.build_fused(*args, **{**kwargs, "device_is_cpu": False})

    monkeypatch.setattr(executors, "build_fused", cuda_form)
    env = make_env()
    n = 70
    runner = ecs.BatchSim(env, n, device="cpu", fuse=True, cpu_threads=1)
    stepper = ecs.BatchSim(env, n, device="cpu", fuse=False)
    assert runner.executor.recorder.kernel.dim is None  # one thread per world: the CUDA form
    if env.archetypes:
        alive = (np.arange(n)[:, None] + np.arange(3)[None, :]) % 4 != 0
        for sim in (runner, stepper):
            sim.tensor("bead", "alive").copy_(torch.from_numpy(alive.astype(np.int32)))
    actions = _random_actions(stepper, 80, seed=11)
    for i in range(20):
        for sim in (runner, stepper):
            sim.step({key: a[i] for key, a in actions.items()})
        _assert_same(_snapshot(runner), _snapshot(stepper))
    runner.run(40, {key: a[20:60] for key, a in actions.items()})
    for i in range(20, 60):
        stepper.step({key: a[i] for key, a in actions.items()})
    _assert_same(_snapshot(runner), _snapshot(stepper))
    runner.run(25)
    for _ in range(25):
        stepper.step()
    _assert_same(_snapshot(runner), _snapshot(stepper))


def test_fused_kernels_count_the_bytes_a_step_moves():
    """Cartpole's step reads 4 state floats, the action, the episode counters, the RNG state and
    the observation (an ``_out`` parameter may be read): 48 bytes; it writes those but the action,
    the reward and the three flags: 54 bytes."""
    sim = ecs.BatchSim(envs.make("cartpole"), 4, device="cpu", fuse=True)
    assert sim.step_bytes == (
        4 * 4 + 4 + 3 * 4 + 16,
        4 * 4 + 3 * 4 + 16 + 4 + 1 + 1 + 4,
    )
    beads = ecs.BatchSim(_bead_env(), 4, device="cpu", fuse=True)
    # Reads: level, drive, episode, episode_step, rng; 3 beads and 3 alive flags per world.
    assert beads.step_bytes[0] == 5 * 4 + 3 * 4 + 3 * 4
    # Writes: level, episode, episode_step, rng, reward, terminated, truncated, reset; 3 beads.
    assert beads.step_bytes[1] == 4 * 4 + 4 + 1 + 1 + 4 + 3 * 4
