"""A PettingZoo ``ParallelEnv`` view of one world of a ``BatchSim``, for tooling and tests.

``PettingZooWorld(sim, world=w)`` shows world ``w`` as a parallel multi-agent environment with
numpy observations. Agents are named ``agent_0`` ... ``agent_{A-1}`` (one agent, ``agent_0``, for
a single-agent env). Each ``step()`` steps the whole simulation (every world; the other worlds
keep whatever actions their buffers hold), so use it to inspect or validate an environment, not
to train.

| per agent | value |
|---|---|
| observation | ``sim.obs[key][w, i]`` for an observation with an agent axis, else ``sim.obs[key][w]``; one key: the array, several: a dict |
| action | written to ``sim.actions[key][w, i]`` (single-agent: ``[w]``); an agent left out keeps its last action |
| reward | ``sim.rewards[w, i]`` (single-agent: ``[w]``) |
| terminated, truncated | the world's flags (episodes end for all agents of a world at once) |

When the world's episode ends, the returned observations are its last ones (``sim.final_obs``)
and ``agents`` becomes empty until ``reset()``, as PettingZoo expects (the engine has already
begun the next episode; ``reset()`` restarts the world again).

Padded agent slots: an env whose levels use a varying number of agents marks the slots in use
with a per-agent observation (hide-and-seek's ``active``, ``[num_worlds, A]``, nonzero where in
use). ``possible_agents`` lists every slot; ``agents`` lists only the slots in use in this
world's episode (read at ``reset()``), and an action for another slot is refused.

There is no renderer in the engine: ``render_mode`` must be None (``render()`` returns None).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from ..errors import EcsError
from ..sim import BatchSim

__all__ = ["PettingZooWorld"]


def _per_agent_space(space: spaces.Space) -> spaces.Space:
    """The space of one agent's slice of a world-level space whose first axis is the agent axis."""
    if isinstance(space, spaces.Box):
        return spaces.Box(low=space.low[0], high=space.high[0], shape=space.shape[1:], dtype=space.dtype)
    if isinstance(space, spaces.MultiDiscrete):
        nvec, start = space.nvec[0], space.start[0]
        if np.ndim(nvec) == 0:
            return spaces.Discrete(int(nvec), start=int(start))
        return spaces.MultiDiscrete(nvec, start=start, dtype=space.dtype)
    raise EcsError(f"cannot split space {space} per agent")


