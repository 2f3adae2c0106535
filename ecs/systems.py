"""Systems: Warp kernels (or Warp functions) whose signatures declare their access.

Parameter names are the declaration:

| name | in a raw ``@wp.kernel`` | in a ``@wp.func`` system |
|---|---|---|
| ``<component>_in`` / ``<component>_out`` | entity column of every archetype that holds all such components (a query), ``(num_worlds, capacity, *shape)``; ``_out`` may also be read | this row's value (a view ``[*shape]`` for a shaped component) |
| ``<archetype>__<component>_in`` / ``_out`` | the column of one named archetype | this world's rows of it, a view ``[capacity, *shape]`` indexed by row, or the whole table when annotated with the world axis (``[world, row]``, as in a raw kernel); ``_out`` from per-world functions only |
| ``<archetype>__overflow_out`` | its spawn-overflow counter (for ``ecs.spawn``) | the same (for ``ecs.spawn_view``) |
| ``<archetype>_in`` / ``_out`` annotated with an ``ecs.bundle`` | a struct of whole columns of that archetype, each declared read or written | the same, or a struct of this world's views (``ecs.bundle(..., view=True)``) |
| ``world_in`` / ``world_out`` annotated with an ``ecs.bundle`` of singletons | a struct of whole singleton tables, ``(num_worlds, *shape)`` each | the same, indexed with its ``world`` |
| ``world_<singleton>_in`` / ``_out`` | a per-world singleton, ``(num_worlds, *shape)`` | this world's value (a view ``[*shape]`` for a shaped singleton, such as per-agent actions), or the whole table when annotated with the world axis (not for the engine's unshaped singletons) |
| ``world`` / ``row`` (``wp.int32``) | (use ``wp.tid()``) | this world's index; this row's index (per-entity functions only) |
| a parameter's name | the per-world parameter array (read it with ``ecs.per_world``) | this world's value |
| anything else | a resource: a scalar from the env's resources or config (or an ``ecs.resource_bundle`` struct of them) | the same |

A raw ``@wp.kernel`` picks its launch shape with ``dim`` ("entity": ``(num_worlds, capacity)``
of the matched archetype, "world": ``num_worlds``, or a callable of the simulation). A raw
kernel in the RESET phase runs for every world, so it must begin with ``if
world_reset_in[world] == 0: return`` (the graph refuses it otherwise).

A ``@wp.func`` system is per-entity when it names an unqualified component (one call per live
row of each matching archetype), else per-world (one call per world). The engine writes the
kernel around it: world indexing, the alive check, and for RESET functions the reset gate. It
returns the new value of each unshaped ``_out`` value in order; views (shaped singletons and
components, other archetypes' rows, bundles) are written in place. A function sees only its
own world (a function taking whole tables must index them with its ``world`` only), so an env
of functions fuses into one kernel per step (``ecs.fusion``). Per-entity
functions may not write singletons or other archetypes' rows, nor read through a view the rows
they write themselves: threads of one world would race.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import warp as wp

from .errors import GraphError
from .schema import ENGINE_COLUMNS, Component, Phase


class AccessKind(enum.IntEnum):
    NONE = 0
    COLUMN = 1  # unqualified entity column (query)
    QUALIFIED = 2  # column of a named archetype
    SINGLETON = 3
    OTHER = 4  # parameter, resource or index
    BUNDLE = 5  # several columns of a named archetype, or several singletons, in one struct (``ecs.bundle``)


@dataclass(frozen=True)
class Access:
    """What one kernel parameter refers to."""

    param: str
    kind: AccessKind
    name: str  # component, singleton or resource name
    archetype: str | None = None
    write: bool = False


def bundle(name: str, columns: Sequence[Component | str], *, view: bool = False, singletons: bool | None = None) -> Any:
    """A Warp struct with one array per column: one kernel parameter standing for many columns.

    A parameter annotated with a bundle and named ``<archetype>_in`` (read) or ``<archetype>_out``
    (written, may be read) is bound by the engine to those columns of that archetype, and its
    reads or writes are declared for every column, as if each were a parameter of its own.

    ```python
    BodyState = ecs.bundle("BodyState", [Position, Velocity, "alive"])  # raw kernels


    @wp.kernel
    def integrate(dt: float, body_in: ...,  body_out: BodyState):
        world = wp.tid()
        body_out.position[world, 0] = ...
    ```

    Args:
        name: the struct's name.
        columns: components (``ecs.Component``), ``(name, dtype)`` or ``(name, dtype, shape)`` tuples
            (checked against the archetype when bound; an int instead of the shape gives the number of
            trailing axes and leaves their sizes to the archetype), or engine column names (``"alive"``,
            ``"generation"``).
        view: False for whole columns, ``(num_worlds, capacity, *shape)``, indexed ``[world, row]``
            (raw kernels, and ``@wp.func`` systems that index by their ``world``); True for one
            world's rows, ``(capacity, *shape)``, indexed ``[row]`` (``@wp.func`` systems only).
        singletons: a bundle of per-world singletons rather than of archetype columns: each field is
            a whole singleton table ``(num_worlds, *shape)``, indexed ``[world]``, and the parameter
            is named ``world_in`` or ``world_out``. Defaults to True when ``columns`` are singleton
            components (give it for ``(name, dtype[, shape])`` tuples).

    Returns:
        The ``@wp.struct`` class, to use as a parameter annotation.

    A bundle of singletons stands for many per-world values (statistics, counters) in one
    parameter:

    ```python
    Tallies = ecs.bundle("Tallies", [Score, Hits, Misses])  # singleton components


    @wp.func
    def tally(world: wp.int32, world_out: Tallies):
        world_out.hits[world] = world_out.hits[world] + 1
    ```
    """
    if singletons is None:
        singletons = any(isinstance(c, Component) and c.singleton for c in columns)
    if singletons and view:
        raise GraphError(f"bundle {name!r}: a bundle of singletons holds whole tables indexed [world]; drop view=True")
    fields: list[tuple[str, Any, tuple[int, ...]]] = []
    for c in columns:
        if isinstance(c, str) and c in ENGINE_COLUMNS and not singletons:
            fields.append((c, wp.int32, ()))
        elif isinstance(c, Component) and c.singleton == singletons:
            fields.append((c.name, c.dtype, c.shape))
        elif isinstance(c, tuple) and len(c) in (2, 3) and isinstance(c[0], str):
            # A trailing-axes count instead of a shape leaves the sizes to the archetype (config-sized columns).
            axes = c[2] if len(c) == 3 and isinstance(c[2], int) else None
            comp = Component(c[0], c[1], tuple(c[2]) if len(c) == 3 and axes is None else ())  # checks name, dtype
            fields.append((comp.name, comp.dtype, comp.shape if axes is None else (-1,) * axes))
        elif singletons:
            raise GraphError(
                f"bundle {name!r}: {c!r} is not a singleton component or a (name, dtype[, shape]) tuple; a bundle "
                "holds either singletons or the columns of one archetype, not both"
            )
        else:
            raise GraphError(
                f"bundle {name!r}: {c!r} is not an entity component, a (name, dtype[, shape]) tuple or one of the "
                f"engine columns {list(ENGINE_COLUMNS)}"
            )
    if len({f[0] for f in fields}) != len(fields) or not fields:
        raise GraphError(f"bundle {name!r}: list each column once, and at least one, got {[f[0] for f in fields]}")
    lead = 1 if view or singletons else 2
    annotations = {n: wp.array(dtype=dtype, ndim=lead + len(shape)) for n, dtype, shape in fields}
    caller = sys._getframe(1).f_globals.get("__name__", __name__)
    cls = type(name, (), {"__annotations__": annotations, "__module__": caller, "__qualname__": name})
    struct = wp.struct(cls)
    struct.ecs_bundle = BundleSpec(name, tuple(fields), view, singletons)
    return struct


def resource_bundle(name: str, fields: dict[str, Any]) -> Any:
    """A Warp struct of resources: one kernel parameter standing for several scalars.

    The engine fills field ``f`` with the env resource or config field named ``f`` when the graph
    is built (a missing one is a ``GraphError``); name the parameter as you like.

    ```python
    Level = ecs.resource_bundle("Level", {"floor_size": float, "max_rooms": int, "ramp_size": wp.vec3})
    ```

    Args:
        name: the struct's name.
        fields: resource name to Warp scalar, vector or matrix type.
    """
    if not fields:
        raise GraphError(f"resource bundle {name!r}: give at least one field")
    caller = sys._getframe(1).f_globals.get("__name__", __name__)
    cls = type(name, (), {"__annotations__": dict(fields), "__module__": caller, "__qualname__": name})
    struct = wp.struct(cls)
    struct.ecs_resources = tuple(fields)
    return struct


@dataclass(frozen=True)
class BundleSpec:
    """What a bundle struct holds: (column, dtype, shape) per field, whether it is a one-world view, and
    whether its fields are singletons rather than archetype columns."""

    name: str
    fields: tuple[tuple[str, Any, tuple[int, ...]], ...]
    view: bool
    singletons: bool = False


def bundle_spec(ptype: Any) -> BundleSpec | None:
    """The bundle behind a parameter annotation, or None."""
    return getattr(ptype, "ecs_bundle", None)


def parse_param(param: str, ptype: Any = None) -> Access:
    """Classifies a kernel parameter by its name (and, for bundles, its annotation)."""
    spec = bundle_spec(ptype)
    if spec is not None and spec.singletons:
        if param not in ("world_in", "world_out"):
            raise GraphError(
                f"parameter {param!r} is a bundle of singletons ({spec.name!r}): name it world_in (read) or "
                "world_out (written)"
            )
        return Access(param, AccessKind.BUNDLE, "world", write=param == "world_out")
    if spec is not None:
        for suffix, write in (("_in", False), ("_out", True)):
            if param.endswith(suffix) and len(param) > len(suffix):
                base = param[: -len(suffix)]
                return Access(param, AccessKind.BUNDLE, base, archetype=base, write=write)
        raise GraphError(f"parameter {param!r} is a bundle: name it <archetype>_in (read) or <archetype>_out (written)")
    for suffix, write in (("_in", False), ("_out", True)):
        if param.endswith(suffix) and len(param) > len(suffix):
            base = param[: -len(suffix)]
            if base.startswith("world_") and len(base) > 6:
                return Access(param, AccessKind.SINGLETON, base[6:], write=write)
            if "__" in base:
                arch, comp = base.split("__", 1)
                if not arch or not comp:
                    break
                return Access(param, AccessKind.QUALIFIED, comp, archetype=arch, write=write)
            return Access(param, AccessKind.COLUMN, base, write=write)
    return Access(param, AccessKind.OTHER, param)


class System:
    """A kernel or per-entity function with its phase and launch shape.

    Args:
        fn: a ``@wp.kernel`` or a ``@wp.func``.
        phase: the phase it runs in.
        name: display name; defaults to the function's name.
        dim: launch shape of a raw kernel: "entity", "world", or ``callable(sim) -> int | tuple``.
            Ignored for functions.
        world_local: a raw kernel whose first launch axis is the world and which reads and writes
            only its own world's rows (of arrays with a leading world axis, and of parameters
            through ``per_world``), its world index serving only to index them. On CPU the engine
            may then run it on chunks of worlds, one thread each (``cpu_threads``), as it runs
            fused steps. Functions are world-local by contract; the flag is for raw kernels.
        block_dim: launch a raw kernel tiled (``wp.launch_tiled``): a block of ``block_dim`` lanes per index
            of ``dim``, ``wp.tid()`` giving the lane last, ``wp.block_dim()`` the lanes of the block. On CUDA
            always; on CPU only where ``wp.config.enable_cpu_blocks`` is set when the simulation is built
            (Warp then runs the lanes as cooperative fibers), else with one lane per block, so such a
            kernel strides its loops by ``wp.block_dim()``.
        cuda: another raw-kernel system that runs in this one's place when the simulation is built on a CUDA
            device: the same phase and the same parameters, computing the same thing in another launch shape
            (say a block of lanes per world where the CPU build runs a thread per world). It must not itself
            have a ``cuda`` system.
        device: "cpu" or "cuda": the system runs only in simulations built on that kind of device (None: on
            both). A pair of such systems computes one thing in two ways, each where it is faster: say a
            solver as one kernel on a CPU and as several smaller ones, each holding fewer registers, on a GPU.
            Where the two differ only in launch shape, give one system a ``cuda`` variant instead.
        min_worlds, max_worlds: the system runs only in simulations of at least ``min_worlds`` and at most
            ``max_worlds`` worlds (a process's ``num_worlds``; None: no bound). A pair of such systems computes
            one thing in the form that is faster at each size: say a block of lanes per world where a GPU holds
            every world at once, and a thread per world where the worlds outnumber what it holds.
    """

    def __init__(
        self,
        fn: Any,
        phase: Phase,
        *,
        name: str | None = None,
        dim: str | Callable[[Any], int | tuple[int, ...]] | None = None,
        world_local: bool = False,
        block_dim: int | None = None,
        cuda: System | None = None,
        device: str | None = None,
        min_worlds: int | None = None,
        max_worlds: int | None = None,
    ) -> None:
        if isinstance(fn, wp.Kernel):
            self.is_func = False
            self.param_types = {a.label: a.type for a in fn.adj.args}
        elif isinstance(fn, wp.Function):
            self.is_func = True
            self.param_types = dict(fn.input_types)
        else:
            raise GraphError(f"system {fn!r}: expected a @wp.kernel or @wp.func, got {type(fn).__name__}")
        if not isinstance(phase, Phase) or phase == Phase.NONE:
            raise GraphError(f"system {fn.key!r}: phase must be an ecs.Phase other than NONE, got {phase!r}")
        if dim is not None and dim not in ("entity", "world") and not callable(dim):
            raise GraphError(f"system {fn.key!r}: dim must be 'entity', 'world' or a callable, got {dim!r}")
        if self.is_func and dim is not None:
            raise GraphError(f"system {fn.key!r}: a @wp.func system gets its launch shape from the engine; drop dim=")
        if not isinstance(world_local, bool):
            raise GraphError(f"system {fn.key!r}: world_local must be True or False, got {world_local!r}")
        if self.is_func and world_local:
            raise GraphError(f"system {fn.key!r}: a @wp.func system is world-local by contract; drop world_local=")
        if block_dim is not None and (
            self.is_func or isinstance(block_dim, bool) or not isinstance(block_dim, int) or not 1 <= block_dim <= 1024
        ):
            raise GraphError(
                f"system {fn.key!r}: block_dim must be an int in [1, 1024] on a raw kernel, got {block_dim!r}"
            )
        self.fn = fn
        self.phase = phase
        self.name = name or fn.key
        self.dim = dim
        self.world_local = bool(world_local)
        self.block_dim = block_dim
        self.accesses = [parse_param(p, t) for p, t in self.param_types.items()]
        if cuda is not None:
            _check_cuda_variant(self, cuda)
        if device not in (None, "cpu", "cuda"):
            raise GraphError(f"system {fn.key!r}: device must be None, 'cpu' or 'cuda', got {device!r}")
        if device == "cpu" and cuda is not None:
            raise GraphError(f"system {fn.key!r}: a system for the CPU only has no cuda= variant; drop one of them")
        for bound_name, bound in (("min_worlds", min_worlds), ("max_worlds", max_worlds)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 1):
                raise GraphError(f"system {fn.key!r}: {bound_name} must be None or an int >= 1, got {bound!r}")
        if min_worlds is not None and max_worlds is not None and min_worlds > max_worlds:
            raise GraphError(
                f"system {fn.key!r}: min_worlds={min_worlds} exceeds max_worlds={max_worlds}, so it would never run; "
                "swap them or drop one"
            )
        self.cuda = cuda
        self.device = device
        self.min_worlds = min_worlds
        self.max_worlds = max_worlds

    def runs_on(self, device_is_cpu: bool, num_worlds: int | None = None) -> bool:
        """Whether it runs in a simulation built on a CPU (``device_is_cpu``) or on a CUDA device (``device``) of
        ``num_worlds`` worlds (None: of some world count)."""
        if self.device is not None and (self.device == "cpu") != device_is_cpu:
            return False
        if num_worlds is None:
            return True
        return (self.min_worlds is None or num_worlds >= self.min_worlds) and (
            self.max_worlds is None or num_worlds <= self.max_worlds
        )

    def on(self, device_is_cpu: bool) -> System:
        """The system that runs on a CPU (``device_is_cpu``) or a CUDA build: itself, or its ``cuda`` system."""
        return self if device_is_cpu or self.cuda is None else self.cuda

    @property
    def is_entity_wise(self) -> bool:
        """Whether it runs one thread per entity row of a query."""
        if self.dim is not None:
            return self.dim == "entity"
        return any(a.kind == AccessKind.COLUMN for a in self.accesses)

    def __repr__(self) -> str:
        where = "" if self.device is None else f", {self.device} only"
        if self.min_worlds is not None or self.max_worlds is not None:
            where += f", {self.min_worlds or 1}..{self.max_worlds or ''} worlds"
        return f"System({self.name!r}, {self.phase.name}{where})"


def _check_cuda_variant(system: System, cuda: Any) -> None:
    """``cuda`` may replace ``system`` on CUDA: a raw-kernel system of the same phase and parameters."""
    where = f"system {system.name!r}: cuda="
    if not isinstance(cuda, System):
        raise GraphError(f"{where} must be an ecs.System, got {type(cuda).__name__}")
    if system.is_func or cuda.is_func:
        raise GraphError(f"{where}{cuda.name!r}: only raw-kernel systems have CUDA variants; drop cuda=")
    if cuda.cuda is not None:
        raise GraphError(f"{where}{cuda.name!r} has a cuda= system of its own; give the variant none")
    if cuda.device is not None:
        raise GraphError(f"{where}{cuda.name!r} is for one device only (device={cuda.device!r}); give the variant none")
    if cuda.min_worlds is not None or cuda.max_worlds is not None:
        raise GraphError(
            f"{where}{cuda.name!r} has world bounds of its own (min_worlds, max_worlds); give them to the system "
            "it replaces"
        )
    if cuda.phase != system.phase:
        raise GraphError(
            f"{where}{cuda.name!r} runs in {cuda.phase.name}, the system in {system.phase.name}; give both one phase"
        )
    same_types = all(
        wp.types.types_equal(a, b) for a, b in zip(cuda.param_types.values(), system.param_types.values(), strict=False)
    )
    if list(cuda.param_types) != list(system.param_types) or cuda.accesses != system.accesses or not same_types:
        raise GraphError(
            f"{where}{cuda.name!r} takes parameters {list(cuda.param_types)}, the system "
            f"{list(system.param_types)}; a variant must take the same parameters in the same order and types"
        )
    if cuda.world_local != system.world_local or cuda.dim != system.dim:
        raise GraphError(
            f"{where}{cuda.name!r} has dim={cuda.dim!r}, world_local={cuda.world_local}, the system "
            f"dim={system.dim!r}, world_local={system.world_local}; a variant must launch over the same indices"
        )


def system(phase: Phase, **options: Any) -> Callable[[Any], System]:
    """Decorator form of ``System``, with its keywords (``name``, ``dim``, ``world_local``, ``block_dim``, ``cuda``,
    ``device``, ``min_worlds``, ``max_worlds``): put it above ``@wp.kernel`` or ``@wp.func``; the name then holds the
    ``System``.

    ```python
    @ecs.system(ecs.Phase.PHYSICS, dim="world", world_local=True)
    @wp.kernel
    def integrate(world_dt_in: wp.array[float], ...): ...
    ```
    """

    def wrap(fn: Any) -> System:
        return System(fn, phase, **options)

    return wrap
