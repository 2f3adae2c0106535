"""A Gymnasium vector environment over a single-agent ``BatchSim``, and vector wrappers that run on torch.

``GymVectorEnv(sim)`` is a ``gymnasium.vector.VectorEnv`` with ``num_envs == sim.num_worlds`` and
**same-step** autoreset (``metadata["autoreset_mode"] == AutoresetMode.SAME_STEP``), which is the
engine's own step semantics: for a world whose episode ended on a step, the returned reward and
flags describe the last transition, the returned observation is already the first of the next
episode, and ``infos["final_obs"]`` holds the last observation of the old one.

| returned | torch mode (default) | ``to_numpy=True`` |
|---|---|---|
| observation | ``torch.Tensor`` ``[num_envs, *shape]`` for an env with one observation key, else a dict of them | numpy arrays, same layout |
| reward | float32 ``[num_envs]`` | float32 numpy |
| terminated, truncated | bool ``[num_envs]`` | bool numpy |
| ``infos["final_obs"]`` | batched like the observation; rows are valid where ``infos["_final_obs"]`` is true | numpy |
| ``infos["final_info"]`` | ``{}`` (the engine keeps no per-world info), with its mask ``infos["_final_info"]`` | same |

By default (``copy=False``) the returned tensors are the simulation's persistent buffers (as
Isaac Lab returns its reward and reset buffers): nothing is allocated or copied per step, and the
next ``step()`` or ``reset()`` overwrites them, so store what you keep (a rollout buffer does) before
stepping again, or pass ``copy=True`` for fresh copies. In numpy mode on a CPU simulation
``copy=False`` gives numpy views of the same buffers; on CUDA numpy mode always copies to the host.

``final_obs``, ``final_info`` and their masks are in every step's infos (masks all false when no
world ended), so the torch mode never synchronises with the device to decide whether to add them.
``final_obs`` is batched rather than Gymnasium's object array of per-env observations.

Actions are a tensor (or numpy array) for an env with one action key, else a dict keyed like
``sim.actions``. Integer actions of another integer dtype (``action_space.sample()`` gives int64)
and float actions of another float dtype are cast; any other mismatch is an ``ecs.ActionError``.

Gymnasium's vector wrappers compute with numpy on the host: on a torch-mode env they fail inside
numpy (``RecordEpisodeStatistics``, ``NormalizeReward``), and Gymnasium's ``NormalizeObservation``
(like every ``VectorObservationWrapper``) refuses same-step autoreset because it would leave
``final_obs`` unnormalised. This module has drop-in replacements with the same arguments,
attributes and info keys that compute with torch on the simulation's device (no host sync per
step) and accept either mode:

| wrapper | as Gymnasium's, except |
|---|---|
| ``RecordEpisodeStatistics`` | ``infos["episode"]`` and ``infos["_episode"]`` are in every step's infos (mask all false when no episode ended); ``return_queue``, ``length_queue``, ``time_queue`` and ``episode_count`` are read from the device when accessed |
| ``NormalizeReward`` | same arithmetic (float64 running statistics) on the device |
| ``NormalizeObservation`` | also normalises ``infos["final_obs"]`` with the same statistics (not updating them) |
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space

from ..errors import ActionError, EcsError
from ..sim import BatchSim
from ..torch_bridge import copy_into

__all__ = ["GymVectorEnv", "NormalizeObservation", "NormalizeReward", "RecordEpisodeStatistics", "RunningMeanStd"]


class GymVectorEnv(VectorEnv):
    """A ``gymnasium.vector.VectorEnv`` over every world of a single-agent ``BatchSim``.

    Args:
        sim: the simulation; it must be single-agent (``env.num_agents`` is None).
        to_numpy: return numpy arrays (on the host) instead of torch tensors on the sim's device.
        copy: return fresh copies. False (default) returns the sim's persistent buffers, which the
            next ``step()`` overwrites: no allocation and no copy per step.

    Raises:
        EcsError: the sim is multi-agent.
    """

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, sim: BatchSim, *, to_numpy: bool = False, copy: bool = False) -> None:
        import torch

        if not isinstance(sim, BatchSim):
            raise EcsError(f"GymVectorEnv needs an ecs.BatchSim, got {type(sim).__name__}")
        if sim.env.num_agents is not None:
            raise EcsError(
                f"GymVectorEnv is single-agent, but env {sim.env.name!r} has num_agents={sim.env.num_agents} "
                f"(rewards {tuple(sim.rewards.shape)}, one row of agents per world). Use "
                "ecs.adapters.torchrl.TorchRLEnv (an 'agents' group) or ecs.adapters.pettingzoo.PettingZooWorld"
            )
        self.sim = sim
        self.to_numpy = bool(to_numpy)
        self.copy = bool(copy)
        self.num_envs = sim.num_worlds
        obs_space, act_space = sim.observation_space, sim.action_space
        self._obs_keys = list(obs_space.spaces)
        self._act_keys = list(act_space.spaces)
        self._single_obs = len(self._obs_keys) == 1
        self._single_act = len(self._act_keys) == 1
        self.single_observation_space = obs_space[self._obs_keys[0]] if self._single_obs else obs_space
        self.single_action_space = act_space[self._act_keys[0]] if self._single_act else act_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._no_info: dict[str, Any] = {}
        # Persistent outputs: the done mask is computed into one buffer; the rest are the sim's own.
        self._done = torch.zeros(sim.num_worlds, dtype=torch.bool, device=sim.rewards.device)
        # Numpy views share memory with the sim's buffers only on a CPU simulation.
        self._views = self.to_numpy and not self.copy and sim.rewards.device.type == "cpu"
        self._fast_act = sim.actions[self._act_keys[0]] if self._single_act else None

    # -- conversions -----------------------------------------------------------------------

    def _out(self, tensor):
        if self.to_numpy:
            if self._views:
                return tensor.numpy()
            return tensor.detach().to("cpu", copy=True).numpy()
        return tensor.clone() if self.copy else tensor

    def _out_obs(self, obs: Mapping[str, Any]):
        if self._single_obs:
            return self._out(obs[self._obs_keys[0]])
        return {k: self._out(obs[k]) for k in self._obs_keys}

    def _action(self, key: str, value: Any):
        import torch

        buf = self.sim.actions[key]
        if not isinstance(value, torch.Tensor):
            value = torch.as_tensor(np.asarray(value))
        if value.dtype != buf.dtype:
            same_kind = (value.dtype.is_floating_point == buf.dtype.is_floating_point) and value.dtype != torch.bool
            if not same_kind:
                raise ActionError(f"action {key!r} must have a dtype castable to {buf.dtype}, got {value.dtype}")
            value = value.to(buf.dtype)
        return value

    def _actions(self, actions: Any) -> dict[str, Any]:
        if isinstance(actions, Mapping):
            unknown = sorted(set(actions) - set(self._act_keys))
            missing = sorted(set(self._act_keys) - set(actions))
            if unknown or missing:
                raise ActionError(f"actions must have the keys {self._act_keys}; unknown {unknown}, missing {missing}")
            return {k: self._action(k, v) for k, v in actions.items()}
        if not self._single_act:
            raise ActionError(f"env {self.sim.env.name!r} has several actions; pass a dict with keys {self._act_keys}")
        return {self._act_keys[0]: self._action(self._act_keys[0], actions)}

    # -- VectorEnv API ---------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Resets every world, or those where ``options["reset_mask"]`` (bool ``[num_envs]``) is true.

        ``seed`` reseeds the simulation (``sim.reseed``) and resets every world; it cannot be
        combined with a reset mask.
        """
        mask = None if options is None else options.get("reset_mask")
        if seed is not None:
            if mask is not None:
                raise EcsError("reset(seed=...) resets every world; do not combine it with options['reset_mask']")
            self.sim.reseed(int(seed))
        else:
            self.sim.reset(mask)
        return self._out_obs(self.sim.obs), {}

    def step(self, actions: Any):
        """Writes the actions, steps every world once and returns (obs, reward, terminated, truncated, infos)."""
        import torch

        sim = self.sim
        buf = self._fast_act
        # The common case (one action key, a tensor of the buffer's dtype, shape and device) is
        # one copy; everything else goes through the checked conversion.
        if (
            buf is not None
            and type(actions) is torch.Tensor
            and actions.dtype == buf.dtype
            and actions.shape == buf.shape
            and actions.device == buf.device
        ):
            copy_into(buf, actions)
            sim.step()
        else:
            sim.step(self._actions(actions))
        done = torch.logical_or(sim.terminated, sim.truncated, out=self._done)
        if self.to_numpy or self.copy:
            done = self._out(done)
        infos = {
            "final_obs": self._out_obs(sim.final_obs),
            "_final_obs": done,
            "final_info": self._no_info,
            "_final_info": done,
        }
        return (
            self._out_obs(sim.obs),
            self._out(sim.rewards),
            self._out(sim.terminated),
            self._out(sim.truncated),
            infos,
        )

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing to release: the simulation belongs to the caller."""


# -- wrappers computing with torch ------------------------------------------------------------


def _as_torch(x: Any):
    """``(tensor, was_numpy)``: numpy arrays are viewed as tensors without a copy."""
    import torch

    if isinstance(x, np.ndarray):
        return torch.from_numpy(x), True
    if not isinstance(x, torch.Tensor):
        return torch.as_tensor(np.asarray(x)), True
    return x, False


def _like(x, was_numpy: bool):
    return x.cpu().numpy() if was_numpy else x


class RunningMeanStd:
    """Running mean, variance and count of batches (Gymnasium's parallel algorithm), in float64 torch.

    Attributes:
        mean: float64 tensor of ``shape``.
        var: float64 tensor of ``shape`` (population variance).
        count: float, the number of samples seen (starts at ``epsilon``, as Gymnasium's).
    """

    def __init__(self, shape: tuple[int, ...] = (), *, epsilon: float = 1e-4, device: Any = "cpu") -> None:
        import torch

        self.mean = torch.zeros(shape, dtype=torch.float64, device=device)
        self.var = torch.ones(shape, dtype=torch.float64, device=device)
        self.count = float(epsilon)

    def update(self, x) -> None:
        """Folds in a batch ``[B, *shape]`` (no host sync: the batch size is known on the host)."""
        import torch

        x = x.to(torch.float64)
        n = x.shape[0]
        batch_mean = x.mean(0)
        batch_var = x.var(0, correction=0)
        delta = batch_mean - self.mean
        total = self.count + n
        m2 = self.var * self.count + batch_var * n + delta.square() * (self.count * n / total)
        self.mean = self.mean + delta * (n / total)
        self.var = m2 / total
        self.count = total


class RecordEpisodeStatistics(VectorWrapper):
    """Gymnasium's ``RecordEpisodeStatistics`` for same-step envs, on the device (torch or numpy mode).

    Every step's infos hold ``infos[stats_key] = {"r": returns, "l": lengths, "t": seconds}`` (zero
    where no episode ended) and the mask ``infos["_" + stats_key]``; nothing is read back per step.
    The last ``buffer_length`` finished episodes are kept in a ring on the device; ``return_queue``,
    ``length_queue``, ``time_queue`` and ``episode_count`` read it back (one sync) when accessed.

    Args:
        env: a vector env with same-step autoreset (``GymVectorEnv`` or a wrapper of it).
        buffer_length: episodes kept for the queues.
        stats_key: the info key.
    """

    def __init__(self, env: VectorEnv, buffer_length: int = 100, stats_key: str = "episode") -> None:
        import torch

        if env.metadata.get("autoreset_mode") != AutoresetMode.SAME_STEP:
            raise EcsError(
                "ecs.adapters.gymnasium.RecordEpisodeStatistics needs a same-step autoreset env (GymVectorEnv); "
                "use gymnasium.wrappers.vector.RecordEpisodeStatistics for others"
            )
        if buffer_length < 1:
            raise EcsError(f"buffer_length must be >= 1, got {buffer_length}")
        super().__init__(env)
        self._stats_key = stats_key
        self.buffer_length = int(buffer_length)
        dev = env.unwrapped.sim.rewards.device if hasattr(env.unwrapped, "sim") else "cpu"
        n = self.num_envs
        self.episode_returns = torch.zeros(n, dtype=torch.float64, device=dev)
        self.episode_lengths = torch.zeros(n, dtype=torch.int64, device=dev)
        self.episode_start_times = torch.full((n,), time.perf_counter(), dtype=torch.float64, device=dev)
        # Ring of finished episodes; slot buffer_length is a sink for entries that do not fit.
        self._ring = torch.zeros(3, self.buffer_length + 1, dtype=torch.float64, device=dev)
        self._total = torch.zeros((), dtype=torch.int64, device=dev)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Resets the env and the current episodes (of every world, or where ``options["reset_mask"]``)."""
        import torch

        obs, info = super().reset(seed=seed, options=options)
        mask = None if options is None else options.get("reset_mask")
        now = time.perf_counter()
        if mask is None:
            self.episode_returns.zero_()
            self.episode_lengths.zero_()
            self.episode_start_times.fill_(now)
        else:
            m = torch.as_tensor(mask, device=self.episode_returns.device)
            self.episode_returns.masked_fill_(m, 0.0)
            self.episode_lengths.masked_fill_(m, 0)
            self.episode_start_times.masked_fill_(m, now)
        return obs, info

    def step(self, actions: Any):
        import torch

        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        if self._stats_key in infos or f"_{self._stats_key}" in infos:
            raise ValueError(f"info already holds the key {self._stats_key!r}: {list(infos)}")
        r, was_numpy = _as_torch(rewards)
        term, _ = _as_torch(terminated)
        trunc, _ = _as_torch(truncated)
        done = torch.logical_or(term, trunc)
        now = time.perf_counter()
        self.episode_returns += r
        self.episode_lengths += 1
        seconds = now - self.episode_start_times
        stats = torch.stack(
            [
                torch.where(done, self.episode_returns, 0.0),
                torch.where(done, self.episode_lengths.double(), 0.0),
                torch.where(done, seconds, 0.0),
            ]
        )
        self._record(done, stats)
        self.episode_returns.masked_fill_(done, 0.0)
        self.episode_lengths.masked_fill_(done, 0)
        self.episode_start_times.masked_fill_(done, now)
        infos = dict(infos)
        infos[self._stats_key] = {
            "r": _like(stats[0], was_numpy),
            "l": _like(stats[1].long(), was_numpy),
            "t": _like(stats[2], was_numpy),
        }
        infos[f"_{self._stats_key}"] = _like(done, was_numpy)
        return obs, rewards, terminated, truncated, infos

    def _record(self, done, stats) -> None:
        import torch

        L = self.buffer_length
        count = done.sum()
        pos = self._total + torch.cumsum(done, 0) - 1
        keep = done & (pos >= self._total + count - L)  # only the last L of this step can stay
        slot = torch.where(keep, pos % L, L)
        self._ring[:, slot] = stats
        self._total += count

    def _queue(self, row: int, cast) -> deque:
        total = int(self._total)
        n = min(total, self.buffer_length)
        ring = self._ring[row].cpu().tolist()
        return deque((cast(ring[(total - n + i) % self.buffer_length]) for i in range(n)), maxlen=self.buffer_length)

    @property
    def episode_count(self) -> int:
        """Episodes finished since construction (one host sync)."""
        return int(self._total)

    @property
    def return_queue(self) -> deque:
        """Returns of the last ``buffer_length`` finished episodes, oldest first (one host sync)."""
        return self._queue(0, float)

    @property
    def length_queue(self) -> deque:
        """Lengths of the last ``buffer_length`` finished episodes, oldest first (one host sync)."""
        return self._queue(1, int)

    @property
    def time_queue(self) -> deque:
        """Wall times [s] of the last ``buffer_length`` finished episodes, oldest first (one host sync)."""
        return self._queue(2, lambda t: round(t, 6))


class NormalizeReward(VectorWrapper):
    """Gymnasium's vector ``NormalizeReward`` (same-step autoreset) on the device, torch or numpy mode.

    Rewards are divided by the running standard deviation of the discounted return
    ``g = g * gamma * (1 - terminated) + reward`` (reset to 0 where an episode ended), as Gymnasium does.

    Args:
        env: a vector env with same-step autoreset.
        gamma: discount of the return whose variance is tracked, in [0, 1].
        epsilon: added to the variance, > 0.
    """

    def __init__(self, env: VectorEnv, gamma: float = 0.99, epsilon: float = 1e-8) -> None:
        import torch

        if not 0 <= gamma <= 1:
            raise EcsError(f"gamma must be in [0, 1], got {gamma}")
        if epsilon <= 0:
            raise EcsError(f"epsilon must be > 0, got {epsilon}")
        if env.metadata.get("autoreset_mode") != AutoresetMode.SAME_STEP:
            raise EcsError("ecs.adapters.gymnasium.NormalizeReward needs a same-step autoreset env (GymVectorEnv)")
        gymnasium.utils.RecordConstructorArgs.__init__(self, gamma=gamma, epsilon=epsilon)
        super().__init__(env)
        dev = env.unwrapped.sim.rewards.device if hasattr(env.unwrapped, "sim") else "cpu"
        self.return_rms = RunningMeanStd((), device=dev)
        self.accumulated_reward = torch.zeros(self.num_envs, dtype=torch.float64, device=dev)
        self.gamma = float(gamma)
        self.epsilon = float(epsilon)
        self.update_running_mean = True

    def step(self, actions: Any):
        import torch

        obs, reward, terminated, truncated, infos = self.env.step(actions)
        r, was_numpy = _as_torch(reward)
        term, _ = _as_torch(terminated)
        trunc, _ = _as_torch(truncated)
        acc = self.accumulated_reward
        acc.mul_(self.gamma * (1.0 - term.double())).add_(r)
        if self.update_running_mean:
            self.return_rms.update(acc)
        acc.masked_fill_(torch.logical_or(term, trunc), 0.0)
        scaled = (r / torch.sqrt(self.return_rms.var + self.epsilon)).to(r.dtype)
        return obs, _like(scaled, was_numpy), terminated, truncated, infos


class NormalizeObservation(VectorWrapper):
    """Gymnasium's vector ``NormalizeObservation`` made correct for same-step autoreset, torch or numpy mode.

    Observations are normalised by a running mean and variance as in Gymnasium; ``infos["final_obs"]``
    is normalised with the same statistics (without updating them), so a value bootstrap on
    truncation sees the same scale. Gymnasium's own wrapper refuses same-step envs for want of
    exactly that.

    Args:
        env: a vector env with same-step autoreset and a Box observation space.
        epsilon: added to the variance, > 0.
    """

    def __init__(self, env: VectorEnv, epsilon: float = 1e-8) -> None:
        if epsilon <= 0:
            raise EcsError(f"epsilon must be > 0, got {epsilon}")
        gymnasium.utils.RecordConstructorArgs.__init__(self, epsilon=epsilon)
        super().__init__(env)
        space = self.single_observation_space
        if not isinstance(space, gymnasium.spaces.Box):
            raise EcsError(
                f"NormalizeObservation needs a Box observation space, got {space}; for a dict of observations "
                "normalise each key yourself (ecs.adapters.gymnasium.RunningMeanStd per key)"
            )
        self.single_observation_space = gymnasium.spaces.Box(-np.inf, np.inf, shape=space.shape, dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        dev = env.unwrapped.sim.rewards.device if hasattr(env.unwrapped, "sim") else "cpu"
        self.obs_rms = RunningMeanStd(space.shape, device=dev)
        self.epsilon = float(epsilon)
        self.update_running_mean = True

    def _scale(self, observations):
        import torch

        x, was_numpy = _as_torch(observations)
        out = ((x - self.obs_rms.mean) / torch.sqrt(self.obs_rms.var + self.epsilon)).to(torch.float32)
        return _like(out, was_numpy)

    def _observe(self, observations):
        if self.update_running_mean:
            self.obs_rms.update(_as_torch(observations)[0])
        return self._scale(observations)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        return self._observe(obs), info

    def step(self, actions: Any):
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        obs = self._observe(obs)
        if "final_obs" in infos:
            infos = dict(infos)
            infos["final_obs"] = self._scale(infos["final_obs"])
        return obs, rewards, terminated, truncated, infos
