"""An RSL-RL vector environment over a single-agent ``BatchSim`` (``pip install -e ".[rsl-rl]"``).

``RslRlVecEnv(sim)`` is an ``rsl_rl.env.VecEnv``, the interface Isaac Lab trains with, so RSL-RL's
``OnPolicyRunner`` takes it directly:

```python
from rsl_rl.runners import OnPolicyRunner
from ecs.adapters.rsl_rl import RslRlVecEnv

env = RslRlVecEnv(ecs.BatchSim(envs.make("cartpole"), num_worlds=4096))
OnPolicyRunner(env, train_cfg, log_dir=None, device=str(env.device)).learn(100)
```

| RSL-RL | engine |
|---|---|
| ``get_observations()`` | ``TensorDict({"policy": obs}, [num_envs])``: every ``sim.obs`` key flattened to float32 and concatenated in key order, ``[num_envs, obs_dim]`` |
| ``step(actions)`` | ``actions`` float ``[num_envs, num_actions]``; returns ``(obs, rewards [num_envs], dones [num_envs] int64, extras)`` |
| ``extras["time_outs"]`` | ``sim.truncated`` (RSL-RL bootstraps the value there) |
| ``extras["log"]`` | ``{"/episode/return": ..., "/episode/length": ...}``, means over the episodes that ended on this step (tensors, 0 when none; no host sync) |
| ``episode_length_buf`` | steps into the current episode, int64 ``[num_envs]`` (read from the engine) |
| ``max_episode_length`` | ``env.max_episode_steps`` |

Same-step autoreset is Isaac Lab's convention too: the observation returned for a world whose
episode ended is the first of the next episode.

Actions: RSL-RL's policies are Gaussian, so ``num_actions`` is the total size of every action key
(in key order). A continuous action is passed through, clipped to its bounds. A discrete action
with ``n`` values reads its entry as a point of ``[-1, 1]`` split into ``n`` equal bins (``< 0``
and ``>= 0`` for two values), clamped at the ends.
Writing ``episode_length_buf`` (``init_at_random_ep_len=True``) is refused: the engine keeps
episode lengths on the device inside its step, and staggering them needs ``sim`` support.
"""

from __future__ import annotations

from typing import Any

from rsl_rl.env import VecEnv
from tensordict import TensorDict

from ..errors import ActionError, EcsError
from ..sim import BatchSim
from ..torch_bridge import copy_into

__all__ = ["RslRlVecEnv"]


