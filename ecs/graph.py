"""The task graph: systems bound to tables, validated and ordered.

A task is one launch: a system bound to one archetype of its query (or to no archetype for
per-world systems). Phases run in order; inside a phase registration order decides, and edges
come from read/write conflicts on columns, singletons and parameters. Tasks with no path
between them may run in any order; ``order(seed)`` draws such an order to expose order bugs.
"""

from __future__ import annotations

import ast
import dataclasses
import random
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, NamedTuple

import warp as wp

from .codegen import build_kernel, generated_module, type_expr
from .errors import GraphError
from .schema import ENGINE_COLUMNS, ENGINE_SINGLETONS, Archetype, Component, Param, Phase
from .systems import Access, AccessKind, System, bundle_spec, parse_param

Key = tuple[str, ...]


@dataclass
class Layout:
    """The schema of one environment with the engine's own columns, without any arrays."""

    archetypes: dict[str, Archetype]
    singletons: dict[str, Component]
    params: dict[str, Param]
    resources: dict[str, Any]

    def component(self, name: str) -> Component | None:
        for a in self.archetypes.values():
            for c in a.components:
                if c.name == name:
                    return c
        return None

    def column(self, arch: Archetype, name: str) -> Component:
        if name == "alive":
            return Component("alive", wp.int32, doc="1 where the row holds a live entity")
        if name == "generation":
            return Component("generation", wp.int32, doc="bumped at every spawn of the row")
        return next(c for c in arch.components if c.name == name)


class Source(NamedTuple):
    """What a kernel parameter is bound to.

    ``kind`` is one of:
        ``column``: ``tables[name][column]``; ``bundle``: a struct of the columns ``column`` of
        archetype ``name`` (its type in ``value``); ``singletons``: a struct of the singletons
        ``column`` (its type in ``value``); ``singleton``, ``overflow``, ``param``,
        ``final_obs`` (observation key) and ``staging`` (action key, per-step actions of a run):
        the array of that ``name``; ``value``: ``value`` itself (a resource, config value or
        resource struct; ``name`` is the parameter); ``engine``: a per-call engine value
        (``seed``, ``world_offset``, ``steps``, ``world_base``, ``world_end``).
    """

    kind: str
    name: str = ""
    column: Any = None
    value: Any = None


@dataclass
class Task:
    """One launch of a system over one archetype (or over worlds)."""

    system: System
    name: str
    kernel: wp.Kernel
    archetype: str | None
    sources: list[tuple[str, Source]]  # (kernel parameter, source)
    reads: set[Key] = field(default_factory=set)
    writes: set[Key] = field(default_factory=set)
    dim: Any = None  # "entity", "world", "entity_rows" (generated, CPU) or a callable
    index: int = -1

    @property
    def phase(self) -> Phase:
        return self.system.phase


def _key_str(key: Key) -> str:
    kind = key[0]
    if kind == "column":
        return f"{key[1]}.{key[2]}"
    if kind == "singleton":
        return f"world.{key[1]}"
    if kind == "overflow":
        return f"{key[1]}.overflow"
    return f"param.{key[1]}"


