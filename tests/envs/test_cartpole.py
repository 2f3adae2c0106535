"""Cartpole against Gymnasium's own CartPole-v1, transition by transition.

Our dynamics run in float32, Gymnasium's in float64. Each transition starts Gymnasium from our
pre-step state (float64 of our float32) so errors never accumulate: one step is a few dozen
float32 operations on values of magnitude <= ~5, so the next state agrees to ~1e-6 absolute
(measured: <= 3e-7). Termination compares the float32 state with the thresholds, so a transition
whose next state lies within ``_AMBIGUOUS`` of a threshold may legitimately disagree; those are
skipped, counted and required to be rare.
"""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control.cartpole import CartPoleEnv, CartPoleVectorEnv
from gymnasium.wrappers import TimeLimit

import ecs
import envs

STATE_COLUMNS = ("cart_position", "cart_velocity", "pole_angle", "pole_angular_velocity")
RTOL, ATOL = 1e-5, 1e-6
_AMBIGUOUS = 1e-5
X_THRESHOLD = 2.4
THETA_THRESHOLD = 12 * 2 * math.pi / 360


def _pre_state(sim: ecs.BatchSim) -> np.ndarray:
    """The state the next step starts from, ``[num_worlds, 4]`` float64 (exact copy of our float32)."""
    cols = [sim.tensor("world", n) for n in STATE_COLUMNS]
    return torch.stack(cols, dim=1).cpu().numpy().astype(np.float64)


def _set_state(sim: ecs.BatchSim, worlds: torch.Tensor, values: np.ndarray) -> None:
    """Overwrites the state of the worlds selected by the bool mask ``worlds``."""
    v = torch.from_numpy(values.astype(np.float32)).to(sim.device)
    worlds = worlds.to(sim.device)
    for i, name in enumerate(STATE_COLUMNS):
        sim.tensor("world", name)[worlds] = v[worlds, i]


def _wide_states(rng: np.random.Generator, n: int) -> np.ndarray:
    """States spread over and past the termination thresholds."""
    half_width = np.array([2.7, 3.0, 0.28, 3.0])
    return rng.uniform(-1.0, 1.0, (n, 4)) * half_width


def _last_obs(sim: ecs.BatchSim) -> np.ndarray:
    """The observation each world reached by the last step (the terminal one where it ended)."""
    done = (sim.terminated | sim.truncated).cpu().numpy()
    return np.where(done[:, None], sim.final_obs["state"].cpu().numpy(), sim.obs["state"].cpu().numpy())


def _ambiguous(state: np.ndarray) -> np.ndarray:
    """Transitions whose next state lies within ``_AMBIGUOUS`` of a termination threshold."""
    return (np.abs(np.abs(state[:, 0]) - X_THRESHOLD) < _AMBIGUOUS) | (
        np.abs(np.abs(state[:, 2]) - THETA_THRESHOLD) < _AMBIGUOUS
    )


def _push(sim: ecs.BatchSim, actions: np.ndarray) -> None:
    sim.actions["push"].copy_(torch.from_numpy(actions.astype(np.int32)))