class RslRlVecEnv(VecEnv):
    """An RSL-RL ``VecEnv`` over every world of a single-agent ``BatchSim``.

    Args:
        sim: the simulation; single-agent.
        cfg: the environment configuration RSL-RL logs with the run (default: the env's config dataclass).

    Raises:
        EcsError: the sim is multi-agent.
    """

    def __init__(self, sim: BatchSim, *, cfg: Any = None) -> None:
        import torch

        if not isinstance(sim, BatchSim):
            raise EcsError(f"RslRlVecEnv needs an ecs.BatchSim, got {type(sim).__name__}")
        if sim.env.num_agents is not None:
            raise EcsError(
                f"RslRlVecEnv is single-agent, but env {sim.env.name!r} has num_agents={sim.env.num_agents}. "
                "Use ecs.adapters.torchrl.TorchRLEnv (an 'agents' group)"
            )
        self.sim = sim
        self.num_envs = sim.num_worlds
        self.device = sim.rewards.device
        self.cfg = cfg if cfg is not None else {"env": sim.env.name, "config": repr(sim.env.config)}
        self.max_episode_length = int(sim.env.max_episode_steps)
        self._episode_step = sim.tensor("world", "episode_step")
        W, dev = sim.num_worlds, self.device
        # Action layout: (key, buffer, start, stop, discrete, low, high) over the flat action vector.
        self._act_layout = []
        start = 0
        for key in sorted(sim.actions):
            buf = sim.actions[key]
            size = buf[0].numel()
            action = sim.env.actions[key]
            discrete = bool(action.discrete)
            if discrete:
                low, high = float(int(action.low)), float(int(action.high))
            else:
                space = sim.action_space[key]
                low = torch.as_tensor(space.low, dtype=torch.float32, device=dev).reshape(-1)
                high = torch.as_tensor(space.high, dtype=torch.float32, device=dev).reshape(-1)
            self._act_layout.append((key, buf, start, start + size, discrete, low, high))
            start += size
        self.num_actions = start
        self._obs_keys = sorted(sim.obs)
        self._obs_dim = sum(sim.obs[k][0].numel() for k in self._obs_keys)
        self._done = torch.zeros(W, dtype=torch.bool, device=dev)
        self._return = torch.zeros(W, dtype=torch.float32, device=dev)
        # Steps since each world's last episode end: the length of an episode that ends now (the
        # engine's own counter has already restarted for it).
        self._length = torch.zeros(W, dtype=torch.float32, device=dev)

    # -- the episode length buffer --------------------------------------------------------------

    @property
    def episode_length_buf(self):
        """Steps into each world's current episode, int64 ``[num_envs]`` (a fresh copy)."""
        return self._episode_step.long()

    @episode_length_buf.setter
    def episode_length_buf(self, value) -> None:
        raise EcsError(
            "RslRlVecEnv cannot set episode_length_buf: the engine counts episode steps on the device inside its "
            "step. Call runner.learn(..., init_at_random_ep_len=False)"
        )

    # -- VecEnv API -----------------------------------------------------------------------------

    def get_observations(self) -> TensorDict:
        """The current observations as ``{"policy": [num_envs, obs_dim]}`` (a fresh tensor)."""
        import torch

        obs = self.sim.obs
        parts = [obs[k].reshape(self.num_envs, -1) for k in self._obs_keys]
        policy = torch.cat([p.to(torch.float32) for p in parts], dim=1) if len(parts) > 1 else parts[0].float()
        if policy.data_ptr() == obs[self._obs_keys[0]].data_ptr():
            policy = policy.clone()  # RSL-RL keeps the previous observations until the next step returns
        return TensorDict({"policy": policy}, batch_size=[self.num_envs], device=self.device)

    def _write_actions(self, actions) -> None:
        import torch

        if tuple(actions.shape) != (self.num_envs, self.num_actions):
            raise ActionError(
                f"actions must have shape ({self.num_envs}, {self.num_actions}), got {tuple(actions.shape)}"
            )
        for _key, buf, start, stop, discrete, low, high in self._act_layout:
            part = actions[:, start:stop]
            if discrete:
                n = high - low + 1
                bins = torch.floor((part + 1.0) * (n / 2.0)).clamp_(0, n - 1) + low
                copy_into(buf, bins.reshape(buf.shape))
            else:
                copy_into(buf, torch.clamp(part, low, high).reshape(buf.shape))

    def step(self, actions):
        """Writes the actions, steps every world, returns ``(obs, rewards, dones, extras)``."""
        import torch

        self._write_actions(actions)
        sim = self.sim
        sim.step()
        done = torch.logical_or(sim.terminated, sim.truncated, out=self._done)
        # Episode statistics on the device: mean return and length of the episodes that ended now.
        self._return += sim.rewards
        ended = done.sum().clamp_min(1)
        self._length += 1
        log = {
            "/episode/return": torch.where(done, self._return, 0.0).sum() / ended,
            "/episode/length": torch.where(done, self._length, 0.0).sum() / ended,
        }
        self._return.masked_fill_(done, 0.0)
        self._length.masked_fill_(done, 0.0)
        extras = {"time_outs": sim.truncated.clone(), "log": log}
        return self.get_observations(), sim.rewards.clone(), done.long(), extras

    def reset(self) -> TensorDict:
        """Resets every world and the episode statistics; returns the observations."""
        self.sim.reset()
        self._return.zero_()
        self._length.zero_()
        return self.get_observations()