class TaskGraph:
    """Systems bound to the tables of a layout, validated and ordered.

    Raises:
        GraphError: an unknown column, a query that matches no archetype, a per-entity system
            writing a singleton, a stale read (a column read before a later system of the same
            phase writes it), a missing resource, or a parameter of the wrong type.
    """

    def __init__(
        self,
        systems: Iterable[System],
        layout: Layout,
        *,
        device_is_cpu: bool,
        num_worlds: int,
        env_name: str = "",
    ) -> None:
        self.layout = layout
        self.env_name = env_name
        self.tasks: list[Task] = []
        systems = list(systems)
        for s in systems:
            if not isinstance(s, System):
                raise GraphError(f"env {env_name!r}: systems must be ecs.System objects, got {s!r}")
        # On CUDA a system with a ``cuda`` variant runs as that variant (same phase, same parameters); a system
        # for one kind of device only (``device``) runs only there, one for some world counts (``min_worlds``,
        # ``max_worlds``) only in simulations of those.
        systems = [s.on(device_is_cpu) for s in systems if s.runs_on(device_is_cpu, num_worlds)]
        # Phases first, registration order second (sorted() is stable).
        for s in sorted(systems, key=lambda s: int(s.phase)):
            self.tasks.extend(self._bind(s, device_is_cpu))
        for i, t in enumerate(self.tasks):
            t.index = i
        self.edges: dict[int, set[int]] = {t.index: set() for t in self.tasks}
        self._validate_and_link()

    # -- binding -------------------------------------------------------------------------

    def _bind(self, system: System, device_is_cpu: bool) -> list[Task]:
        layout = self.layout
        where = f"system {system.name!r} ({system.phase.name})"
        query = [a.name for a in system.accesses if a.kind == AccessKind.COLUMN]
        for a in system.accesses:
            if a.kind == AccessKind.COLUMN and a.name not in ENGINE_COLUMNS and layout.component(a.name) is None:
                hint = ""
                if a.name in layout.singletons:
                    hint = f"; {a.name!r} is a singleton: name the parameter world_{a.param}"
                known = sorted({c.name for ar in layout.archetypes.values() for c in ar.components})
                raise GraphError(
                    f"{where}: parameter {a.param!r} names no component {a.name!r} of any archetype{hint}. "
                    f"Entity components: {known}"
                )
            if a.kind == AccessKind.SINGLETON and a.name not in layout.singletons:
                hint = ""
                if layout.component(a.name) is not None:
                    hint = f"; {a.name!r} is an entity component: name the parameter {a.param[6:]}"
                raise GraphError(
                    f"{where}: parameter {a.param!r} names no singleton {a.name!r}{hint}. "
                    f"Singletons: {sorted(layout.singletons)}"
                )
            if a.kind == AccessKind.QUALIFIED:
                arch = layout.archetypes.get(a.archetype)
                if arch is None:
                    raise GraphError(
                        f"{where}: parameter {a.param!r} names no archetype {a.archetype!r}. "
                        f"Archetypes: {sorted(layout.archetypes)}"
                    )
                if a.name != "overflow" and not arch.has(a.name):
                    raise GraphError(
                        f"{where}: parameter {a.param!r}: archetype {a.archetype!r} has no component {a.name!r}. "
                        f"It has: {sorted(c.name for c in arch.components)} plus alive, generation, overflow"
                    )
            if a.kind == AccessKind.BUNDLE:
                _check_bundle(layout, system, a, where)
        if system.is_entity_wise:
            for a in system.accesses:
                if a.kind == AccessKind.SINGLETON and a.write:
                    raise GraphError(
                        f"{where}: a per-entity system may not write singleton {a.name!r} (parameter {a.param!r}): "
                        "threads of one world would race. Write it from a per-world system (dim='world') instead"
                    )
        if query:
            matches = [ar for ar in layout.archetypes.values() if all(ar.has(c) for c in query)]
            if not matches:
                raise GraphError(
                    f"{where}: no archetype holds all of {sorted(set(query))}; archetypes: "
                    + ", ".join(
                        f"{ar.name}{sorted(c.name for c in ar.components)}" for ar in layout.archetypes.values()
                    )
                )
        else:
            matches = [None]
            if system.dim == "entity":
                qualified = sorted(
                    {
                        a.archetype
                        for a in system.accesses
                        if a.kind in (AccessKind.QUALIFIED, AccessKind.BUNDLE) and a.archetype is not None
                    }
                )
                if len(qualified) != 1:
                    raise GraphError(
                        f"{where}: dim='entity' needs unqualified component parameters (a query) or exactly one "
                        f"named archetype to take the capacity from; found {qualified or 'none'}"
                    )
                matches = [layout.archetypes[qualified[0]]]

        if system.is_func:
            kernel, dim = self._generate(system, device_is_cpu, where)
        else:
            if system.phase == Phase.RESET:
                _check_reset_gate(system, where)
            kernel, dim = system.fn, system.dim or ("entity" if query else "world")
        tasks = []
        for arch in matches:
            name = system.name if arch is None or len(matches) == 1 else f"{system.name}[{arch.name}]"
            task = Task(system, name, kernel, arch.name if arch is not None else None, [], dim=dim)
            self._bind_params(task, kernel, arch, where)
            if system.is_func and system.is_entity_wise:
                for a in system.accesses:
                    if a.kind == AccessKind.BUNDLE and a.archetype is None:
                        continue  # singletons: a per-entity function only reads them (checked in func_params)
                    if a.kind == AccessKind.BUNDLE:
                        names = [f[0] for f in bundle_spec(system.param_types[a.param]).fields]
                    else:
                        names = [a.name]
                    hit = [n for n in names if ("column", a.archetype, n) in task.writes]
                    if a.kind in (AccessKind.QUALIFIED, AccessKind.BUNDLE) and hit:
                        raise GraphError(
                            f"{where}: parameter {a.param!r} reads rows of {a.archetype!r} that this per-entity "
                            f"system writes ({hit[0]!r}) in other threads of the same world, so a row would see "
                            "its neighbours before or after their update depending on the schedule. Read it in an "
                            "earlier system, or write a per-world @wp.func system that loops over the rows"
                        )
            tasks.append(task)
        return tasks

    def _bind_params(self, task: Task, kernel: wp.Kernel, arch: Archetype | None, where: str) -> None:
        layout = self.layout
        for arg in kernel.adj.args:
            ptype = arg.type
            a = parse_param(arg.label, ptype)
            if a.kind == AccessKind.BUNDLE:
                names = tuple(f[0] for f in bundle_spec(ptype).fields)
                if a.archetype is None:
                    keys = {("singleton", n) for n in names}
                    source = Source("singletons", "", names, ptype)
                else:
                    keys = {("column", a.archetype, n) for n in names}
                    source = Source("bundle", a.archetype, names, ptype)
                (task.writes if a.write else task.reads).update(keys)
                task.sources.append((a.param, source))
                continue
            if a.kind in (AccessKind.COLUMN, AccessKind.QUALIFIED):
                target = arch if a.kind == AccessKind.COLUMN else layout.archetypes[a.archetype]
                if a.kind == AccessKind.QUALIFIED and a.name == "overflow":
                    _check_array(where, a.param, ptype, wp.int32, 1)
                    key: Key = ("overflow", target.name)
                    source = Source("overflow", target.name)
                else:
                    comp = layout.column(target, a.name)
                    _check_array(where, a.param, ptype, comp.dtype, 2 + len(comp.shape))
                    key = ("column", target.name, a.name)
                    source = Source("column", target.name, a.name)
            elif a.kind == AccessKind.SINGLETON:
                comp = layout.singletons[a.name]
                _check_array(where, a.param, ptype, comp.dtype, 1 + len(comp.shape))
                key = ("singleton", a.name)
                source = Source("singleton", a.name)
            elif a.name in layout.params:
                p = layout.params[a.name]
                _check_array(where, a.param, ptype, p.dtype, 1)
                key = ("param", a.name)
                source = Source("param", a.name)
                task.reads.add(key)
                task.sources.append((a.param, source))
                continue
            elif getattr(ptype, "ecs_resources", None) is not None:
                task.sources.append(
                    (a.param, Source("value", a.param, value=_resource_struct(layout, ptype, a.param, where)))
                )
                continue
            else:
                value = _resource(layout, a.name)
                if value is _MISSING:
                    cfg = layout.resources.get("__config__")
                    cfg_fields = sorted(f.name for f in fields(cfg)) if is_dataclass(cfg) else []
                    raise GraphError(
                        f"{where}: parameter {a.param!r} is no component, singleton or parameter, and no resource "
                        f"or config field of that name exists. Resources: "
                        f"{sorted(k for k in layout.resources if k != '__config__')}; config fields: {cfg_fields}; "
                        f"parameters: {sorted(layout.params)}"
                    )
                if wp.types.is_array(ptype):
                    raise GraphError(f"{where}: resource {a.param!r} is a scalar; annotate it with a scalar type")
                task.sources.append((a.param, Source("value", a.param, value=value)))
                continue
            (task.writes if a.write else task.reads).add(key)
            if a.write:
                task.reads.add(key)
            task.sources.append((a.param, source))
        # An _out parameter is read as well; keep "reads" for in-only so stale reads are exact.
        task.reads -= task.writes

    # -- per-entity functions ----------------------------------------------------------------

    def _generate(self, system: System, device_is_cpu: bool, where: str) -> tuple[wp.Kernel, str]:
        layout = self.layout
        entity = system.is_entity_wise
        ns: dict[str, Any] = {"F": system.fn}
        params: list[str] = []
        call: list[str] = []
        outs: list[str] = []
        pre: list[str] = []  # statements before the call
        worlds = None  # an array with a world axis: its first dimension counts the worlds
        fparams = func_params(system, layout, where)
        for fp in fparams:
            if fp.kind in ("world", "row"):
                call.append(fp.name)
                continue
            if fp.kind in ("column", "qualified", "singleton"):
                ndim = {"column": 2, "qualified": 2, "singleton": 1}[fp.kind] + len(fp.comp.shape)
                params.append(f"{fp.name}: wp.array(dtype={type_expr(fp.comp.dtype, ns)}, ndim={ndim})")
                if fp.table:
                    call.append(fp.name)
                else:
                    call.append(f"{fp.name}[world, row]" if fp.kind == "column" else f"{fp.name}[world]")
                if fp.kind != "column" and worlds is None:
                    worlds = fp.name
            elif fp.kind == "overflow":
                params.append(f"{fp.name}: wp.array(dtype=wp.int32, ndim=1)")
                call.append(fp.name)
            elif fp.kind == "bundle":
                # The columns (whole, or this world's views) gathered into the struct inside the kernel.
                spec = bundle_spec(fp.type)
                var = f"b_{fp.name}"
                pre.append(f"{var} = {type_expr(fp.type, ns)}()")
                for cname, dtype, shape in spec.fields:
                    owner = "world_" if fp.archetype is None else f"{fp.archetype}__"
                    col = f"{owner}{cname}_{'out' if fp.write else 'in'}"
                    lead = 1 if fp.archetype is None else 2
                    decl = f"{col}: wp.array(dtype={type_expr(dtype, ns)}, ndim={lead + len(shape)})"
                    if decl not in params:
                        params.append(decl)
                    pre.append(f"{var}.{cname} = {col}[world]" if spec.view else f"{var}.{cname} = {col}")
                    worlds = worlds or col
                call.append(var)
            elif fp.kind == "param":
                p = layout.params[fp.name]
                params.append(f"{fp.name}: wp.array(dtype={type_expr(p.dtype, ns)}, ndim=1)")
                call.append(f"{fp.name}[world % {fp.name}.shape[0]]")
            else:
                params.append(f"{fp.name}: {type_expr(fp.type, ns)}")
                call.append(fp.name)
            if fp.returned:
                outs.append(fp.name)
        names = set(system.param_types)
        if entity and "alive_in" not in names:
            params.append("alive_in: wp.array(dtype=wp.int32, ndim=2)")
        reset = system.phase == Phase.RESET
        if reset and "world_reset_in" not in names:
            params.append("world_reset_in: wp.array(dtype=wp.int32, ndim=1)")
        if worlds is None and not entity:  # nothing else has a world axis: count worlds by the reset flags
            if "world_reset_in" not in names and not reset:
                params.append("world_reset_in: wp.array(dtype=wp.int32, ndim=1)")
            worlds = "world_reset_in"
        index = "[world, row]" if entity else "[world]"
        if outs:
            lhs = ", ".join(f"r{i}" for i in range(len(outs)))
            body = [f"{lhs} = F({', '.join(call)})"] + [f"{o}{index} = r{i}" for i, o in enumerate(outs)]
        else:
            body = [f"F({', '.join(call)})"]
        body = pre + body
        kname = f"sys_{system.name}" + ("_cpu" if device_is_cpu else "")
        lines = [f"def {kname}(", *(f"    {p}," for p in params), "):"]
        # Nested guards, innermost last: (condition or None, loop header or None).
        guards: list[str] = []
        if device_is_cpu:
            # One thread loops over all worlds: a CPU launch is serial anyway, and each thread
            # pays for copying the argument struct.
            guards.append(f"for world in range({'alive_in' if entity else worlds}.shape[0]):")
        elif entity:
            lines.append("    world, row = wp.tid()")
        else:
            lines.append("    world = wp.tid()")
        if reset:
            guards.append("if world_reset_in[world] != 0:")
        if entity and device_is_cpu:
            guards.append("for row in range(alive_in.shape[1]):")
        if entity:
            guards.append("if alive_in[world, row] != 0:")
        for depth, guard in enumerate(guards):
            lines.append("    " * (depth + 1) + guard)
        lines += ["    " * (len(guards) + 1) + b for b in body]
        source = "\n".join(lines) + "\n"
        module = generated_module("gen", self.env_name or "env", device_is_cpu)
        kernel = build_kernel(kname, source, ns, module)
        dim = "serial" if device_is_cpu else ("entity" if entity else "world")
        return kernel, dim

    # -- ordering --------------------------------------------------------------------------

    def _validate_and_link(self) -> None:
        for i, ti in enumerate(self.tasks):
            for tj in self.tasks[i + 1 :]:
                if tj.phase != ti.phase:
                    continue
                stale = ti.reads & tj.writes
                if stale:
                    cols = ", ".join(sorted(_key_str(k) for k in stale))
                    raise GraphError(
                        f"stale read in phase {ti.phase.name}: {ti.name!r} reads {cols}, which {tj.name!r} writes "
                        f"later in the same phase, so {ti.name!r} would see last step's value. Register "
                        f"{tj.name!r} first, move it to an earlier phase, or declare the parameter as _out"
                    )
                if ti.writes & (tj.reads | tj.writes):
                    self.edges[tj.index].add(ti.index)

    def phases(self) -> list[Phase]:
        return sorted({t.phase for t in self.tasks})

    def order(self, phase: Phase, seed: int | None = None) -> list[Task]:
        """Tasks of ``phase`` in registration order, or in a random valid order drawn from ``seed``."""
        tasks = [t for t in self.tasks if t.phase == phase]
        if seed is None:
            return tasks
        rng = random.Random(seed * 1000003 + int(phase))
        pending = {t.index: set(self.edges[t.index]) & {u.index for u in tasks} for t in tasks}
        by_index = {t.index: t for t in tasks}
        out = []
        while pending:
            ready = sorted(i for i, deps in pending.items() if not deps)
            pick = rng.choice(ready)
            out.append(by_index[pick])
            del pending[pick]
            for deps in pending.values():
                deps.discard(pick)
        return out

    def __str__(self) -> str:
        lines = [f"TaskGraph of {self.env_name!r}: {len(self.tasks)} tasks"]
        for phase in self.phases():
            lines.append(f"  {phase.name}")
            for t in self.order(phase):
                deps = sorted(self.edges[t.index])
                after = f" after {', '.join(f'[{d}]' for d in deps)}" if deps else ""
                shape = t.dim if isinstance(t.dim, str) else "custom"
                if not t.system.is_func and t.kernel.key != t.name:  # a raw kernel under another name
                    shape += f", kernel {t.kernel.key}"
                if t.system.block_dim:
                    shape += f", blocks of {t.system.block_dim}"
                lines.append(f"    [{t.index}] {t.name} ({shape}){after}")
                if t.reads:
                    lines.append(f"        reads:  {', '.join(sorted(_key_str(k) for k in t.reads))}")
                if t.writes:
                    lines.append(f"        writes: {', '.join(sorted(_key_str(k) for k in t.writes))}")
        return "\n".join(lines)