def test_transitions_match_gymnasium(device):
    W, steps = 256, 40
    sim = ecs.BatchSim(envs.make("cartpole"), W, device=device, seed=1)
    rng = np.random.default_rng(1)
    gyms = [CartPoleEnv() for _ in range(W)]
    venv = CartPoleVectorEnv(num_envs=W)
    venv.reset(seed=0)
    episode_step = sim.tensor("world", "episode_step")
    compared = skipped = terminations = 0
    for t in range(steps):
        if t % 10 == 0:
            # Half the worlds jump to states near or past the thresholds, so terminations happen.
            _set_state(sim, torch.from_numpy(rng.random(W) < 0.5), _wide_states(rng, W))
        pre = _pre_state(sim)
        steps_before = episode_step.cpu().numpy().copy()
        actions = rng.integers(0, 2, W)
        _push(sim, actions)
        sim.step()

        ref = np.empty((W, 4))
        ref_terminated = np.empty(W, dtype=bool)
        for w, env in enumerate(gyms):
            env.state = pre[w].copy()
            env.steps_beyond_terminated = None
            _, reward, terminated, truncated, _ = env.step(int(actions[w]))
            ref[w], ref_terminated[w] = env.state, terminated
            assert reward == 1.0 and not truncated

        ours = _last_obs(sim)
        np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL)
        assert torch.all(sim.rewards == 1.0), "reward is 1.0 on every step, the terminating one included"
        assert not sim.truncated.any(), "the default 500-step horizon cannot be reached in 40 steps"

        terminated = sim.terminated.cpu().numpy()
        clear = ~_ambiguous(ref)
        np.testing.assert_array_equal(terminated[clear], ref_terminated[clear])
        skipped += int((~clear).sum())
        compared += int(clear.sum())
        terminations += int(terminated.sum())

        # Gymnasium's vectorised CartPole, started from the same states, agrees too.
        venv.state = pre.T.copy()
        venv.prev_done[:] = False
        venv.steps[:] = 0
        vobs, vreward, vterminated, vtruncated, _ = venv.step(actions)
        np.testing.assert_allclose(ours, vobs, rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(terminated[clear], vterminated[clear])
        assert np.all(vreward == 1.0) and not vtruncated.any()

        # Same-step auto-reset: ended worlds already show a fresh episode.
        new_obs = sim.obs["state"].cpu().numpy()
        steps_after = episode_step.cpu().numpy()
        assert np.all(np.abs(new_obs[terminated]) <= 0.05)
        np.testing.assert_array_equal(steps_after[terminated], 0)
        np.testing.assert_array_equal(steps_after[~terminated], steps_before[~terminated] + 1)
        np.testing.assert_array_equal(_pre_state(sim), new_obs.astype(np.float64))

    assert compared == W * steps - skipped
    assert skipped <= 0.002 * W * steps, f"{skipped} ambiguous transitions out of {W * steps}"
    assert terminations > 300, "the comparison must cover many terminating transitions"
    assert terminations < 0.8 * W * steps, "and many non-terminating ones"


def test_truncation_matches_gymnasium_time_limit(device):
    W, horizon = 48, 20
    sim = ecs.BatchSim(envs.make("cartpole", max_episode_steps=horizon), W, device=device, seed=2)
    rng = np.random.default_rng(2)
    gyms = [TimeLimit(CartPoleEnv(), max_episode_steps=horizon) for _ in range(W)]
    for env in gyms:
        env.reset(seed=0)
    truncations = both_flags = 0
    for _ in range(90):
        pre = _pre_state(sim)
        # A balancing push (with noise) keeps most episodes alive until the time limit.
        lean = pre[:, 2] + 0.5 * pre[:, 3] > 0
        actions = np.where(rng.random(W) < 0.8, lean, rng.integers(0, 2, W)).astype(np.int64)
        _push(sim, actions)
        sim.step()
        terminated = sim.terminated.cpu().numpy()
        truncated = sim.truncated.cpu().numpy()
        ref = np.empty((W, 4))
        for w, env in enumerate(gyms):
            env.unwrapped.state = pre[w].copy()
            env.unwrapped.steps_beyond_terminated = None
            _, _, ref_terminated, ref_truncated, _ = env.step(int(actions[w]))
            ref[w] = env.unwrapped.state
            if not _ambiguous(ref[w : w + 1])[0]:
                assert terminated[w] == ref_terminated
            # Ours: truncated = time limit reached and not terminated (never both at once);
            # Gymnasium's TimeLimit sets both flags on a terminating step at the limit.
            assert truncated[w] == (ref_truncated and not terminated[w])
            both_flags += int(ref_terminated and ref_truncated)
            if terminated[w] or truncated[w]:
                env.reset()
        np.testing.assert_allclose(_last_obs(sim), ref, rtol=RTOL, atol=ATOL)
        assert not (terminated & truncated).any()
        truncations += int(truncated.sum())
    assert truncations >= W, "most worlds should reach the time limit at least once"


def test_default_horizon_is_500(device):
    env = envs.make("cartpole")
    assert env.max_episode_steps == 500 == env.config.max_episode_steps
    assert gymnasium.spec("CartPole-v1").max_episode_steps == 500
    sim = ecs.BatchSim(env, 8, device=device, seed=0)
    sim.actions["push"].zero_()
    episode_step = sim.tensor("world", "episode_step")
    episode_step.fill_(498)
    before = sim.obs["state"].clone()
    sim.step()
    assert not sim.truncated.any() and not sim.terminated.any()
    assert torch.all(episode_step == 499)
    # Worlds 0..2 also fall on the last step: Gymnasium's TimeLimit reports both flags, we report
    # terminated only (the two are never true at once).
    falling = torch.zeros(8, dtype=torch.bool)
    falling[:3] = True
    _set_state(sim, falling, np.tile([2.45, 0.5, 0.0, 0.0], (8, 1)))
    pre = _pre_state(sim)
    sim.step()
    terminated, truncated = sim.terminated.cpu(), sim.truncated.cpu()
    assert torch.equal(terminated, falling) and torch.equal(truncated, ~falling)
    assert torch.all(sim.rewards == 1.0)
    assert torch.all(episode_step == 0)
    assert not torch.equal(sim.obs["state"], before)
    assert torch.all(sim.obs["state"].abs() <= 0.05)
    gym = TimeLimit(CartPoleEnv(), max_episode_steps=500)
    gym.reset(seed=0)
    for w in range(8):
        gym.unwrapped.state = pre[w].copy()
        gym.unwrapped.steps_beyond_terminated = None
        gym._elapsed_steps = 499
        _, _, ref_terminated, ref_truncated, _ = gym.step(0)
        assert ref_truncated and ref_terminated == bool(falling[w])


def test_reset_distribution(device):
    W = 4096
    sim = ecs.BatchSim(envs.make("cartpole"), W, device=device, seed=3)
    first = sim.obs["state"].cpu().numpy().copy()
    samples = [first]
    for _ in range(2):
        sim.reset()
        samples.append(sim.obs["state"].cpu().numpy().copy())
    assert not np.array_equal(samples[0], samples[1]), "each reset starts a new episode with new noise"
    x = np.stack(samples)  # [resets, worlds, 4]
    assert x.min() >= -0.05 and x.max() <= 0.05
    assert len(np.unique(x)) > 0.99 * x.size
    expected_std = 0.05 / math.sqrt(3.0)
    for i in range(4):
        v = x[..., i].ravel()
        assert abs(v.mean()) < 6 * expected_std / math.sqrt(v.size)
        assert v.std() == pytest.approx(expected_std, rel=0.03)
    counts, _ = np.histogram(x.ravel(), bins=10, range=(-0.05, 0.05))
    np.testing.assert_allclose(counts, x.size / 10, rtol=0.1)
    # The pre-step state and the observation agree after a reset.
    np.testing.assert_array_equal(_pre_state(sim), samples[-1].astype(np.float64))


def test_reset_noise_config(device):
    sim = ecs.BatchSim(envs.make("cartpole", reset_noise=0.01), 1024, device=device, seed=0)
    state = sim.obs["state"]
    assert state.abs().max() <= 0.01
    assert state.abs().max() > 0.009


def test_spaces(device):
    sim = ecs.BatchSim(envs.make("cartpole"), 4, device=device, seed=0)
    obs_space = sim.observation_space["state"]
    assert isinstance(obs_space, gymnasium.spaces.Box)
    assert obs_space.shape == (4,) and obs_space.dtype == np.float32
    assert obs_space.contains(sim.obs["state"][0].cpu().numpy())
    assert sim.action_space["push"] == gymnasium.spaces.Discrete(2)
    assert set(sim.observation_space.spaces) == {"state"}
    assert set(sim.action_space.spaces) == {"push"}


def test_force_mag_override_changes_dynamics(device):
    W = 64
    default = ecs.BatchSim(envs.make("cartpole"), W, device=device, seed=4)
    strong = ecs.BatchSim(envs.make("cartpole", force_mag=20.0), W, device=device, seed=4)
    assert strong.env.config.force_mag == 20.0
    assert float(strong.params["force_mag"][0]) == 20.0
    pre = _pre_state(strong)
    np.testing.assert_array_equal(pre, _pre_state(default))
    actions = np.random.default_rng(4).integers(0, 2, W)
    for sim in (default, strong):
        _push(sim, actions)
        sim.step()
    assert not np.allclose(_last_obs(default)[:, 1], _last_obs(strong)[:, 1])
    gym = CartPoleEnv()
    gym.force_mag = 20.0
    ref = np.empty((W, 4))
    for w in range(W):
        gym.state = pre[w].copy()
        gym.steps_beyond_terminated = None
        gym.step(int(actions[w]))
        ref[w] = gym.state
    np.testing.assert_allclose(_last_obs(strong), ref, rtol=RTOL, atol=ATOL)


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ecs.ConfigError) as e:
        envs.make("cartpole", bogus=1)
    msg = str(e.value)
    assert "bogus" in msg
    for key in ("force_mag", "max_episode_steps", "gravity", "reset_noise"):
        assert key in msg


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_episode_steps", "x"), ("max_episode_steps", 2.5), ("force_mag", "strong"), ("tau", True)],
)
def test_wrong_type_names_the_field(field, value):
    with pytest.raises(ecs.ConfigError, match=field):
        envs.make("cartpole", **{field: value})


