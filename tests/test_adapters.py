"""The RL-library adapters (``ecs.adapters``) and ``ecs.EpisodeStats``.

Cartpole and foraging cover the single-agent paths; a small inline two-agent env ("duel") covers
the multi-agent structure (an agent axis on observations, actions and rewards, and a boolean
per-agent action mask) and the single-agent adapter's refusal of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
import torch
import warp as wp

import ecs
import envs
from ecs.adapters.gymnasium import GymVectorEnv, NormalizeObservation, NormalizeReward, RecordEpisodeStatistics

# -- a two-agent toy env ----------------------------------------------------------------------

DUEL_AGENTS = 2


@dataclass(frozen=True)
class DuelConfig:
    speed: float = 0.5  # m per step
    arena: float = 2.0  # m; an agent beyond ±arena ends the episode


@ecs.component(singleton=True, shape=(DUEL_AGENTS,))
class Stride:
    """Action per agent: 0 left, 1 stay, 2 right. Exported as ``stride``, int32 ``[W, 2]``."""

    value: wp.int32


@ecs.component(singleton=True, shape=(DUEL_AGENTS,))
class Offset:
    """Position of each agent on a line [m]."""

    value: wp.float32


@ecs.component(singleton=True, shape=(DUEL_AGENTS, 2))
class Sight:
    """Observation per agent: own offset, other agent's offset [m]. ``[W, 2, 2]``."""

    value: wp.float32


@ecs.component(singleton=True, shape=(DUEL_AGENTS, 3))
class MoveMask:
    """Observation per agent: which strides keep the agent within 1.5 m. bool ``[W, 2, 3]``."""

    value: wp.bool


@wp.kernel
def move_duel(
    speed: float,
    world_stride_in: wp.array2d[wp.int32],
    world_offset_out: wp.array2d[wp.float32],
):
    world = wp.tid()
    for a in range(world_offset_out.shape[1]):
        world_offset_out[world, a] = world_offset_out[world, a] + speed * float(world_stride_in[world, a] - 1)


@wp.kernel
def judge_duel(
    arena: float,
    world_offset_in: wp.array2d[wp.float32],
    world_reward_out: wp.array2d[wp.float32],
    world_terminated_out: wp.array[wp.bool],
):
    world = wp.tid()
    out = wp.int32(0)  # a dynamic variable: Warp refuses to mutate a literal in a loop
    for a in range(world_offset_in.shape[1]):
        x = world_offset_in[world, a]
        world_reward_out[world, a] = -wp.abs(x) + float(a)
        if wp.abs(x) > arena:
            out = 1
    world_terminated_out[world] = out != 0


@wp.kernel
def reset_duel(
    world_reset_in: wp.array[wp.int32],
    world_rng_out: wp.array[wp.uint32],
    world_offset_out: wp.array2d[wp.float32],
):
    world = wp.tid()
    if world_reset_in[world] == 0:
        return
    state = world_rng_out[world]
    for a in range(world_offset_out.shape[1]):
        world_offset_out[world, a] = wp.randf(state, -1.0, 1.0)
    world_rng_out[world] = state


@wp.kernel
def observe_duel(
    world_offset_in: wp.array2d[wp.float32],
    world_sight_out: wp.array3d[wp.float32],
    world_move_mask_out: wp.array3d[wp.bool],
):
    world = wp.tid()
    for a in range(2):
        x = world_offset_in[world, a]
        world_sight_out[world, a, 0] = x
        world_sight_out[world, a, 1] = world_offset_in[world, 1 - a]
        world_move_mask_out[world, a, 0] = x > -1.5
        world_move_mask_out[world, a, 1] = True
        world_move_mask_out[world, a, 2] = x < 1.5


def duel_env() -> ecs.EnvSpec:
    return ecs.EnvSpec(
        name="duel_toy",
        config=DuelConfig(),
        singletons=[Stride, Offset, Sight, MoveMask],
        systems=[
            ecs.System(move_duel, ecs.Phase.ACT),
            ecs.System(judge_duel, ecs.Phase.REWARD),
            ecs.System(reset_duel, ecs.Phase.RESET),
            ecs.System(observe_duel, ecs.Phase.OBSERVE),
        ],
        actions={"stride": ecs.Action(Stride, low=0, high=2)},
        observations={
            "sight": ecs.Observation(Sight, low=-math.inf, high=math.inf),
            "move_mask": ecs.Observation(MoveMask, low=0, high=1),
        },
        max_episode_steps=12,
        num_agents=DUEL_AGENTS,
    )


