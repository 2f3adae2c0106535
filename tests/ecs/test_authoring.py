"""Authoring: raw RESET kernels are gated per world, richer @wp.func systems, column bundles."""

import re

import numpy as np
import pytest
import torch
import warp as wp

import ecs
from tests.ecs.test_fusion import _assert_same, _snapshot

wp.set_module_options({"enable_backward": False})


def _sync(t: torch.Tensor) -> None:
    if t.is_cuda:
        torch.cuda.synchronize(t.device)


# -- raw RESET kernels run only for the worlds being reset --------------------------------------


@ecs.component(singleton=True)
class Stop:
    """Action: 1 terminates the episode at this step."""

    value: wp.int32


@ecs.component(singleton=True)
class Mark:
    """Set by the RESET kernels, counted up by PHYSICS."""

    value: wp.int32


@wp.func
def count_mark(world_mark_out: wp.int32):
    return world_mark_out + 1


@wp.func
def judge_stop(world_stop_in: wp.int32, world_terminated_out: wp.bool):
    return world_stop_in != 0


@wp.kernel
def reset_mark_early_return(world_reset_in: wp.array(dtype=wp.int32), world_mark_out: wp.array(dtype=wp.int32)):
    """Gated by an early return."""
    world = wp.tid()
    if world_reset_in[world] == 0:
        return
    world_mark_out[world] = 100 + world