@dataclass(frozen=True)
class FuncParam:
    """How one parameter of a ``@wp.func`` system is passed.

    ``kind``: "column" (the query's own row: a value, or a view ``[*shape]`` for a shaped
    component), "qualified" (a named archetype's column in this world: a view ``[capacity,
    *shape]``), "overflow" (a named archetype's spawn-overflow counter, for ``ecs.spawn_view``),
    "singleton" (a value, or a view ``[*shape]`` for a shaped singleton), "world", "row", "param"
    (the world's value) or "resource" (a scalar). ``table``: a "qualified" or "singleton" parameter
    annotated with the world axis gets the whole table (``[world, ...]``, as in a raw kernel).
    """

    name: str
    kind: str
    type: Any
    write: bool = False
    comp: Component | None = None
    archetype: str | None = None
    table: bool = False  # the whole table (world axis first) rather than this world's view or value

    @property
    def view(self) -> bool:
        """Passed as an array (written in place) rather than as a value."""
        if self.kind in ("qualified", "overflow", "bundle") or self.table:
            return True
        return self.kind in ("column", "singleton") and bool(self.comp.shape)

    @property
    def returned(self) -> bool:
        """An ``_out`` value: the function returns its new value."""
        return self.write and not self.view


def func_params(system: System, layout: Layout, where: str) -> list[FuncParam]:
    """Classifies and checks the parameters of a ``@wp.func`` system (see ``ecs.systems``)."""
    entity = system.is_entity_wise
    out: list[FuncParam] = []
    for pname, ptype in system.param_types.items():
        a = parse_param(pname, ptype)
        if a.kind == AccessKind.COLUMN:
            comp = layout.component(a.name) or layout.column(None, a.name)
            fp = FuncParam(pname, "column", ptype, a.write, comp)
        elif a.kind == AccessKind.QUALIFIED:
            if a.write and entity:
                raise GraphError(
                    f"{where}: a per-entity @wp.func system may not write another archetype's column ({pname!r}): "
                    "the threads of one world would race. Write it from a per-world @wp.func system (one without "
                    "unqualified component parameters) or a raw kernel"
                )
            if a.name == "overflow":
                fp = FuncParam(pname, "overflow", ptype, a.write, archetype=a.archetype)
            else:
                comp = layout.column(layout.archetypes[a.archetype], a.name)
                fp = FuncParam(pname, "qualified", ptype, a.write, comp, a.archetype)
        elif a.kind == AccessKind.BUNDLE:
            if a.write and entity:
                what = "singletons" if a.archetype is None else "archetype rows"
                raise GraphError(
                    f"{where}: a per-entity @wp.func system may not write a bundle of {what} ({pname!r}): "
                    "the threads of one world would race. Write it from a per-world @wp.func system"
                )
            fp = FuncParam(pname, "bundle", ptype, a.write, archetype=a.archetype)
        elif a.kind == AccessKind.SINGLETON:
            fp = FuncParam(pname, "singleton", ptype, a.write, layout.singletons[a.name])
        elif pname in ("world", "row"):
            if pname == "row" and not entity:
                raise GraphError(
                    f"{where}: parameter 'row' is given to per-entity systems only (those with unqualified "
                    "component parameters); a per-world system loops over the rows of its archetype views itself"
                )
            if ptype not in (int, wp.int32):
                raise GraphError(f"{where}: parameter {pname!r} is an index: annotate it wp.int32")
            fp = FuncParam(pname, pname, ptype)
        elif pname in layout.params:
            fp = FuncParam(pname, "param", ptype)
        else:
            fp = FuncParam(pname, "resource", ptype)
        if fp.kind in ("qualified", "singleton") and wp.types.is_array(ptype):
            lead = 1 if fp.kind == "singleton" else 2
            if ptype.ndim == lead + len(fp.comp.shape):
                # The whole table, indexed [world, ...] like a raw kernel (so helpers written for
                # raw kernels can be called); the function must touch only its own world.
                if fp.kind == "singleton" and not fp.comp.shape and fp.comp.name in ENGINE_SINGLETONS:
                    raise GraphError(
                        f"{where}: parameter {pname!r}: the engine singleton {fp.comp.name!r} is passed by value; "
                        f"annotate it {wp.types.type_repr(fp.comp.dtype)}"
                    )
                fp = dataclasses.replace(fp, table=True)
        if fp.kind == "bundle":
            pass  # checked with the archetype in _check_bundle
        elif fp.view:
            ndim = 1 if fp.kind == "overflow" else len(fp.comp.shape) + (1 if fp.kind == "qualified" else 0)
            ndim += 1 if fp.table else 0
            dtype = wp.int32 if fp.kind == "overflow" else fp.comp.dtype
            what = {
                "overflow": "the archetype's overflow counter",
                "qualified": "a view of the archetype's rows in this world",
                "column": "a view of this row's shaped component",
                "singleton": "a view of this world's shaped singleton",
            }[fp.kind]
            if (
                not wp.types.is_array(ptype)
                or ptype.ndim != ndim
                or (ptype.dtype is not Any and not wp.types.types_equal(ptype.dtype, dtype))
            ):
                tables = fp.kind in ("qualified", "singleton") and not fp.table
                table = f" (or ndim={ndim + 1} for the whole table, indexed [world, ...])" if tables else ""
                raise GraphError(
                    f"{where}: parameter {pname!r} is {what}: annotate it "
                    f"wp.array(dtype={wp.types.type_repr(dtype)}, ndim={ndim}){table}, not {wp.types.type_repr(ptype)}"
                )
        elif fp.kind in ("column", "singleton") and wp.types.is_array(ptype):
            raise GraphError(
                f"{where}: parameter {pname!r} is passed by value to a @wp.func system: annotate it "
                f"{wp.types.type_repr(fp.comp.dtype)}, not an array (or wp.array(ndim=1) for the whole table)"
            )
        out.append(fp)
    if not any(fp.write for fp in out):
        raise GraphError(
            f"{where}: a @wp.func system must have at least one _out parameter (and return the new value of each "
            "unshaped one, in order)"
        )
    return out