@pytest.fixture(scope="module")
def cartpole_sim():
    return ecs.BatchSim(envs.make("cartpole"), num_worlds=16, device="cpu", seed=3)


@pytest.fixture(scope="module")
def foraging_sim():
    return ecs.BatchSim(envs.make("foraging"), num_worlds=6, device="cpu", seed=5)


@pytest.fixture(scope="module")
def duel_sim():
    return ecs.BatchSim(duel_env(), num_worlds=5, device="cpu", seed=7)


# -- Gymnasium --------------------------------------------------------------------------------


def test_gym_spaces(cartpole_sim, foraging_sim):
    env = GymVectorEnv(cartpole_sim)
    assert env.num_envs == 16
    assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    assert env.single_observation_space == gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    assert env.single_action_space == gym.spaces.Discrete(2)
    assert env.observation_space.shape == (16, 4)
    assert env.action_space == gym.spaces.MultiDiscrete(np.full(16, 2))

    env = GymVectorEnv(foraging_sim)
    assert isinstance(env.single_observation_space, gym.spaces.Dict)
    assert set(env.single_observation_space.spaces) == {"agent", "items"}
    assert env.observation_space["items"].shape == (6, 12, 3)
    assert env.single_action_space == gym.spaces.Discrete(5)
    obs, info = env.reset()
    assert set(obs) == {"agent", "items"} and obs["items"].shape == (6, 12, 3) and info == {}
    assert env.observation_space.contains({k: v.numpy() for k, v in obs.items()})


def test_gym_step_matches_the_sim_and_final_obs(cartpole_sim):
    env = GymVectorEnv(cartpole_sim, copy=True)
    sim = cartpole_sim
    obs, _ = env.reset(seed=11)
    assert isinstance(obs, torch.Tensor) and torch.equal(obs, sim.obs["state"])
    env.action_space.seed(0)
    ended = 0
    for _ in range(60):
        prev = obs
        action = env.action_space.sample()  # int64 numpy: cast to the sim's int32
        obs, reward, terminated, truncated, infos = env.step(action)
        assert torch.equal(torch.from_numpy(action).int(), sim.actions["push"])
        assert torch.equal(obs, sim.obs["state"]) and obs.data_ptr() != sim.obs["state"].data_ptr()
        assert torch.equal(reward, sim.rewards) and torch.equal(terminated, sim.terminated)
        assert torch.equal(truncated, sim.truncated)
        done = terminated | truncated
        assert torch.equal(infos["_final_obs"], done) and torch.equal(infos["_final_info"], done)
        assert infos["final_info"] == {}
        assert torch.equal(infos["final_obs"][done], sim.final_obs["state"][done])
        # A world that ended: the returned obs is already the new episode's first (small) state.
        assert (obs[done].abs() <= 0.05).all()
        # A world that did not end moved on from its previous observation.
        assert not torch.equal(obs[~done], prev[~done]) or not (~done).any()
        ended += int(done.sum())
    assert ended > 0


def test_gym_reset_seed_reproduces_and_mask(cartpole_sim):
    env = GymVectorEnv(cartpole_sim, copy=True)
    actions = torch.randint(0, 2, (20, 16), generator=torch.Generator().manual_seed(1), dtype=torch.int32)

    def rollout():
        obs, _ = env.reset(seed=42)
        out = [obs]
        for a in actions:
            out.append(env.step(a)[0])
        return torch.stack(out)

    assert torch.equal(rollout(), rollout())
    before = cartpole_sim.obs["state"].clone()
    mask = np.zeros(16, dtype=bool)
    mask[[2, 5]] = True
    obs, _ = env.reset(options={"reset_mask": mask})
    assert torch.equal(obs[~torch.from_numpy(mask)], before[~torch.from_numpy(mask)])
    assert not torch.equal(obs[torch.from_numpy(mask)], before[torch.from_numpy(mask)])