def test_invalid_value_is_refused():
    with pytest.raises(ecs.ConfigError, match="force_mag"):
        envs.make("cartpole", force_mag=-1.0)
    with pytest.raises(ecs.ConfigError, match="unknown environment"):
        envs.make("no_such_env")


def test_yaml_config(tmp_path, device):
    path = tmp_path / "cartpole.yaml"
    path.write_text("force_mag: 15.0\nmax_episode_steps: 30\n")
    env = envs.make("cartpole", config=path)
    assert env.config.force_mag == 15.0 and env.config.max_episode_steps == 30
    assert env.max_episode_steps == 30
    assert env.config.gravity == 9.8, "keys missing from the file keep their defaults"
    sim = ecs.BatchSim(env, 2, device=device, seed=0)
    assert float(sim.params["force_mag"][0]) == 15.0
    # Keyword overrides win over the file.
    assert envs.make("cartpole", config=str(path), force_mag=12.0).config.force_mag == 12.0

    bad = tmp_path / "bad.yaml"
    bad.write_text("force_mag: 15.0\nforce_magnitude: 3.0\n")
    with pytest.raises(ecs.ConfigError) as e:
        envs.make("cartpole", config=bad)
    assert "force_magnitude" in str(e.value) and "force_mag" in str(e.value)
    with pytest.raises(ecs.ConfigError, match="does not exist"):
        envs.make("cartpole", config=tmp_path / "missing.yaml")


