"""Checkpoints: the state dict on disk, and the checks a state must pass before it is loaded.

A state that passes ``check_values`` cannot make a kernel read or write out of bounds or start
from non-finite numbers: every float of the live rows and of the singletons is finite, engine
columns hold what the engine writes (``alive`` 0 or 1, generations >= 0, episode counters in
range), and every column declared as rows of an archetype (``Component.index_of``) or as a count
of them (``count_of``) stays within that archetype's capacity. ``load_state_dict`` runs it on
every load, so a damaged or hand-edited state is refused with a ``StateDictError`` instead of
crashing the process at the next ``step()``.

A state saved before a column was added, or before a shaped column grew, loads where that column's
component says how (``Component.upgrade``; ``zeros_if_missing``, ``zero_padded``): ``check_state``
brings its arrays across first and checks the result as it checks any state; ``write_state`` then writes it.

Files are written atomically: a temporary ``.<name>.ecs-tmp-*`` file beside the target, fsync,
rename. A save killed midway leaves such a file behind; the next successful save of the same
target removes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import json
import math
import os
import tempfile
import zipfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import warp as wp

from .errors import StateDictError
from .schema import Component, dtype_shape, scalar_type

if TYPE_CHECKING:
    from .storage import Storage

_FLOAT_KINDS = "fc"


def _first(bad: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(bad)[0])


def check_values(
    arrays: Mapping[str, np.ndarray],
    *,
    components: Mapping[str, Component],
    capacities: Mapping[str, int],
) -> None:
    """Raises ``StateDictError`` naming the first value a simulation must never hold.

    Args:
        arrays: ``state_dict()["arrays"]``, shapes and dtypes already checked.
        components: every entity component and singleton of the env (engine ones included), by name.
        capacities: rows per world of every archetype.
    """
    alive = {
        k.split("/")[1]: np.asarray(v) != 0
        for k, v in arrays.items()
        if k.startswith("table/") and k.endswith("/alive")
    }

    def refuse(key: str, index: tuple[int, ...], value: Any, why: str) -> None:
        raise StateDictError(
            f"state dict array {key!r} holds {value!r} at {list(index)} (world {index[0]}): {why}. A state from "
            "sim.state_dict() never does; it was damaged or edited. Load an unmodified state."
        )

    for key, raw in arrays.items():
        v = np.asarray(raw)
        parts = key.split("/")
        kind, name = parts[0], parts[-1]
        if kind == "table" and name in ("alive", "generation"):
            bad = (v != 0) & (v != 1) if name == "alive" else v < 0
            if bad.any():
                refuse(
                    key,
                    _first(bad),
                    v[_first(bad)].item(),
                    "alive must be 0 or 1" if name == "alive" else "generations are >= 0",
                )
            continue
        if kind not in ("table", "singleton", "param"):
            continue
        if kind == "table":
            live = alive[parts[1]].reshape(alive[parts[1]].shape + (1,) * (v.ndim - 2))
        else:
            live = np.ones((1,) * v.ndim, dtype=bool)
        if v.dtype.kind in _FLOAT_KINDS:
            bad = ~np.isfinite(v) & live
            if bad.any():
                refuse(key, _first(bad), v[_first(bad)].item(), "values must be finite")
            continue
        if kind == "singleton" and name in ("episode_step", "episode", "reset"):
            low, high = {"episode_step": (0, 2**31 - 1), "episode": (-1, 2**31 - 1), "reset": (0, 1)}[name]
            bad = (v < low) | (v > high)
            if bad.any():
                refuse(key, _first(bad), v[_first(bad)].item(), f"{name} must lie in [{low}, {high}]")
            continue
        comp = components.get(name) if kind != "param" else None
        if comp is None:
            continue
        if comp.index_of is not None:
            cap = capacities[comp.index_of]
            low = -1 if comp.nullable else 0
            bad = ((v < low) | (v >= cap)) & live
            if bad.any():
                none = " or -1" if comp.nullable else ""
                refuse(
                    key, _first(bad), v[_first(bad)].item(), f"it holds rows of {comp.index_of!r}, in [0, {cap}){none}"
                )
        if comp.count_of is not None:
            cap = capacities[comp.count_of]
            bad = (v < 0) | (v > cap)
            if bad.any():
                refuse(key, _first(bad), v[_first(bad)].item(), f"it counts rows of {comp.count_of!r}, in [0, {cap}]")


def _temp_prefix(path: str) -> str:
    return f".{os.path.basename(path)}.ecs-tmp-"


def _naming(e: OSError, path: str) -> OSError:
    """``e`` again, with a message that names the target instead of the temporary file."""
    return type(e)(e.errno, f"cannot save the state to {path!r}: {e.strerror or e}")


def save_state(state: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Writes a state dict as one ``.npz`` file (arrays plus JSON metadata), atomically.

    Raises:
        OSError: the file could not be written: the same kind of error, naming ``path`` (not the
            temporary file); nothing is left behind and an existing file at ``path`` is unchanged.
    """
    path = os.path.abspath(os.fspath(path))
    meta = {k: v for k, v in state.items() if k != "arrays"}
    arrays = {f"a/{k}": v for k, v in state["arrays"].items()}
    folder = os.path.dirname(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".npz", dir=folder)
    except OSError as e:
        raise _naming(e, path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, __meta__=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _naming(e, path) from None
        raise
    # Leftovers of earlier saves of this target that were killed midway.
    for stale in glob.glob(os.path.join(folder, glob.escape(_temp_prefix(path)) + "*.npz")):
        with contextlib.suppress(OSError):
            os.unlink(stale)


def load_state(path: str | os.PathLike) -> dict[str, Any]:
    """Reads a file written by ``save_state``.

    Raises:
        StateDictError: the file is missing, empty, truncated, damaged, or not a saved simulation state.
    """
    path = os.fspath(path)
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError("it holds a single array (.npy), not a saved state (.npz from sim.save)")
        with data:
            meta = json.loads(bytes(data["__meta__"]).decode())
            arrays = {k[2:]: data[k] for k in data.files if k.startswith("a/")}
    except FileNotFoundError:
        raise StateDictError(f"no saved state at {path!r}") from None
    except IsADirectoryError:
        raise StateDictError(f"{path!r} is a folder, not a saved state") from None
    except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile, TypeError, UnicodeDecodeError) as e:
        raise StateDictError(
            f"{path!r} is not a saved BatchSim state ({type(e).__name__}: {e}); it may be empty, "
            "truncated or damaged. Load a file written by sim.save"
        ) from None
    if not isinstance(meta, dict):
        raise StateDictError(f"{path!r} is not a saved BatchSim state (its metadata is not a mapping)")
    return {**meta, "arrays": arrays}