def test_gym_dict_actions_and_errors(cartpole_sim):
    env = GymVectorEnv(cartpole_sim)
    env.reset()
    env.step({"push": torch.ones(16, dtype=torch.int64)})
    assert (cartpole_sim.actions["push"] == 1).all()
    with pytest.raises(ecs.ActionError, match="missing"):
        env.step({"pull": torch.ones(16, dtype=torch.int32)})
    with pytest.raises(ecs.ActionError, match="castable"):
        env.step(torch.ones(16, dtype=torch.float32))
    with pytest.raises(ecs.ActionError, match="shape"):
        env.step(torch.ones(15, dtype=torch.int32))


def test_gym_refuses_a_multi_agent_sim(duel_sim):
    with pytest.raises(ecs.EcsError, match=r"num_agents=2.*rewards \(5, 2\)"):
        GymVectorEnv(duel_sim)


def test_gym_wrappers_numpy_mode(cartpole_sim):
    sim = cartpole_sim
    env = GymVectorEnv(sim, to_numpy=True)
    stats = gym.wrappers.vector.RecordEpisodeStatistics(env)
    scaled = gym.wrappers.vector.NormalizeReward(stats, gamma=0.99)
    wrapped = NormalizeObservation(scaled)
    obs, _ = wrapped.reset(seed=0)
    assert isinstance(obs, np.ndarray) and obs.shape == (16, 4)
    wrapped.action_space.seed(3)
    returns, lengths = np.zeros(16), np.zeros(16, dtype=int)
    finished_r, finished_l = [], []
    for _ in range(80):
        obs, reward, terminated, truncated, infos = wrapped.step(wrapped.action_space.sample())
        assert isinstance(obs, np.ndarray) and obs.dtype == np.float32
        raw = sim.rewards.numpy()
        # NormalizeReward scales the sim's reward by one positive factor for all worlds.
        np.testing.assert_allclose(reward / raw, np.full(16, reward[0] / raw[0]), rtol=1e-6)
        returns += raw
        lengths += 1
        done = terminated | truncated
        finished_r += returns[done].tolist()
        finished_l += lengths[done].tolist()
        if done.any():
            ep = infos["episode"]
            np.testing.assert_allclose(ep["r"][done], returns[done])
            np.testing.assert_array_equal(ep["l"][done], lengths[done])
            # final_obs is normalised with the same statistics as obs.
            final = sim.final_obs["state"].numpy()[done]
            mean, var = wrapped.obs_rms.mean.numpy(), wrapped.obs_rms.var.numpy()
            expect = (final - mean) / np.sqrt(var + wrapped.epsilon)
            np.testing.assert_allclose(infos["final_obs"][done], expect, rtol=1e-5, atol=1e-6)
        returns[done], lengths[done] = 0, 0
    assert finished_r and list(stats.return_queue) == pytest.approx(finished_r[-len(stats.return_queue) :])
    assert list(stats.length_queue) == finished_l[-len(stats.length_queue) :]


def test_gym_default_returns_the_sims_buffers_without_allocating(cartpole_sim):
    sim = cartpole_sim
    env = GymVectorEnv(sim)
    env.reset(seed=2)
    a = torch.ones(16, dtype=torch.int32)
    first = env.step(a)
    for _ in range(30):
        obs, reward, terminated, truncated, infos = env.step(a)
        # The same persistent buffers every step: nothing is allocated or copied.
        assert obs is sim.obs["state"] and reward is sim.rewards and terminated is sim.terminated
        assert infos["final_obs"] is sim.final_obs["state"] and infos["_final_obs"] is first[4]["_final_obs"]
        assert torch.equal(infos["_final_obs"], terminated | truncated)
    views = GymVectorEnv(sim, to_numpy=True)
    obs, reward, *_ = views.step(np.ones(16, dtype=np.int64))
    assert np.shares_memory(obs, sim.obs["state"].numpy()) and np.shares_memory(reward, sim.rewards.numpy())
    copies = GymVectorEnv(sim, to_numpy=True, copy=True)
    obs, *_ = copies.step(np.ones(16, dtype=np.int64))
    assert not np.shares_memory(obs, sim.obs["state"].numpy())