def test_force_mag_parameter_is_a_live_view(device):
    W = 32
    sim = ecs.BatchSim(envs.make("cartpole"), W, device=device, seed=5)
    twin = ecs.BatchSim(envs.make("cartpole"), W, device=device, seed=5)
    reference = ecs.BatchSim(envs.make("cartpole", force_mag=20.0), W, device=device, seed=5)
    param = sim.params["force_mag"]
    assert isinstance(param, torch.Tensor) and param.dtype == torch.float32
    assert tuple(param.shape) == (1,) and float(param[0]) == 10.0

    param.fill_(20.0)
    assert sim.params["force_mag"] is param
    pre = _pre_state(sim)
    rng = np.random.default_rng(5)
    actions = rng.integers(0, 2, W)
    for s in (sim, twin, reference):
        _push(s, actions)
        s.step()
    # The first step after the write already uses the new force: it differs from the untouched
    # twin, matches Gymnasium with force_mag 20, and equals a simulation configured with 20.
    assert not np.allclose(_last_obs(sim)[:, 1], _last_obs(twin)[:, 1])
    gym = CartPoleEnv()
    gym.force_mag = 20.0
    ref = np.empty((W, 4))
    for w in range(W):
        gym.state = pre[w].copy()
        gym.steps_beyond_terminated = None
        gym.step(int(actions[w]))
        ref[w] = gym.state
    np.testing.assert_allclose(_last_obs(sim), ref, rtol=RTOL, atol=ATOL)
    for _ in range(10):
        np.testing.assert_array_equal(_last_obs(sim), _last_obs(reference))
        actions = rng.integers(0, 2, W)
        for s in (sim, reference):
            _push(s, actions)
            s.step()

    # Writing it back restores the default dynamics (the parameter is part of the saved state).
    param.fill_(10.0)
    twin.load_state_dict(sim.state_dict())
    assert float(twin.params["force_mag"][0]) == 10.0
    for _ in range(5):
        actions = rng.integers(0, 2, W)
        for s in (sim, twin):
            _push(s, actions)
            s.step()
        np.testing.assert_array_equal(_last_obs(sim), _last_obs(twin))
