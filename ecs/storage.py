"""Storage: every array of one simulation, planned once.

The layout (the env's schema plus the engine's columns and singletons), the memory estimate and
the check that it fits, the allocation, the names of the state (``state_dict()["arrays"]``) and
the binding of kernel parameters to arrays all live here, so that the rest of the engine never
builds or names an array itself. A kernel parameter is bound through a ``graph.Source``: what it
stands for (a column, a singleton, a parameter, a value ...), resolved by ``Storage.resolve``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import warp as wp

from .errors import SchemaError
from .graph import Layout, Source, make_bundle
from .memory import check_fits, estimate
from .schema import ENGINE_COLUMNS, Component, EnvSpec, dtype_shape, scalar_type

INT32_MAX = 2147483647


def make_layout(env: EnvSpec) -> Layout:
    """The env's schema with the engine's singletons (rng, episode counters, reward, end flags)."""
    reward_shape = () if env.num_agents is None else (env.num_agents,)
    singles = {
        "rng": Component("rng", wp.uint32, singleton=True, doc="per-world RNG state, advanced by wp.randf"),
        "episode": Component("episode", wp.int32, singleton=True, doc="episodes begun in this world, from 0"),
        "episode_step": Component("episode_step", wp.int32, singleton=True, doc="steps taken in the episode"),
        "reset": Component("reset", wp.int32, singleton=True, doc="1 while this world is being reset"),
        "reward": Component("reward", wp.float32, reward_shape, singleton=True, doc="reward of the last transition"),
        "terminated": Component("terminated", wp.bool, singleton=True, doc="the MDP reached a terminal state"),
        "truncated": Component("truncated", wp.bool, singleton=True, doc="the time limit ended the episode"),
    }
    for s in env.singletons:
        singles[s.name] = s
    comps: dict[str, Component] = {}
    for a in env.archetypes:
        for c in a.components:
            if comps.setdefault(c.name, c) != c:
                raise SchemaError(f"env {env.name!r}: two different components are named {c.name!r}")
            if c.name in singles:
                raise SchemaError(f"env {env.name!r}: {c.name!r} is both an entity component and a singleton")
    resources = dict(env.resources)
    resources["__config__"] = env.config
    return Layout({a.name: a for a in env.archetypes}, singles, {p.name: p for p in env.params}, resources)


class Storage:
    """The arrays of ``num_worlds`` worlds of ``env`` on ``device``.

    Attributes:
        layout: the schema the arrays follow.
        tables: ``{archetype: {column: [num_worlds, capacity, *shape]}}``, engine columns included. With
            ``interleave_worlds`` each column is stored row by row (row ``r`` of every world side by side) and
            this is a strided view of it, indexed the same way.
        overflow: ``{archetype: [failed spawns, first failing world]}``.
        singletons: ``{name: [num_worlds, *shape]}``.
        params: ``{name: [n]}``, world ``w`` reads entry ``w % n``.
        final_obs: ``{observation key: [num_worlds, *shape]}``, the last observation of ended episodes.
        reset_request: ``[num_worlds]`` int32, the worlds ``reset(mask)`` resets.
        seed, world_offset: one int32 each, read by the step on the device.
        staging: ``{action key: [k, num_worlds, *shape]}``, the per-step actions of ``run(k, actions)``.
    """

    def __init__(
        self,
        env: EnvSpec,
        num_worlds: int,
        device: str,
        param_values: dict[str, np.ndarray],
        seed: int,
        offset: int,
        interleave_worlds: bool = False,
    ) -> None:
        self.env, self.num_worlds, self.device = env, num_worlds, device
        self.interleave_worlds = interleave_worlds
        self.layout = make_layout(env)
        check_fits(self.memory(), device, num_worlds)
        W = num_worlds
        self.tables: dict[str, dict[str, wp.array]] = {}
        self.overflow: dict[str, wp.array] = {}
        for a in env.archetypes:
            cols = {name: self._column(a.capacity, (), wp.int32) for name in ENGINE_COLUMNS}
            for c in a.components:
                cols[c.name] = self._column(a.capacity, c.shape, c.dtype)
            self.tables[a.name] = cols
            self.overflow[a.name] = wp.array([0, INT32_MAX], dtype=wp.int32, device=device)
        self.singletons = {
            n: wp.zeros((W, *c.shape), dtype=c.dtype, device=device) for n, c in self.layout.singletons.items()
        }
        self.singletons["episode"].fill_(-1)
        self.params = {p.name: wp.array(param_values[p.name], dtype=p.dtype, device=device) for p in env.params}
        self.final_obs = {
            k: wp.zeros((W, *o.component.shape), dtype=o.component.dtype, device=device)
            for k, o in env.observations.items()
        }
        self.reset_request = wp.zeros(W, dtype=wp.int32, device=device)
        self.seed = wp.array([seed], dtype=wp.int32, device=device)
        self.world_offset = wp.array([offset], dtype=wp.int32, device=device)
        self.staging: dict[str, wp.array] = {}
        self.staging_steps = 0
        self.action_keys = sorted(env.actions)

    def _column(self, capacity: int, shape: tuple[int, ...], dtype: Any) -> wp.array:
        """A zeroed ``[num_worlds, capacity, *shape]`` table column; with ``interleave_worlds`` a view of a
        ``[capacity, num_worlds, *shape]`` array, so that threads that each step a world read adjacent addresses."""
        if not self.interleave_worlds:
            return wp.zeros((self.num_worlds, capacity, *shape), dtype=dtype, device=self.device)
        rows = wp.zeros((capacity, self.num_worlds, *shape), dtype=dtype, device=self.device)
        return rows.transpose((1, 0, *range(2, 2 + len(shape))))

    def memory(self) -> dict[str, int]:
        """Bytes per archetype column, singleton and engine buffer (estimated, so known before allocation)."""
        return estimate(self.layout, self.env, self.num_worlds)

    def capacity(self, archetype: str) -> int:
        return self.layout.archetypes[archetype].capacity

    def action(self, key: str) -> wp.array:
        """The singleton ``sim.actions[key]`` is a view of."""
        return self.singletons[self.env.actions[key].component.name]

    def flat(self, arr: wp.array, steps: int | None = None) -> wp.array:
        """A ``(num_worlds, n)`` scalar view of a per-world array, or ``(steps, num_worlds, n)`` (no copy)."""
        lead = 1 if steps is None else 2
        n = int(np.prod(arr.shape[lead:], dtype=np.int64)) * int(np.prod(dtype_shape(arr.dtype), dtype=np.int64))
        shape = (self.num_worlds, n) if steps is None else (steps, self.num_worlds, n)
        return wp.array(ptr=arr.ptr, dtype=scalar_type(arr.dtype), shape=shape, device=arr.device)

    def grow_staging(self, k: int) -> bool:
        """Makes room for ``k`` steps of per-step actions; True when the buffers were reallocated."""
        if k <= self.staging_steps:
            return False
        for key in self.action_keys:
            comp = self.env.actions[key].component
            self.staging[key] = wp.zeros((k, self.num_worlds, *comp.shape), dtype=comp.dtype, device=self.device)
        self.staging_steps = k
        return True

    def state_arrays(self) -> dict[str, wp.array]:
        """Every array that makes up the simulation's state, by its ``state_dict()["arrays"]`` name."""
        arrays: dict[str, wp.array] = {}
        for a, cols in self.tables.items():
            for c, arr in cols.items():
                arrays[f"table/{a}/{c}"] = arr
            arrays[f"overflow/{a}"] = self.overflow[a]
        for n, arr in self.singletons.items():
            arrays[f"singleton/{n}"] = arr
        for n, arr in self.params.items():
            arrays[f"param/{n}"] = arr
        for k, arr in self.final_obs.items():
            arrays[f"final_obs/{k}"] = arr
        return arrays

    def state_components(self) -> dict[str, Component]:
        """The component behind each array of ``state_arrays`` that is an env's column or singleton (a final
        observation's is its observation's), by its name there (the engine's own columns and parameters have none)."""
        out = {f"table/{a.name}/{c.name}": c for a in self.env.archetypes for c in a.components}
        out.update({f"singleton/{n}": c for n, c in self.layout.singletons.items()})
        out.update({f"final_obs/{k}": o.component for k, o in self.env.observations.items()})  # as the observation
        return out

    def components(self) -> dict[str, Component]:
        """Every entity component and singleton by name (what a state's values are checked against)."""
        out = dict(self.layout.singletons)
        for a in self.env.archetypes:
            out.update({c.name: c for c in a.components})
        return out

    def resolve_chunk(self, source: Source, first: int, end: int, overflow: dict[str, wp.array]) -> Any:
        """What ``resolve`` gives, for worlds ``[first, end)`` only: arrays with a world axis sliced
        to them, per-world parameters too (a shared one whole); ``overflow`` replaces the overflow
        arrays (a chunk counts its failures apart, with chunk-local worlds). None when a parameter
        has neither one value nor one per world, so that a chunk could not index it."""
        kind = source.kind
        if kind == "column":
            return self.tables[source.name][source.column][first:end]
        if kind == "bundle":
            table = self.tables[source.name]
            return make_bundle(source.value, {n: table[n][first:end] for n in source.column}, source.column)
        if kind == "singletons":
            return make_bundle(source.value, {n: self.singletons[n][first:end] for n in source.column}, source.column)
        if kind == "singleton":
            return self.singletons[source.name][first:end]
        if kind == "overflow":
            return overflow[source.name]
        if kind == "param":
            values = self.params[source.name]
            if values.shape[0] == 1:
                return values
            return values[first:end] if values.shape[0] == self.num_worlds else None
        if kind == "value":
            return source.value
        raise ValueError(f"a {kind!r} source has no per-chunk form")

    def resolve(self, source: Source, engine: dict[str, Any] | None = None) -> Any:
        """The array or value bound to a parameter with this source; ``engine`` gives per-call values."""
        kind = source.kind
        if kind == "column":
            return self.tables[source.name][source.column]
        if kind == "bundle":  # a struct of columns (ecs.bundle), filled once per binding
            return make_bundle(source.value, self.tables[source.name], source.column)
        if kind == "singletons":  # a struct of singleton tables (ecs.bundle of singletons)
            return make_bundle(source.value, self.singletons, source.column)
        if kind == "value":
            return source.value
        if kind == "engine":
            if source.name in ("seed", "world_offset"):
                return getattr(self, source.name)
            return engine[source.name]
        arrays = {
            "singleton": self.singletons,
            "overflow": self.overflow,
            "param": self.params,
            "final_obs": self.final_obs,
            "staging": self.staging,
        }[kind]
        return arrays[source.name]
