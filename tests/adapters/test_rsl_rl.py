"""RSL-RL adapter (the Isaac Lab convention): RSL-RL's VecEnv contract, and its OnPolicyRunner learns cartpole."""

from __future__ import annotations

import time

import pytest
import torch

import ecs
import envs

pytest.importorskip("rsl_rl")

from rsl_rl.env import VecEnv

from ecs.adapters.rsl_rl import RslRlVecEnv


def _sim(num_worlds: int = 8, seed: int = 0) -> ecs.BatchSim:
    return ecs.BatchSim(envs.make("cartpole"), num_worlds=num_worlds, device="cpu", seed=seed)


def test_rsl_rl_vec_env_contract():
    sim = _sim()
    env = RslRlVecEnv(sim)
    assert isinstance(env, VecEnv)
    assert env.num_envs == 8 and env.num_actions == 1 and env.max_episode_length == sim.env.max_episode_steps
    obs = env.get_observations()
    assert obs["policy"].shape == (8, 4) and torch.equal(obs["policy"], sim.obs["state"])
    assert obs["policy"].data_ptr() != sim.obs["state"].data_ptr()  # RSL-RL keeps it across the next step
    returns, lengths = torch.zeros(8), torch.zeros(8)
    ended = 0
    for step in range(60):
        # Continuous actions: < 0 pushes left (0), >= 0 right (1).
        actions = torch.where(torch.arange(8) % 2 == 0, -0.5, 0.7).unsqueeze(1) * (1 if step % 3 else -1)
        obs, rewards, dones, extras = env.step(actions)
        assert torch.equal(sim.actions["push"], (actions[:, 0] >= 0).int())
        assert torch.equal(obs["policy"], sim.obs["state"]) and torch.equal(rewards, sim.rewards)
        assert dones.dtype == torch.long and torch.equal(dones.bool(), sim.terminated | sim.truncated)
        assert torch.equal(extras["time_outs"], sim.truncated)
        returns += rewards
        lengths += 1
        d = dones.bool()
        if d.any():
            ended += int(d.sum())
            torch.testing.assert_close(extras["log"]["/episode/return"], returns[d].mean())
            torch.testing.assert_close(extras["log"]["/episode/length"], lengths[d].mean())
        returns[d], lengths[d] = 0, 0
        assert torch.equal(env.episode_length_buf, sim.tensor("world", "episode_step").long())
    assert ended > 0
    with pytest.raises(ecs.ActionError, match="shape"):
        env.step(torch.zeros(8, 2))
    with pytest.raises(ecs.EcsError, match="init_at_random_ep_len=False"):
        env.episode_length_buf = torch.zeros(8, dtype=torch.long)


def test_rsl_rl_discrete_bins():
    env = RslRlVecEnv(ecs.BatchSim(envs.make("foraging"), num_worlds=5, device="cpu"))
    key = next(iter(env.sim.actions))
    action = env.sim.env.actions[key]
    n = int(action.high) - int(action.low) + 1
    points = torch.tensor([-5.0, -1.0, -0.01, 0.0, 0.99]).unsqueeze(1)
    env.step(points)
    expect = torch.clamp(torch.floor((points[:, 0] + 1) * n / 2), 0, n - 1).int() + int(action.low)
    assert torch.equal(env.sim.actions[key], expect)
    assert env.sim.actions[key][0] == int(action.low) and env.sim.actions[key][-1] == int(action.high)


def test_rsl_rl_on_policy_runner_learns_cartpole(tmp_path):
    """RSL-RL's PPO over 64 cartpole worlds: mean episode return clearly above the random policy's (about 20)."""
    from rsl_rl.runners import OnPolicyRunner

    torch.manual_seed(0)
    env = RslRlVecEnv(_sim(num_worlds=64, seed=3))
    cfg = {
        "num_steps_per_env": 32,
        "save_interval": 1000,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "actor": {
            "class_name": "MLPModel",
            "hidden_dims": [32, 32],
            "activation": "elu",
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0},
        },
        "critic": {"class_name": "MLPModel", "hidden_dims": [32, 32], "activation": "elu"},
        "algorithm": {
            "class_name": "PPO",
            "num_learning_epochs": 5,
            "num_mini_batches": 4,
            "learning_rate": 1e-3,
            "gamma": 0.98,
            "lam": 0.95,
            "entropy_coef": 0.0,
        },
    }
    runner = OnPolicyRunner(env, cfg, log_dir=None, device="cpu")

    def mean_return(steps: int = 520) -> float:
        stats = ecs.EpisodeStats(env.sim)
        policy = runner.get_inference_policy()
        obs = env.reset()
        with torch.no_grad():
            for _ in range(steps):
                obs, _r, _d, _e = env.step(policy(obs))
                stats.update()
        return stats.summary()["mean_return"]

    before = mean_return()
    t0 = time.perf_counter()
    runner.learn(20)
    print(f"learn: {time.perf_counter() - t0:.1f} s")
    after = mean_return()
    print(f"mean return before {before:.1f}, after {after:.1f}")
    assert after > 100 and after > 4 * before, (before, after)