@wp.kernel
def reset_mark_nested(world_reset_in: wp.array(dtype=wp.int32), world_mark_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    if world_reset_in[world] != 0:
        world_mark_out[world] = 100 + world


@wp.kernel
def reset_mark_ungated(world_reset_in: wp.array(dtype=wp.int32), world_mark_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    world_mark_out[world] = 100 + world


@wp.kernel
def reset_mark_far(world_reset_in: wp.array(dtype=wp.int32), world_mark_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    if world_reset_in[world] != 0:
        world_mark_out[world] = 1000 + world


@ecs.system(ecs.Phase.RESET, dim="world", max_worlds=4)
@wp.kernel
def reset_mark_decorated(world_reset_in: wp.array(dtype=wp.int32), world_mark_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    if world_reset_in[world] != 0:
        world_mark_out[world] = 200 + world


@ecs.system(ecs.Phase.PHYSICS, name="count_mark_by_ten")
@wp.func
def count_mark_ten(world_mark_out: wp.int32):
    return world_mark_out + 10


@wp.kernel
def reset_mark_late_gate(world_reset_in: wp.array(dtype=wp.int32), world_mark_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    world_mark_out[world] = 0
    if world_reset_in[world] == 0:
        return
    world_mark_out[world] = 100 + world


@wp.kernel
def reset_mark_partial_gate(world_reset_in: wp.array(dtype=wp.int32), world_mark_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    if world_reset_in[world] != 0:
        world_mark_out[world] = 100 + world
    world_mark_out[world] = world_mark_out[world] + 0


@wp.kernel
def reset_mark_no_flag(world_mark_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    world_mark_out[world] = 100 + world


def _mark_env(reset_kernel) -> ecs.EnvSpec:
    return ecs.EnvSpec(
        name="authoring_mark",
        config=None,
        singletons=[Stop, Mark],
        systems=[
            ecs.System(count_mark, ecs.Phase.PHYSICS),
            ecs.System(judge_stop, ecs.Phase.REWARD),
            ecs.System(reset_kernel, ecs.Phase.RESET, dim="world"),
        ],
        actions={"stop": ecs.Action(Stop, low=0, high=1)},
    )


@pytest.mark.parametrize("kernel", [reset_mark_early_return, reset_mark_nested])
def test_gated_raw_reset_kernel_touches_only_reset_worlds(device, kernel):
    sim = ecs.BatchSim(_mark_env(kernel), 4, device=device)
    mark = sim.tensor("world", "mark")
    np.testing.assert_array_equal(mark.cpu().numpy(), [100, 101, 102, 103])
    sim.step()
    np.testing.assert_array_equal(mark.cpu().numpy(), [101, 102, 103, 104])
    sim.reset(torch.tensor([False, True, False, False]))
    np.testing.assert_array_equal(mark.cpu().numpy(), [101, 101, 103, 104])
    # World 2 ends: its same-step reset touches it alone.
    sim.actions["stop"].copy_(torch.tensor([0, 0, 1, 0], dtype=torch.int32))
    _sync(sim.actions["stop"])
    sim.step()
    np.testing.assert_array_equal(mark.cpu().numpy(), [102, 102, 102, 105])


@pytest.mark.parametrize(
    ("kernel", "where"),
    [
        (reset_mark_ungated, "line"),
        (reset_mark_late_gate, "line"),
        (reset_mark_partial_gate, "line"),
        (reset_mark_no_flag, "needs a world_reset_in parameter"),
    ],
)
def test_ungated_raw_reset_kernel_is_refused(kernel, where):
    with pytest.raises(ecs.GraphError) as info:
        ecs.BatchSim(_mark_env(kernel), 2, device="cpu")
    msg = str(info.value)
    assert kernel.key in msg and "(RESET)" in msg and where in msg
    assert "if world_reset_in[world] == 0:" in msg and "return" in msg  # the fix, spelt out


# -- @wp.func systems with shaped singletons, indices, views of other archetypes and spawning ----
#
# A predator-prey toy: two hunters (one row each, steered by a per-agent action) chase prey that
# spawn at random, flee from the nearest hunter, and are despawned when caught; each hunter is
# rewarded per catch. Every system is a @wp.func, so the env fuses.

N_HUNTERS = 2


@ecs.component
class HunterPos:
    """Hunter position [m]."""

    value: wp.vec2


@ecs.component
class PreyPos:
    """Prey position [m]."""

    value: wp.vec2


@ecs.component
class PreyVel:
    """Prey velocity [m/step]."""

    value: wp.vec2


@ecs.component(singleton=True, shape=(N_HUNTERS,))
class Steer:
    """Action: 0 stay, 1 +x, 2 -x, 3 +y, 4 -y, per hunter."""

    value: wp.int32


@ecs.component(singleton=True, shape=(N_HUNTERS, 2))
class Sight:
    """Observation: per hunter, (dx, dy, live prey count) of the nearest prey, and its own position."""

    value: wp.vec3


@ecs.component(singleton=True)
class Caught:
    """Prey caught this episode."""

    value: wp.int32


@wp.func
def steer_hunter(
    world: wp.int32, row: wp.int32, speed: float, world_steer_in: wp.array(dtype=wp.int32), hunter_pos_out: wp.vec2
):
    a = world_steer_in[row]
    d = wp.vec2(0.0, 0.0)
    if a == 1:
        d = wp.vec2(speed, 0.0)
    elif a == 2:
        d = wp.vec2(-speed, 0.0)
    elif a == 3:
        d = wp.vec2(0.0, speed)
    elif a == 4:
        d = wp.vec2(0.0, -speed)
    # The world index enters the dynamics, so a wrong index would show.
    return hunter_pos_out + d * (1.0 + 0.125 * float(world % 3))


@wp.func
def flee_prey(
    hunter__alive_in: wp.array(dtype=wp.int32),
    hunter__hunter_pos_in: wp.array(dtype=wp.vec2),
    prey_pos_in: wp.vec2,
    prey_vel_out: wp.vec2,
):
    """Per prey row: away from the nearest hunter, read through the hunters' view."""
    best = wp.float32(1.0e9)
    away = wp.vec2(0.0, 0.0)
    for h in range(hunter__alive_in.shape[0]):
        if hunter__alive_in[h] != 0:
            d = prey_pos_in - hunter__hunter_pos_in[h]
            dist = wp.length_sq(d)
            if dist < best:
                best = dist
                away = d
    return prey_vel_out * 0.5 + wp.normalize(away) * 0.25


@wp.func
def move_prey(prey_vel_in: wp.vec2, prey_pos_out: wp.vec2):
    return prey_pos_out + prey_vel_in


@wp.func
def spawn_prey(
    world: wp.int32,
    spawn_prob: float,
    world_rng_out: wp.uint32,
    prey__alive_out: wp.array(dtype=wp.int32),
    prey__generation_out: wp.array(dtype=wp.int32),
    prey__overflow_out: wp.array(dtype=wp.int32),
    prey__prey_pos_out: wp.array(dtype=wp.vec2),
    prey__prey_vel_out: wp.array(dtype=wp.vec2),
):
    state = world_rng_out
    roll = wp.randf(state)
    at = wp.vec2(wp.randf(state, -4.0, 4.0), wp.randf(state, -4.0, 4.0))
    free = wp.int32(0)
    for r in range(prey__alive_out.shape[0]):
        if prey__alive_out[r] == 0:
            free += 1
    if roll < spawn_prob and free > 0:
        row = ecs.spawn_view(prey__alive_out, prey__generation_out, prey__overflow_out, world)
        prey__prey_pos_out[row] = at
        prey__prey_vel_out[row] = wp.vec2(0.0, 0.0)
    return state


@wp.func
def catch_prey(
    reach: float,
    hunter__alive_in: wp.array(dtype=wp.int32),
    hunter__hunter_pos_in: wp.array(dtype=wp.vec2),
    prey__prey_pos_in: wp.array(dtype=wp.vec2),
    prey__alive_out: wp.array(dtype=wp.int32),
    world_reward_out: wp.array(dtype=wp.float32),
    world_caught_out: wp.int32,
):
    """Each hunter in turn despawns the live prey within reach, +1 reward per prey."""
    caught = world_caught_out
    for h in range(hunter__alive_in.shape[0]):
        if hunter__alive_in[h] != 0:
            for r in range(prey__alive_out.shape[0]):
                if prey__alive_out[r] != 0:
                    d = prey__prey_pos_in[r] - hunter__hunter_pos_in[h]
                    if wp.length_sq(d) <= reach * reach:
                        ecs.despawn_view(prey__alive_out, r)
                        world_reward_out[h] = world_reward_out[h] + 1.0
                        caught += 1
    return caught


@wp.func
def judge_catches(world_caught_in: wp.int32, world_terminated_out: wp.bool):
    return world_caught_in >= 4


@wp.func
def reset_hunt(
    world: wp.int32,
    world_rng_out: wp.uint32,
    world_caught_out: wp.int32,
    prey__alive_out: wp.array(dtype=wp.int32),
    hunter__alive_out: wp.array(dtype=wp.int32),
    hunter__generation_out: wp.array(dtype=wp.int32),
    hunter__overflow_out: wp.array(dtype=wp.int32),
    hunter__hunter_pos_out: wp.array(dtype=wp.vec2),
):
    for r in range(prey__alive_out.shape[0]):
        ecs.despawn_view(prey__alive_out, r)
    state = world_rng_out
    for h in range(hunter__alive_out.shape[0]):
        if hunter__alive_out[h] == 0:  # the first reset spawns the hunters, which then live on
            ecs.spawn_view(hunter__alive_out, hunter__generation_out, hunter__overflow_out, world)
        hunter__hunter_pos_out[h] = wp.vec2(wp.randf(state, -4.0, 4.0), wp.randf(state, -4.0, 4.0))
    return state, 0


@wp.func
def observe_hunt(
    hunter__hunter_pos_in: wp.array(dtype=wp.vec2),
    prey__alive_in: wp.array(dtype=wp.int32),
    prey__prey_pos_in: wp.array(dtype=wp.vec2),
    world_sight_out: wp.array(dtype=wp.vec3, ndim=2),
):
    for h in range(world_sight_out.shape[0]):
        p = hunter__hunter_pos_in[h]
        best = wp.float32(1.0e9)
        near = wp.vec2(0.0, 0.0)
        count = wp.float32(0.0)
        for r in range(prey__alive_in.shape[0]):
            if prey__alive_in[r] != 0:
                count += 1.0
                d = prey__prey_pos_in[r] - p
                if wp.length_sq(d) < best:
                    best = wp.length_sq(d)
                    near = d
        world_sight_out[h, 0] = wp.vec3(near[0], near[1], count)
        world_sight_out[h, 1] = wp.vec3(p[0], p[1], 0.0)


@wp.func
def within_reach(
    alive: wp.array2d(dtype=wp.int32), at: wp.array2d(dtype=wp.vec2), world: int, row: int, p: wp.vec2, reach: float
) -> bool:
    """A helper written for raw kernels: whole tables and a world index."""
    if alive[world, row] == 0:
        return False
    return wp.length_sq(at[world, row] - p) <= reach * reach


@wp.func
def catch_prey_table(
    world: wp.int32,
    reach: float,
    hunter__alive_in: wp.array2d(dtype=wp.int32),
    hunter__hunter_pos_in: wp.array2d(dtype=wp.vec2),
    prey__prey_pos_in: wp.array2d(dtype=wp.vec2),
    prey__alive_out: wp.array2d(dtype=wp.int32),
    world_reward_out: wp.array2d(dtype=wp.float32),
    world_caught_out: wp.array(dtype=wp.int32),
):
    """``catch_prey`` on whole tables, as a raw per-world kernel would be written (less ``wp.tid()``)."""
    for h in range(hunter__alive_in.shape[1]):
        if hunter__alive_in[world, h] != 0:
            for r in range(prey__alive_out.shape[1]):
                if within_reach(prey__alive_out, prey__prey_pos_in, world, r, hunter__hunter_pos_in[world, h], reach):
                    ecs.despawn(prey__alive_out, world, r)
                    world_reward_out[world, h] = world_reward_out[world, h] + 1.0
                    world_caught_out[world] = world_caught_out[world] + 1


def hunt_env(max_episode_steps: int = 12, *, table: bool = False) -> ecs.EnvSpec:
    return ecs.EnvSpec(
        name="authoring_hunt",
        config=None,
        archetypes=[
            ecs.Archetype("hunter", (HunterPos,), capacity=N_HUNTERS),
            ecs.Archetype("prey", (PreyPos, PreyVel), capacity=5),
        ],
        singletons=[Steer, Sight, Caught],
        systems=[
            ecs.System(steer_hunter, ecs.Phase.ACT),
            ecs.System(spawn_prey, ecs.Phase.ACT),
            ecs.System(flee_prey, ecs.Phase.ACT),
            ecs.System(move_prey, ecs.Phase.PHYSICS),
            ecs.System(catch_prey_table if table else catch_prey, ecs.Phase.COLLIDE),
            ecs.System(judge_catches, ecs.Phase.REWARD),
            ecs.System(reset_hunt, ecs.Phase.RESET),
            ecs.System(observe_hunt, ecs.Phase.OBSERVE),
        ],
        actions={"steer": ecs.Action(Steer, low=0, high=4)},
        observations={"sight": ecs.Observation(Sight)},
        num_agents=N_HUNTERS,
        max_episode_steps=max_episode_steps,
        resources={"speed": 0.5, "reach": 2.0, "spawn_prob": 0.6},
    )


def _random_actions(sim: ecs.BatchSim, steps: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"steer": torch.randint(0, 5, (steps, sim.num_worlds, N_HUNTERS), generator=g, dtype=torch.int32)}


def _hunt_pair(n: int, **kwargs) -> tuple[ecs.BatchSim, ecs.BatchSim]:
    fused = ecs.BatchSim(hunt_env(), n, device="cpu", fuse=True, **kwargs)
    plain = ecs.BatchSim(hunt_env(), n, device="cpu", fuse=False)
    assert fused.fused and not plain.fused
    return fused, plain


def test_func_systems_with_views_indices_and_spawning_fuse_bit_identically():
    """Shaped action, observation and reward, world and row indices, views of another archetype,
    spawn and despawn: fused steps equal unfused ones over episodes that end and reset."""
    fused, plain = _hunt_pair(19)
    actions = _random_actions(plain, 60, seed=21)
    ended = terminated = caught = spawned = 0
    for i in range(60):
        for sim in (fused, plain):
            sim.step({"steer": actions["steer"][i]})
        _assert_same(_snapshot(fused), _snapshot(plain))
        ended += int(plain.terminated.sum() + plain.truncated.sum())
        terminated += int(plain.terminated.sum())
        caught += int(plain.rewards.sum())
        spawned = max(spawned, int(plain.tensor("prey", "generation").sum()))
    assert terminated > 2 and ended > 40 and caught > 20 and spawned > 50
    assert plain.rewards.shape == (19, N_HUNTERS) and plain.obs["sight"].shape == (19, N_HUNTERS, 2, 3)


def test_func_systems_with_views_fuse_in_k_step_runs():
    fused, plain = _hunt_pair(11)
    actions = _random_actions(plain, 50, seed=22)
    fused.run(30, {"steer": actions["steer"][:30]})
    for i in range(30):
        plain.step({"steer": actions["steer"][i]})
    _assert_same(_snapshot(fused), _snapshot(plain))
    fused.run(20)  # held actions
    for _ in range(20):
        plain.step()
    _assert_same(_snapshot(fused), _snapshot(plain))


def test_func_systems_with_views_on_cpu_threads_and_in_cuda_form(monkeypatch):
    threaded, plain = _hunt_pair(23, cpu_threads=3)
    actions = _random_actions(plain, 40, seed=23)
    threaded.run(40, {"steer": actions["steer"]})
    for i in range(40):
        plain.step({"steer": actions["steer"][i]})
    _assert_same(_snapshot(threaded), _snapshot(plain))

    from ecs import executors, fusion

    monkeypatch.setattr(
        executors, "build_fused", lambda *a, **k: fusion.build_fused(*a, **{**k, "device_is_cpu": False})
    )
    cuda_form, plain = _hunt_pair(9)
    assert cuda_form.executor.recorder.kernel.dim is None  # a thread per world, K steps in registers
    for i in range(15):
        for sim in (cuda_form, plain):
            sim.step({"steer": actions["steer"][i, :9]})
    cuda_form.run(25, {"steer": actions["steer"][15:40, :9]})
    for i in range(15, 40):
        plain.step({"steer": actions["steer"][i, :9]})
    _assert_same(_snapshot(cuda_form), _snapshot(plain))


def test_func_systems_on_whole_tables_equal_views_fused_and_chunked():
    """A function may take whole tables (``[world, ...]``) and call helpers written for raw
    kernels; it gives the views' results, fused on CPU threads too (chunks index whole arrays)."""
    views = ecs.BatchSim(hunt_env(), 23, device="cpu", fuse=False)
    table = ecs.BatchSim(hunt_env(table=True), 23, device="cpu", fuse=False)
    fused = ecs.BatchSim(hunt_env(table=True), 23, device="cpu", fuse=True, cpu_threads=3)
    assert fused.fused
    actions = _random_actions(views, 40, seed=24)
    for i in range(20):
        for sim in (views, table, fused):
            sim.step({"steer": actions["steer"][i]})
        _assert_same(_snapshot(table), _snapshot(views))
        _assert_same(_snapshot(fused), _snapshot(views))
    fused.run(20, {"steer": actions["steer"][20:]})
    for i in range(20, 40):
        views.step({"steer": actions["steer"][i]})
    _assert_same(_snapshot(fused), _snapshot(views))
    assert int(views.tensor("world", "caught").sum()) > 0


def test_spawn_and_despawn_from_func_systems_match_a_numpy_count():
    """Prey spawned minus prey caught (and cleared by resets) is the number of live prey."""
    sim = ecs.BatchSim(hunt_env(max_episode_steps=0), 6, device="cpu")
    alive = sim.tensor("prey", "alive")
    generation = sim.tensor("prey", "generation")
    sim.actions["steer"].zero_()
    for _ in range(25):
        live_before = int(alive.sum())
        spawns_before = int(generation.sum())
        sim.step()
        if bool(sim.terminated.any()):
            break
        spawned = int(generation.sum()) - spawns_before
        caught = int(sim.rewards.sum())
        assert int(alive.sum()) == live_before + spawned - caught
        assert int(sim.tensor("world", "caught").sum()) >= caught
    assert int(generation.sum()) > 0


# -- what the graph refuses in @wp.func systems, and what fusion refuses ------------------------


@wp.func
def write_other_per_entity(prey_pos_in: wp.vec2, hunter__hunter_pos_out: wp.array(dtype=wp.vec2)):
    hunter__hunter_pos_out[0] = prey_pos_in


@wp.func
def read_own_rows_while_writing(prey__prey_pos_in: wp.array(dtype=wp.vec2), prey_pos_out: wp.vec2):
    return prey__prey_pos_in[0]


@wp.func
def row_in_per_world(row: wp.int32, world_caught_out: wp.int32):
    return row


@wp.func
def view_as_value(prey__prey_pos_in: wp.vec2, world_caught_out: wp.int32):
    return 0


@wp.func
def view_wrong_ndim(world_steer_in: wp.array(dtype=wp.int32, ndim=3), world_caught_out: wp.int32):
    return 0


@wp.func
def value_as_array(prey_pos_in: wp.array(dtype=wp.vec2), prey_vel_out: wp.vec2):
    return prey_pos_in[0]


@wp.func
def engine_singleton_as_table(world_rng_out: wp.array(dtype=wp.uint32)):
    world_rng_out[0] = wp.uint32(1)


@wp.kernel
def raw_observe(world_caught_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    world_caught_out[world] = 0


def _refused(fn, phase=ecs.Phase.PHYSICS) -> str:
    env = hunt_env()
    env.systems = [*env.systems, ecs.System(fn, phase)]
    with pytest.raises(ecs.GraphError) as info:
        ecs.BatchSim(env, 2, device="cpu")
    return str(info.value)


def test_func_system_refusals_name_the_fix():
    msg = _refused(write_other_per_entity)
    assert "per-entity @wp.func system may not write another archetype" in msg and "per-world" in msg
    msg = _refused(read_own_rows_while_writing)
    assert "'prey__prey_pos_in' reads rows of 'prey' that this per-entity system writes" in msg
    assert "given to per-entity systems only" in _refused(row_in_per_world)
    assert "annotate it wp.array(dtype=vec2f, ndim=1)" in _refused(view_as_value)
    msg = _refused(view_wrong_ndim)
    assert "annotate it wp.array(dtype=int32, ndim=1) (or ndim=2 for the whole table, indexed [world, ...])" in msg
    assert "passed by value" in _refused(value_as_array)
    assert "the engine singleton 'rng' is passed by value" in _refused(engine_singleton_as_table)


def test_why_not_fusable_names_the_raw_kernel():
    env = hunt_env()
    env.systems = [*env.systems, ecs.System(raw_observe, ecs.Phase.OBSERVE)]
    with pytest.raises(ecs.EcsError, match=r"cannot be fused: system 'raw_observe' is a raw kernel"):
        ecs.BatchSim(env, 2, device="cpu", fuse=True)
    assert not ecs.BatchSim(env, 2, device="cpu").fused  # fuse=None falls back to the captured graph


# -- column bundles: one parameter for several columns, reads and writes still declared ----------


@ecs.component
class Pos:
    """Position [m]."""

    value: wp.float32


@ecs.component
class Vel:
    """Velocity [m/step]."""

    value: wp.float32


HIST = ecs.Component("hist", wp.float32, shape=(3,), doc="The last 3 positions [m].")
Ball = ecs.bundle("Ball", [Pos, Vel, HIST, "alive"])
BallView = ecs.bundle("BallView", [Pos, Vel, HIST, "alive"], view=True)


@ecs.component(singleton=True)
class Sum:
    """Sum of live positions."""

    value: wp.float32


@wp.kernel
def push_balls(kick: float, ball_out: Ball):
    world, row = wp.tid()
    if ball_out.alive[world, row] == 0:
        return
    v = ball_out.vel[world, row] + kick * float(row + 1)
    ball_out.vel[world, row] = v
    for i in range(2):
        ball_out.hist[world, row, i] = ball_out.hist[world, row, i + 1]
    ball_out.hist[world, row, 2] = ball_out.pos[world, row]


@wp.func
def move_balls(world_stop_in: wp.int32, ball_out: BallView):
    """Per world: every live ball moves by its velocity (a written view bundle)."""
    for r in range(ball_out.alive.shape[0]):
        if ball_out.alive[r] != 0:
            ball_out.pos[r] = ball_out.pos[r] + ball_out.vel[r]


@wp.func
def sum_balls(ball_in: BallView, world_sum_out: wp.float32):
    total = wp.float32(0.0)
    for r in range(ball_in.alive.shape[0]):
        if ball_in.alive[r] != 0:
            total += ball_in.pos[r] + 0.5 * ball_in.hist[r, 1]
    return total


@wp.func
def sum_balls_table(world: wp.int32, ball_in: Ball, world_sum_out: wp.float32):
    """``sum_balls`` on a bundle of whole columns, indexed by the world."""
    total = wp.float32(0.0)
    for r in range(ball_in.alive.shape[1]):
        if ball_in.alive[world, r] != 0:
            total += ball_in.pos[world, r] + 0.5 * ball_in.hist[world, r, 1]
    return total


@wp.func
def judge_balls(limit: float, world_sum_in: wp.float32, world_terminated_out: wp.bool):
    return world_sum_in > limit


@wp.func
def reset_balls(world: wp.int32, ball_out: BallView, world_sum_out: wp.float32):
    for r in range(ball_out.alive.shape[0]):
        ball_out.alive[r] = wp.where((world + r) % 3 == 0, 0, 1)
        ball_out.pos[r] = float(r) * 0.5
        ball_out.vel[r] = 0.0
        for i in range(3):
            ball_out.hist[r, i] = 0.0
    return 0.0


def _ball_env(*systems, limit: float = 6.0) -> ecs.EnvSpec:
    return ecs.EnvSpec(
        name="authoring_balls",
        config=None,
        archetypes=[ecs.Archetype("ball", (Pos, Vel, HIST), capacity=4)],
        singletons=[Stop, Sum],
        systems=list(systems)
        or [
            ecs.System(move_balls, ecs.Phase.PHYSICS),
            ecs.System(sum_balls, ecs.Phase.REWARD),
            ecs.System(judge_balls, ecs.Phase.REWARD),
            ecs.System(reset_balls, ecs.Phase.RESET),
            ecs.System(push_balls, ecs.Phase.OBSERVE, dim="entity"),
        ],
        actions={"stop": ecs.Action(Stop, low=0, high=1)},
        max_episode_steps=7,
        resources={"kick": 0.25, "limit": limit},
    )


def test_bundles_bind_columns_and_declare_access(device):
    sim = ecs.BatchSim(_ball_env(limit=1e6), 5, device=device)
    tasks = {t.name: t for t in sim.graph.tasks}
    cols = {("column", "ball", n) for n in ("pos", "vel", "hist", "alive")}
    assert tasks["push_balls"].writes == cols and tasks["move_balls"].writes == cols
    assert tasks["sum_balls"].reads == cols and tasks["sum_balls"].writes == {("singleton", "sum")}
    assert "writes: ball.alive, ball.hist, ball.pos, ball.vel" in str(sim.graph)
    # Against numpy: reset, then steps of move (PHYSICS), sum (REWARD) and push (OBSERVE).
    W, f = 5, np.float32
    alive = np.array([[(w + r) % 3 != 0 for r in range(4)] for w in range(W)])
    pos = np.tile(np.arange(4, dtype=f) * f(0.5), (W, 1))
    vel = np.zeros((W, 4), f)
    hist = np.zeros((W, 4, 3), f)

    def push():
        nonlocal vel, hist
        vel = np.where(alive, vel + f(0.25) * np.arange(1, 5, dtype=f), vel)
        hist = np.where(alive[..., None], np.concatenate([hist[..., 1:], pos[..., None]], axis=-1), hist)

    push()  # the reset observes
    for _ in range(4):
        sim.step()
        assert not sim.terminated.any()
        pos = np.where(alive, pos + vel, pos)
        total = np.where(alive, pos + f(0.5) * hist[..., 1], f(0)).sum(axis=1, dtype=f)
        push()
        np.testing.assert_allclose(sim.tensor("world", "sum").cpu().numpy(), total, rtol=1e-6)
        np.testing.assert_array_equal(sim.tensor("ball", "pos").cpu().numpy(), pos)
        np.testing.assert_array_equal(sim.tensor("ball", "vel").cpu().numpy(), vel)
        np.testing.assert_array_equal(sim.tensor("ball", "hist").cpu().numpy(), hist)


def test_bundles_in_func_systems_fuse_bit_identically():
    env = _ball_env(
        ecs.System(move_balls, ecs.Phase.PHYSICS),
        ecs.System(sum_balls, ecs.Phase.REWARD),
        ecs.System(judge_balls, ecs.Phase.REWARD),
        ecs.System(reset_balls, ecs.Phase.RESET),
    )
    fused = ecs.BatchSim(env, 13, device="cpu", fuse=True)
    plain = ecs.BatchSim(env, 13, device="cpu", fuse=False)
    for sim in (fused, plain):
        sim.tensor("ball", "vel").copy_(torch.linspace(-0.5, 1.0, 13 * 4).reshape(13, 4))
    ended = 0
    for _ in range(12):
        for sim in (fused, plain):
            sim.step()
        ended += int(plain.terminated.sum())
        _assert_same(_snapshot(fused), _snapshot(plain))
    fused.run(9)
    for _ in range(9):
        plain.step()
    _assert_same(_snapshot(fused), _snapshot(plain))
    assert ended > 0


def test_whole_column_bundles_in_func_systems_equal_views():
    def env(summer):
        return _ball_env(
            ecs.System(move_balls, ecs.Phase.PHYSICS),
            ecs.System(summer, ecs.Phase.REWARD),
            ecs.System(judge_balls, ecs.Phase.REWARD),
            ecs.System(reset_balls, ecs.Phase.RESET),
        )

    views = ecs.BatchSim(env(sum_balls), 11, device="cpu", fuse=False)
    table = ecs.BatchSim(env(sum_balls_table), 11, device="cpu", fuse=False)
    fused = ecs.BatchSim(env(sum_balls_table), 11, device="cpu", fuse=True, cpu_threads=2)
    assert fused.fused
    for sim in (views, table, fused):
        sim.tensor("ball", "vel").copy_(torch.linspace(-0.5, 1.0, 11 * 4).reshape(11, 4))
    for _ in range(10):
        for sim in (views, table, fused):
            sim.step()
        _assert_same(_snapshot(table), _snapshot(views))
        _assert_same(_snapshot(fused), _snapshot(views))
    assert views.terminated.any() or int(views.tensor("world", "episode").sum()) > 11


BallRes = ecs.resource_bundle("BallRes", {"kick": float, "limit": float})


@wp.kernel
def push_balls_res(res: BallRes, ball_out: Ball):
    """``push_balls`` with its resource from a resource bundle."""
    world, row = wp.tid()
    if ball_out.alive[world, row] == 0:
        return
    v = ball_out.vel[world, row] + res.kick * float(row + 1)
    ball_out.vel[world, row] = v
    for i in range(2):
        ball_out.hist[world, row, i] = ball_out.hist[world, row, i + 1]
    ball_out.hist[world, row, 2] = ball_out.pos[world, row]


@wp.func
def judge_balls_res(res: BallRes, world_sum_in: wp.float32, world_terminated_out: wp.bool):
    return world_sum_in > res.limit


def test_resource_bundles_fill_from_resources():
    def env(pusher, judge):
        return _ball_env(
            ecs.System(move_balls, ecs.Phase.PHYSICS),
            ecs.System(sum_balls, ecs.Phase.REWARD),
            ecs.System(judge, ecs.Phase.REWARD),
            ecs.System(reset_balls, ecs.Phase.RESET),
            *([ecs.System(pusher, ecs.Phase.OBSERVE, dim="entity")] if pusher else []),
        )

    plain = ecs.BatchSim(env(push_balls, judge_balls), 7, device="cpu")
    bundled = ecs.BatchSim(env(push_balls_res, judge_balls_res), 7, device="cpu")
    for _ in range(12):
        for sim in (plain, bundled):
            sim.step()
        _assert_same(_snapshot(bundled), _snapshot(plain))
    assert int(plain.tensor("world", "episode").sum()) > 7  # the limit ended episodes
    fused = ecs.BatchSim(env(None, judge_balls_res), 7, device="cpu", fuse=True)
    unfused = ecs.BatchSim(env(None, judge_balls_res), 7, device="cpu", fuse=False)
    for _ in range(12):
        for sim in (fused, unfused):
            sim.step()
        _assert_same(_snapshot(fused), _snapshot(unfused))
    missing = ecs.resource_bundle("Missing", {"kick": float, "stiffness": float})

    @wp.func
    def judge_missing(res: missing, world_sum_in: wp.float32, world_terminated_out: wp.bool):
        return world_sum_in > res.kick

    with pytest.raises(ecs.GraphError, match=r"field 'stiffness' of resource bundle 'res' is no resource"):
        ecs.BatchSim(env(None, judge_missing), 2, device="cpu")


@wp.kernel
def read_balls_raw(ball_in: Ball, world_sum_out: wp.array(dtype=wp.float32)):
    world = wp.tid()
    world_sum_out[world] = ball_in.pos[world, 0]


@wp.kernel
def write_pos_raw(ball__pos_out: wp.array2d(dtype=wp.float32)):
    world, row = wp.tid()
    ball__pos_out[world, row] = 1.0


@wp.kernel
def wrong_archetype(balls_in: Ball, world_sum_out: wp.array(dtype=wp.float32)):
    _world = wp.tid()


@wp.kernel
def view_in_raw(ball_in: BallView, world_sum_out: wp.array(dtype=wp.float32)):
    _world = wp.tid()


@wp.func
def entity_writes_bundle(pos_in: wp.float32, ball_out: BallView):
    ball_out.pos[0] = pos_in


def _bundle_refused(*systems) -> str:
    with pytest.raises(ecs.GraphError) as info:
        ecs.BatchSim(_ball_env(*systems), 2, device="cpu")
    return str(info.value)


def test_bundle_refusals_name_the_fix():
    P = ecs.Phase.PHYSICS
    msg = _bundle_refused(ecs.System(read_balls_raw, P, dim="world"), ecs.System(write_pos_raw, P, dim="entity"))
    assert "stale read" in msg and "ball.pos" in msg  # a bundle's reads are declared per column
    assert "names no archetype 'balls'" in _bundle_refused(ecs.System(wrong_archetype, P, dim="world"))
    assert "a raw kernel takes bundles made with view=False" in _bundle_refused(ecs.System(view_in_raw, P, dim="world"))
    assert "may not write a bundle" in _bundle_refused(ecs.System(entity_writes_bundle, P))
    wrong = ecs.bundle("Wrong", [("pos", wp.vec2)])  # a (name, dtype) tuple, checked when bound

    @wp.kernel
    def wrong_dtype(ball_in: wrong, world_sum_out: wp.array(dtype=wp.float32)):
        _world = wp.tid()

    assert "holds 'pos' as vec2f(), but archetype 'ball' stores float32()" in _bundle_refused(
        ecs.System(wrong_dtype, P, dim="world")
    )
    axes = ecs.bundle("Axes", [("hist", wp.float32, 2)])  # two trailing axes; the column has one

    @wp.kernel
    def wrong_axes(ball_in: axes, world_sum_out: wp.array(dtype=wp.float32)):
        _world = wp.tid()

    assert "holds 'hist' as float32(-1, -1), but archetype 'ball' stores float32(3,)" in _bundle_refused(
        ecs.System(wrong_axes, P, dim="world")
    )
    with pytest.raises(ecs.GraphError, match="not an entity component"):
        ecs.bundle("Bad", [Pos, "pos"])
    with pytest.raises(ecs.GraphError, match="not a singleton component"):
        ecs.bundle("Bad", [Sum, "alive"])
    with pytest.raises(ecs.GraphError, match="list each column once"):
        ecs.bundle("Twice", [Pos, ("pos", wp.float32)])


# -- bundles of singletons: many per-world values in one parameter --------------------------------

Count = ecs.Component("count", wp.int32, singleton=True, doc="Live balls counted over the episode.")
Peak = ecs.Component("peak", wp.float32, shape=(2,), singleton=True, doc="Largest and smallest sum so far.")
Tallies = ecs.bundle("Tallies", [Count, Peak])
TallyPeak = ecs.bundle("TallyPeak", [("peak", wp.float32, (2,))], singletons=True)


@wp.func
def tally_balls(world: wp.int32, ball_in: Ball, world_sum_in: wp.float32, world_out: Tallies):
    """Per world, after ``sum_balls``: counts live balls, keeps the extreme sums (written through the bundle)."""
    for r in range(ball_in.alive.shape[1]):
        world_out.count[world] = world_out.count[world] + ball_in.alive[world, r]
    world_out.peak[world, 0] = wp.max(world_out.peak[world, 0], world_sum_in)
    world_out.peak[world, 1] = wp.min(world_out.peak[world, 1], world_sum_in)


@wp.kernel
def tally_balls_raw(ball_in: Ball, world_sum_in: wp.array(dtype=wp.float32), world_out: Tallies):
    """``tally_balls`` as a raw per-world kernel."""
    world = wp.tid()
    for r in range(ball_in.alive.shape[1]):
        world_out.count[world] = world_out.count[world] + ball_in.alive[world, r]
    world_out.peak[world, 0] = wp.max(world_out.peak[world, 0], world_sum_in[world])
    world_out.peak[world, 1] = wp.min(world_out.peak[world, 1], world_sum_in[world])


@wp.func
def reset_tallies(world: wp.int32, world_out: Tallies):
    world_out.count[world] = 0
    world_out.peak[world, 0] = -1.0e6
    world_out.peak[world, 1] = 1.0e6


@wp.func
def brake_balls(world: wp.int32, vel_in: wp.float32, world_in: TallyPeak, vel_out: wp.float32):
    """Per entity, reading the bundle: a ball slows down while its world's largest sum is above 2."""
    return wp.where(world_in.peak[world, 0] > 2.0, vel_in * 0.5, vel_in)


def _tally_env(tally) -> ecs.EnvSpec:
    env = _ball_env(
        ecs.System(move_balls, ecs.Phase.PHYSICS),
        ecs.System(sum_balls, ecs.Phase.REWARD),
        ecs.System(judge_balls, ecs.Phase.REWARD),
        ecs.System(tally, ecs.Phase.REWARD, **({} if isinstance(tally, wp.Function) else {"world_local": True})),
        ecs.System(reset_balls, ecs.Phase.RESET),
        ecs.System(reset_tallies, ecs.Phase.RESET),
        ecs.System(brake_balls, ecs.Phase.PHYSICS),
    )
    env.singletons = [*env.singletons, Count, Peak]
    return env


def test_singleton_bundles_match_numpy_fused_raw_and_split():
    """A bundle of singletons (``world_in`` / ``world_out``) declares and binds each singleton: the
    function, its raw twin (on one thread and split over threads) and the fused step agree with numpy."""
    sims = {
        "func": ecs.BatchSim(_tally_env(tally_balls), 9, device="cpu", fuse=False),
        "fused": ecs.BatchSim(_tally_env(tally_balls), 9, device="cpu", fuse=True, cpu_threads=2),
        "raw": ecs.BatchSim(_tally_env(tally_balls_raw), 9, device="cpu"),
        "split": ecs.BatchSim(_tally_env(tally_balls_raw), 9, device="cpu", cpu_threads=2),
    }
    assert sims["fused"].fused
    tasks = {t.name: t for t in sims["raw"].graph.tasks}
    assert tasks["tally_balls_raw"].writes == {("singleton", "count"), ("singleton", "peak")}
    assert ("singleton", "peak") in tasks["brake_balls"].reads
    W, f = 9, np.float32
    vel0 = torch.linspace(-0.5, 1.0, W * 4).reshape(W, 4)
    for sim in sims.values():
        sim.tensor("ball", "vel").copy_(vel0)
    ref = sims["func"]
    count = np.zeros(W, np.int32)
    peak = np.tile(np.array([-1e6, 1e6], f), (W, 1))
    resets = 0
    for _ in range(16):
        episode = ref.tensor("world", "episode").numpy().copy()
        for sim in sims.values():
            sim.step()
        for name, sim in sims.items():
            if name != "func":
                _assert_same(_snapshot(sim), _snapshot(ref))
        # numpy: this step's sum and alive rows (the world's state before any same-step reset)
        ended = ref.tensor("world", "episode").numpy() != episode
        resets += int(ended.sum())
        total = ref.tensor("world", "sum").numpy()
        alive = ref.tensor("ball", "alive").numpy()
        count = np.where(ended, 0, count + alive.sum(axis=1, dtype=np.int32))
        peak = np.where(
            ended[:, None],
            np.array([-1e6, 1e6], f),
            np.stack([np.maximum(peak[:, 0], total), np.minimum(peak[:, 1], total)], 1),
        )
        np.testing.assert_array_equal(ref.tensor("world", "count").numpy(), count)
        np.testing.assert_array_equal(ref.tensor("world", "peak").numpy(), peak)
    assert resets > 0 and (count > 0).any() and (peak[:, 0] > 2.0).any()


@wp.func
def entity_writes_tallies(world: wp.int32, pos_in: wp.float32, world_out: Tallies, vel_out: wp.float32):
    return pos_in


@wp.kernel
def tallies_named_badly(tallies_out: Tallies):
    _world = wp.tid()


Missing = ecs.bundle("Missing", [("count", wp.int32), ("misses", wp.int32)], singletons=True)
Hist = ecs.bundle("Hist", [("hist", wp.float32, (3,))], singletons=True)
Twisted = ecs.bundle("Twisted", [("peak", wp.float32)], singletons=True)


@wp.kernel
def tally_missing(world_out: Missing):
    _world = wp.tid()


@wp.kernel
def tally_hist(world_in: Hist, world_sum_out: wp.array(dtype=wp.float32)):
    _world = wp.tid()


@wp.kernel
def tally_twisted(world_out: Twisted):
    _world = wp.tid()


def test_singleton_bundle_refusals_name_the_fix():
    def refused(system) -> str:
        env = _tally_env(tally_balls)
        env.systems = [*env.systems, system]
        with pytest.raises(ecs.GraphError) as info:
            ecs.BatchSim(env, 2, device="cpu")
        return str(info.value)

    P = ecs.Phase.PHYSICS
    assert "may not write a bundle of singletons" in refused(ecs.System(entity_writes_tallies, P))
    with pytest.raises(ecs.GraphError, match=r"name it world_in \(read\) or world_out"):
        ecs.System(tallies_named_badly, P, dim="world")
    assert "holds 'misses', which is no singleton. Singletons:" in refused(ecs.System(tally_missing, P, dim="world"))
    assert "'hist', which is no singleton (an entity component" in refused(ecs.System(tally_hist, P, dim="world"))
    assert "holds singleton 'peak' as float32(), but it is float32(2,)" in refused(
        ecs.System(tally_twisted, P, dim="world")
    )
    with pytest.raises(ecs.GraphError, match="holds either singletons or the columns of one archetype"):
        ecs.bundle("Mixed", [Count, Pos])
    with pytest.raises(ecs.GraphError, match="drop view=True"):
        ecs.bundle("Viewed", [Count], view=True)


# -- hide-and-seek's ACT, REWARD and OBSERVE systems as @wp.func systems -------------------------


def _raw_twin(func) -> wp.Kernel:
    """The raw per-world kernel a per-world function stands for: ``world = wp.tid()``, singletons
    passed by value read from their tables at ``[world]`` (and those written, ``_out``, written back
    from what it returns, in order), everything else passed through."""
    from ecs.codegen import build_kernel, type_expr

    ns = {"F": func}
    params, args, outs = [], [], []
    for name, t in func.input_types.items():
        if name == "world":
            args.append("world")
        elif name.startswith("world_") and not wp.types.is_array(t):
            params.append(f"{name}: wp.array(dtype={type_expr(t, ns)}, ndim=1)")
            args.append(f"{name}[world]")
            if name.endswith("_out"):
                outs.append(name)
        else:
            params.append(f"{name}: {type_expr(t, ns)}")
            args.append(name)
    src = f"def raw_{func.key}(\n" + "".join(f"    {p},\n" for p in params) + "):\n"
    src += "    world = wp.tid()\n"
    if not outs:
        src += f"    F({', '.join(args)})\n"
    else:
        returned = [f"r{i}" for i in range(len(outs))]
        src += f"    {', '.join(returned)} = F({', '.join(args)})\n"
        src += "".join(f"    {o}[world] = {r}\n" for o, r in zip(outs, returned, strict=True))
    return build_kernel(f"raw_{func.key}", src, ns, "test_authoring_twins")


def test_hide_and_seek_func_systems_equal_their_raw_kernels():
    """act_agents, reward_teams and observe_agents are per-world functions on whole tables; launched
    by the engine's generated kernels they equal the raw kernels they replaced, bit for bit."""
    import envs
    from envs.hide_and_seek import kernels

    env = envs.make("hide_and_seek", max_episode_steps=15, prep_fraction=0.2)
    funcs = {kernels.act_agents.key, kernels.reward_teams.key, kernels.observe_agents.key}
    assert funcs <= {s.fn.key for s in env.systems if s.is_func}
    raw = envs.make("hide_and_seek", max_episode_steps=15, prep_fraction=0.2)
    raw.systems = [
        ecs.System(_raw_twin(s.fn), s.phase, name=s.name, dim="world") if s.fn.key in funcs else s for s in raw.systems
    ]
    a, b = ecs.BatchSim(env, 4, device="cpu", seed=2), ecs.BatchSim(raw, 4, device="cpu", seed=2)
    g = torch.Generator().manual_seed(9)
    rewarded = 0.0
    for _ in range(36):  # two resets
        for key, high in (("move", 11), ("grab", 2), ("lock", 2)):
            value = torch.randint(0, high, a.actions[key].shape, generator=g, dtype=torch.int32)
            a.actions[key].copy_(value)
            b.actions[key].copy_(value)
        a.step()
        b.step()
        _assert_same(_snapshot(a), _snapshot(b))
        rewarded += float(a.rewards.abs().sum())
    assert rewarded > 0


# -- a systems/ kernel on bundles: the broadphase against a numpy reference -----------------------


def _quat_rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Warp's quaternion (x, y, z, w) applied to ``v``."""
    u, w = q[:3], q[3]
    return v + 2.0 * w * np.cross(u, v) + 2.0 * np.cross(u, np.cross(u, v))


@pytest.mark.parametrize("broadphase", ["SORT_SWEEP", "ALL_PAIRS"])
def test_find_pairs_on_bundles_matches_numpy(broadphase):
    """``collision.find_pairs`` takes its body and pair columns as bundles; its candidate pairs are
    the numpy ones computed from the boxes it wrote: overlapping boxes with a movable body (a held
    body and its holder too: grabs happen in this play), and each plane with the movable bodies
    reaching below it."""
    import envs
    from systems import collision
    from systems.geometry import ShapeType
    from systems.rigid_body import Response

    mode = int(collision.Broadphase[broadphase])
    env = envs.make("hide_and_seek", max_episode_steps=30, prep_fraction=0.1)
    env.resources = {**env.resources, "broadphase": mode}
    sim = ecs.BatchSim(env, 3, device="cpu", seed=4)
    task = next(t for t in sim.graph.tasks if t.name == "find_pairs")
    assert ("column", "body", "aabb_lower") in task.writes and ("column", "body", "locked_by") in task.reads
    g = torch.Generator().manual_seed(1)
    checked = 0
    for _ in range(20):
        for key, high in (("move", 11), ("grab", 2), ("lock", 2)):
            sim.actions[key].copy_(torch.randint(0, high, sim.actions[key].shape, generator=g, dtype=torch.int32))
        sim.step()
        col = {n: sim.tensor("body", n).numpy() for n in ("alive", "shape", "response", "locked_by", "position")}
        col["rotation"] = sim.tensor("body", "rotation").numpy()
        lo, hi = sim.tensor("body", "aabb_lower").numpy(), sim.tensor("body", "aabb_upper").numpy()
        ended = (sim.terminated | sim.truncated).numpy()
        for w in np.flatnonzero(~ended):
            movable = (col["response"][w] == int(Response.DYNAMIC)) & (col["locked_by"][w] == 0)
            live = col["alive"][w] != 0
            plane = live & (col["shape"][w] == int(ShapeType.PLANE))
            expected = set()
            nb = len(live)
            for i in range(nb):
                for j in range(i + 1, nb):
                    boxed = live[i] and live[j] and not plane[i] and not plane[j]
                    overlap = np.all(lo[w, i] <= hi[w, j]) and np.all(lo[w, j] <= hi[w, i])
                    if boxed and overlap and (movable[i] or movable[j]):
                        expected.add((i, j))
            for p in np.flatnonzero(plane):
                n = _quat_rotate(col["rotation"][w, p].astype(np.float64), np.array([0.0, 0.0, 1.0]))
                for i in np.flatnonzero(live & movable & ~plane):
                    centre, half = (lo[w, i] + hi[w, i]) * 0.5, (hi[w, i] - lo[w, i]) * 0.5
                    if np.dot(centre - col["position"][w, p], n) - np.abs(n) @ half <= 0.0:
                        expected.add((min(i, p), max(i, p)))
            count = int(sim.tensor("world", "pair_count")[w])
            got = set(
                zip(
                    sim.tensor("pair", "pair_body_a")[w, :count].tolist(),
                    sim.tensor("pair", "pair_body_b")[w, :count].tolist(),
                    strict=True,
                )
            )
            assert count == len(got) and got == expected, (w, got ^ expected)
            assert sim.tensor("pair", "alive")[w].tolist() == [1] * count + [0] * (
                len(sim.tensor("pair", "alive")[w]) - count
            )
            checked += len(expected)
    assert checked > 100


@wp.func
def count_overflow_only(prey__overflow_out: wp.array(dtype=wp.int32)):
    """A per-world function whose only array is an overflow counter (no world axis to count by)."""
    prey__overflow_out[0] = prey__overflow_out[0] + 0


def test_per_world_function_without_world_axis_builds_and_runs():
    env = hunt_env()
    env.systems = [*env.systems, ecs.System(count_overflow_only, ecs.Phase.REWARD)]
    for fuse in (False, True):
        sim = ecs.BatchSim(env, 3, device="cpu", fuse=fuse)
        sim.step()
        sim.check()


# -- entity handles from @wp.func systems ---------------------------------------------------------


@ecs.component(singleton=True)
class Kill:
    """Action: 1 despawns the tracked mote, 2 despawns it and spawns a new one into the freed row."""

    value: wp.int32


@ecs.component(singleton=True)
class Handle:
    """Handle of the mote spawned at the last reset."""

    value: wp.int64


@ecs.component(singleton=True)
class Live:
    """1 while the handle names a live mote (``ecs.is_live_view``)."""

    value: wp.int32


@ecs.component
class Tag:
    """A per-mote value."""

    value: wp.int32


@wp.func
def track_mote(
    world: wp.int32,
    world_kill_in: wp.int32,
    world_handle_in: wp.int64,
    mote__alive_out: wp.array(dtype=wp.int32),
    mote__generation_out: wp.array(dtype=wp.int32),
    mote__overflow_out: wp.array(dtype=wp.int32),
    world_live_out: wp.int32,
):
    if world_kill_in != 0:
        ecs.despawn_view(mote__alive_out, ecs.handle_row(world_handle_in))
    if world_kill_in == 2:
        ecs.spawn_view(mote__alive_out, mote__generation_out, mote__overflow_out, world)
    return wp.where(ecs.is_live_view(world_handle_in, mote__alive_out, mote__generation_out), 1, 0)


@wp.func
def reset_mote(
    world: wp.int32,
    mote__alive_out: wp.array(dtype=wp.int32),
    mote__generation_out: wp.array(dtype=wp.int32),
    mote__overflow_out: wp.array(dtype=wp.int32),
    world_handle_out: wp.int64,
    world_live_out: wp.int32,
):
    for r in range(mote__alive_out.shape[0]):
        ecs.despawn_view(mote__alive_out, r)
    row = ecs.spawn_view(mote__alive_out, mote__generation_out, mote__overflow_out, world)
    return ecs.make_handle(0, row, mote__generation_out[row]), 1


def test_handles_from_func_systems_go_stale():
    env = ecs.EnvSpec(
        name="authoring_handles",
        config=None,
        archetypes=[ecs.Archetype("mote", (Tag,), capacity=2)],
        singletons=[Kill, Handle, Live],
        systems=[ecs.System(track_mote, ecs.Phase.ACT), ecs.System(reset_mote, ecs.Phase.RESET)],
        actions={"kill": ecs.Action(Kill, low=0, high=2)},
    )
    for fuse in (False, True):
        sim = ecs.BatchSim(env, 3, device="cpu", fuse=fuse)
        assert sim.fused == fuse
        live, gen = sim.tensor("world", "live"), sim.tensor("mote", "generation")
        sim.step({"kill": torch.tensor([0, 1, 2], dtype=torch.int32)})
        assert live.tolist() == [1, 0, 0]  # world 2 respawned into the same row: a new generation
        assert gen[:, 0].tolist() == [1, 1, 2] and sim.tensor("mote", "alive")[:, 0].tolist() == [1, 0, 1]
        sim.reset(torch.tensor([False, True, True]))
        assert live.tolist() == [1, 1, 1] and gen[:, 0].tolist() == [1, 2, 3]
        sim.step({"kill": torch.tensor([1, 0, 0], dtype=torch.int32)})
        assert live.tolist() == [0, 1, 1]


@wp.kernel
def reset_mark_float(world_reset_in: wp.array(dtype=wp.int32), world_mark_out: wp.array(dtype=wp.float32)):
    world = wp.tid()
    if world_reset_in[world] != 0:
        world_mark_out[world] = 100.0


def test_a_cuda_variant_runs_in_a_cuda_build_and_is_checked_when_made():
    from ecs.graph import TaskGraph

    cuda = ecs.System(reset_mark_early_return, ecs.Phase.RESET, dim="world")
    both = ecs.System(reset_mark_nested, ecs.Phase.RESET, dim="world", cuda=cuda)
    assert both.on(True) is both and both.on(False) is cuda and cuda.on(False) is cuda
    env = _mark_env(reset_mark_nested)
    env.systems = [*env.systems[:2], both]
    sim = ecs.BatchSim(env, 3, device="cpu")
    reset = [t for t in sim.graph.tasks if t.phase == ecs.Phase.RESET]
    assert [t.kernel.key for t in reset] == ["reset_mark_nested"]
    graph = TaskGraph(
        env.systems, sim.storage.layout, device_is_cpu=False, num_worlds=sim.num_worlds, env_name=env.name
    )
    assert [t.kernel.key for t in graph.tasks if t.phase == ecs.Phase.RESET] == ["reset_mark_early_return"]
    # the variant's reads and writes are the system's
    cpu_graph = TaskGraph(
        env.systems, sim.storage.layout, device_is_cpu=True, num_worlds=sim.num_worlds, env_name=env.name
    )
    assert [(t.reads, t.writes) for t in graph.tasks] == [(t.reads, t.writes) for t in cpu_graph.tasks]

    bad = {
        "must be an ecs.System, got Kernel": reset_mark_early_return,
        "runs in PHYSICS, the system in RESET; give both one phase": ecs.System(
            reset_mark_early_return, ecs.Phase.PHYSICS, dim="world"
        ),
        "takes parameters \\['world_mark_out'\\], the system \\['world_reset_in', 'world_mark_out'\\]": ecs.System(
            reset_mark_no_flag, ecs.Phase.RESET, dim="world"
        ),
        "has dim='entity', world_local=False, the system dim='world'": ecs.System(
            reset_mark_early_return, ecs.Phase.RESET, dim="entity"
        ),
        "a variant must take the same parameters in the same order and types": ecs.System(
            reset_mark_float, ecs.Phase.RESET, dim="world"
        ),
        "has a cuda= system of its own": both,
        "only raw-kernel systems have CUDA variants": ecs.System(count_mark, ecs.Phase.RESET),
    }
    for message, variant in bad.items():
        with pytest.raises(ecs.GraphError, match=message):
            ecs.System(reset_mark_nested, ecs.Phase.RESET, dim="world", cuda=variant)
    with pytest.raises(ecs.GraphError, match="only raw-kernel systems have CUDA variants"):
        ecs.System(count_mark, ecs.Phase.PHYSICS, cuda=cuda)


def test_a_system_for_one_device_runs_only_in_builds_on_that_device():
    """``System(device=...)``: a CPU-only and a CUDA-only system compute one thing in two ways (as the physics
    solver runs whole on a CPU and staged on a GPU); each build binds only its own, and runs it."""
    from ecs.graph import TaskGraph

    cpu = ecs.System(reset_mark_nested, ecs.Phase.RESET, dim="world", device="cpu")
    variant = ecs.System(reset_mark_early_return, ecs.Phase.RESET, dim="world")
    cuda = ecs.System(reset_mark_ungated, ecs.Phase.RESET, dim="world", device="cuda", cuda=variant)
    assert repr(cpu) == "System('reset_mark_nested', RESET, cpu only)"
    assert cpu.runs_on(True) and not cpu.runs_on(False) and cuda.runs_on(False) and not cuda.runs_on(True)
    for order in ((cpu, cuda), (cuda, cpu)):
        env = _mark_env(reset_mark_nested)
        env.systems = [*env.systems[:2], *order]
        sim = ecs.BatchSim(env, 4, device="cpu")
        assert [t.kernel.key for t in sim.graph.tasks if t.phase == ecs.Phase.RESET] == ["reset_mark_nested"]
        np.testing.assert_array_equal(sim.tensor("world", "mark").numpy(), [100, 101, 102, 103])
        sim.step()
        sim.reset(torch.tensor([False, True, False, False]))
        np.testing.assert_array_equal(sim.tensor("world", "mark").numpy(), [101, 101, 103, 104])
        graph = TaskGraph(
            env.systems, sim.storage.layout, device_is_cpu=False, num_worlds=sim.num_worlds, env_name=env.name
        )
        # On CUDA the CUDA-only system runs, as its own cuda= variant where it has one.
        assert [t.kernel.key for t in graph.tasks if t.phase == ecs.Phase.RESET] == ["reset_mark_early_return"]
    with pytest.raises(ecs.GraphError, match=r"device must be None, 'cpu' or 'cuda', got 'gpu'"):
        ecs.System(reset_mark_nested, ecs.Phase.RESET, dim="world", device="gpu")
    with pytest.raises(ecs.GraphError, match=r"a system for the CPU only has no cuda= variant"):
        ecs.System(reset_mark_nested, ecs.Phase.RESET, dim="world", device="cpu", cuda=variant)
    with pytest.raises(ecs.GraphError, match=r"is for one device only \(device='cuda'\); give the variant none"):
        ecs.System(
            reset_mark_nested,
            ecs.Phase.RESET,
            dim="world",
            cuda=ecs.System(reset_mark_early_return, ecs.Phase.RESET, dim="world", device="cuda"),
        )


def test_a_system_for_some_world_counts_runs_only_in_simulations_of_those():
    """``System(min_worlds=, max_worlds=)``: two systems compute one thing in the form that suits a world count (as
    the solver's "auto" layout on CUDA is a block per world below ``physics.AUTO_WORLD_FROM`` worlds and a thread per
    world from there); a simulation binds those whose bounds hold its ``num_worlds``, at each edge, in either
    listing order, and with a device bound too."""
    from ecs.graph import TaskGraph

    few = ecs.System(reset_mark_nested, ecs.Phase.RESET, dim="world", max_worlds=4)
    many = ecs.System(reset_mark_far, ecs.Phase.RESET, dim="world", min_worlds=5)
    assert repr(few) == "System('reset_mark_nested', RESET, 1..4 worlds)"
    assert repr(many) == "System('reset_mark_far', RESET, 5.. worlds)"
    assert few.runs_on(True) and many.runs_on(True)  # of some world count
    assert few.runs_on(True, 4) and not few.runs_on(True, 5) and many.runs_on(True, 5) and not many.runs_on(True, 4)
    for order in ((few, many), (many, few)):
        for n, base in ((1, 100), (4, 100), (5, 1000), (9, 1000)):
            env = _mark_env(reset_mark_nested)
            env.systems = [*env.systems[:2], *order]
            sim = ecs.BatchSim(env, n, device="cpu")
            reset = [t.kernel.key for t in sim.graph.tasks if t.phase == ecs.Phase.RESET]
            assert reset == ["reset_mark_nested" if base == 100 else "reset_mark_far"], (n, reset)
            np.testing.assert_array_equal(sim.tensor("world", "mark").numpy(), base + np.arange(n))
    # Both bounds, and a device: in a CUDA build of 3 worlds only the CUDA system for 2..3 worlds runs.
    between = ecs.System(reset_mark_far, ecs.Phase.RESET, dim="world", device="cuda", min_worlds=2, max_worlds=3)
    assert repr(between) == "System('reset_mark_far', RESET, cuda only, 2..3 worlds)"
    env = _mark_env(reset_mark_nested)
    env.systems = [*env.systems[:2], ecs.System(reset_mark_nested, ecs.Phase.RESET, dim="world", device="cpu"), between]
    for n, is_cpu, want in (
        (3, False, ["reset_mark_far"]),
        (4, False, []),
        (1, False, []),
        (3, True, ["reset_mark_nested"]),
    ):
        sim = ecs.BatchSim(env, 3, device="cpu")
        graph = TaskGraph(env.systems, sim.storage.layout, device_is_cpu=is_cpu, num_worlds=n, env_name=env.name)
        assert [t.kernel.key for t in graph.tasks if t.phase == ecs.Phase.RESET] == want, (n, is_cpu)
    bad = {
        "min_worlds must be None or an int >= 1, got 0": dict(min_worlds=0),
        "max_worlds must be None or an int >= 1, got 2.5": dict(max_worlds=2.5),
        "min_worlds must be None or an int >= 1, got True": dict(min_worlds=True),
        "min_worlds=5 exceeds max_worlds=4, so it would never run; swap them or drop one": dict(
            min_worlds=5, max_worlds=4
        ),
    }
    for message, bounds in bad.items():
        with pytest.raises(ecs.GraphError, match=re.escape(message)):
            ecs.System(reset_mark_nested, ecs.Phase.RESET, dim="world", **bounds)
    with pytest.raises(ecs.GraphError, match=r"has world bounds of its own \(min_worlds, max_worlds\)"):
        ecs.System(
            reset_mark_nested,
            ecs.Phase.RESET,
            dim="world",
            cuda=ecs.System(reset_mark_early_return, ecs.Phase.RESET, dim="world", min_worlds=2),
        )


def test_the_system_decorator_makes_the_system_its_keywords_describe():
    """``@ecs.system(phase, **keywords)`` above ``@wp.kernel`` or ``@wp.func`` is ``ecs.System(fn, phase, **keywords)``:
    the decorated name holds the system, which runs as one made directly would, world bounds and name included; a
    bad keyword is refused when the decorator is applied."""
    assert isinstance(reset_mark_decorated, ecs.System) and isinstance(count_mark_ten, ecs.System)
    assert repr(reset_mark_decorated) == "System('reset_mark_decorated', RESET, 1..4 worlds)"
    assert (count_mark_ten.name, count_mark_ten.is_func) == ("count_mark_by_ten", True)
    for n, base in ((3, 200), (5, None)):
        env = _mark_env(reset_mark_nested)
        env.systems = [count_mark_ten, env.systems[1], reset_mark_decorated]
        sim = ecs.BatchSim(env, n, device="cpu")
        assert [t.name for t in sim.graph.tasks] == ["count_mark_by_ten", "judge_stop"] + ["reset_mark_decorated"] * (
            base is not None
        )
        mark = sim.tensor("world", "mark")
        start = mark.numpy().copy()
        if base is not None:
            np.testing.assert_array_equal(start, base + np.arange(n))
        sim.step()
        np.testing.assert_array_equal(mark.numpy(), start + 10)
    with pytest.raises(ecs.GraphError, match=r"dim must be 'entity', 'world' or a callable, got 'row'"):
        ecs.system(ecs.Phase.RESET, dim="row")(reset_mark_nested)
    with pytest.raises(ecs.GraphError, match=r"max_worlds must be None or an int >= 1, got 0"):
        ecs.system(ecs.Phase.RESET, dim="world", max_worlds=0)(reset_mark_nested)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'dims'"):
        ecs.system(ecs.Phase.RESET, dims="world")(reset_mark_nested)
