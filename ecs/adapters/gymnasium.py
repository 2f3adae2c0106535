"""A Gymnasium vector environment over a single-agent ``BatchSim``.

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

``final_obs``, ``final_info`` and their masks are in every step's infos (masks all false when no
world ended), so the torch mode never synchronises with the device to decide whether to add them.
``final_obs`` is batched rather than Gymnasium's object array of per-env observations.

Actions are a tensor (or numpy array) for an env with one action key, else a dict keyed like
``sim.actions``. Integer actions of another integer dtype (``action_space.sample()`` gives int64)
and float actions of another float dtype are cast; any other mismatch is an ``ecs.ActionError``.

Gymnasium's vector wrappers compute with numpy: ``RecordEpisodeStatistics`` and ``NormalizeReward``
need ``to_numpy=True`` (with tensors they fail inside numpy). Gymnasium's ``NormalizeObservation``
(like every ``VectorObservationWrapper``) refuses same-step autoreset, because it would leave
``final_obs`` unnormalised; use this module's ``NormalizeObservation``, which normalises both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers.utils import RunningMeanStd

from ..errors import ActionError, EcsError
from ..sim import BatchSim

__all__ = ["GymVectorEnv", "NormalizeObservation"]


class GymVectorEnv(VectorEnv):
    """A ``gymnasium.vector.VectorEnv`` over every world of a single-agent ``BatchSim``.

    Args:
        sim: the simulation; it must be single-agent (``env.num_agents`` is None).
        to_numpy: return numpy arrays (on the host) instead of torch tensors on the sim's device.
        copy: return copies (default). False returns the sim's persistent tensors themselves
            (torch mode only), which the next ``step()`` overwrites: the fastest, no allocation.

    Raises:
        EcsError: the sim is multi-agent.
    """

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, sim: BatchSim, *, to_numpy: bool = False, copy: bool = True) -> None:
        if not isinstance(sim, BatchSim):
            raise EcsError(f"GymVectorEnv needs an ecs.BatchSim, got {type(sim).__name__}")
        if sim.env.num_agents is not None:
            raise EcsError(
                f"GymVectorEnv is single-agent, but env {sim.env.name!r} has num_agents={sim.env.num_agents} "
                f"(rewards {tuple(sim.rewards.shape)}, one row of agents per world). Use "
                "ecs.adapters.torchrl.TorchRLEnv (an 'agents' group) or ecs.adapters.pettingzoo.PettingZooWorld"
            )
        if to_numpy and not copy:
            raise EcsError("to_numpy=True always copies to the host; leave copy=True")
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

    # -- conversions -----------------------------------------------------------------------

    def _out(self, tensor):
        if self.to_numpy:
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
        sim = self.sim
        sim.step(self._actions(actions))
        terminated, truncated = self._out(sim.terminated), self._out(sim.truncated)
        done = terminated | truncated
        infos = {
            "final_obs": self._out_obs(sim.final_obs),
            "_final_obs": done,
            "final_info": self._no_info,
            "_final_info": done,
        }
        return self._out_obs(sim.obs), self._out(sim.rewards), terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing to release: the simulation belongs to the caller."""


class NormalizeObservation(gymnasium.wrappers.vector.NormalizeObservation):
    """Gymnasium's vector ``NormalizeObservation`` made correct for same-step autoreset.

    Observations are normalised by a running mean and variance as in Gymnasium (numpy, so wrap a
    ``GymVectorEnv(..., to_numpy=True)``); ``infos["final_obs"]`` is normalised with the same
    statistics (without updating them), so a value bootstrap on truncation sees the same scale.
    Gymnasium's own wrapper refuses same-step envs for want of exactly that.
    """

    def __init__(self, env: VectorEnv, epsilon: float = 1e-8) -> None:
        if epsilon <= 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon}")
        gymnasium.utils.RecordConstructorArgs.__init__(self, epsilon=epsilon)
        # Gymnasium's observation wrappers refuse same-step envs in __init__: skip that check only.
        VectorWrapper.__init__(self, env)
        space = self.single_observation_space
        if not isinstance(space, gymnasium.spaces.Box):
            raise EcsError(f"NormalizeObservation needs a Box observation space, got {space}")
        self.single_observation_space = gymnasium.spaces.Box(-np.inf, np.inf, shape=space.shape, dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.obs_rms = RunningMeanStd(shape=space.shape, dtype=np.float32)
        self.epsilon = epsilon
        self._update_running_mean = True

    def _scale(self, observations: np.ndarray) -> np.ndarray:
        return ((observations - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + self.epsilon)).astype(np.float32)

    def step(self, actions: Any):
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        obs = self.observations(obs)
        if "final_obs" in infos:
            infos = dict(infos)
            infos["final_obs"] = self._scale(np.asarray(infos["final_obs"]))
        return obs, rewards, terminated, truncated, infos
