"""Zero-copy torch views of the simulation's arrays, and Gymnasium spaces of one world.

The only engine module besides the adapters that imports torch; it does so lazily.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import warp as wp

from .errors import ActionError, EcsError
from .schema import scalar_type

if TYPE_CHECKING:
    from .storage import Storage


class TorchViews:
    """Persistent torch views, created once per simulation (each conversion costs microseconds)."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        env = storage.env
        s = storage.singletons
        self.obs = ReadOnlyTensors(
            "obs", {k: wp.to_torch(s[o.component.name]) for k, o in sorted(env.observations.items())}
        )
        self.final_obs = ReadOnlyTensors(
            "final_obs", {k: wp.to_torch(storage.final_obs[k]) for k in sorted(env.observations)}
        )
        self.actions = {k: wp.to_torch(s[a.component.name]) for k, a in sorted(env.actions.items())}
        self.rewards = wp.to_torch(s["reward"])
        self.terminated = wp.to_torch(s["terminated"])
        self.truncated = wp.to_torch(s["truncated"])
        self.params = ParamDict({k: wp.to_torch(v) for k, v in storage.params.items()}, {p.name: p for p in env.params})
        self.reset_request = wp.to_torch(storage.reset_request)
        self.staging: dict[str, Any] = {}
        self._columns: dict[tuple[str, str], Any] = {}

    def restage(self) -> None:
        """Views of the staging buffers of ``run(k, actions)``, after they were reallocated."""
        self.staging = {key: wp.to_torch(a) for key, a in self._storage.staging.items()}

    def request_reset(self, mask: Any) -> None:
        """Flags every world for reset (``mask`` None) or the worlds where ``mask`` is true."""
        import torch

        if mask is None:
            self.reset_request.fill_(1)
            return
        num_worlds = self._storage.num_worlds
        if isinstance(mask, np.ndarray):
            mask = torch.from_numpy(mask)
        if not isinstance(mask, torch.Tensor):
            raise EcsError(f"reset mask must be a torch.Tensor or numpy array of bools, got {type(mask).__name__}")
        _check_dense(mask, "reset mask", EcsError)
        if mask.dtype != torch.bool or tuple(mask.shape) != (num_worlds,):
            raise EcsError(
                f"reset mask must be bool with shape ({num_worlds},), got {mask.dtype} {tuple(mask.shape)}; "
                "build it as e.g. torch.zeros(num_worlds, dtype=torch.bool)"
            )
        copy_into(self.reset_request, mask)

    def column(self, archetype: str, component: str):
        key = (archetype, component)
        view = self._columns.get(key)
        if view is not None:
            return view
        sim = self._storage
        if archetype == "world":
            if component not in sim.singletons:
                raise EcsError(f"no singleton {component!r}; singletons: {sorted(sim.singletons)}")
            arr = sim.singletons[component]
        else:
            if archetype not in sim.tables:
                raise EcsError(
                    f"no archetype {archetype!r}; archetypes: {sorted(sim.tables)} (or 'world' for singletons)"
                )
            cols = sim.tables[archetype]
            if component not in cols:
                raise EcsError(f"archetype {archetype!r} has no component {component!r}; it has {sorted(cols)}")
            arr = cols[component]
        view = wp.to_torch(arr)
        self._columns[key] = view
        return view

    def observation_space(self):
        from gymnasium import spaces

        out = {}
        for key, o in sorted(self._storage.env.observations.items()):
            c = o.component
            np_dtype = np.dtype(wp.dtype_to_numpy(scalar_type(c.dtype)))
            out[key] = spaces.Box(low=o.low, high=o.high, shape=c.export_shape, dtype=np_dtype)
        return spaces.Dict(out)

    def action_space(self):
        from gymnasium import spaces

        out = {}
        for key, a in sorted(self._storage.env.actions.items()):
            c = a.component
            np_dtype = np.dtype(wp.dtype_to_numpy(scalar_type(c.dtype)))
            shape = c.export_shape
            if a.discrete:
                n = int(a.high) - int(a.low) + 1
                if shape == ():
                    out[key] = spaces.Discrete(n, start=int(a.low))
                else:
                    out[key] = spaces.MultiDiscrete(
                        np.full(shape, n, dtype=np_dtype), start=np.full(shape, int(a.low), dtype=np_dtype)
                    )
            else:
                out[key] = spaces.Box(low=a.low, high=a.high, shape=shape, dtype=np_dtype)
        return spaces.Dict(out)


