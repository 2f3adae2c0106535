"""Stable-Baselines3 adapter: SB3's own vector wrappers and checks accept it, and PPO learns cartpole."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import ecs
import envs

sb3 = pytest.importorskip("stable_baselines3")

from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.vec_env import VecCheckNan, VecEnv, VecMonitor, VecNormalize  # noqa: E402

from ecs.adapters.sb3 import SB3VecEnv  # noqa: E402


def _sim(num_worlds: int = 8, seed: int = 0, name: str = "cartpole") -> ecs.BatchSim:
    return ecs.BatchSim(envs.make(name), num_worlds=num_worlds, device="cpu", seed=seed)


def test_sb3_vec_env_interface_and_autoreset_infos():
    sim = _sim()
    env = SB3VecEnv(sim)
    assert isinstance(env, VecEnv) and env.num_envs == 8
    assert env.observation_space.shape == (4,) and env.action_space.n == 2
    assert env.get_attr("render_mode") == [None] * 8 and env.env_is_wrapped(object) == [False] * 8
    env.seed(5)
    obs = env.reset()
    assert isinstance(obs, np.ndarray) and obs.shape == (8, 4) and np.array_equal(obs, sim.obs["state"].numpy())
    assert sim.seed == 5
    ended = 0
    for _ in range(40):
        actions = np.ones(8, dtype=np.int64)  # always right: falls within ~10 steps
        obs, rewards, dones, infos = env.step(actions)
        assert rewards.dtype == np.float32 and dones.dtype == bool and len(infos) == 8
        assert not np.shares_memory(obs, sim.obs["state"].numpy())  # SB3 keeps obs across steps
        np.testing.assert_array_equal(obs, sim.obs["state"].numpy())
        for i in range(8):
            assert ("terminal_observation" in infos[i]) == dones[i]
            if dones[i]:
                np.testing.assert_array_equal(infos[i]["terminal_observation"], sim.final_obs["state"][i].numpy())
                assert infos[i]["TimeLimit.truncated"] == bool(sim.truncated[i])
        ended += int(dones.sum())
    assert ended > 0


def test_sb3_wrappers_run_on_it():
    sim = _sim(seed=2)
    env = VecNormalize(VecMonitor(VecCheckNan(SB3VecEnv(sim), raise_exception=True)), gamma=0.99)
    env.reset()
    episodes = []
    for _ in range(60):
        _obs, _r, dones, infos = env.step(np.random.default_rng(0).integers(0, 2, 8))
        episodes += [info["episode"] for info, d in zip(infos, dones, strict=True) if d]
    assert episodes and all(e["l"] >= 1 and e["r"] == e["l"] for e in episodes)  # cartpole: +1 per step


def test_sb3_refuses_what_it_cannot_express():
    from tests.test_adapters import duel_env

    with pytest.raises(ecs.EcsError, match="num_agents=2"):
        SB3VecEnv(ecs.BatchSim(duel_env(), num_worlds=2, device="cpu"))
    with pytest.raises(ecs.ActionError, match="shape"):
        SB3VecEnv(_sim()).step(np.ones(7, dtype=np.int64))


def test_sb3_ppo_learns_cartpole():
    """SB3's PPO on 8 cartpole worlds for 16k steps clearly beats the untrained policy (random, about 20)."""
    from stable_baselines3 import PPO

    torch.manual_seed(0)
    env = SB3VecEnv(_sim(num_worlds=8, seed=1))
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=64,
        batch_size=256,
        n_epochs=10,
        gamma=0.98,
        gae_lambda=0.8,
        learning_rate=1e-3,
        ent_coef=0.0,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [64, 64]},
    )
    eval_env = VecMonitor(SB3VecEnv(_sim(num_worlds=8, seed=99)))
    # Sampled actions of the untrained policy are close to uniform: a random-policy baseline.
    before, _ = evaluate_policy(model, eval_env, n_eval_episodes=16, deterministic=False)
    t0 = time.perf_counter()
    model.learn(16_384)
    print(f"learn: {time.perf_counter() - t0:.1f} s")
    after, _ = evaluate_policy(model, eval_env, n_eval_episodes=16, deterministic=False)
    print(f"mean return before {before:.1f}, after {after:.1f}")
    assert before < 40
    assert after > 100 and after > 4 * before, (before, after)