def _check_bundle(layout: Layout, system: System, a: Access, where: str) -> None:
    spec = bundle_spec(system.param_types[a.param])
    if spec.singletons:
        for cname, dtype, shape in spec.fields:
            comp = layout.singletons.get(cname)
            if comp is None:
                hint = " (an entity component: bundle it with its archetype)" if layout.component(cname) else ""
                raise GraphError(
                    f"{where}: bundle {spec.name!r} ({a.param!r}) holds {cname!r}, which is no singleton{hint}. "
                    f"Singletons: {sorted(layout.singletons)}"
                )
            sized = len(comp.shape) == len(shape) and all(
                n < 0 or n == m for n, m in zip(shape, comp.shape, strict=True)
            )
            if not wp.types.types_equal(comp.dtype, dtype) or not sized:
                raise GraphError(
                    f"{where}: bundle {spec.name!r} ({a.param!r}) holds singleton {cname!r} as "
                    f"{wp.types.type_repr(dtype)}{shape}, but it is {wp.types.type_repr(comp.dtype)}{comp.shape}"
                )
        return
    arch = layout.archetypes.get(a.archetype)
    if arch is None:
        raise GraphError(
            f"{where}: bundle parameter {a.param!r} names no archetype {a.archetype!r} (a bundle parameter is "
            f"<archetype>_in or <archetype>_out). Archetypes: {sorted(layout.archetypes)}"
        )
    if spec.view and not system.is_func:
        raise GraphError(
            f"{where}: bundle {spec.name!r} of parameter {a.param!r} was made with view=True (one world's rows); "
            "a raw kernel takes bundles made with view=False (whole columns)"
        )
    for cname, dtype, shape in spec.fields:
        if not arch.has(cname):
            raise GraphError(
                f"{where}: bundle {spec.name!r} ({a.param!r}) holds {cname!r}, which archetype {arch.name!r} lacks. "
                f"It has: {sorted(c.name for c in arch.components)} plus alive, generation"
            )
        comp = layout.column(arch, cname)
        sized = len(comp.shape) == len(shape) and all(n < 0 or n == m for n, m in zip(shape, comp.shape, strict=True))
        if not wp.types.types_equal(comp.dtype, dtype) or not sized:
            raise GraphError(
                f"{where}: bundle {spec.name!r} ({a.param!r}) holds {cname!r} as {wp.types.type_repr(dtype)}{shape}, "
                f"but archetype {arch.name!r} stores {wp.types.type_repr(comp.dtype)}{comp.shape}"
            )