# -- the state of a simulation ---------------------------------------------------------------------


def zeros_if_missing(saved: np.ndarray | None, like: np.ndarray) -> np.ndarray | None:
    """A ``Component.upgrade`` for a column whose zeros are where a new simulation starts it and mean "nothing
    recorded yet": a record that the kernels rebuild before they read it, or read only to skip work they would
    otherwise redo (a cache), or a count that starts again (a body's rest). A state saved before the column existed
    loads it zeroed. One that holds the column at another shape or dtype is refused."""
    return like if saved is None else None


def zero_padded(saved: np.ndarray | None, like: np.ndarray) -> np.ndarray | None:
    """A ``Component.upgrade`` for a shaped column that grew at the end of its last axis, where a new entry at zero
    means what a state saved before it implied (a count of records that the state did not keep, say): the saved
    entries, then zeros. A state that lacks the column, or holds it at another leading shape, a larger one or
    another dtype, is refused."""
    if saved is None or saved.dtype != like.dtype or saved.ndim != like.ndim or saved.ndim == 0:
        return None
    if saved.shape[:-1] != like.shape[:-1] or saved.shape[-1] > like.shape[-1]:
        return None
    out = like.copy()
    out[..., : saved.shape[-1]] = saved
    return out


def _upgraded(storage: Storage, arrays: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``arrays`` with the arrays of this simulation's state that they lack or hold at another shape or dtype
    brought across by their components' ``upgrade``, and the names of those upgraded; the rest as they are."""
    components = storage.state_components()
    out, upgraded = dict(arrays), []
    for key, arr in storage.state_arrays().items():
        comp = components.get(key)
        if comp is None or comp.upgrade is None:
            continue
        like = np.zeros(tuple(arr.shape) + dtype_shape(arr.dtype), dtype=wp.dtype_to_numpy(scalar_type(arr.dtype)))
        saved = np.asarray(arrays[key]) if key in arrays else None
        if saved is not None and saved.shape == like.shape and saved.dtype == like.dtype:
            continue
        value = comp.upgrade(saved, like)
        if value is not None:
            out[key] = value
            upgraded.append(key)
    return out, upgraded


STATE_FORMAT_VERSION = 1


def config_dict(cfg: Any) -> Any:
    """An env config as plain data (a dataclass as a dict; NaN as "nan", so equal configs compare equal)."""
    if dataclasses.is_dataclass(cfg):
        return {k: _plain(v) for k, v in dataclasses.asdict(cfg).items()}
    return cfg


def config_problem(saved: Any, cfg: Any) -> str | None:
    """Why a state saved with the config ``saved`` (``config_dict`` of it) cannot load into a simulation built
    with ``cfg``, or None: the two are equal, or ``cfg`` (a dataclass) has fields that ``saved`` lacks, each at its
    default (fields added to the env since the state was saved, left as they were)."""
    mine = config_dict(cfg)
    if saved == mine:
        return None
    if not (dataclasses.is_dataclass(cfg) and isinstance(saved, Mapping) and isinstance(mine, dict)):
        return f"state dict was saved with a different env config (saved: {saved!r})"
    problems = [f"{k}={saved[k]!r} there, {mine[k]!r} here" for k in mine if k in saved and saved[k] != mine[k]]
    problems += [f"{k} (saved, not a field of this env's config)" for k in saved if k not in mine]
    for f in dataclasses.fields(cfg):
        if f.name in saved:
            continue
        if f.default is not dataclasses.MISSING:
            default = config_dict(f.default) if dataclasses.is_dataclass(f.default) else _plain(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            made = f.default_factory()
            default = config_dict(made) if dataclasses.is_dataclass(made) else _plain(made)
        else:
            problems.append(f"{f.name} (not in the saved config, and without a default)")
            continue
        if mine[f.name] != default:
            problems.append(
                f"{f.name}={mine[f.name]!r} here, not in the saved config (load it at the default {default!r})"
            )
    if not problems:
        return None
    return (
        f"state dict was saved with a different env config: {'; '.join(problems)}. Build the BatchSim with the "
        "config it was saved with"
    )


def _plain(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return v


def state_of(storage: Storage, *, seed: int, world_offset: int) -> dict[str, Any]:
    """``sim.state_dict()``: every state array as numpy, with what it must be loaded into."""
    return {
        "format_version": STATE_FORMAT_VERSION,
        "env": storage.env.name,
        "config": config_dict(storage.env.config),
        "num_worlds": storage.num_worlds,
        "seed": seed,
        "world_offset": world_offset,
        "arrays": {k: v.numpy().copy() for k, v in storage.state_arrays().items()},
    }


def per_world(key: str, value: Any, num_worlds: int) -> bool:
    """Whether array ``key`` of a state of ``num_worlds`` worlds holds a row per world along its first axis (tables,
    singletons, final observations, per-world parameters), rather than one value that every world shares (shared
    parameters, the spawn-overflow flags)."""
    return not key.startswith(("overflow/", "param/")) or (np.ndim(value) > 0 and len(value) == num_worlds > 1)


def worlds_of(state: Mapping[str, Any], lo: int, hi: int) -> dict[str, Any]:
    """The state of worlds ``lo`` up to ``hi`` of ``state`` (a ``state_dict()``), to load into a simulation of
    ``hi - lo`` worlds: each world's rows (``per_world``), the shared arrays whole, the world offset moved on."""
    n = state["num_worlds"]
    if not 0 <= lo < hi <= n:
        raise StateDictError(f"worlds {lo}..{hi - 1} are not worlds of this state's {n}; pick them in 0..{n - 1}")
    arrays = {k: np.asarray(v)[lo:hi].copy() if per_world(k, v, n) else v for k, v in state["arrays"].items()}
    return {**state, "num_worlds": hi - lo, "world_offset": state["world_offset"] + lo, "arrays": arrays}


@dataclasses.dataclass(frozen=True)
class CheckedState:
    """A state that ``check_state`` found fit to load into a simulation: its seed, world offset, the arrays to write
    (by their ``state_dict()`` names, upgraded where their components say how) and the names of those upgraded."""

    seed: int
    world_offset: int
    arrays: Mapping[str, Any]
    upgraded: list[str]


def check_state(storage: Storage, state: Mapping[str, Any]) -> CheckedState:
    """Everything a load checks of ``state`` for ``storage`` before anything is written (``write_state``), so a
    refused state changes nothing.

    Raises:
        StateDictError: naming the first problem.
    """
    env, num_worlds = storage.env, storage.num_worlds
    if not isinstance(state, Mapping) or "arrays" not in state:
        raise StateDictError("not a BatchSim state dict: expected a mapping with 'arrays' (from sim.state_dict())")
    if state.get("format_version") != STATE_FORMAT_VERSION:
        raise StateDictError(
            f"state dict format version {state.get('format_version')!r} is not supported; this engine reads "
            f"version {STATE_FORMAT_VERSION}"
        )
    for field, mine in (("env", env.name), ("num_worlds", num_worlds)):
        if state.get(field) != mine:
            raise StateDictError(
                f"state dict is for {field}={state.get(field)!r}, this simulation has {field}={mine!r}"
            )
    problem = config_problem(state.get("config"), env.config)
    if problem:
        raise StateDictError(problem)
    seed, world_offset = state.get("seed"), state.get("world_offset")
    for label, value in (("seed", seed), ("world_offset", world_offset)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < 2**31:
            raise StateDictError(f"state dict {label} must be an int in [0, 2**31), got {value!r}")
    if world_offset + num_worlds > 2**31:
        raise StateDictError(f"state dict world_offset {world_offset} + num_worlds exceeds 2**31 global worlds")
    if not isinstance(state["arrays"], Mapping):
        raise StateDictError("not a BatchSim state dict: its 'arrays' must map names to arrays")
    arrays, upgraded = _upgraded(storage, state["arrays"])
    mine = storage.state_arrays()
    missing, extra = sorted(set(mine) - set(arrays)), sorted(set(arrays) - set(mine))
    if missing or extra:
        raise StateDictError(f"state dict arrays do not match: missing {missing}, unexpected {extra}")
    for k, arr in mine.items():
        v = np.asarray(arrays[k])
        shape = tuple(arr.shape) + dtype_shape(arr.dtype)
        dtype = np.dtype(wp.dtype_to_numpy(scalar_type(arr.dtype)))
        if v.shape != shape or v.dtype != dtype:
            raise StateDictError(f"state dict array {k!r} is {v.dtype}{v.shape}, expected {dtype}{shape}")
    capacities = {a.name: a.capacity for a in env.archetypes}
    checked = {k: np.asarray(arrays[k]) for k in mine}
    check_values(checked, components=storage.components(), capacities=capacities)
    return CheckedState(int(seed), int(world_offset), checked, upgraded)


def write_state(storage: Storage, checked: CheckedState) -> None:
    """Writes a state that ``check_state`` passed for ``storage`` into it."""
    for k, arr in storage.state_arrays().items():
        arr.assign(checked.arrays[k])
    # The captured reset reads seed and world offset from device arrays: update those too, or
    # the next episode would draw from this simulation's construction seed.
    storage.seed.assign(np.array([checked.seed], dtype=np.int32))
    storage.world_offset.assign(np.array([checked.world_offset], dtype=np.int32))
