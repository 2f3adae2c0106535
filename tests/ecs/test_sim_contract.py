"""The public contract of ``ecs.BatchSim`` (DESIGN.md, "Step semantics" and "The public contract").

Cartpole is the vehicle; a small inline env with a float action covers NaN rejection and a
foreign env name. "Changes nothing" is checked against the full ``state_dict()`` or against an
untouched twin simulation fed the same valid actions.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import warp as wp

import ecs
import envs

OBS_BOUND = 0.05
X_THRESHOLD = 2.4
THETA_THRESHOLD = 12 * 2 * math.pi / 360
STATE_COLUMNS = ("cart_position", "cart_velocity", "pole_angle", "pole_angular_velocity")


# -- a toy env with a float action ------------------------------------------------------------


@dataclass(frozen=True)
class ToyConfig:
    gain: float = 0.5  # m per N of thrust


@ecs.component(singleton=True)
class Thrust:
    """Action: thrust along the line [N], any finite float. Exported as ``thrust``, float32 ``[num_worlds]``."""

    value: wp.float32


@ecs.component(singleton=True)
class Height:
    """Height above the floor [m], uniform in [0, 1) at reset. Exported as ``height``."""

    value: wp.float32


@wp.func
def lift_contract_toy(
    # Resources:
    gain: float,
    # Components in:
    world_thrust_in: wp.float32,
    # Components out:
    world_height_out: wp.float32,
):
    return world_height_out + gain * world_thrust_in


@wp.func
def reset_contract_toy(
    # Components out:
    world_rng_out: wp.uint32,
    world_height_out: wp.float32,
):
    state = world_rng_out
    height = wp.randf(state)
    return state, height


def _toy_env() -> ecs.EnvSpec:
    return ecs.EnvSpec(
        name="contract_toy",
        config=ToyConfig(),
        singletons=[Thrust, Height],
        systems=[
            ecs.System(lift_contract_toy, ecs.Phase.PHYSICS),
            ecs.System(reset_contract_toy, ecs.Phase.RESET),
        ],
        actions={"thrust": ecs.Action(Thrust)},
        observations={"height": ecs.Observation(Height)},
    )


# -- helpers ------------------------------------------------------------------------------------


def _cartpole(num_worlds: int, device: str, **kwargs) -> ecs.BatchSim:
    config = {k: kwargs.pop(k) for k in list(kwargs) if k in ("max_episode_steps", "force_mag")}
    return ecs.BatchSim(envs.make("cartpole", **config), num_worlds, device=device, **kwargs)


def _arrays(sim: ecs.BatchSim) -> dict[str, np.ndarray]:
    return sim.state_dict()["arrays"]


def _assert_same_arrays(a: dict[str, np.ndarray], b: dict[str, np.ndarray], *, skip: tuple[str, ...] = ()) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if key not in skip:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _assert_same_state(a: ecs.BatchSim, b: ecs.BatchSim, *, skip: tuple[str, ...] = ()) -> None:
    _assert_same_arrays(_arrays(a), _arrays(b), skip=skip)


def _pushes(steps: int, num_worlds: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2, (steps, num_worlds), dtype=torch.int32, generator=gen)


def _record(sim: ecs.BatchSim) -> dict[str, torch.Tensor]:
    return {
        "obs": sim.obs["state"].cpu().clone(),
        "final_obs": sim.final_obs["state"].cpu().clone(),
        "rewards": sim.rewards.cpu().clone(),
        "terminated": sim.terminated.cpu().clone(),
        "truncated": sim.truncated.cpu().clone(),
        "episode_step": sim.tensor("world", "episode_step").cpu().clone(),
        "episode": sim.tensor("world", "episode").cpu().clone(),
    }


def _rollout(
    sim: ecs.BatchSim, pushes: torch.Tensor, *, worlds: slice = slice(None), resets: dict | None = None
) -> list[dict[str, torch.Tensor]]:
    """Steps with ``pushes[t, worlds]``; ``resets[t]`` (None or a global bool mask) resets before step t."""
    out = []
    for t in range(pushes.shape[0]):
        if resets is not None and t in resets:
            mask = resets[t]
            sim.reset(None if mask is None else mask[worlds].to(sim.device))
        sim.actions["push"].copy_(pushes[t, worlds])
        sim.step()
        out.append(_record(sim))
    return out


def _assert_same_rollouts(a: list[dict], b: list[dict], *, worlds: slice = slice(None)) -> None:
    assert len(a) == len(b)
    for t, (ra, rb) in enumerate(zip(a, b, strict=True)):
        for key in ra:
            assert torch.equal(ra[key][worlds], rb[key]), f"step {t}: {key} differs"


def _step_np(state: np.ndarray, push: np.ndarray, force_mag: float = 10.0) -> np.ndarray:
    """Cart-pole Euler step in float64 (CartPole-v1 constants), written for these tests."""
    x, x_dot, theta, theta_dot = state.T
    force = np.where(push == 1, force_mag, -force_mag)
    total_mass, masspole, length = 1.1, 0.1, 0.5
    temp = (force + masspole * length * theta_dot**2 * np.sin(theta)) / total_mass
    thetaacc = (9.8 * np.sin(theta) - np.cos(theta) * temp) / (
        length * (4.0 / 3.0 - masspole * np.cos(theta) ** 2 / total_mass)
    )
    xacc = temp - masspole * length * thetaacc * np.cos(theta) / total_mass
    return np.stack([x + 0.02 * x_dot, x_dot + 0.02 * xacc, theta + 0.02 * theta_dot, theta_dot + 0.02 * thetaacc], 1)


def _pre_state(sim: ecs.BatchSim) -> np.ndarray:
    return torch.stack([sim.tensor("world", n) for n in STATE_COLUMNS], 1).cpu().numpy().astype(np.float64)


def _expect_action_error(sim: ecs.BatchSim) -> str:
    """Steps expecting an ActionError (raised by step() on CPU, by the next check() on CUDA)."""
    with pytest.raises(ecs.ActionError) as e:
        sim.step()
        sim.check()
    return str(e.value)


# -- persistent zero-copy tensors ---------------------------------------------------------------


def test_exported_tensors_are_persistent(device):
    W = 16
    sim = _cartpole(W, device, seed=0)
    tensors = {
        "obs": sim.obs["state"],
        "final_obs": sim.final_obs["state"],
        "actions": sim.actions["push"],
        "rewards": sim.rewards,
        "terminated": sim.terminated,
        "truncated": sim.truncated,
        "episode_step": sim.tensor("world", "episode_step"),
        "cart_position": sim.tensor("world", "cart_position"),
    }
    ptrs = {k: v.data_ptr() for k, v in tensors.items()}
    dicts = (sim.obs, sim.final_obs, sim.actions)

    assert tensors["obs"].dtype == torch.float32 and tuple(tensors["obs"].shape) == (W, 4)
    assert tensors["final_obs"].dtype == torch.float32 and tuple(tensors["final_obs"].shape) == (W, 4)
    assert tensors["actions"].dtype == torch.int32 and tuple(tensors["actions"].shape) == (W,)
    assert tensors["rewards"].dtype == torch.float32 and tuple(tensors["rewards"].shape) == (W,)
    for flag in ("terminated", "truncated"):
        assert tensors[flag].dtype == torch.bool and tuple(tensors[flag].shape) == (W,)
    for t in tensors.values():
        assert t.device == torch.device(sim.device)
    assert set(sim.obs) == {"state"} and set(sim.actions) == {"push"}

    def check_same() -> None:
        current = {
            "obs": sim.obs["state"],
            "final_obs": sim.final_obs["state"],
            "actions": sim.actions["push"],
            "rewards": sim.rewards,
            "terminated": sim.terminated,
            "truncated": sim.truncated,
            "episode_step": sim.tensor("world", "episode_step"),
            "cart_position": sim.tensor("world", "cart_position"),
        }
        for k, t in current.items():
            assert t is tensors[k], k
            assert t.data_ptr() == ptrs[k], k
        assert (sim.obs, sim.final_obs, sim.actions) == dicts
        assert all(a is b for a, b in zip((sim.obs, sim.final_obs, sim.actions), dicts, strict=True))

    pushes = _pushes(40, W, seed=0)
    saved = None
    ended = 0
    for t in range(40):
        sim.actions["push"] = pushes[t]  # item assignment copies; it never rebinds
        sim.step()
        ended += int((sim.terminated | sim.truncated).sum())
        check_same()
        # The component column and the observation are two views of the same state.
        assert torch.equal(sim.tensor("world", "cart_position"), sim.obs["state"][:, 0])
        assert torch.equal(sim.tensor("world", "pole_angle"), sim.obs["state"][:, 2])
        if t == 20:
            saved = sim.state_dict()
    assert ended > 0, "the run must include same-step resets"
    sim.reset()
    check_same()
    sim.reset(torch.arange(W) % 2 == 0)
    check_same()
    sim.load_state_dict(saved)
    check_same()
    sim.profile(2)
    check_same()

    # A zero-copy view: writing the column is what the next step starts from.
    sim.tensor("world", "cart_position").fill_(3.0)
    velocity = sim.tensor("world", "cart_velocity").cpu().numpy().copy()
    sim.step({"push": torch.ones(W, dtype=torch.int32)})
    assert sim.terminated.all()
    np.testing.assert_allclose(sim.final_obs["state"][:, 0].cpu().numpy(), 3.0 + 0.02 * velocity, rtol=1e-6)


def test_unknown_tensor_names_raise():
    sim = _cartpole(2, "cpu", seed=0)
    with pytest.raises(ecs.EcsError, match="cart_position"):
        sim.tensor("world", "nope")
    with pytest.raises(ecs.EcsError, match="world"):
        sim.tensor("no_archetype", "x")
    with pytest.raises(KeyError, match="push"):
        sim.actions["nope"]


def test_action_assignment_copies_into_the_buffer(device):
    W = 8
    sim = _cartpole(W, device, seed=0)
    buf = sim.actions["push"]
    ptr = buf.data_ptr()
    new = torch.tensor([1, 0, 1, 1, 0, 0, 1, 0], dtype=torch.int32)
    sim.actions["push"] = new
    assert sim.actions["push"] is buf and buf.data_ptr() == ptr
    assert torch.equal(buf.cpu(), new)
    new.fill_(0)  # the buffer holds a copy, not an alias of the caller's tensor
    assert int(buf.sum()) == 4
    sim.step({"push": torch.ones(W, dtype=torch.int32)})
    assert sim.actions["push"] is buf and buf.data_ptr() == ptr
    assert torch.all(buf == 1)
    sim.actions["push"] = np.zeros(W, dtype=np.int32)
    assert sim.actions["push"] is buf and torch.all(buf == 0)


def test_cpu_action_writes_stay_on_the_calling_thread(monkeypatch):
    """On CPU the engine copies actions (``sim.actions[k] = x``, ``step(actions)``, staged runs)
    without torch's ``copy_``, which runs large copies on OpenMP threads that then spin and take
    a core from the step; the checks are the same."""
    W = 40_000  # more than the 32,768 values torch copies on several threads
    sim = ecs.BatchSim(envs.make("cartpole"), W, device="cpu", seed=0, cpu_threads=1)
    rng = np.random.default_rng(3)
    pushes = rng.integers(0, 2, (4, W), dtype=np.int32)

    def no_torch_copy(*args, **kwargs):
        raise AssertionError("torch's copy_ was called")

    monkeypatch.setattr(torch.Tensor, "copy_", no_torch_copy)
    sim.actions["push"] = pushes[0]
    np.testing.assert_array_equal(sim.actions["push"].numpy(), pushes[0])
    sim.step({"push": torch.from_numpy(pushes[1])})
    np.testing.assert_array_equal(sim.actions["push"].numpy(), pushes[1])
    sim.run(2, {"push": pushes[2:]})
    np.testing.assert_array_equal(sim.actions["push"].numpy(), pushes[3])
    with pytest.raises(ecs.ActionError, match=r"dtype torch\.int32"):
        sim.actions["push"] = pushes[0].astype(np.int64)
    with pytest.raises(ecs.ActionError, match="shape"):
        sim.actions["push"] = pushes[0][:-1]
    np.testing.assert_array_equal(sim.actions["push"].numpy(), pushes[3])
    monkeypatch.undo()
    half = torch.zeros(3, dtype=torch.bfloat16)  # no numpy dtype: torch copies it
    ecs.torch_bridge.copy_into(half, torch.ones(3, dtype=torch.bfloat16))
    assert torch.all(half == 1)


# -- step semantics -----------------------------------------------------------------------------


@pytest.mark.parametrize("horizon", [500, 12])
def test_same_step_auto_reset(device, horizon):
    W = 64
    sim = _cartpole(W, device, seed=1, max_episode_steps=horizon)
    pushes = _pushes(60, W, seed=1)
    episode_step = sim.tensor("world", "episode_step")
    episode = sim.tensor("world", "episode")
    assert torch.all(episode_step == 0) and torch.all(episode == 0)
    terminations = truncations = 0
    for t in range(60):
        pre = _pre_state(sim)
        steps_before = episode_step.cpu().clone()
        episode_before = episode.cpu().clone()
        sim.step({"push": pushes[t]})
        terminated, truncated = sim.terminated.cpu(), sim.truncated.cpu()
        done = terminated | truncated
        assert not (terminated & truncated).any(), "terminated and truncated are never both true"
        assert torch.all(sim.rewards == 1.0), "rewards describe the last transition of the old episode"
        obs, final_obs = sim.obs["state"].cpu(), sim.final_obs["state"].cpu()
        expected_last = _step_np(pre, pushes[t].numpy())
        # The old episode's last observation is in final_obs...
        np.testing.assert_allclose(final_obs[done].numpy(), expected_last[done.numpy()], rtol=1e-5, atol=1e-6)
        last = final_obs[terminated]
        fell = (last[:, 0].abs() > X_THRESHOLD) | (last[:, 2].abs() > THETA_THRESHOLD)
        assert fell.all()
        # ...while obs is already the first observation of the new episode.
        assert torch.all(obs[done].abs() <= OBS_BOUND)
        np.testing.assert_allclose(obs[~done].numpy(), expected_last[(~done).numpy()], rtol=1e-5, atol=1e-6)
        assert torch.equal(_state_columns(sim)[done], obs[done])
        assert torch.all(episode_step.cpu()[done] == 0)
        assert torch.equal(episode_step.cpu()[~done], steps_before[~done] + 1)
        assert torch.equal(episode.cpu(), episode_before + done.int())
        if horizon < 500:
            assert torch.equal(truncated, (steps_before + 1 >= horizon) & ~terminated)
        else:
            assert not truncated.any()
        terminations += int(terminated.sum())
        truncations += int(truncated.sum())
    assert terminations > 20
    if horizon < 500:
        assert truncations > 20


def _state_columns(sim: ecs.BatchSim) -> torch.Tensor:
    return torch.stack([sim.tensor("world", n) for n in STATE_COLUMNS], 1).cpu()


def test_reset_all(device):
    W = 32
    sim = _cartpole(W, device, seed=2)
    for push in _pushes(15, W, seed=2):
        sim.step({"push": push})
    before = _record(sim)
    sim.reset()
    after = _record(sim)
    assert torch.all(after["episode_step"] == 0)
    assert torch.equal(after["episode"], before["episode"] + 1)
    assert torch.all(after["rewards"] == 0) and not after["terminated"].any() and not after["truncated"].any()
    assert torch.all(after["obs"].abs() <= OBS_BOUND)
    assert not torch.equal(after["obs"], before["obs"])
    assert torch.equal(_state_columns(sim), after["obs"])


def test_reset_mask_resets_only_masked_worlds(device):
    W = 32
    sim = _cartpole(W, device, seed=3)
    for push in _pushes(15, W, seed=3):
        sim.step({"push": push})
    # A world with obs outside the reset range shows the reset clearly.
    sim.tensor("world", "cart_velocity").add_(0.5)
    sim.step({"push": torch.zeros(W, dtype=torch.int32)})
    mask = torch.zeros(W, dtype=torch.bool)
    mask[torch.randperm(W, generator=torch.Generator().manual_seed(3))[: W // 2]] = True
    before, record_before = _arrays(sim), _record(sim)
    sim.reset(mask.to(sim.device))
    after, record_after = _arrays(sim), _record(sim)
    keep = (~mask).numpy()
    for key in before:
        if key == "singleton/reset":
            continue  # the engine's transient "being reset" flag; not world state
        if before[key].shape[:1] == (W,):
            np.testing.assert_array_equal(after[key][keep], before[key][keep], err_msg=key)
        else:
            np.testing.assert_array_equal(after[key], before[key], err_msg=key)
    assert torch.all(record_after["episode_step"][mask] == 0)
    assert torch.equal(record_after["episode"][mask], record_before["episode"][mask] + 1)
    assert torch.all(record_after["obs"][mask].abs() <= OBS_BOUND)
    assert torch.all(record_after["rewards"][mask] == 0)
    assert not record_after["terminated"][mask].any() and not record_after["truncated"][mask].any()
    assert not torch.equal(record_after["obs"][mask], record_before["obs"][mask])

    # A numpy mask does the same as a torch mask; an all-false mask resets nothing.
    twin = _cartpole(W, device, seed=3)
    twin.load_state_dict(sim.state_dict())
    sim.reset(mask.to(sim.device))
    twin.reset(mask.numpy())
    _assert_same_state(sim, twin)
    before = _arrays(sim)
    sim.reset(torch.zeros(W, dtype=torch.bool, device=sim.device))
    _assert_same_arrays(_arrays(sim), before, skip=("singleton/reset",))


@pytest.mark.parametrize(
    "make_mask",
    [
        lambda w: torch.ones(w, dtype=torch.int32),
        lambda w: torch.ones(w, dtype=torch.float32),
        lambda w: torch.ones(w + 1, dtype=torch.bool),
        lambda w: torch.ones(w, 1, dtype=torch.bool),
        lambda w: [True] * w,
        lambda w: np.ones(w, dtype=np.int64),
        lambda w: 1,
    ],
    ids=["int32", "float32", "long", "2d", "list", "numpy-int", "scalar"],
)
def test_bad_reset_mask_raises_and_changes_nothing(make_mask):
    W = 8
    sim = _cartpole(W, "cpu", seed=4)
    for push in _pushes(6, W, seed=4):
        sim.step({"push": push})
    before = _arrays(sim)
    with pytest.raises(ecs.EcsError, match="mask"):
        sim.reset(make_mask(W))
    _assert_same_arrays(_arrays(sim), before)


# -- random numbers and determinism -------------------------------------------------------------


def _reset_plan(num_worlds: int) -> dict:
    return {100: None, 200: torch.arange(num_worlds) % 3 == 0}


def test_world_trajectory_does_not_depend_on_num_worlds(device):
    steps, big = 300, 64
    pushes = _pushes(steps, big, seed=5)
    plan = _reset_plan(big)
    full = _rollout(_cartpole(big, device, seed=9), pushes, resets=plan)
    small = _rollout(_cartpole(5, device, seed=9), pushes, worlds=slice(0, 5), resets=plan)
    _assert_same_rollouts(full, small, worlds=slice(0, 5))
    # A simulation whose world 0 is global world 2 reproduces worlds 2..4.
    offset = _rollout(_cartpole(3, device, seed=9, world_offset=2), pushes, worlds=slice(2, 5), resets=plan)
    _assert_same_rollouts(full, offset, worlds=slice(2, 5))
    assert sum(int(r["terminated"].sum()) for r in full) > 200, "the run must include many auto-resets"


def test_same_seed_identical_and_different_seed_differs(device):
    W, steps = 32, 200
    pushes = _pushes(steps, W, seed=6)
    plan = _reset_plan(W)
    a = _rollout(_cartpole(W, device, seed=7), pushes, resets=plan)
    b = _rollout(_cartpole(W, device, seed=7), pushes, resets=plan)
    _assert_same_rollouts(a, b)
    other = _cartpole(W, device, seed=8)
    assert not torch.equal(other.obs["state"].cpu(), _cartpole(W, device, seed=7).obs["state"].cpu())
    c = _rollout(other, pushes, resets=plan)
    assert not torch.equal(a[-1]["obs"], c[-1]["obs"])
    # Worlds of one simulation draw different initial states.
    assert len(torch.unique(other.obs["state"][:, 0].cpu())) == W or len(torch.unique(c[0]["obs"][:, 0])) == W


@pytest.mark.parametrize("variant", [{"capture": False}, {"schedule_seed": 0}, {"schedule_seed": 12345}])
def test_eager_and_shuffled_schedules_match_captured(device, variant):
    W, steps = 24, 200
    pushes = _pushes(steps, W, seed=10)
    plan = _reset_plan(W)
    captured = _cartpole(W, device, seed=11)
    other = _cartpole(W, device, seed=11, **variant)
    _assert_same_rollouts(_rollout(captured, pushes, resets=plan), _rollout(other, pushes, resets=plan))
    _assert_same_state(captured, other)


# -- state_dict ---------------------------------------------------------------------------------


def test_state_dict_round_trip(device):
    W, n = 32, 80
    sim = _cartpole(W, device, seed=12)
    for push in _pushes(25, W, seed=12):
        sim.step({"push": push})
    saved = sim.state_dict()
    frozen = {k: v.copy() for k, v in saved["arrays"].items()}
    pushes = _pushes(n, W, seed=13)
    first = _rollout(sim, pushes)
    _assert_same_arrays(saved["arrays"], frozen)  # the saved arrays are copies, not views
    assert sum(int((r["terminated"] | r["truncated"]).sum()) for r in first) > 20

    sim.load_state_dict(saved)
    _assert_same_rollouts(first, _rollout(sim, pushes))

    # A fresh simulation (built with another seed) continues identically: the seed is part of the state.
    fresh = _cartpole(W, device, seed=99)
    fresh.load_state_dict(saved)
    assert fresh.seed == 12
    _assert_same_rollouts(first, _rollout(fresh, pushes))
    _assert_same_state(sim, fresh)


def test_state_dict_mismatch_raises_and_changes_nothing(device):
    W = 16
    source = _cartpole(W, device, seed=14)
    for push in _pushes(10, W, seed=14):
        source.step({"push": push})
    saved = source.state_dict()
    for push in _pushes(7, W, seed=15):
        source.step({"push": push})

    def check(target: ecs.BatchSim, state: dict, match: str) -> None:
        before = _arrays(target)
        seed = target.seed
        with pytest.raises(ecs.StateDictError, match=match):
            target.load_state_dict(state)
        _assert_same_arrays(_arrays(target), before)
        assert target.seed == seed

    check(_cartpole(W + 1, device, seed=14), saved, "num_worlds")
    check(_cartpole(W, device, seed=14, force_mag=20.0), saved, "config")
    check(ecs.BatchSim(_toy_env(), W, device=device, seed=14), saved, "env")

    # Corrupt arrays of an otherwise valid state (saved 7 steps ago, so a partial write would show).
    for key, corrupt in [
        ("singleton/cart_position", lambda a: a[:-1]),
        ("final_obs/state", lambda a: a[:, :3]),
        ("final_obs/state", lambda a: a.astype(np.float64)),
        ("singleton/terminated", lambda a: a.astype(np.int32)),
    ]:
        bad = {**saved, "arrays": {**saved["arrays"], key: corrupt(saved["arrays"][key])}}
        check(source, bad, re.escape(key))
    missing = {**saved, "arrays": {k: v for k, v in saved["arrays"].items() if k != "singleton/episode"}}
    check(source, missing, "missing")
    check(source, {**saved, "format_version": 999}, "version")
    check(source, {**saved, "seed": -3}, "seed")
    check(source, {k: v for k, v in saved.items() if k != "world_offset"}, "world_offset")
    with pytest.raises(ecs.StateDictError):
        source.load_state_dict([1, 2, 3])


# -- bad input ----------------------------------------------------------------------------------


def _twins(W: int, device: str, seed: int) -> tuple[ecs.BatchSim, ecs.BatchSim, torch.Tensor]:
    sim, twin = _cartpole(W, device, seed=seed), _cartpole(W, device, seed=seed)
    pushes = _pushes(12, W, seed=seed)
    for push in pushes:
        sim.step({"push": push})
        twin.step({"push": push})
    return sim, twin, _pushes(1, W, seed=seed + 1)[0]


def test_wrong_action_dtype_shape_or_key_raises_and_changes_nothing(device):
    W = 8
    sim, twin, push = _twins(W, device, seed=16)
    sim.actions["push"] = push
    twin.actions["push"] = push
    with pytest.raises(ecs.ActionError, match=r"dtype.*int32"):
        sim.actions["push"] = torch.zeros(W, dtype=torch.int64)
    with pytest.raises(ecs.ActionError, match="dtype"):
        sim.actions["push"] = torch.zeros(W, dtype=torch.float32)
    with pytest.raises(ecs.ActionError, match="shape"):
        sim.actions["push"] = torch.zeros(W + 1, dtype=torch.int32)
    with pytest.raises(ecs.ActionError, match="shape"):
        sim.step({"push": torch.zeros(W, 1, dtype=torch.int32)})
    with pytest.raises(ecs.ActionError, match="Tensor"):
        sim.actions["push"] = [0] * W
    with pytest.raises(ecs.ActionError) as e:
        sim.step({"nope": torch.zeros(W, dtype=torch.int32)})
    assert "nope" in str(e.value) and "push" in str(e.value)
    # One bad entry means nothing is written, not even the good ones.
    with pytest.raises(ecs.ActionError, match="nope"):
        sim.step({"push": 1 - push, "nope": torch.zeros(W, dtype=torch.int32)})
    _assert_same_state(sim, twin)
    for _ in range(5):
        sim.step()
        twin.step()
    _assert_same_state(sim, twin)


def test_out_of_range_discrete_action_advances_no_world(device):
    W = 8
    sim, twin, push = _twins(W, device, seed=17)
    sim.actions["push"] = push
    twin.actions["push"] = push
    sim.actions["push"][3] = 7
    msg = _expect_action_error(sim)
    assert "'push'" in msg and "world 3" in msg and "7" in msg
    _assert_same_state(sim, twin, skip=("singleton/push",))

    # Several bad worlds: the lowest is named, all are counted.
    sim.actions["push"][6] = -1
    msg = _expect_action_error(sim)
    assert "world 3" in msg and "2 invalid" in msg
    _assert_same_state(sim, twin, skip=("singleton/push",))

    sim.actions["push"] = push
    for t in range(20):
        sim.step()
        twin.step()
        if t == 0:
            _assert_same_state(sim, twin)
    _assert_same_state(sim, twin)


def test_non_finite_float_action_advances_no_world(device):
    W = 6
    sim = ecs.BatchSim(_toy_env(), W, device=device, seed=18)
    twin = ecs.BatchSim(_toy_env(), W, device=device, seed=18)
    thrust = torch.linspace(-1.0, 1.0, W)
    for s in (sim, twin):
        s.step({"thrust": thrust})
    np.testing.assert_allclose(sim.obs["height"].cpu().numpy(), twin.obs["height"].cpu().numpy())
    for bad in (math.nan, math.inf, -math.inf):
        sim.actions["thrust"] = thrust
        sim.actions["thrust"][2] = bad
        msg = _expect_action_error(sim)
        assert "'thrust'" in msg and "world 2" in msg and "finite" in msg
        _assert_same_state(sim, twin, skip=("singleton/thrust",))
    sim.actions["thrust"] = thrust
    height = sim.obs["height"].cpu().clone()
    for s in (sim, twin):
        s.step()
    _assert_same_state(sim, twin)
    # The step after the fix really ran: height grew by gain * thrust.
    np.testing.assert_allclose(sim.obs["height"].cpu().numpy(), (height + 0.5 * thrust).numpy(), rtol=1e-6)
    assert sim.action_space["thrust"].shape == () and sim.action_space["thrust"].dtype == np.float32


@pytest.mark.parametrize("num_worlds", [0, -1, 1.5, True, "4", None])
def test_bad_num_worlds(num_worlds):
    with pytest.raises(ecs.EcsError, match="num_worlds"):
        ecs.BatchSim(envs.make("cartpole"), num_worlds)


def test_unknown_device_names_available_devices():
    for device in ("tpu:0", "cuda:99", "gpu"):
        with pytest.raises(ecs.EcsError) as e:
            ecs.BatchSim(envs.make("cartpole"), 2, device=device)
        assert device in str(e.value) and "'cpu'" in str(e.value)


def test_device_none_picks_cuda_when_present_else_cpu():
    sim = ecs.BatchSim(envs.make("cartpole"), 2, device=None)
    assert sim.device == ("cuda:0" if wp.is_cuda_available() else "cpu")
    assert sim.obs["state"].device == torch.device(sim.device)


def test_out_of_memory_names_bytes_needed(monkeypatch):
    env = envs.make("cartpole")
    per_world = sum(_cartpole(10, "cpu").memory().values()) // 10
    monkeypatch.setenv("ECS_MEMORY_LIMIT", "1000000")
    W = 100_000
    with pytest.raises(ecs.OutOfMemoryError) as e:
        ecs.BatchSim(env, W, device="cpu")
    assert isinstance(e.value, MemoryError)
    assert f"({per_world * W} bytes)" in str(e.value)
    assert "fewer worlds" in str(e.value)
    small = ecs.BatchSim(env, 1000, device="cpu")  # 1000 worlds fit under the same limit
    assert small.num_worlds == 1000


# -- profiling ----------------------------------------------------------------------------------


def test_profile_reports_systems_and_restores_state(device):
    W = 16
    sim, twin, push = _twins(W, device, seed=19)
    sim.actions["push"] = push
    twin.actions["push"] = push
    before = _arrays(sim)
    profile = sim.profile(20)
    _assert_same_arrays(_arrays(sim), before)
    text = str(profile)
    for name in ("step_cartpole", "judge_cartpole", "reset_cartpole", "observe_cartpole", "PHYSICS", "OBSERVE"):
        assert name in text
    assert profile.root.seconds > 0 and profile.captured_step > 0
    assert profile.steps == 20 and profile.num_worlds == W
    for _ in range(10):
        sim.step()
        twin.step()
    _assert_same_state(sim, twin)
    with pytest.raises(ecs.EcsError, match="steps"):
        sim.profile(0)