def make_bundle(struct: Any, table: dict[str, wp.array], names: tuple[str, ...]) -> Any:
    """An instance of a bundle struct holding the columns ``names`` of ``table``."""
    value = struct()
    for n in names:
        setattr(value, n, table[n])
    return value


_MISSING = object()


def _resource(layout: Layout, name: str) -> Any:
    if name in layout.resources:
        return layout.resources[name]
    cfg = layout.resources.get("__config__")
    if cfg is not None and hasattr(cfg, name):
        return getattr(cfg, name)
    return _MISSING


def _resource_struct(layout: Layout, struct: Any, param: str, where: str) -> Any:
    """An instance of an ``ecs.resource_bundle`` struct, each field the resource or config value of its name."""
    value = struct()
    for name in struct.ecs_resources:
        v = _resource(layout, name)
        if v is _MISSING:
            cfg = layout.resources.get("__config__")
            cfg_fields = sorted(f.name for f in fields(cfg)) if is_dataclass(cfg) else []
            raise GraphError(
                f"{where}: field {name!r} of resource bundle {param!r} is no resource or config field. Resources: "
                f"{sorted(k for k in layout.resources if k != '__config__')}; config fields: {cfg_fields}"
            )
        try:
            setattr(value, name, v)
        except (TypeError, ValueError) as e:
            raise GraphError(f"{where}: field {name!r} of resource bundle {param!r} cannot hold {v!r}: {e}") from None
    return value