def copy_into(dst: Any, src: Any) -> None:
    """``dst.copy_(src)``; between CPU tensors, through numpy on the calling thread.

    Torch copies more than 32,768 elements on its OpenMP threads, which keep spinning for a while
    afterwards: on a small CPU they take a core from whatever runs next (a cartpole step at 65,536
    worlds on a 2-core machine took 3x as long right after such a copy of its actions). Like
    ``copy_``, it broadcasts ``src`` and casts its dtype as C does (a float truncated towards zero, an
    integer wrapped); tensors of a dtype numpy lacks (bfloat16) and other devices go to ``copy_``.
    """
    if dst.device.type == "cpu" and src.device.type == "cpu":
        try:
            np.copyto(dst.numpy(), src.detach().numpy(), casting="unsafe")
            return
        except TypeError:  # a dtype numpy lacks (bfloat16)
            pass
    dst.copy_(src)


def _host_view(tensor: Any) -> np.ndarray | None:
    """A numpy view of a CPU tensor (None on another device or for a dtype numpy lacks)."""
    if tensor.device.type != "cpu":
        return None
    try:
        return tensor.numpy()
    except TypeError:
        return None


def _check_dense(value: Any, what: str, error: type[Exception]) -> None:
    """Refuses sparse tensors and tensors without data (``meta``), which cannot be copied into a buffer."""
    import torch

    if value.layout != torch.strided:
        raise error(f"{what} must be a dense tensor, got layout {value.layout}; convert it with .to_dense()")
    if value.device.type == "meta":
        raise error(f"{what} is on the 'meta' device and holds no data; build it on 'cpu' or the sim's device")


