"""A Stable-Baselines3 vector environment over a single-agent ``BatchSim`` (``pip install -e ".[sb3]"``).

``SB3VecEnv(sim)`` is a ``stable_baselines3.common.vec_env.VecEnv`` with ``num_envs ==
sim.num_worlds``, so every SB3 algorithm and vector wrapper (``VecMonitor``, ``VecNormalize``,
``VecCheckNan``, ``evaluate_policy``) takes it directly:

```python
from stable_baselines3 import PPO
from ecs.adapters.sb3 import SB3VecEnv

model = PPO("MlpPolicy", SB3VecEnv(ecs.BatchSim(envs.make("cartpole"), num_worlds=16)))
model.learn(50_000)
```

SB3 works on the host with numpy, so each step copies observations, rewards and flags to the
host (one transfer per buffer; zero-copy views would be overwritten under SB3's feet, since it
keeps ``self._last_obs`` across steps). Same-step autoreset is SB3's convention too: for a world
whose episode ended, the returned observation is the first of the next episode and
``infos[i]["terminal_observation"]`` holds the last one; ``infos[i]["TimeLimit.truncated"]`` is
true when the time limit ended it, so SB3 bootstraps the value there.

| SB3 | engine |
|---|---|
| observation | ``sim.obs``: the array for an env with one observation key, else a dict (``MultiInputPolicy``) |
| action | one action key (SB3 has no dict actions); Discrete, MultiDiscrete and Box spaces as ``sim.action_space`` |
| ``seed(s)`` then ``reset()`` | ``sim.reseed(s)`` (SB3 offsets the seeds of later envs; world ``w`` of the sim is already keyed by ``(s, w)``) |
| ``get_attr("render_mode")`` | None for every world (no renderer) |
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from ..errors import ActionError, EcsError
from ..sim import BatchSim

__all__ = ["SB3VecEnv"]


class SB3VecEnv(VecEnv):
    """A Stable-Baselines3 ``VecEnv`` over every world of a single-agent ``BatchSim``.

    Args:
        sim: the simulation; single-agent, with one action key.

    Raises:
        EcsError: the sim is multi-agent or has several action keys.
    """

    render_mode = None

    def __init__(self, sim: BatchSim) -> None:
        import torch

        if not isinstance(sim, BatchSim):
            raise EcsError(f"SB3VecEnv needs an ecs.BatchSim, got {type(sim).__name__}")
        if sim.env.num_agents is not None:
            raise EcsError(
                f"SB3VecEnv is single-agent, but env {sim.env.name!r} has num_agents={sim.env.num_agents}; "
                "Stable-Baselines3 has no multi-agent API. Use ecs.adapters.torchrl.TorchRLEnv (an 'agents' group)"
            )
        if len(sim.actions) != 1:
            raise EcsError(
                f"SB3VecEnv needs one action key, env {sim.env.name!r} has {sorted(sim.actions)}; Stable-Baselines3 "
                "has no dict action spaces. Use ecs.adapters.gymnasium.GymVectorEnv or TorchRLEnv"
            )
        self.sim = sim
        obs_space = sim.observation_space
        self._obs_keys = list(obs_space.spaces)
        self._single_obs = len(self._obs_keys) == 1
        self._act_key = next(iter(sim.actions))
        self._act_buf = sim.actions[self._act_key]
        action_space = sim.action_space[self._act_key]
        observation_space = obs_space[self._obs_keys[0]] if self._single_obs else obs_space
        self._done = torch.zeros(sim.num_worlds, dtype=torch.bool, device=sim.rewards.device)
        self._actions: np.ndarray | None = None
        super().__init__(sim.num_worlds, observation_space, action_space)

    # -- conversions ------------------------------------------------------------------------------

    def _obs(self, source: dict[str, Any]):
        if self._single_obs:
            return source[self._obs_keys[0]].cpu().numpy().copy()
        return {k: source[k].cpu().numpy().copy() for k in self._obs_keys}

    def _write_actions(self, actions: np.ndarray) -> None:
        import torch

        buf = self._act_buf
        value = torch.as_tensor(np.asarray(actions))
        if tuple(value.shape) != tuple(buf.shape):
            # SB3 passes Discrete actions as [n] and may pass [n, 1]; anything else is a real mismatch.
            if value.numel() != buf.numel():
                raise ActionError(f"actions must have shape {tuple(buf.shape)}, got {tuple(value.shape)}")
            value = value.reshape(buf.shape)
        if value.dtype.is_floating_point and not buf.dtype.is_floating_point:
            raise ActionError(f"action {self._act_key!r} is discrete ({buf.dtype}); got {value.dtype} actions")
        self.sim.actions[self._act_key] = value.to(buf.dtype)

    # -- VecEnv API -------------------------------------------------------------------------------

    def reset(self):
        """Resets every world (reseeding first if ``seed()`` was called) and returns the observations."""
        seed = self._seeds[0]
        if seed is not None:
            self.sim.reseed(int(seed) % 2**31)
        else:
            self.sim.reset()
        self._reset_seeds()
        self._reset_options()
        return self._obs(self.sim.obs)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self):
        import torch

        if self._actions is None:
            raise EcsError("step_wait() without step_async(actions); call step(actions)")
        actions, self._actions = self._actions, None
        self._write_actions(actions)
        sim = self.sim
        sim.step()
        obs = self._obs(sim.obs)
        rewards = sim.rewards.cpu().numpy().astype(np.float32, copy=True)
        done_t = torch.logical_or(sim.terminated, sim.truncated, out=self._done)
        dones = done_t.cpu().numpy().copy()
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        ended = np.flatnonzero(dones)
        if ended.size:
            truncated = sim.truncated.cpu().numpy()
            final = self._obs(sim.final_obs)
            for i in ended.tolist():
                info = infos[i]
                info["terminal_observation"] = final[i] if self._single_obs else {k: v[i] for k, v in final.items()}
                info["TimeLimit.truncated"] = bool(truncated[i])
        return obs, rewards, dones, infos

    def close(self) -> None:
        """Nothing to release: the simulation belongs to the caller."""

    def _indices(self, indices) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, int):
            return [indices]
        return list(indices)

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        """The adapter's attribute, once per world (every world shares one simulation)."""
        value = getattr(self, attr_name)
        return [value for _ in self._indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        """Sets the adapter's attribute; only for every world at once (they share one simulation)."""
        if len(self._indices(indices)) != self.num_envs:
            raise EcsError(f"set_attr({attr_name!r}) applies to every world at once; pass indices=None")
        setattr(self, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        """Calls the adapter's method once and returns its result for every world."""
        result = getattr(self, method_name)(*method_args, **method_kwargs)
        return [result for _ in self._indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices=None) -> list[bool]:
        """False: the worlds are not Gymnasium envs and carry no Gymnasium wrappers (use ``VecMonitor``)."""
        return [False for _ in self._indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None for _ in range(self.num_envs)]