def test_gym_wrappers_in_torch_mode_match_gymnasiums_numpy_wrappers():
    """Ours on a torch-mode env against Gymnasium's own on a numpy-mode twin (same seed, same actions)."""
    ref_sim = ecs.BatchSim(envs.make("cartpole"), num_worlds=16, device="cpu", seed=4)
    sim = ecs.BatchSim(envs.make("cartpole"), num_worlds=16, device="cpu", seed=4)
    ref_stats = gym.wrappers.vector.RecordEpisodeStatistics(GymVectorEnv(ref_sim, to_numpy=True), buffer_length=7)
    ref = gym.wrappers.vector.NormalizeReward(ref_stats, gamma=0.9)
    stats = RecordEpisodeStatistics(GymVectorEnv(sim), buffer_length=7)
    mine = NormalizeObservation(NormalizeReward(stats, gamma=0.9))
    ref_obs, _ = ref.reset(seed=1)
    obs, _ = mine.reset(seed=1)
    rms = gym.wrappers.utils.RunningMeanStd(shape=(4,))
    rms.update(ref_obs)
    assert isinstance(obs, torch.Tensor)
    np.testing.assert_allclose(obs.numpy(), (ref_obs - rms.mean) / np.sqrt(rms.var + 1e-8), rtol=1e-5, atol=1e-5)
    gen = np.random.default_rng(0)
    ended = 0
    for _ in range(90):
        action = gen.integers(0, 2, 16)
        ref_obs, ref_r, ref_term, ref_trunc, ref_info = ref.step(action)
        obs, r, term, trunc, info = mine.step(torch.from_numpy(action))
        assert isinstance(r, torch.Tensor) and isinstance(info["episode"]["r"], torch.Tensor)
        np.testing.assert_array_equal(term.numpy(), ref_term)
        np.testing.assert_array_equal(trunc.numpy(), ref_trunc)
        np.testing.assert_allclose(r.numpy(), ref_r, rtol=1e-5, atol=1e-6)
        rms.update(ref_obs)
        scale = np.sqrt(rms.var + 1e-8)
        np.testing.assert_allclose(obs.numpy(), (ref_obs - rms.mean) / scale, rtol=1e-4, atol=1e-4)
        done = ref_term | ref_trunc
        assert np.array_equal(info["_episode"].numpy(), done)
        final = (ref_info["final_obs"][done] - rms.mean) / scale
        np.testing.assert_allclose(info["final_obs"].numpy()[done], final, rtol=1e-4, atol=1e-4)
        if done.any():
            ended += int(done.sum())
            np.testing.assert_allclose(info["episode"]["r"].numpy()[done], ref_info["episode"]["r"][done])
            np.testing.assert_array_equal(info["episode"]["l"].numpy()[done], ref_info["episode"]["l"][done])
            assert (info["episode"]["r"].numpy()[~done] == 0).all()
        else:
            assert not info["_episode"].any()
    assert ended > 7
    assert stats.episode_count == ref_stats.episode_count
    assert list(stats.return_queue) == pytest.approx(list(ref_stats.return_queue))
    assert list(stats.length_queue) == list(ref_stats.length_queue)
    assert len(stats.time_queue) == 7


def test_gymnasiums_own_normalize_observation_refuses_same_step(cartpole_sim):
    # Gymnasium's own NormalizeObservation refuses same-step envs; ours exists for that reason.
    with pytest.raises(ValueError, match="autoreset_mode"):
        gym.wrappers.vector.NormalizeObservation(GymVectorEnv(cartpole_sim, to_numpy=True))


# -- TorchRL ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cartpole", "foraging"])
def test_torchrl_check_env_specs_single_agent(name, cartpole_sim, foraging_sim):
    pytest.importorskip("torchrl")
    from torchrl.envs.utils import check_env_specs

    from ecs.adapters.torchrl import TorchRLEnv

    sim = cartpole_sim if name == "cartpole" else foraging_sim
    env = TorchRLEnv(sim)
    check_env_specs(env, seed=1)
    td = env.rollout(40, break_when_any_done=False)
    assert td.batch_size == (sim.num_worlds, 40)
    assert set(td["next"].keys()) >= {"reward", "done", "terminated", "truncated", *sim.obs}


