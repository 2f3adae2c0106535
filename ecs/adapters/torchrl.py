"""A TorchRL environment over a ``BatchSim`` (``pip install -e ".[torchrl]"``).

``TorchRLEnv(sim)`` is a ``torchrl.envs.EnvBase`` with ``batch_size == [num_worlds]`` on the sim's
device. Keys follow TorchRL's conventions:

| key | single-agent | multi-agent (``env.num_agents = A``) |
|---|---|---|
| observations | each ``sim.obs`` key at the root, ``[W, *shape]`` | keys with an agent axis under ``"agents"``, ``[W, A, *shape]``; others at the root |
| actions | ``"action"`` for one action key, else ``("action", key)`` | ``("agents", "action")``, or ``("agents", "action", key)`` |
| reward | ``"reward"``, ``[W, 1]`` | ``("agents", "reward")``, ``[W, A, 1]`` |
| ``done``, ``terminated``, ``truncated`` | root, ``[W, 1]`` bool | root (episodes end per world) |

Per-agent masks (an observation such as ``action_mask`` or ``mask`` with the agent axis) travel
in the ``"agents"`` group with the other per-agent observations, with a boolean spec when the
component is boolean.

Resets: the engine restarts an ended world inside the step, so ``("next", obs)`` of a world that
ended holds the last observation of the old episode (``sim.final_obs``) and the partial
``reset()`` TorchRL then calls for that world returns the already-begun new episode without
stepping the simulation again. A partial reset of a world that did not just end restarts it with
``sim.reset(mask)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Binary, Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from ..errors import EcsError
from ..sim import BatchSim

if TYPE_CHECKING:
    import torch

__all__ = ["TorchRLEnv"]

_AGENTS = "agents"


def _box_spec(space: Any, shape: tuple[int, ...], device: torch.device):
    import torch

    dtype = torch.from_numpy(np.zeros((), dtype=space.dtype)).dtype
    if dtype == torch.bool:
        if not shape:
            return Categorical(2, shape=shape, dtype=torch.bool, device=device)
        return Binary(n=shape[-1], shape=shape, dtype=torch.bool, device=device)
    low, high = np.broadcast_to(space.low, space.shape), np.broadcast_to(space.high, space.shape)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        return Unbounded(shape=shape, dtype=dtype, device=device)
    lead = shape[: len(shape) - len(space.shape)]
    low_t = torch.as_tensor(np.array(low), dtype=dtype).expand(*lead, *space.shape).clone()
    high_t = torch.as_tensor(np.array(high), dtype=dtype).expand(*lead, *space.shape).clone()
    return Bounded(low=low_t, high=high_t, shape=shape, dtype=dtype, device=device)


def _action_spec(sim: BatchSim, key: str, shape: tuple[int, ...], device: torch.device):
    action = sim.env.actions[key]
    dtype = sim.actions[key].dtype
    if action.discrete:
        low, high = int(action.low), int(action.high)
        if low == 0:
            return Categorical(high + 1, shape=shape, dtype=dtype, device=device)
        return Bounded(low=low, high=high, shape=shape, dtype=dtype, device=device)
    space = sim.action_space[key]
    return _box_spec(space, shape, device)


class TorchRLEnv(EnvBase):
    """A TorchRL ``EnvBase`` over every world of a ``BatchSim``.

    Args:
        sim: the simulation (single- or multi-agent).
    """

    def __init__(self, sim: BatchSim) -> None:
        import torch

        if not isinstance(sim, BatchSim):
            raise EcsError(f"TorchRLEnv needs an ecs.BatchSim, got {type(sim).__name__}")
        device = sim.rewards.device
        super().__init__(device=device, batch_size=torch.Size([sim.num_worlds]))
        self.sim = sim
        W, A = sim.num_worlds, sim.env.num_agents
        self.num_agents = A
        self._multi = A is not None
        obs_space = sim.observation_space

        def has_agent_axis(t: torch.Tensor) -> bool:
            return self._multi and t.ndim >= 2 and t.shape[1] == A

        # Where each observation and action lives in the tensordict.
        self._obs_paths = {k: (_AGENTS, k) if has_agent_axis(sim.obs[k]) else (k,) for k in sorted(sim.obs)}
        act_keys = sorted(sim.actions)
        act_root = (_AGENTS, "action") if self._multi else ("action",)
        self._act_paths = {k: act_root if len(act_keys) == 1 else (*act_root, k) for k in act_keys}
        for k in act_keys:
            if self._multi and not has_agent_axis(sim.actions[k]):
                raise EcsError(
                    f"action {k!r} of multi-agent env {sim.env.name!r} has shape {tuple(sim.actions[k].shape)}; "
                    f"TorchRLEnv expects [num_worlds, num_agents={A}, ...]"
                )

        obs_spec = Composite(shape=(W,), device=device)
        if self._multi:
            obs_spec[_AGENTS] = Composite(shape=(W, A), device=device)
        for k, path in self._obs_paths.items():
            obs_spec[path] = _box_spec(obs_space[k], tuple(sim.obs[k].shape), device)
        self.observation_spec = obs_spec

        act_spec = Composite(shape=(W,), device=device)
        if self._multi:
            act_spec[_AGENTS] = Composite(shape=(W, A), device=device)
            if len(act_keys) > 1:
                act_spec[act_root] = Composite(shape=(W, A), device=device)
        elif len(act_keys) > 1:
            act_spec[act_root] = Composite(shape=(W,), device=device)
        for k, path in self._act_paths.items():
            act_spec[path] = _action_spec(sim, k, tuple(sim.actions[k].shape), device)
        self.full_action_spec = act_spec

        reward = Unbounded(shape=(*sim.rewards.shape, 1), dtype=torch.float32, device=device)
        if self._multi:
            self.full_reward_spec = Composite(
                {_AGENTS: Composite({"reward": reward}, shape=(W, A), device=device)}, shape=(W,), device=device
            )
        else:
            self.full_reward_spec = Composite({"reward": reward}, shape=(W,), device=device)
        flag = Categorical(2, shape=(W, 1), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(
            {"done": flag.clone(), "terminated": flag.clone(), "truncated": flag.clone()}, shape=(W,), device=device
        )
        # Worlds the engine restarted inside the last step: their next partial reset is already done.
        self._restarted = torch.zeros(W, dtype=torch.bool, device=device)

    # -- EnvBase hooks ------------------------------------------------------------------------

    def _empty(self) -> TensorDictBase:
        out = TensorDict({}, batch_size=self.batch_size, device=self.device)
        if self._multi:
            # The group's batch includes the agent axis, as its specs declare.
            out.set(_AGENTS, TensorDict({}, batch_size=(*self.batch_size, self.num_agents), device=self.device))
        return out

    def _observations(self, td: TensorDictBase, done: torch.Tensor | None) -> None:
        import torch

        sim = self.sim
        for k, path in self._obs_paths.items():
            obs = sim.obs[k]
            if done is None:
                td.set(path, obs.clone())
            else:
                d = done.view(-1, *([1] * (obs.ndim - 1)))
                td.set(path, torch.where(d, sim.final_obs[k], obs))

    def _flags(self, td: TensorDictBase, terminated: torch.Tensor, truncated: torch.Tensor) -> None:
        td.set("terminated", terminated.unsqueeze(-1))
        td.set("truncated", truncated.unsqueeze(-1))
        td.set("done", (terminated | truncated).unsqueeze(-1))

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        sim = self.sim
        actions = {}
        for k, path in self._act_paths.items():
            value = tensordict.get(path)
            actions[k] = value.to(sim.actions[k].dtype)
        sim.step(actions)
        terminated, truncated = sim.terminated.clone(), sim.truncated.clone()
        done = terminated | truncated
        self._restarted.copy_(done)
        out = self._empty()
        self._observations(out, done)
        reward_path = (_AGENTS, "reward") if self._multi else ("reward",)
        out.set(reward_path, sim.rewards.unsqueeze(-1).clone())
        self._flags(out, terminated, truncated)
        return out

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        import torch

        sim = self.sim
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            sim.reset()
            self._restarted.zero_()
        else:
            mask = mask.reshape(sim.num_worlds).to(torch.bool)
            # One replay of the reset graph, whatever the mask: deciding to skip it would need a sync.
            sim.reset(mask & ~self._restarted)
            self._restarted &= ~mask
        out = self._empty()
        self._observations(out, None)
        no = torch.zeros(sim.num_worlds, dtype=torch.bool, device=self.device)
        self._flags(out, no, no)
        return out

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self.sim.reseed(int(seed) % 2**31)
            self._restarted.zero_()
