"""PolicyStep: policy forward plus simulation step as one call (one graph replay on CUDA)."""

import pytest
import torch

import ecs
import envs
from ecs.adapters.policy_step import PolicyStep


def _policy(obs):
    # Push towards the side the pole leans to: a deterministic function of the observation.
    return {"push": (obs["state"][:, 2] > 0).to(torch.int32)}


def test_policy_step_matches_policy_then_step(device):
    env = envs.make("cartpole", max_episode_steps=50)
    fused = ecs.BatchSim(env, 32, device=device)
    manual = ecs.BatchSim(env, 32, device=device)
    rollout = PolicyStep(fused, _policy)
    for _ in range(120):
        rollout()
        manual.actions["push"].copy_(_policy(manual.obs)["push"])
        manual.step()
        assert torch.equal(fused.obs["state"], manual.obs["state"])
        assert torch.equal(fused.rewards, manual.rewards)
        assert torch.equal(fused.truncated, manual.truncated)
    # The policy really drove the worlds: balancing keeps poles up much longer than random
    # pushes (about 22 steps), so fewer episodes began (about 2.5 per world against 5.2).
    assert float(fused.tensor("world", "episode").float().mean()) < 3.5


def test_policy_must_return_every_action(device):
    sim = ecs.BatchSim(envs.make("cartpole"), 4, device=device)
    with pytest.raises(ecs.EcsError, match=r"no value for action\(s\) \['push'\]"):
        PolicyStep(sim, lambda obs: {})()