class ReadOnlyTensors(Mapping):
    """``sim.obs`` and ``sim.final_obs``: the engine's persistent output tensors, read by the trainer.

    Replacing or deleting an entry would leave the engine writing a tensor nobody reads, so both are
    refused; copy an entry (``sim.obs[k].clone()``) to keep or change it.
    """

    def __init__(self, name: str, views: dict[str, Any]) -> None:
        self._name = name
        self._views = views

    def __getitem__(self, key: str):
        try:
            return self._views[key]
        except KeyError:
            raise KeyError(f"no {self._name} key {key!r}; keys: {sorted(self._views)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)

    def __setitem__(self, key: str, value: Any) -> None:
        raise TypeError(
            f"sim.{self._name}[{key!r}] cannot be replaced: the engine writes its own tensor on every step. "
            f"Read it, or keep a copy with sim.{self._name}[{key!r}].clone()"
        )

    def __delitem__(self, key: str) -> None:
        raise TypeError(f"sim.{self._name}[{key!r}] cannot be deleted: the engine writes it on every step")

    def __repr__(self) -> str:
        return repr(self._views)


class ParamDict(Mapping):
    """``sim.params``: per-world parameters (one shared value, or one per world), written in place.

    ``sim.params[name] = value`` checks ``value`` (finite numbers of the parameter's shape, or one
    value for all its entries, inside the ``ecs.Param``'s ``low``/``high``) and copies it into the
    persistent buffer; nothing changes on an
    error. In-place tensor writes (``sim.params[name].fill_(x)``) skip those checks.
    """

    def __init__(self, views: dict[str, Any], declared: dict[str, Any] | None = None) -> None:
        self._views = views
        self._declared = declared or {}

    def __getitem__(self, key: str):
        try:
            return self._views[key]
        except KeyError:
            raise KeyError(f"no parameter {key!r}; parameters: {sorted(self._views)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)

    def __setitem__(self, key: str, value: Any) -> None:
        import torch

        if key not in self._views:
            raise EcsError(f"unknown parameter {key!r}; parameters: {sorted(self._views)}")
        buf = self._views[key]
        if isinstance(value, torch.Tensor):
            _check_dense(value, f"parameter {key!r}", EcsError)
            value = value.detach().cpu().numpy()
        arr = np.asarray(value)
        one = tuple(buf.shape[1:])  # one value of the parameter (a scalar, vector or matrix)
        if arr.dtype.kind not in "iuf":
            raise EcsError(f"parameter {key!r} takes numbers, got {arr.dtype}")
        if arr.shape == one or arr.size == int(np.prod(one, dtype=int)):
            arr = np.broadcast_to(arr.reshape(one), tuple(buf.shape))  # one value for every entry
        if arr.shape != tuple(buf.shape):
            raise EcsError(f"parameter {key!r} takes one value or {tuple(buf.shape)} values, got shape {arr.shape}")
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise EcsError(f"parameter {key!r} must be finite, got {arr.tolist()}")
        if not buf.dtype.is_floating_point and arr.dtype.kind == "f" and not np.all(arr == np.round(arr)):
            raise EcsError(f"parameter {key!r} holds integers, got non-integral {arr.tolist()}")
        if key in self._declared:
            self._declared[key].check_range(arr)  # the Param's low/high
        buf.copy_(torch.as_tensor(np.array(arr)).to(buf.dtype))

    def __delitem__(self, key: str) -> None:
        raise EcsError(f"sim.params[{key!r}] cannot be deleted: the env's systems read it on every step")

    def __repr__(self) -> str:
        return repr(self._views)


class ActionDict(Mapping):
    """``sim.actions``: persistent tensors that the trainer writes in place.

    ``sim.actions[key] = x`` does not rebind: it checks dtype, shape and device of ``x`` (no host
    sync) and copies it into the persistent buffer. Value checks (range, NaN) run on the device
    inside the captured step. ``sim.actions[key].copy_(x)`` is torch's own copy: it converts
    dtypes silently (a float 0.9 copied into an int action becomes 0), so prefer the checked
    assignment when ``x`` might have another dtype. On CPU the checked assignment also keeps the
    copy on the calling thread (``copy_into``), where torch would copy a large tensor on its
    OpenMP threads.
    """

    def __init__(self, views: dict[str, Any]) -> None:
        self._views = views
        self._host = {k: _host_view(v) for k, v in views.items()}  # numpy views of CPU buffers

    def __getitem__(self, key: str):
        try:
            return self._views[key]
        except KeyError:
            raise KeyError(f"no action {key!r}; actions: {sorted(self._views)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)

    def checked(self, key: str, value: Any, steps: int | None = None):
        """``value`` as a tensor after checking type, dtype, shape and device (``steps`` adds a leading axis)."""
        import torch

        buf = self[key]
        want = tuple(buf.shape) if steps is None else (steps, *buf.shape)
        if isinstance(value, np.ndarray):
            value = torch.from_numpy(value)
        if not isinstance(value, torch.Tensor):
            raise ActionError(f"action {key!r} must be a torch.Tensor (or numpy array), got {type(value).__name__}")
        _check_dense(value, f"action {key!r}", ActionError)
        if value.dtype != buf.dtype:
            raise ActionError(
                f"action {key!r} must have dtype {buf.dtype}, got {value.dtype}; convert it with .to({buf.dtype})"
            )
        if tuple(value.shape) != want:
            raise ActionError(f"action {key!r} must have shape {want}, got {tuple(value.shape)}")
        if value.device != buf.device and value.device.type != "cpu":
            raise ActionError(
                f"action {key!r} must be on {buf.device}, got {value.device}; move it with .to('{buf.device}')"
            )
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        host = self._host.get(key)
        if host is not None and type(value) is np.ndarray and value.dtype == host.dtype and value.shape == host.shape:
            np.copyto(host, value)  # what checked() accepts from numpy, copied without torch
            return
        if key not in self._views:
            raise ActionError(f"unknown action key {key!r}; actions: {sorted(self._views)}")
        copy_into(self[key], self.checked(key, value))

    def __delitem__(self, key: str) -> None:
        raise ActionError(
            f"sim.actions[{key!r}] cannot be deleted: every step reads it. Write the action you want instead "
            f"(e.g. sim.actions[{key!r}].zero_())"
        )

    def update(self, actions: Mapping[str, Any]) -> None:
        """Checks every entry first, then copies them all (nothing is written if one is bad)."""
        unknown = sorted(set(actions) - set(self._views))
        if unknown:
            raise ActionError(f"unknown action key(s) {unknown}; actions: {sorted(self._views)}")
        checked = {k: self.checked(k, v) for k, v in actions.items()}
        for k, v in checked.items():
            copy_into(self._views[k], v)