def test_torchrl_next_obs_of_an_ended_world_is_final_obs(cartpole_sim):
    pytest.importorskip("torchrl")
    from ecs.adapters.torchrl import TorchRLEnv

    sim = cartpole_sim
    env = TorchRLEnv(sim)
    td = env.reset()
    for _ in range(40):
        td["action"] = torch.ones(16, dtype=torch.int32)  # always right: falls within ~10 steps
        td = env.step(td)
        done = td["next", "done"].squeeze(-1)
        assert torch.equal(td["next", "state"][done], sim.final_obs["state"][done])
        assert torch.equal(td["next", "state"][~done], sim.obs["state"][~done])
        before = sim.tensor("world", "episode").clone()
        td = env.reset(td["next"].clone().set("_reset", done[:, None]))
        # The engine had restarted the ended worlds: this partial reset starts no further episode.
        assert torch.equal(sim.tensor("world", "episode"), before)
        assert torch.equal(td["state"], sim.obs["state"])


def test_torchrl_multi_agent_group(duel_sim):
    pytest.importorskip("torchrl")
    from torchrl.envs.utils import check_env_specs

    from ecs.adapters.torchrl import TorchRLEnv

    env = TorchRLEnv(duel_sim)
    check_env_specs(env, seed=2)
    assert env.full_observation_spec["agents"].shape == (5, 2)
    assert env.full_observation_spec["agents", "move_mask"].dtype == torch.bool
    assert env.full_action_spec["agents", "action"].shape == (5, 2)
    assert env.full_reward_spec["agents", "reward"].shape == (5, 2, 1)
    td = env.rollout(30, break_when_any_done=False)
    assert td["next", "agents", "sight"].shape == (5, 30, 2, 2)
    assert td["next", "done"].any()
    # Agent a's reward is a - |offset_a|, with each agent's own offset first in its sight.
    reward, sight = td["next", "agents", "reward"][..., 0], td["next", "agents", "sight"]
    torch.testing.assert_close(reward, torch.tensor([0.0, 1.0]) - sight[..., 0].abs())


def _assert_td_equal(a, b) -> None:
    keys = sorted(a.keys(True, True), key=str)
    assert keys == sorted(b.keys(True, True), key=str)
    for key in keys:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("name", ["cartpole", "duel"])
def test_torchrl_fast_step_and_maybe_reset_matches_envbase(name):
    """The fast paths give the data of EnvBase's generic step, step_mdp and partial reset, on a twin sim."""
    pytest.importorskip("torchrl")
    from ecs.adapters.torchrl import TorchRLEnv

    make = (lambda: envs.make("cartpole")) if name == "cartpole" else duel_env
    fast_sim, ref_sim = (ecs.BatchSim(make(), num_worlds=6, device="cpu", seed=8) for _ in range(2))
    fast, ref = TorchRLEnv(fast_sim), TorchRLEnv(ref_sim)
    ref.run_type_checks = True  # turns the fast paths off: EnvBase's own step and maybe_reset run
    fast_td, ref_td = fast.reset(), ref.reset()
    gen = torch.Generator().manual_seed(3)
    action_key = fast.action_key
    shape = fast.full_action_spec[action_key].shape
    ended = 0
    for _ in range(40):
        action = torch.randint(0, 3 if name == "duel" else 2, shape, generator=gen)
        fast_td.set(action_key, action)
        ref_td.set(action_key, action.clone())
        fast_out, fast_td = fast.step_and_maybe_reset(fast_td)
        ref_out, ref_td = ref.step_and_maybe_reset(ref_td)
        _assert_td_equal(fast_out, ref_out)
        # The carried action differs only where a world restarted: EnvBase's reset pads it with 0 there.
        done = fast_out["next", "done"].squeeze(-1)
        assert torch.equal(fast_td[action_key], action)
        assert torch.equal(ref_td[action_key][~done], action[~done]) and (ref_td[action_key][done] == 0).all()
        _assert_td_equal(fast_td.exclude(action_key), ref_td.exclude(action_key))
        # EnvBase's partial reset found every ended world already restarted: the sims stay twins.
        assert torch.equal(fast_sim.tensor("world", "episode"), ref_sim.tensor("world", "episode"))
        ended += int(fast_out["next", "done"].sum())
    assert ended > 0


