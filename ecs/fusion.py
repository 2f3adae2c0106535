"""Fusion: a whole step (or K steps) of a world-local environment as one generated kernel.

An environment whose systems are all ``@wp.func`` systems (per-world or per-entity) touches
nothing outside its own world, so the engine can run the entire step for one world in one
thread: episode bookkeeping, the phases in order, the same-step reset and the observations.
Singletons live in local variables (registers) across systems; on CUDA also across the K steps
of one launch, stored once at the end; on CPU a thread steps a block of worlds in turn, K
times, so their state stays in the L1 cache. Entity columns are read and written in place.

Fused and unfused runs execute the same functions on the same values in the same order, so on
CPU they are bit-identical (tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import warp as wp

from .codegen import build_kernel, type_expr
from .funcs import episode_rng, per_world
from .graph import Layout, TaskGraph
from .schema import EnvSpec, Phase
from .systems import AccessKind, parse_param

_BEFORE_RESET = (Phase.ACT, Phase.PHYSICS, Phase.COLLIDE, Phase.REWARD)
_OBSERVE = (Phase.SENSE, Phase.OBSERVE)
CPU_BLOCK = 256  # worlds stepped in turn by a CPU thread, K times (see build_fused)


@dataclass
class FusedKernel:
    """A generated kernel and what to bind to each of its parameters, in order."""

    kernel: wp.Kernel
    sources: list[tuple[str, tuple]]
    dim: int | None  # launch dimension; None for one thread per world
    # Bytes one step reads and writes per world: the singletons it carries or writes and every
    # row of the entity columns its systems touch. Not counted: parameters (often one shared
    # value) and final observations (written only when an episode ends).
    read_bytes: int
    write_bytes: int


def why_not_fusable(graph: TaskGraph, env: EnvSpec) -> str | None:
    """None when the env can be fused, else the reason."""
    for task in graph.tasks:
        if not task.system.is_func:
            return f"system {task.name!r} is a raw kernel; only @wp.func systems are fused"
    if env.num_agents is not None:
        return "multi-agent rewards are shaped singletons"
    for kind, exported in (("action", env.actions), ("observation", env.observations)):
        for key, ex in exported.items():
            if ex.component.shape:
                return f"{kind} {key!r} has shape {ex.component.shape}"
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
    gen = _Generator(layout)
    kernel_name = "fused_step_cpu" if device_is_cpu else "fused_step"
    tasks = {p: graph.order(p, schedule_seed) for p in Phase if p != Phase.NONE}
    touched = {"episode", "episode_step", "rng", "reset", "reward", "terminated", "truncated"}
    touched |= {a.component.name for a in env.actions.values()}
    touched |= {o.component.name for o in env.observations.values()}
    for task in graph.tasks:
        touched |= {a.name for a in task.system.accesses if a.kind == AccessKind.SINGLETON}
    for name in sorted(touched):
        gen.singleton(name)
    # Each step assigns these before anything reads them, so their stored values are never loaded.
    fresh = {"terminated", "truncated", "reward"}
    if not any(a.name == "reset" for p in _BEFORE_RESET for t in tasks[p] for a in t.system.accesses):
        fresh.add("reset")
    # Only what a step writes is stored (a per-step action too: sim.actions then holds the last).
    written = {"episode", "episode_step", "rng", "reset", "reward", "terminated", "truncated"}
    for task in graph.tasks:
        written |= {a.name for a in task.system.accesses if a.kind == AccessKind.SINGLETON and a.write}

    body: list[str] = []
    action_names = {a.component.name: key for key, a in env.actions.items()}
    if per_step_actions:
        for comp, key in sorted(action_names.items()):
            arr = gen.param(
                f"a_{key}",
                ("staging", key),
                f"wp.array(dtype={type_expr(layout.singletons[comp].dtype, gen.ns)}, ndim=2)",
            )
            body.append(f"s_{comp} = {arr}[it, world]")
            fresh.add(comp)
            written.add(comp)
    horizon = int(env.max_episode_steps)
    body += [
        "s_episode_step = s_episode_step + 1",
        "s_terminated = False",
        f"s_truncated = {horizon} > 0 and s_episode_step >= {horizon}",
        "s_reward = float(0.0)",
    ]
    for phase in _BEFORE_RESET:
        for task in tasks[phase]:
            body += gen.call(task)
    body += [
        "if s_terminated:",
        "    s_truncated = False",
        "done = s_terminated or s_truncated",
        "s_reset = wp.where(done, 1, 0)",
        "if done:",
    ]
    ended: list[str] = []
    for phase in _OBSERVE:
        for task in tasks[phase]:
            ended += gen.call(task)
    for key, o in sorted(env.observations.items()):
        fo = gen.param(
            f"fo_{key}", ("final_obs", key), f"wp.array(dtype={type_expr(o.component.dtype, gen.ns)}, ndim=1)"
        )
        ended.append(f"{fo}[world] = s_{o.component.name}")
    seed = gen.param("e_seed", ("engine", "seed"), "wp.array(dtype=wp.int32, ndim=1)")
    offset = gen.param("e_world_offset", ("engine", "world_offset"), "wp.array(dtype=wp.int32, ndim=1)")
    ended += [
        "s_episode = s_episode + 1",
        "s_episode_step = 0",
        f"s_rng = episode_rng({seed}[0], {offset}[0] + gw, s_episode)",
    ]
    for task in tasks[Phase.RESET]:
        ended += gen.call(task)
    body += [f"    {line}" for line in ended] or ["    pass"]
    for phase in _OBSERVE:
        for task in tasks[phase]:
            body += gen.call(task)

    steps = gen.param("e_steps", ("engine", "steps"), "wp.array(dtype=wp.int32, ndim=1)")
    # Worlds may be launched in chunks (one CPU thread each): `world` indexes the chunk's array
    # views, `gw` is the simulation's world index (for parameters, the RNG and `world` arguments).
    base = gen.param("e_world_base", ("engine", "world_base"), "int")
    load = [f"gw = world + {base}"] + [f"{name} = {expr}" for name, expr in gen.hoisted.items()]
    load += [f"s_{n} = {gen.singleton(n)}[world]" for n in sorted(touched - fresh)]
    if not device_is_cpu:
        # Every step assigns the fresh values before reading them; the CUDA kernel's variables live
        # on across its K-step loop, so they start as zeros (K >= 1) rather than as loads.
        load += [f"s_{n} = {type_expr(layout.singletons[n].dtype, gen.ns)}(0)" for n in sorted(touched & fresh)]
    # Fresh values are not carried into the next step: on CPU only the last step stores them.
    carried = [f"{gen.singleton(n)}[world] = s_{n}" for n in sorted((touched & written) - fresh)]
    last = [f"    {gen.singleton(n)}[world] = s_{n}" for n in sorted(touched & written & fresh)]
    lines = [f"def {kernel_name}(", *(f"    {p}," for p in gen.params), "):"]
    if not device_is_cpu:
        # One thread per world: singletons stay in registers across the K steps.
        lines += ["    world = wp.tid()"] + [f"    {b}" for b in load]
        lines += [f"    for it in range({steps}[0]):"] + [f"        {b}" for b in body]
        lines += [f"    {gen.singleton(n)}[world] = s_{n}" for n in sorted(touched & written)]
    else:
        # One thread loops over all worlds (measured faster than a thread index per world here).
        # A world's step is one long chain of dependent operations, so K steps of one world in a
        # row leave the core waiting on latencies; stepping a block of worlds once each, K times,
        # gives it independent chains to overlap, and the block's state stays in the L1 cache.
        count = f"{gen.singleton('reset')}.shape[0]"
        lines += [
            f"    for first in range(0, {count}, {CPU_BLOCK}):",
            f"        for it in range({steps}[0]):",
            f"            for world in range(first, wp.min(first + {CPU_BLOCK}, {count})):",
        ]
        store = carried + ([f"if it == {steps}[0] - 1:", *last] if last else [])
        lines += [f"                {b}" for b in load + body + store]
    source = "\n".join(lines) + "\n"
    gen.ns["episode_rng"] = episode_rng
    kernel = build_kernel(kernel_name, source, gen.ns, f"ecs_fused_{env.name}")
    sizes = {n: wp.types.type_size_in_bytes(c.dtype) * math.prod(c.shape) for n, c in layout.singletons.items()}
    read_bytes = sum(sizes[n] for n in touched - fresh) + gen.column_bytes(write=False)
    write_bytes = sum(sizes[n] for n in touched & written) + gen.column_bytes(write=True)
    return FusedKernel(kernel, gen.sources, 1 if device_is_cpu else None, read_bytes, write_bytes)


class _Generator:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.ns: dict[str, Any] = {}
        self.params: list[str] = []
        self.sources: list[tuple[str, tuple]] = []
        self._names: dict[tuple, str] = {}
        self._funcs: dict[int, str] = {}
        self._temps = 0
        self.hoisted: dict[str, str] = {}
        self.columns: dict[tuple[str, str], tuple[int, bool]] = {}  # (archetype, column): (bytes per world, written)

    def column_bytes(self, *, write: bool) -> int:
        """Bytes per world of the entity columns read (``write=False``) or written."""
        return sum(size for size, written in self.columns.values() if written or not write)

    def param(self, name: str, source: tuple, annotation: str) -> str:
        if source not in self._names:
            self._names[source] = name
            self.params.append(f"{name}: {annotation}")
            self.sources.append((name, source))
        return self._names[source]

    def singleton(self, name: str) -> str:
        comp = self.layout.singletons[name]
        return self.param(f"w_{name}", ("singleton", name), f"wp.array(dtype={type_expr(comp.dtype, self.ns)}, ndim=1)")

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
        args, outs = [], []
        for pname, ptype in system.param_types.items():
            a = parse_param(pname)
            if a.kind == AccessKind.COLUMN:
                comp = layout.column(layout.archetypes[arch], a.name)
                col = self.param(
                    f"c_{arch}__{a.name}",
                    ("column", arch, a.name),
                    f"wp.array(dtype={type_expr(comp.dtype, self.ns)}, ndim=2)",
                )
                args.append(f"{col}[world, row]")
                if a.write:
                    outs.append(f"{col}[world, row]")
                size = (
                    wp.types.type_size_in_bytes(comp.dtype) * math.prod(comp.shape) * layout.archetypes[arch].capacity
                )
                self.columns[arch, a.name] = (size, a.write or self.columns.get((arch, a.name), (0, False))[1])
            elif a.kind == AccessKind.SINGLETON:
                args.append(f"s_{a.name}")
                if a.write:
                    outs.append(f"s_{a.name}")
            elif pname == "world":
                args.append("gw")
            elif pname == "row" and entity:
                args.append("row")
            elif pname in layout.params:
                p = self.param(
                    f"p_{pname}",
                    ("param", pname),
                    f"wp.array(dtype={type_expr(layout.params[pname].dtype, self.ns)}, ndim=1)",
                )
                # Parameters are read-only: read before the systems (CUDA: once per world and launch).
                self.ns["per_world"] = per_world
                self.hoisted.setdefault(f"pv_{pname}", f"per_world({p}, gw)")
                args.append(f"pv_{pname}")
            else:
                source = next(s for n, s in task.sources if n == pname)
                r = self.param(f"r_{pname}", ("value", pname, source[1]), type_expr(ptype, self.ns))
                args.append(r)
        fn = self.func(system.fn)
        # Fresh temporaries per call: Warp refuses to rebind a name to another type.
        tmp = [f"t{self._temps + i}" for i in range(len(outs))]
        self._temps += len(outs)
        lines = [f"{', '.join(tmp)} = {fn}({', '.join(args)})"]
        lines += [f"{o} = {t}" for o, t in zip(outs, tmp, strict=True)]
        if not entity:
            return lines
        alive = self.param(f"c_{arch}__alive", ("column", arch, "alive"), "wp.array(dtype=wp.int32, ndim=2)")
        self.columns.setdefault((arch, "alive"), (4 * layout.archetypes[arch].capacity, False))
        return [f"for row in range({alive}.shape[1]):", f"    if {alive}[world, row] != 0:"] + [
            f"        {line}" for line in lines
        ]
