"""On the CPU, actions reach the simulation through numpy on the calling thread (``torch_bridge.copy_into``),
not torch's ``copy_``, whose OpenMP threads keep spinning after a large copy and take a core from the
step: in ``BatchSim`` and in the RSL-RL, TorchRL and PolicyStep adapters. Casts and broadcasts are torch's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ecs
import envs
from ecs.adapters.policy_step import PolicyStep
from ecs.torch_bridge import copy_into


def _refuse_torch_copies(monkeypatch) -> None:
    def no_torch_copy(self, *args, **kwargs):
        raise AssertionError("torch's copy_ was called on a CPU action buffer")

    monkeypatch.setattr(torch.Tensor, "copy_", no_torch_copy)


@pytest.mark.parametrize(
    ("dst_dtype", "src"),
    [
        (torch.int32, torch.tensor([-3, 0, 7, 2**31 + 5, -(2**33) - 1], dtype=torch.int64)),  # wraps
        (torch.int32, torch.tensor([-1.7, -0.2, 0.0, 0.9, 2.5])),  # truncates towards zero
        (torch.float32, torch.tensor([1, -2, 3, 4, 5], dtype=torch.int64)),
        (torch.int64, torch.tensor([True, False, True, True, False])),
        (torch.float32, torch.tensor(0.25, dtype=torch.float64)),  # broadcast
    ],
)
def test_copy_into_casts_and_broadcasts_as_torch_does(dst_dtype, src):
    ours, theirs = torch.zeros(5, dtype=dst_dtype), torch.zeros(5, dtype=dst_dtype)
    theirs.copy_(src)
    copy_into(ours, src)
    assert torch.equal(ours, theirs), (ours, theirs)


def test_copy_into_writes_strided_views_from_strided_sources():
    base, expect = torch.zeros(4, 6, dtype=torch.int32), torch.zeros(4, 6, dtype=torch.int32)
    src = torch.arange(24, dtype=torch.int64).reshape(6, 4).T  # not contiguous
    copy_into(base[:, ::2], src[:, 1::2])
    expect[:, ::2].copy_(src[:, 1::2])
    assert torch.equal(base, expect)


def test_rsl_rl_writes_cpu_actions_without_torch_copies(monkeypatch):
    pytest.importorskip("rsl_rl")
    from ecs.adapters.rsl_rl import RslRlVecEnv

    env = RslRlVecEnv(ecs.BatchSim(envs.make("foraging"), num_worlds=5, device="cpu"))
    key = next(iter(env.sim.actions))
    action = env.sim.env.actions[key]
    n = int(action.high) - int(action.low) + 1
    points = torch.tensor([-5.0, -1.0, -0.01, 0.0, 0.99]).unsqueeze(1)
    _refuse_torch_copies(monkeypatch)
    env.step(points)
    monkeypatch.undo()
    expect = torch.clamp(torch.floor((points[:, 0] + 1) * n / 2), 0, n - 1).int() + int(action.low)
    assert torch.equal(env.sim.actions[key], expect)


def test_torchrl_writes_int64_actions_without_torch_copies(monkeypatch):
    pytest.importorskip("torchrl")
    from ecs.adapters.torchrl import TorchRLEnv

    env = TorchRLEnv(ecs.BatchSim(envs.make("cartpole"), num_worlds=6, device="cpu", seed=2))
    td = env.reset()
    action = torch.tensor([0, 1, 1, 0, 1, 0], dtype=torch.int64).reshape(env.full_action_spec[env.action_key].shape)
    td.set(env.action_key, action)
    _refuse_torch_copies(monkeypatch)
    env.step(td)
    monkeypatch.undo()
    np.testing.assert_array_equal(env.sim.actions["push"].numpy(), action.reshape(-1).numpy())


def test_policy_step_writes_cpu_actions_without_torch_copies(monkeypatch):
    env = envs.make("cartpole", max_episode_steps=50)
    fused, manual = (ecs.BatchSim(env, 16, device="cpu", seed=4) for _ in range(2))

    def policy(obs):
        return {"push": (obs["state"][:, 2] > 0).to(torch.int64)}  # int64: cast to the int32 buffer

    rollout = PolicyStep(fused, policy)
    _refuse_torch_copies(monkeypatch)
    for _ in range(30):
        rollout()
        manual.actions["push"] = policy(manual.obs)["push"].int()
        manual.step()
    monkeypatch.undo()
    assert torch.equal(fused.obs["state"], manual.obs["state"])
    assert torch.equal(fused.tensor("world", "episode"), manual.tensor("world", "episode"))