def test_torchrl_collector_on_the_fast_path_matches_the_sim():
    """TorchRL's Collector (step_and_maybe_reset every step): its batch is the sim's own trajectory."""
    pytest.importorskip("torchrl")
    from torchrl.collectors import Collector

    from ecs.adapters.torchrl import TorchRLEnv

    sim = ecs.BatchSim(envs.make("cartpole"), num_worlds=4, device="cpu", seed=6)
    env = TorchRLEnv(sim)
    collector = Collector(env, policy=None, frames_per_batch=4 * 30, total_frames=4 * 60)
    episodes_before = sim.tensor("world", "episode").clone()
    ended = 0
    for batch in collector:
        assert batch.batch_size == (4, 30)
        done = batch["next", "done"].squeeze(-1)
        # Next observations continue into the following step's observation, except where an episode ended.
        cont = ~done[:, :-1]
        assert torch.equal(batch["next", "state"][:, :-1][cont], batch["state"][:, 1:][cont])
        # The step after an end starts from a fresh state; the rewards are cartpole's +1.
        assert (batch["state"][:, 1:][done[:, :-1]].abs() <= 0.05).all()
        assert (batch["next", "reward"] == 1).all()
        ended += int(done.sum())
    collector.shutdown()
    # Every restart was the engine's own (one per ended episode): no extra reset-graph replays.
    assert int((sim.tensor("world", "episode") - episodes_before).sum()) == ended > 0


def test_torchrl_agents_group_has_flags_and_feature_axes_for_gae():
    """Hide-and-seek as TorchRL's multi-agent recipes expect: flags in the group, active with a feature axis."""
    pytest.importorskip("torchrl")
    from tensordict.nn import TensorDictModule
    from torchrl.envs.utils import check_env_specs
    from torchrl.objectives.value import GAE

    from ecs.adapters.torchrl import TorchRLEnv

    sim = ecs.BatchSim(envs.make("hide_and_seek"), num_worlds=2, device="cpu", seed=1)
    env = TorchRLEnv(sim)
    A = sim.env.num_agents
    check_env_specs(env, seed=0)
    assert env.full_observation_spec["agents", "active"].shape == (2, A, 1)
    for flag in ("done", "terminated", "truncated"):
        assert env.full_done_spec["agents", flag].shape == (2, A, 1)
    assert ("agents", "done") in env.done_keys
    td = env.rollout(6, break_when_any_done=False)
    assert torch.equal(td["next", "agents", "active"][:, -1, :, 0], sim.obs["active"])
    assert torch.equal(td["next", "agents", "done"], td["next", "done"].unsqueeze(-2).expand(2, 6, A, 1))
    critic = TensorDictModule(torch.nn.Linear(11, 1), in_keys=[("agents", "self")], out_keys=[("agents", "value")])
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    gae.set_keys(
        reward=("agents", "reward"),
        done=("agents", "done"),
        terminated=("agents", "terminated"),
        value=("agents", "value"),
        advantage=("agents", "advantage"),
        value_target=("agents", "value_target"),
    )
    with torch.no_grad():
        gae(td)
    assert td["agents", "advantage"].shape == (2, 6, A, 1)
    assert torch.isfinite(td["agents", "advantage"]).all()


def test_torchrl_agent_level_reset_key_restarts_the_world(duel_sim):
    pytest.importorskip("torchrl")
    from tensordict import TensorDict

    from ecs.adapters.torchrl import TorchRLEnv

    env = TorchRLEnv(duel_sim)
    env.reset()
    before = duel_sim.tensor("world", "episode").clone()
    agent_reset = torch.zeros(5, 2, 1, dtype=torch.bool)
    agent_reset[3, 1] = True
    td = TensorDict({"agents": TensorDict({"_reset": agent_reset}, [5, 2])}, [5])
    env.reset(td)
    assert (duel_sim.tensor("world", "episode") - before).tolist() == [0, 0, 0, 1, 0]


# -- PettingZoo -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cartpole", "duel"])
def test_pettingzoo_parallel_api(name, cartpole_sim, duel_sim):
    pytest.importorskip("pettingzoo")
    from pettingzoo.test import parallel_api_test

    from ecs.adapters.pettingzoo import PettingZooWorld

    sim = cartpole_sim if name == "cartpole" else duel_sim
    env = PettingZooWorld(sim, world=3)
    parallel_api_test(env, num_cycles=600)
    expected = ["agent_0"] if name == "cartpole" else ["agent_0", "agent_1"]
    assert env.possible_agents == expected
    obs, _ = env.reset()
    for agent in expected:
        assert env.observation_space(agent).contains(obs[agent])