class PettingZooWorld(ParallelEnv):
    """A PettingZoo ``ParallelEnv`` over world ``world`` of ``sim``.

    Args:
        sim: the simulation (single- or multi-agent).
        world: index of the world shown, in ``[0, sim.num_worlds)``.
        render_mode: must be None (the engine has no renderer).
        active_key: the per-agent observation that marks the agent slots in use (``[num_worlds, A]``,
            nonzero where in use); ignored when the env has no such observation. None lists every slot.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": [], "is_parallelizable": True}

    def __init__(
        self, sim: BatchSim, *, world: int = 0, render_mode: str | None = None, active_key: str | None = "active"
    ) -> None:
        if render_mode is not None:
            raise EcsError(
                f"PettingZooWorld has no renderer (render_mode={render_mode!r}); pass render_mode=None and draw "
                "frames from sim.tensor(...) yourself (examples/hide_and_seek_demo.py renders hide-and-seek)"
            )
        self.render_mode = None
        if not isinstance(sim, BatchSim):
            raise EcsError(f"PettingZooWorld needs an ecs.BatchSim, got {type(sim).__name__}")
        if not 0 <= world < sim.num_worlds:
            raise EcsError(f"world must be in [0, {sim.num_worlds}), got {world}")
        self.sim = sim
        self.world = int(world)
        self.metadata = {**self.metadata, "name": f"ecs_{sim.env.name}"}
        A = sim.env.num_agents
        self._multi = A is not None
        self.possible_agents = [f"agent_{i}" for i in range(A if self._multi else 1)]
        self.agents: list[str] = []
        obs_space, act_space = sim.observation_space, sim.action_space

        def agent_axis(t) -> bool:
            return self._multi and t.ndim >= 2 and t.shape[1] == A

        self._obs_split = {k: agent_axis(sim.obs[k]) for k in obs_space.spaces}
        self._act_keys = list(act_space.spaces)
        for k in self._act_keys:
            if self._multi and not agent_axis(sim.actions[k]):
                raise EcsError(
                    f"action {k!r} of multi-agent env {sim.env.name!r} has shape {tuple(sim.actions[k].shape)}; "
                    f"PettingZooWorld expects [num_worlds, num_agents={A}, ...]"
                )
        active = sim.obs.get(active_key) if (self._multi and active_key is not None) else None
        self._active = active if active is not None and tuple(active.shape) == (sim.num_worlds, A) else None
        obs_spaces = {k: _per_agent_space(s) if self._obs_split[k] else s for k, s in obs_space.spaces.items()}
        act_spaces = {k: _per_agent_space(s) if self._multi else s for k, s in act_space.spaces.items()}
        one_obs = next(iter(obs_spaces.values())) if len(obs_spaces) == 1 else spaces.Dict(obs_spaces)
        one_act = next(iter(act_spaces.values())) if len(act_spaces) == 1 else spaces.Dict(act_spaces)
        # One space object per agent, returned as is on every call (PettingZoo checks identity).
        self.observation_spaces = {a: one_obs for a in self.possible_agents}
        self.action_spaces = {a: one_act for a in self.possible_agents}

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    # -- helpers --------------------------------------------------------------------------------

    def _observations(self, source: dict[str, Any]) -> dict[str, Any]:
        w = self.world
        world_obs = {k: t[w].detach().cpu().numpy() for k, t in source.items()}
        out = {}
        for i, agent in enumerate(self.possible_agents):
            per = {k: (v[i] if self._obs_split[k] else v).copy() for k, v in world_obs.items()}
            out[agent] = next(iter(per.values())) if len(per) == 1 else per
        return out

    def _write_actions(self, actions: dict[str, Any]) -> None:
        import torch

        unknown = sorted(set(actions) - set(self.possible_agents))
        if unknown:
            raise EcsError(f"actions for unknown agents {unknown}; agents: {self.possible_agents}")
        idle = sorted(set(actions) - set(self.agents))
        if idle:
            raise EcsError(
                f"actions for agents {idle}, whose slots are not in use in this episode; agents: {self.agents}"
            )
        for agent, action in actions.items():
            i = int(agent.rsplit("_", 1)[1])
            per_key = action if isinstance(action, dict) else {self._act_keys[0]: action}
            if len(self._act_keys) > 1 and not isinstance(action, dict):
                raise EcsError(f"env {self.sim.env.name!r} has several actions; give {agent} a dict {self._act_keys}")
            for k, v in per_key.items():
                buf = self.sim.actions[k]
                index = (self.world, i) if self._multi else (self.world,)
                buf[index] = torch.as_tensor(np.asarray(v), device=buf.device).to(buf.dtype)

    # -- ParallelEnv API ------------------------------------------------------------------------

    def reset(self, seed: int | None = None, options: dict | None = None):
        """Restarts the world (``seed`` reseeds the whole simulation: ``sim.reseed``)."""
        import torch

        if seed is not None:
            self.sim.reseed(int(seed) % 2**31)
        else:
            mask = torch.zeros(self.sim.num_worlds, dtype=torch.bool)
            mask[self.world] = True
            self.sim.reset(mask)
        if self._active is None:
            self.agents = self.possible_agents[:]
        else:
            in_use = (self._active[self.world] != 0).tolist()
            self.agents = [a for a, used in zip(self.possible_agents, in_use, strict=True) if used]
        obs = self._observations(self.sim.obs)
        return {a: obs[a] for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]):
        if not self.agents:
            raise EcsError("the episode of this world has ended; call reset() first")
        self._write_actions(actions)
        sim, w = self.sim, self.world
        sim.step()
        terminated, truncated = bool(sim.terminated[w]), bool(sim.truncated[w])
        done = terminated or truncated
        obs = self._observations(sim.final_obs if done else sim.obs)
        rewards_w = sim.rewards[w].detach().cpu().numpy()
        live = self.agents
        rewards = {a: float(rewards_w[i] if self._multi else rewards_w) for i, a in enumerate(self.possible_agents)}
        out = (
            {a: obs[a] for a in live},
            {a: rewards[a] for a in live},
            dict.fromkeys(live, terminated),
            dict.fromkeys(live, truncated),
            {a: {} for a in live},
        )
        if done:
            self.agents = []
        return out

    def render(self) -> None:
        return None

    def close(self) -> None:
        """Nothing to release: the simulation belongs to the caller."""

    def state(self) -> np.ndarray:
        raise NotImplementedError("the engine has no global state vector; read sim.tensor(...) instead")
