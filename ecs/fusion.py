"""Fusion: a whole step (or K steps) of a world-local environment as one generated kernel.

An environment whose systems are all ``@wp.func`` systems (per-world or per-entity) touches
nothing outside its own world, so the engine can run the entire step for one world in one
thread: episode bookkeeping, the phases in order, the same-step reset and the observations.
Singletons live in local variables (registers) across systems and across the K steps of one
launch and are stored once at the end; entity columns are read and written in place.

Fused and unfused runs execute the same functions on the same values in the same order, so on
CPU they are bit-identical (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import warp as wp

from .codegen import build_kernel, type_expr
from .funcs import episode_rng
from .graph import Layout, TaskGraph
from .schema import EnvSpec, Phase
from .systems import AccessKind, parse_param

_BEFORE_RESET = (Phase.ACT, Phase.PHYSICS, Phase.COLLIDE, Phase.REWARD)
_OBSERVE = (Phase.SENSE, Phase.OBSERVE)


@dataclass
class FusedKernel:
    """A generated kernel and what to bind to each of its parameters, in order."""

    kernel: wp.Kernel
    sources: list[tuple[str, tuple]]
    dim: int | None  # launch dimension; None for one thread per world


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
    tasks = {p: graph.order(p, schedule_seed) for p in Phase if p != Phase.NONE}
    touched = {"episode", "episode_step", "rng", "reset", "reward", "terminated", "truncated"}
    touched |= {a.component.name for a in env.actions.values()}
    touched |= {o.component.name for o in env.observations.values()}
    for task in graph.tasks:
        touched |= {a.name for a in task.system.accesses if a.kind == AccessKind.SINGLETON}
    for name in sorted(touched):
        gen.singleton(name)

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
    inner = [f"gw = world + {base}"] + [f"{name} = {expr}" for name, expr in gen.hoisted.items()]
    inner += [f"s_{n} = {gen.singleton(n)}[world]" for n in sorted(touched)]
    inner += [f"for it in range({steps}[0]):"] + [f"    {b}" for b in body]
    inner += [f"{gen.singleton(n)}[world] = s_{n}" for n in sorted(touched)]
    lines = [f"def fused_step{'_cpu' if device_is_cpu else ''}(", *(f"    {p}," for p in gen.params), "):"]
    if device_is_cpu:
        # One thread loops over all worlds: each CPU thread pays for copying the argument struct.
        lines += [f"    for world in range({gen.singleton('reset')}.shape[0]):"] + [f"        {b}" for b in inner]
    else:
        lines += ["    world = wp.tid()"] + [f"    {b}" for b in inner]
    source = "\n".join(lines) + "\n"
    gen.ns["episode_rng"] = episode_rng
    name = "fused_step_cpu" if device_is_cpu else "fused_step"
    kernel = build_kernel(name, source, gen.ns, f"ecs_fused_{env.name}")
    return FusedKernel(kernel, gen.sources, 1 if device_is_cpu else None)


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
                # Parameters are read-only: load once per world, outside the K-step loop.
                self.hoisted.setdefault(f"pv_{pname}", f"{p}[gw % {p}.shape[0]]")
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
        return [f"for row in range({alive}.shape[1]):", f"    if {alive}[world, row] != 0:"] + [
            f"        {line}" for line in lines
        ]