def test_pettingzoo_view_reads_its_world(duel_sim):
    pytest.importorskip("pettingzoo")
    from ecs.adapters.pettingzoo import PettingZooWorld

    env = PettingZooWorld(duel_sim, world=2)
    obs, _ = env.reset()
    sight = duel_sim.obs["sight"][2].numpy()
    np.testing.assert_array_equal(obs["agent_1"]["sight"], sight[1])
    _obs, rew, *_ = env.step({"agent_0": 2, "agent_1": 0})
    assert duel_sim.actions["stride"][2].tolist() == [2, 0]
    assert rew["agent_1"] == pytest.approx(float(duel_sim.rewards[2, 1]))
    assert env.observation_space("agent_0") == gym.spaces.Dict(
        {"move_mask": gym.spaces.Box(0, 1, (3,), bool), "sight": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)}
    )


def test_pettingzoo_lists_only_the_agent_slots_in_use():
    pytest.importorskip("pettingzoo")
    from pettingzoo.test import parallel_api_test

    from ecs.adapters.pettingzoo import PettingZooWorld

    sim = ecs.BatchSim(envs.make("hide_and_seek"), num_worlds=2, device="cpu", seed=0)
    env = PettingZooWorld(sim, world=0)
    assert env.render_mode is None and len(env.possible_agents) == 6
    obs, infos = env.reset()  # draws a new level for world 0
    active = sim.obs["active"][0] != 0
    assert not active.all()  # this seed's level uses fewer than six slots
    in_use = [f"agent_{i}" for i in range(6) if active[i]]
    assert env.agents == in_use and sorted(obs) == sorted(in_use) and sorted(infos) == sorted(in_use)
    idle = next(a for a in env.possible_agents if a not in in_use)
    with pytest.raises(ecs.EcsError, match="not in use"):
        env.step({idle: env.action_space(idle).sample()})
    _obs, rewards, *_ = env.step({a: env.action_space(a).sample() for a in env.agents})
    assert sorted(rewards) == sorted(in_use)
    parallel_api_test(env, num_cycles=40)
    with pytest.raises(ecs.EcsError, match="render_mode=None"):
        PettingZooWorld(sim, render_mode="rgb_array")


# -- EpisodeStats ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cartpole", "foraging", "duel"])
def test_episode_stats_match_a_python_accumulation(name, cartpole_sim, foraging_sim, duel_sim):
    sim = {"cartpole": cartpole_sim, "foraging": foraging_sim, "duel": duel_sim}[name]
    sim.reset()
    stats = ecs.EpisodeStats(sim)
    gen = torch.Generator().manual_seed(9)
    key = next(iter(sim.actions))
    high = int(sim.env.actions[key].high)
    W = sim.num_worlds
    ret = [np.zeros(sim.rewards.shape[1:]) for _ in range(W)]
    length = [0] * W
    finished_r, finished_l = [], []
    for step in range(260):
        sim.actions[key] = torch.randint(0, high + 1, sim.actions[key].shape, generator=gen, dtype=torch.int32)
        sim.step()
        stats.update()
        r, d = sim.rewards.numpy(), (sim.terminated | sim.truncated).numpy()
        for w in range(W):
            ret[w] = ret[w] + r[w]
            length[w] += 1
            if d[w]:
                finished_r.append(ret[w])
                finished_l.append(length[w])
                ret[w], length[w] = np.zeros_like(ret[w]), 0
        if step == 129:
            half = stats.summary(clear=True)
            assert half["episodes"] == len(finished_r)
            finished_r, finished_l = [], []
    s = stats.summary()
    assert s["episodes"] == len(finished_r) > 0
    fr = np.array(finished_r, dtype=np.float64)
    np.testing.assert_allclose(s["mean_return"], fr.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s["std_return"], fr.std(0), rtol=1e-4, atol=1e-4)
    assert s["mean_length"] == pytest.approx(np.mean(finished_l))
    np.testing.assert_allclose(stats.episode_return.numpy(), np.array(ret, dtype=np.float32), rtol=1e-5, atol=1e-5)
    assert stats.episode_length.tolist() == length
    stats.reset(torch.arange(W) == 0)
    assert stats.episode_length[0] == 0 and stats.episode_length[1:].tolist() == length[1:]
    stats.clear()
    assert stats.summary()["episodes"] == 0 and math.isnan(stats.summary()["mean_length"])
