"""A TorchRL environment over a ``BatchSim`` (``pip install -e ".[torchrl]"``).

``TorchRLEnv(sim)`` is a ``torchrl.envs.EnvBase`` with ``batch_size == [num_worlds]`` on the sim's
device. Keys follow TorchRL's conventions:

| key | single-agent | multi-agent (``env.num_agents = A``) |
|---|---|---|
| observations | each ``sim.obs`` key at the root, ``[W, *shape]`` | keys with an agent axis under ``"agents"``, ``[W, A, *shape]``; others at the root |
| actions | ``"action"`` for one action key, else ``("action", key)`` | ``("agents", "action")``, or ``("agents", "action", key)`` |
| reward | ``"reward"``, ``[W, 1]`` | ``("agents", "reward")``, ``[W, A, 1]`` |
| ``done``, ``terminated``, ``truncated`` | root, ``[W, 1]`` bool | root ``[W, 1]``, and the world's flags per agent under ``"agents"``, ``[W, A, 1]`` |

Per-agent masks (an observation such as ``action_mask`` or ``mask`` with the agent axis) travel
in the ``"agents"`` group with the other per-agent observations, with a boolean spec when the
component is boolean. A per-agent observation with no feature axis (hide-and-seek's ``active``,
``[W, A]``) gets one (``[W, A, 1]``), as TorchRL's multi-agent modules and losses expect. With the
flags in the group too, TorchRL's multi-agent recipes (GAE and ``ClipPPOLoss`` keyed on
``("agents", "done")`` and ``("agents", "terminated")``) run without reshaping glue.

Speed: ``step()`` and ``step_and_maybe_reset()`` take a fast path that writes the actions, replays
the step and builds the output tensordict with a handful of tensor ops (no host sync; TorchRL's
generic checks run only with ``run_type_checks``). Since the engine already restarted ended worlds,
``step_and_maybe_reset`` never replays the reset graph: the next root holds ``sim.obs`` (the new
episodes' first observations) and cleared flags, which is what TorchRL's reset would produce.

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
from ..torch_bridge import copy_into

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


def _rows(tensor: torch.Tensor) -> torch.Tensor:
    """A ``[W, n]`` view of a contiguous ``[W, ...]`` tensor with the widest element that divides a row.

    ``torch.where`` with a ``[W, 1]`` mask costs per element, and more when the mask broadcasts, so
    a cartpole row of 4 floats is selected as one 16-byte element. Bits are moved, not converted.
    """
    import torch

    flat = tensor.reshape(tensor.shape[0], -1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    row = flat.shape[1] * flat.element_size()
    for dtype, size in ((torch.complex128, 16), (torch.int64, 8), (torch.int32, 4), (torch.int16, 2)):
        if row % size == 0 and flat.element_size() <= size:
            return flat.view(dtype)
    return flat.view(torch.uint8)


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
        # A per-agent scalar observation gets a feature axis of 1 (a view, no copy).
        self._obs_expand = {k: path[0] == _AGENTS and sim.obs[k].ndim == 2 for k, path in self._obs_paths.items()}
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
            space = obs_space[k]
            if self._obs_expand[k]:
                space = type(space)(low=space.low[..., None], high=space.high[..., None], dtype=space.dtype)
            obs_spec[path] = _box_spec(space, self._obs_shape(k), device)
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
        flags = {"done": flag.clone(), "terminated": flag.clone(), "truncated": flag.clone()}
        done_spec = Composite(flags, shape=(W,), device=device)
        if self._multi:
            agent_flag = Categorical(2, shape=(W, A, 1), dtype=torch.bool, device=device)
            done_spec[_AGENTS] = Composite(
                {"done": agent_flag.clone(), "terminated": agent_flag.clone(), "truncated": agent_flag.clone()},
                shape=(W, A),
                device=device,
            )
        self.full_done_spec = done_spec
        self._reward_path = (_AGENTS, "reward") if self._multi else ("reward",)
        self._obs_items = [(k, path, self._obs_expand[k]) for k, path in self._obs_paths.items()]
        self._act_items = [(k, path, sim.actions[k]) for k, path in self._act_paths.items()]
        self._obs_views = {k: self._view(sim.obs[k], k) for k in self._obs_paths}
        self._dev, self._batch = torch.device(device), torch.Size([W])
        self._group_size = torch.Size([W, A]) if self._multi else None
        self._terminated_col, self._truncated_col = sim.terminated.unsqueeze(-1), sim.truncated.unsqueeze(-1)
        self._reward_col = sim.rewards.unsqueeze(-1)
        # Worlds the engine restarted inside the last step: their next partial reset is already done.
        self._restarted = torch.zeros(W, dtype=torch.bool, device=device)
        self._restarted_col = self._restarted.unsqueeze(-1)
        self._restarted_views = {1: self._restarted, 2: self._restarted_col}
        # _pending[0] False: _restarted is stale, read it as all False. A list, because EnvBase's
        # __setattr__ costs microseconds and this flag changes on every step.
        self._pending = [False]
        self._root_obs_names = [(k, path[0]) for k, path in self._obs_paths.items()]
        # Entries that _output writes itself, so a carried value of theirs is dropped.
        flags = {"done", "terminated", "truncated"}
        self._replaced = (
            {"next", "reward", *flags, *(p[0] for p in self._obs_paths.values() if len(p) == 1)},
            {"reward", *flags, *(p[1] for p in self._obs_paths.values() if len(p) == 2)},
        )
        # Selecting final_obs where a world ended, on [W, n] row views with wide elements (see _rows);
        # the result is viewed back to the observation's dtype, and shape where that is not [W, n].
        self._select = []
        for k in self._obs_paths:
            view = self._obs_views[k]
            back = None if view.ndim == 2 else view.shape
            self._select.append((k, _rows(sim.final_obs[k]), _rows(sim.obs[k]), view.dtype, back))

    def _obs_shape(self, key: str) -> tuple[int, ...]:
        shape = tuple(self.sim.obs[key].shape)
        return (*shape, 1) if self._obs_expand[key] else shape

    def _view(self, tensor: torch.Tensor, key: str) -> torch.Tensor:
        return tensor.unsqueeze(-1) if self._obs_expand[key] else tensor

    # -- EnvBase hooks ------------------------------------------------------------------------

    def _output(
        self, obs: dict[str, torch.Tensor], reward, terminated, truncated, done, carry: TensorDictBase | None = None
    ) -> TensorDictBase:
        """The output tensordict from fresh tensors (no copies; ``TensorDict._new_unsafe`` skips checks).

        ``carry``: a root tensordict whose other entries (not ``"next"``, observations or flags) are
        carried over, as ``step_mdp`` does, and zeroed in the worlds that restarted, as the padding of
        ``EnvBase``'s partial reset does (a recurrent state starts again from zeros); except the
        action, carried as it is (the policy overwrites it before the next step).
        """
        root: dict[str, Any] = {}
        group: dict[str, Any] = {}
        if carry is not None:
            replaced, group_replaced = self._replaced
            for key, value in carry.items():
                if key == _AGENTS and self._multi:
                    group.update((k, self._carried(k, v)) for k, v in value.items() if k not in group_replaced)
                elif key not in replaced:
                    root[key] = self._carried(key, value)
        root.update(terminated=terminated, truncated=truncated, done=done)
        W = self.sim.num_worlds
        if self._multi:
            A = self.num_agents
            group.update(
                terminated=terminated.unsqueeze(1).expand(W, A, 1).clone(),
                truncated=truncated.unsqueeze(1).expand(W, A, 1).clone(),
                done=done.unsqueeze(1).expand(W, A, 1).clone(),
            )
            if reward is not None:
                group["reward"] = reward
            for k, path, _expand in self._obs_items:
                (group if path[0] == _AGENTS else root)[path[-1]] = obs[k]
            root[_AGENTS] = TensorDict._new_unsafe(group, batch_size=self._group_size, device=self._dev)
        else:
            if reward is not None:
                root["reward"] = reward
            for k, path, _expand in self._obs_items:
                root[path[-1]] = obs[k]
        return TensorDict._new_unsafe(root, batch_size=self._batch, device=self._dev)

    def _carried(self, key: str, value):
        """A carried entry: the action as it is (the policy overwrites it), others zeroed where worlds restarted."""
        return value if key == "action" else self._zero_restarted(value)

    def _zero_restarted(self, value):
        """``value`` (leading axis: worlds) with zeros in the worlds restarted by the last step."""
        if isinstance(value, TensorDictBase):
            return value.apply(self._zero_restarted)
        ndim = value.ndim
        mask = self._restarted_views.get(ndim)
        if mask is None:
            mask = self._restarted_views[ndim] = self._restarted.view(-1, *([1] * (ndim - 1)))
        return value.masked_fill(mask, 0)

    def _write_actions(self, tensordict: TensorDictBase) -> None:
        for _k, path, buf in self._act_items:
            value = tensordict._get_str(path[0], None) if len(path) == 1 else tensordict.get(path)
            if value is None:
                raise EcsError(f"the input tensordict has no action {path}; the action spec is {self.full_action_spec}")
            if value.shape != buf.shape:
                raise EcsError(f"action {path} must have shape {tuple(buf.shape)}, got {tuple(value.shape)}")
            copy_into(buf, value)  # casts the dtype (a categorical spec samples int64)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        import torch

        sim = self.sim
        self._write_actions(tensordict)
        sim.step()
        torch.logical_or(sim.terminated, sim.truncated, out=self._restarted)
        self._pending[0] = True
        mask = self._restarted_col
        obs = {}
        for k, final, now, dtype, shape in self._select:
            out = torch.where(mask, final, now).view(dtype)
            obs[k] = out if shape is None else out.view(shape)
        terminated, truncated = self._terminated_col.clone(), self._truncated_col.clone()
        done = torch.logical_or(terminated, truncated)
        reward = self._reward_col.clone()
        if self._multi:
            return self._output(obs, reward, terminated, truncated, done)
        out = {"terminated": terminated, "truncated": truncated, "done": done, "reward": reward}
        for k, name in self._root_obs_names:
            out[name] = obs[k]
        return TensorDict._new_unsafe(out, batch_size=self._batch, device=self._dev)

    def _fast_input(self, tensordict: TensorDictBase) -> bool:
        """Whether a step may skip ``EnvBase``'s generic handling: a full batch on our device, no masks, no preset."""
        if type(tensordict) is not TensorDict or self.run_type_checks:
            return False
        entries = tensordict._tensordict  # a plain TensorDict's own mapping (a TensorDict refuses `in` itself)
        return not (
            "_step" in entries
            or "next" in entries
            or tensordict.batch_size != self._batch
            or tensordict.device != self._dev
        )

    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """``EnvBase.step``, with a fast path for a full-batch step (no ``"_step"`` mask, no preset ``"next"``)."""
        if not self._fast_input(tensordict):
            return super().step(tensordict)
        # _step's output matches the specs by construction, so EnvBase's post-processing is skipped.
        tensordict._set_str("next", self._step(tensordict), validated=True, inplace=False, non_blocking=False)
        return tensordict

    def _step_and_maybe_reset(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """A step, then the next root: ``sim.obs`` (ended worlds were restarted by the step) and cleared flags.

        The same data as ``EnvBase``'s step, ``step_mdp`` and partial ``reset()`` (the input's other
        entries, such as the action and policy outputs, carried over), without replaying the reset
        graph or reading ``done.any()`` on the host.
        """
        import torch

        if not self._fast_input(tensordict):
            return super()._step_and_maybe_reset(tensordict)
        tensordict._set_str("next", self._step(tensordict), validated=True, inplace=False, non_blocking=False)
        if self._multi:
            obs = {k: self._obs_views[k].clone() for k in self._obs_paths}
            no = [torch.zeros(self._batch[0], 1, dtype=torch.bool, device=self._dev) for _ in range(3)]
            next_root = self._output(obs, None, *no, carry=tensordict)
        else:
            # The single-agent root, written out: this runs once per step of every rollout. The action
            # is carried as it is (EnvBase's reset pads it with 0 in restarted worlds; the policy
            # overwrites it either way); other carried entries are zeroed there, as EnvBase does.
            replaced, _ = self._replaced
            carried = self._carried
            root = {k: carried(k, v) for k, v in tensordict._tensordict.items() if k not in replaced}
            # Every flag of the next root is False (ended worlds have restarted): one fresh tensor serves
            # the three keys, which TorchRL only reads or replaces.
            root["done"] = root["terminated"] = root["truncated"] = torch.zeros(
                self._batch[0], 1, dtype=torch.bool, device=self._dev
            )
            for k, path, _expand in self._obs_items:
                root[path[0]] = self._obs_views[k].clone()
            next_root = TensorDict._new_unsafe(root, batch_size=self._batch, device=self._dev)
        # The restart of ended worlds has been consumed: a later partial reset of them restarts them again.
        self._pending[0] = False
        return tensordict, next_root

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        import torch

        sim = self.sim
        mask = None
        if tensordict is not None:
            mask = tensordict.get("_reset", None)
            if self._multi:
                agent_mask = tensordict.get((_AGENTS, "_reset"), None)
                if agent_mask is not None:
                    agent_mask = agent_mask.reshape(sim.num_worlds, -1).any(-1)
                    mask = agent_mask if mask is None else mask.reshape(sim.num_worlds) | agent_mask
        if not self._pending[0]:
            self._restarted.zero_()
        if mask is None:
            sim.reset()
            self._restarted.zero_()
        else:
            mask = mask.reshape(sim.num_worlds).to(torch.bool)
            # One replay of the reset graph, whatever the mask: deciding to skip it would need a sync.
            sim.reset(mask & ~self._restarted)
            self._restarted &= ~mask
        obs = {k: self._obs_views[k].clone() for k in self._obs_paths}
        no = torch.zeros(sim.num_worlds, 1, dtype=torch.bool, device=self.device)
        return self._output(obs, None, no, no.clone(), no.clone())

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self.sim.reseed(int(seed) % 2**31)
            self._restarted.zero_()
