"""Fusion: a whole step (or K steps) of a world-local environment as one generated kernel.

An environment whose systems are all ``@wp.func`` systems (per-world or per-entity) touches
nothing outside its own world (see ``why_not_fusable``), so the engine can run the entire step
for one world in one thread: episode bookkeeping, the phases in order, the same-step reset and
the observations. Unshaped singletons live in local variables (registers) across systems
(shaped ones, and those a function takes as a whole table, stay in memory); on CUDA also across
the K steps of one launch, stored once at the end; on CPU a thread steps a block of worlds in
turn, K times, so their state stays in the L1 cache. Entity columns are read and written in
place.

Fused and unfused runs execute the same functions on the same values in the same order, so on
CPU they are bit-identical (tested).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import warp as wp

from . import engine_kernels as ek
from . import program
from .codegen import build_kernel, contiguous_access, generated_module, type_expr
from .funcs import per_world
from .graph import Layout, Source, TaskGraph, func_params
from .program import BEFORE_RESET, IfEnded, Phases, Rule
from .schema import EnvSpec, Phase
from .systems import AccessKind, bundle_spec

CPU_BLOCK = 256  # worlds stepped in turn by a CPU thread, K times (see build_fused)
_ENDED = "if s_reset != 0:"  # opens the branch of the worlds whose episode ended (program.IfEnded)


@wp.func_native(
    "#if defined(__CUDA_ARCH__)\n"  # compiled for CUDA too when a module serves both devices
    "return atomicAdd(&claims.data[2], 1);\n"
    "#else\n"
    "return __atomic_fetch_add(&claims.data[2], 1, __ATOMIC_RELAXED);\n"
    "#endif\n"
)
def take_ticket(claims: wp.array(dtype=wp.int32)) -> int:
    """The order in which this CPU thread joined the launch (``claims[2]``, then incremented): 0 first."""
    ...


@wp.func_native(
    "#if defined(__CUDA_ARCH__)\n"
    "int lo = atomicAdd(&claims.data[0], count);\n"
    "int hi = min(lo + count, claims.data[1]);\n"
    "return wp::vec2i(min(lo, hi), hi);\n"
    "#else\n"
    "long long* both = (long long*)&claims.data[0];\n"
    "long long seen = __atomic_load_n(both, __ATOMIC_RELAXED);\n"
    "while (true) {\n"
    "    int front = (int)(seen & 0xffffffffLL);\n"
    "    int back = (int)(seen >> 32);\n"
    "    if (front >= back) return wp::vec2i(back, back);\n"
    "    int lo = from_back ? (back - count > front ? back - count : front) : front;\n"
    "    int hi = from_back ? back : (front + count < back ? front + count : back);\n"
    "    long long next = from_back ? (((long long)lo << 32) | (unsigned int)front)\n"
    "                               : (((long long)back << 32) | (unsigned int)hi);\n"
    "    if (__atomic_compare_exchange_n(both, &seen, next, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))\n"
    "        return wp::vec2i(lo, hi);\n"
    "}\n"
    "#endif\n"
)
def claim_worlds(claims: wp.array(dtype=wp.int32), count: int, from_back: int) -> wp.vec2i:
    """Claims up to ``count`` worlds for this CPU thread: ``[lo, hi)``, empty once none is left.

    The unclaimed worlds are ``[claims[0], claims[1])``; a thread takes them from the front, or with
    ``from_back`` from the back, atomically (one compare-and-swap of both ends; Warp's ``atomic_add``
    is a plain add on the CPU, whose launches are serial). With two threads, one from each end, a
    thread steps mostly the worlds it stepped the call before, which are still in its core's cache:
    claimed in turn from one end, blocks moved between the cores every call and the thread that
    started second stepped its worlds 1.5x slower.
    """
    ...


@dataclass
class FusedKernel:
    """A generated kernel and what to bind to each of its parameters, in order."""

    kernel: wp.Kernel
    sources: list[tuple[str, Source]]
    dim: int | None  # launch dimension; None for one thread per world
    # Bytes one step reads and writes per world: the singletons it carries or writes and every
    # row of the entity columns its systems touch. Not counted: parameters (often one shared
    # value) and final observations (written only when an episode ends).
    read_bytes: int
    write_bytes: int


def why_not_fusable(graph: TaskGraph, env: EnvSpec) -> str | None:
    """None when the env can be fused, else the reason.

    The rule: every system must be a ``@wp.func`` system. Such a system sees one world: values
    and views of that world's rows and singletons (its own row for a per-entity system, the rows
    of named archetypes for a per-world one), or whole tables that it indexes with its ``world``
    alone (the contract of a function taking tables). So the whole step of a world can run in one
    thread, systems in graph order, each task over all its rows before the next. A system reading
    rows that an earlier system of the same step wrote (another archetype's, or its own through a
    named view) sees them written, as in the unfused step. What the graph refuses anyway (a
    per-entity function writing a singleton or another archetype, or reading through a view the
    rows it writes itself: threads of one world would race) never reaches fusion. A raw kernel
    picks its own launch shape and may index any world, so it is never fused.
    """
    for task in graph.tasks:
        if not task.system.is_func:
            return f"system {task.name!r} is a raw kernel; only @wp.func systems are fused"
    return None


def build_fused(
    graph: TaskGraph,
    layout: Layout,
    env: EnvSpec,
    *,
    per_step_actions: bool,
    schedule_seed: int | None,
    device_is_cpu: bool,
) -> FusedKernel:
    """Generates the fused K-step kernel of ``env`` (call ``why_not_fusable`` first)."""
    gen = _Generator(layout, contiguous=device_is_cpu)
    kernel_name = "fused_step_cpu" if device_is_cpu else "fused_step"
    tasks = {p: graph.order(p, schedule_seed) for p in Phase if p != Phase.NONE}
    touched = {"episode", "episode_step", "rng", "reset", "reward", "terminated", "truncated"}
    touched |= {a.component.name for a in env.actions.values()}
    touched |= {o.component.name for o in env.observations.values()}
    tables: set[str] = set()  # singletons some function takes as a whole table (alone or in a bundle)
    for task in graph.tasks:
        touched |= {a.name for a in task.system.accesses if a.kind == AccessKind.SINGLETON}
        for fp in func_params(task.system, layout, task.name):
            if fp.table and fp.kind == "singleton":
                tables.add(fp.comp.name)
            elif fp.kind == "bundle" and fp.archetype is None:
                tables |= {f[0] for f in bundle_spec(fp.type).fields}
    touched |= tables
    # Shaped singletons (per-agent actions, observations, rewards) stay in memory: systems get views.
    # So does a singleton a function takes as a whole table: it reads and writes memory.
    in_memory = {n for n in touched if layout.singletons[n].shape} | tables
    gen.in_memory = in_memory
    touched -= in_memory
    for name in sorted(touched | in_memory):
        gen.singleton(name)
    # Each step assigns these before anything reads them, so their stored values are never loaded.
    fresh = {"terminated", "truncated", "reward"}
    if not any(a.name == "reset" for p in BEFORE_RESET for t in tasks[p] for a in t.system.accesses):
        fresh.add("reset")
    # Only what a step writes is stored (a per-step action too: sim.actions then holds the last).
    written = {"episode", "episode_step", "rng", "reset", "reward", "terminated", "truncated"}
    for task in graph.tasks:
        written |= {key[1] for key in task.writes if key[0] == "singleton"}

    body: list[str] = []
    action_names = {a.component.name: key for key, a in env.actions.items()}
    if per_step_actions:
        for comp, key in sorted(action_names.items()):
            c = layout.singletons[comp]
            arr = gen.param(
                f"a_{key}",
                Source("staging", key),
                f"wp.array(dtype={type_expr(c.dtype, gen.ns)}, ndim={2 + len(c.shape)})",
            )
            if comp in in_memory:
                body += _copy_loops(gen.singleton(comp), "world", arr, "it, world", c.shape)
            else:
                body.append(f"s_{comp} = {arr}[it, world]")
                fresh.add(comp)
            written.add(comp)
    body += _StepWriter(gen, env, layout, tasks, in_memory).lines(program.STEP)

    steps = gen.param("e_steps", Source("engine", "steps"), "wp.array(dtype=wp.int32, ndim=1)")
    end = gen.param("e_world_end", Source("engine", "world_end"), "int")
    load = ["gw = world"] + [f"{name} = {expr}" for name, expr in gen.hoisted.items()]
    lazy = _only_when_ended(body, touched - fresh) if device_is_cpu else set()
    load += [f"s_{n} = {gen.read(n)}" for n in sorted(touched - fresh - lazy)]
    if not device_is_cpu:
        # Every step assigns the fresh values before reading them; the CUDA kernel's variables live
        # on across its K-step loop, so they start as zeros (K >= 1) rather than as loads.
        load += [f"s_{n} = {type_expr(layout.singletons[n].dtype, gen.ns)}(0)" for n in sorted(touched & fresh)]
    # Fresh values are not carried into the next step: on CPU only the last step stores them.
    carried = [gen.write(n) for n in sorted((touched & written) - fresh - lazy)]
    last = [f"    {gen.write(n)}" for n in sorted(touched & written & fresh)]
    if device_is_cpu:
        claims = gen.param("e_claims", Source("engine", "claims"), "wp.array(dtype=wp.int32, ndim=1)")
    else:
        # Worlds may be launched in chunks, worlds [base, end) of the whole arrays, so that `world`
        # indexes them as in the unfused step (functions may take whole tables).
        base = gen.param("e_world_base", Source("engine", "world_base"), "int")
    lines = [f"def {kernel_name}(", *(f"    {p}," for p in gen.params), "):"]
    if not device_is_cpu:
        # One thread per world: singletons stay in registers across the K steps.
        lines += [f"    world = wp.tid() + {base}", f"    if world >= {end}:", "        return"]
        lines += [f"    {b}" for b in load]
        lines += [f"    for it in range({steps}[0]):"] + [f"        {b}" for b in body]
        lines += [f"    {gen.write(n)}" for n in sorted(touched & written)]
    else:
        # A thread loops over worlds (measured faster than a thread index per world here), a block
        # at a time. A world's step is one long chain of dependent operations, so K steps of one
        # world in a row leave the core waiting on latencies; stepping a block of worlds once each,
        # K times, gives it independent chains to overlap, and the block's state stays in the L1
        # cache. Several threads may run the kernel at once (``cpu_threads``): each claims the next
        # block of worlds of [claims[0], claims[1]) until none is left, so a thread that starts late or runs
        # on a busy core simply steps fewer blocks; the worlds of a block are indexed in the whole
        # arrays as in the unfused step (functions may take whole tables).
        gen.ns["claim_worlds"] = claim_worlds
        gen.ns["take_ticket"] = take_ticket
        if lazy:
            body = _load_when_ended(body, gen, lazy, written)
        store = carried + (["if it == last:", *last] if last else [])
        lines += [
            f"    last = {steps}[0] - 1",
            # Threads joining in turn take worlds from alternate ends (claim_worlds).
            f"    from_back = take_ticket({claims}) % 2",
            f"    span = claim_worlds({claims}, {CPU_BLOCK}, from_back)",
            "    while span[0] < span[1]:",
            "        first = span[0]",
            "        stop = span[1]",
            f"        for it in range({steps}[0]):",
            # A plain counter: a range() loop costs about 15 instructions per world here.
            "            w = first",
            "            while w < stop:",
            # The clamp tells the compiler that `world` is not negative, which spares every array
            # access a wrap-around of negative indices (about a tenth of a cartpole step).
            "                world = wp.max(w, 0)",
        ]
        lines += [f"                {b}" for b in load + body + store]
        lines += ["                w += 1", f"        span = claim_worlds({claims}, {CPU_BLOCK}, from_back)"]
    source = "\n".join(lines) + "\n"
    gen.ns.update(next_step=ek.next_step, end_step=ek.end_step, next_episode=ek.next_episode)
    kernel = build_kernel(kernel_name, source, gen.ns, generated_module("fused", env.name, device_is_cpu))
    sizes = {n: wp.types.type_size_in_bytes(c.dtype) * math.prod(c.shape) for n, c in layout.singletons.items()}
    # A shaped singleton counts as read unless only the engine writes it (the reward, zeroed each step).
    memory_read = {n for n in in_memory if n != "reward" or gen.reads_reward}
    read_bytes = sum(sizes[n] for n in (touched - fresh) | memory_read) + gen.column_bytes(write=False)
    write_bytes = sum(sizes[n] for n in (touched | in_memory) & written) + gen.column_bytes(write=True)
    return FusedKernel(kernel, gen.sources, 1 if device_is_cpu else None, read_bytes, write_bytes)


class _StepWriter:
    """Writes ``program.STEP`` as the body of one world's step, the rules as calls of ``engine_kernels``' functions."""

    def __init__(self, gen: _Generator, env: EnvSpec, layout: Layout, tasks: dict, in_memory: set[str]) -> None:
        self.gen, self.env, self.layout, self.tasks, self.in_memory = gen, env, layout, tasks, in_memory

    def lines(self, items: tuple) -> list[str]:
        out: list[str] = []
        for item in items:
            out += self.item(item)
        return out

    def item(self, item: Rule | Phases | IfEnded) -> list[str]:
        gen = self.gen
        if isinstance(item, Phases):
            return [line for phase in item.phases for task in self.tasks[phase] for line in gen.call(task)]
        if isinstance(item, IfEnded):
            return [_ENDED, *(f"    {line}" for line in self.lines(item.body) or ["pass"])]
        if item is Rule.BEGIN_STEP:
            step, truncated = self.gen.temps(2)
            out = [
                f"{step}, {truncated} = next_step({int(self.env.max_episode_steps)}, s_episode_step)",
                f"s_episode_step = {step}",
                "s_terminated = False",
                f"s_truncated = {truncated}",
            ]
            if "reward" in self.in_memory:
                return out + _fill_loops(
                    gen.singleton("reward"), "world", "float(0.0)", self.layout.singletons["reward"].shape
                )
            return [*out, "s_reward = float(0.0)"]
        if item is Rule.FINISH_STEP:
            truncated, reset = self.gen.temps(2)
            return [
                f"{truncated}, {reset} = end_step(s_terminated, s_truncated)",
                f"s_truncated = {truncated}",
                f"s_reset = {reset}",
            ]
        if item is Rule.COPY_FINAL_OBS:
            out = []
            for key, o in sorted(self.env.observations.items()):
                c = o.component
                annotation = f"wp.array(dtype={type_expr(c.dtype, gen.ns)}, ndim={1 + len(c.shape)})"
                fo = gen.param(f"fo_{key}", Source("final_obs", key), annotation)
                if c.name in self.in_memory:
                    out += _copy_loops(fo, "world", gen.singleton(c.name), "world", c.shape)
                else:
                    out.append(f"{fo}[world] = s_{c.name}")
            return out
        if item is Rule.NEW_EPISODE:
            seed = gen.param("e_seed", Source("engine", "seed"), "wp.array(dtype=wp.int32, ndim=1)")
            offset = gen.param("e_world_offset", Source("engine", "world_offset"), "wp.array(dtype=wp.int32, ndim=1)")
            episode, rng = self.gen.temps(2)
            return [
                f"{episode}, {rng} = next_episode({seed}[0], {offset}[0] + gw, s_episode)",
                f"s_episode = {episode}",
                "s_episode_step = 0",
                f"s_rng = {rng}",
            ]
        raise ValueError(f"{item} is no part of a fused step")


class _Generator:
    def __init__(self, layout: Layout, *, contiguous: bool) -> None:
        self.layout = layout
        self.contiguous = contiguous  # singletons read and written through their data pointer (CPU)
        self.ns: dict[str, Any] = {}
        self.params: list[str] = []
        self.sources: list[tuple[str, Source]] = []
        self._names: dict[Source, str] = {}
        self._funcs: dict[int, str] = {}
        self._temps = 0
        self.hoisted: dict[str, str] = {}
        self.columns: dict[tuple[str, str], tuple[int, bool]] = {}  # (archetype, column): (bytes per world, written)
        self.reads_reward = False  # a system reads a shaped reward (an _out view may be read)
        self.in_memory: set[str] = set()  # singletons kept in memory rather than in registers

    def temps(self, n: int) -> list[str]:
        """``n`` fresh local names (Warp refuses to rebind a name to a value of another type)."""
        names = [f"t{self._temps + i}" for i in range(n)]
        self._temps += n
        return names

    def column_bytes(self, *, write: bool) -> int:
        """Bytes per world of the entity columns read (``write=False``) or written."""
        return sum(size for size, written in self.columns.values() if written or not write)

    def param(self, name: str, source: Source, annotation: str) -> str:
        if source not in self._names:
            self._names[source] = name
            self.params.append(f"{name}: {annotation}")
            self.sources.append((name, source))
        return self._names[source]

    def read(self, name: str) -> str:
        """Source of the value of singleton ``name`` in ``world``."""
        if not self.contiguous:
            return f"{self.singleton(name)}[world]"
        return f"{self._access(name, 0)}({self.singleton(name)}, world)"

    def write(self, name: str) -> str:
        """Source storing ``s_<name>`` into singleton ``name`` of ``world``."""
        if not self.contiguous:
            return f"{self.singleton(name)}[world] = s_{name}"
        return f"{self._access(name, 1)}({self.singleton(name)}, world, s_{name})"

    def _access(self, name: str, which: int) -> str:
        fn = contiguous_access(self.layout.singletons[name].dtype)[which]
        self.ns[fn.func.__name__] = fn
        return fn.func.__name__

    def singleton(self, name: str) -> str:
        comp = self.layout.singletons[name]
        annotation = f"wp.array(dtype={type_expr(comp.dtype, self.ns)}, ndim={1 + len(comp.shape)})"
        return self.param(f"w_{name}", Source("singleton", name), annotation)

    def func(self, fn: Any) -> str:
        if id(fn) not in self._funcs:
            name = f"F{len(self._funcs)}_{fn.key}"
            self._funcs[id(fn)] = name
            self.ns[name] = fn
        return self._funcs[id(fn)]

    def call(self, task: Any) -> list[str]:
        system, layout = task.system, self.layout
        entity = system.is_entity_wise
        arch = task.archetype
        args, outs, pre = [], [], []
        for fp in func_params(system, layout, task.name):
            if fp.kind in ("column", "qualified"):
                owner = arch if fp.kind == "column" else fp.archetype
                comp = fp.comp
                col = self.param(
                    f"c_{owner}__{comp.name}",
                    Source("column", owner, comp.name),
                    f"wp.array(dtype={type_expr(comp.dtype, self.ns)}, ndim={2 + len(comp.shape)})",
                )
                if fp.table:
                    expr = col
                else:
                    expr = f"{col}[world, row]" if fp.kind == "column" else f"{col}[world]"
                args.append(expr)
                if fp.returned:
                    outs.append(expr)
                self._count(owner, comp, fp.write)
            elif fp.kind == "bundle":
                var = f"b{self._temps}"
                self._temps += 1
                pre.append(f"{var} = {type_expr(fp.type, self.ns)}()")
                spec = bundle_spec(fp.type)
                for cname, _dtype, _shape in spec.fields:
                    if spec.singletons:  # whole tables, kept in memory (see generate)
                        pre.append(f"{var}.{cname} = {self.singleton(cname)}")
                        continue
                    comp = layout.column(layout.archetypes[fp.archetype], cname)
                    col = self.param(
                        f"c_{fp.archetype}__{cname}",
                        Source("column", fp.archetype, cname),
                        f"wp.array(dtype={type_expr(comp.dtype, self.ns)}, ndim={2 + len(comp.shape)})",
                    )
                    pre.append(f"{var}.{cname} = {col}[world]" if spec.view else f"{var}.{cname} = {col}")
                    self._count(fp.archetype, comp, fp.write)
                args.append(var)
            elif fp.kind == "overflow":
                args.append(
                    self.param(
                        f"o_{fp.archetype}", Source("overflow", fp.archetype), "wp.array(dtype=wp.int32, ndim=1)"
                    )
                )
            elif fp.kind == "singleton":
                name = fp.comp.name
                if fp.view or name in self.in_memory:
                    expr = self.singleton(name) if fp.table else f"{self.singleton(name)}[world]"
                    args.append(expr)
                    if fp.returned:
                        outs.append(expr)
                    self.reads_reward |= name == "reward"
                else:
                    args.append(f"s_{name}")
                    if fp.write:
                        outs.append(f"s_{name}")
            elif fp.kind == "world":
                args.append("gw")
            elif fp.kind == "row":
                args.append("row")
            elif fp.kind == "param":
                p = self.param(
                    f"p_{fp.name}",
                    Source("param", fp.name),
                    f"wp.array(dtype={type_expr(layout.params[fp.name].dtype, self.ns)}, ndim=1)",
                )
                # Parameters are read-only: read before the systems (CUDA: once per world and launch).
                self.ns["per_world"] = per_world
                self.hoisted.setdefault(f"pv_{fp.name}", f"per_world({p}, gw)")
                args.append(f"pv_{fp.name}")
            else:
                source = next(s for n, s in task.sources if n == fp.name)
                r = self.param(f"r_{fp.name}", source, type_expr(fp.type, self.ns))
                args.append(r)
        fn = self.func(system.fn)
        lines = list(pre)
        if outs:
            # Fresh temporaries per call: Warp refuses to rebind a name to another type.
            tmp = [f"t{self._temps + i}" for i in range(len(outs))]
            self._temps += len(outs)
            lines += [f"{', '.join(tmp)} = {fn}({', '.join(args)})"]
            lines += [f"{o} = {t}" for o, t in zip(outs, tmp, strict=True)]
        else:
            lines.append(f"{fn}({', '.join(args)})")
        if not entity:
            return lines
        alive = self.param(f"c_{arch}__alive", Source("column", arch, "alive"), "wp.array(dtype=wp.int32, ndim=2)")
        self.columns.setdefault((arch, "alive"), (4 * layout.archetypes[arch].capacity, False))
        return [f"for row in range({alive}.shape[1]):", f"    if {alive}[world, row] != 0:"] + [
            f"        {line}" for line in lines
        ]

    def _count(self, arch: str, comp: Any, write: bool) -> None:
        size = wp.types.type_size_in_bytes(comp.dtype) * math.prod(comp.shape) * self.layout.archetypes[arch].capacity
        self.columns[arch, comp.name] = (size, write or self.columns.get((arch, comp.name), (0, False))[1])


def _ended_span(body: list[str]) -> tuple[int, int]:
    """Where the branch of ended worlds is in a step's lines: its first line and the one after it
    (``(len, len)`` when the step has none)."""
    start = body.index(_ENDED) if _ENDED in body else len(body)
    stop = next((i for i in range(start + 1, len(body)) if not body[i].startswith(" ")), len(body))
    return start, stop


def _only_when_ended(body: list[str], names: set[str]) -> set[str]:
    """The singletons of ``names`` that the step uses only in the branch of ended worlds (the
    episode count, the RNG state): loaded and stored there rather than in every step."""
    start, stop = _ended_span(body)
    outside = "\n".join(body[:start] + body[stop:])
    return {n for n in names if re.search(rf"\bs_{n}\b", outside) is None}


def _load_when_ended(body: list[str], gen: _Generator, names: set[str], written: set[str]) -> list[str]:
    """``body`` with the singletons ``names`` loaded on entering the branch of ended worlds and
    stored (those in ``written``) on leaving it."""
    start, stop = _ended_span(body)
    loads = [f"    s_{n} = {gen.read(n)}" for n in sorted(names)]
    stores = [f"    {gen.write(n)}" for n in sorted(names & written)]
    return [*body[: start + 1], *loads, *body[start + 1 : stop], *stores, *body[stop:]]


def _loops(shape: tuple[int, ...]) -> tuple[list[str], str]:
    """Nested loop headers over ``shape`` and the index they produce (``i0, i1``)."""
    heads = [" " * (4 * d) + f"for i{d} in range({n}):" for d, n in enumerate(shape)]
    return heads, ", ".join(f"i{d}" for d in range(len(shape)))


def _copy_loops(dst: str, dst_lead: str, src: str, src_lead: str, shape: tuple[int, ...]) -> list[str]:
    if not shape:
        return [f"{dst}[{dst_lead}] = {src}[{src_lead}]"]
    heads, idx = _loops(shape)
    return [*heads, " " * (4 * len(shape)) + f"{dst}[{dst_lead}, {idx}] = {src}[{src_lead}, {idx}]"]


def _fill_loops(dst: str, lead: str, value: str, shape: tuple[int, ...]) -> list[str]:
    if not shape:
        return [f"{dst}[{lead}] = {value}"]
    heads, idx = _loops(shape)
    return [*heads, " " * (4 * len(shape)) + f"{dst}[{lead}, {idx}] = {value}"]