def _check_array(where: str, param: str, ptype: Any, dtype: Any, ndim: int) -> None:
    if not wp.types.is_array(ptype):
        raise GraphError(f"{where}: parameter {param!r} must be a Warp array of {ndim} dims, annotated {ptype!r}")
    if ptype.ndim != ndim:
        raise GraphError(
            f"{where}: parameter {param!r} must have {ndim} dims (wp.array{ndim}d), annotated ndim={ptype.ndim}"
        )
    if ptype.dtype is not Any and not wp.types.types_equal(ptype.dtype, dtype):
        raise GraphError(
            f"{where}: parameter {param!r} has dtype {wp.types.type_repr(ptype.dtype)}, "
            f"but the column holds {wp.types.type_repr(dtype)}"
        )


_GATE_FIX = (
    "A raw RESET kernel is launched for every world, also for worlds that are not being reset. Declare "
    "`world_reset_in: wp.array(dtype=wp.int32)` and begin the kernel with\n"
    "    world = wp.tid()\n"
    "    if world_reset_in[world] == 0:\n"
    "        return\n"
    "or write the system as a @wp.func, which the engine gates itself"
)


def _check_reset_gate(system: System, where: str) -> None:
    """Refuses a raw RESET kernel that does not return at once for worlds that are not being reset.

    Accepted: after the docstring and ``... = wp.tid()``, either ``if world_reset_in[...] == 0: return``
    or one ``if world_reset_in[...] != 0:`` holding the rest of the body.
    """
    if "world_reset_in" not in system.param_types:
        raise GraphError(
            f"{where}: a raw RESET kernel needs a world_reset_in parameter to skip other worlds. {_GATE_FIX}"
        )
    tree = system.fn.adj.tree
    fdef = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)), None)
    body = list(fdef.body) if fdef is not None else []
    while body and (_is_docstring(body[0]) or _is_tid(body[0])):
        body.pop(0)
    if body and isinstance(body[0], ast.If) and not body[0].orelse:
        gate = _reset_test(body[0].test)
        if gate == "==" and len(body[0].body) == 1 and isinstance(body[0].body[0], ast.Return):
            return
        if gate == "!=" and len(body) == 1:
            return
    line = f" (line {body[0].lineno} of the kernel)" if body else ""
    raise GraphError(f"{where}: the kernel does not begin with the reset gate{line}. {_GATE_FIX}")


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _is_tid(node: ast.stmt) -> bool:
    if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
        return False
    f = node.value.func
    return isinstance(f, ast.Attribute) and f.attr == "tid" and isinstance(f.value, ast.Name) and f.value.id == "wp"


def _reset_test(test: ast.expr) -> str | None:
    """ "==" for ``world_reset_in[...] == 0``, "!=" for ``world_reset_in[...] != 0``, else None."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return None
    left, right = test.left, test.comparators[0]
    if isinstance(left, ast.Constant):
        left, right = right, left
    if not (isinstance(left, ast.Subscript) and isinstance(left.value, ast.Name) and left.value.id == "world_reset_in"):
        return None
    if not (isinstance(right, ast.Constant) and right.value == 0 and not isinstance(right.value, bool)):
        return None
    return {ast.Eq: "==", ast.NotEq: "!="}.get(type(test.ops[0]))
