"""Rigid-body physics for an environment in a few lines: archetypes, singletons, systems, resources,
scene loading and validation.

```python
from systems import physics

cfg = physics.PhysicsConfig(max_bodies=32)
spec = ecs.EnvSpec(
    name="my_env",
    config=my_config,
    archetypes=[*physics.archetypes(cfg), my_agent_archetype],
    singletons=[*physics.singletons(), ...],
    systems=[my_act_systems..., *physics.systems(cfg), my_sense_systems...],
    resources=physics.resources(cfg),
)
```

The archetypes are ``body`` (every physical thing of a world, ``max_bodies`` rows), ``pair``
(broadphase candidates), ``contact`` (the contact table, ``max_contacts`` rows) and ``joint``
(fixed joints, ``max_joints`` rows). The systems are ``find_pairs`` (PHYSICS phase),
``step_bodies`` (COLLIDE phase; ``step_bodies_block``, a block of lanes per world with the same
results, where ``solver_layout`` is "block"; with ``solver_staged``, four kernels a substep
and ``end_substeps``; with ``solver_cache``, the block's kernels keep a world's hot columns in shared memory) and
``forget_contacts`` (RESET phase: a world that starts an episode starts its next step's solve cold). The first two
sit in two phases because the solver reads the pairs that the broadphase computes from the poses that the solver then changes. Env systems that set forces
belong in ACT; systems that react to the new poses go after them (COLLIDE, registered later, or
a later phase).

Bodies are placed by the env's own kernels (``placement.place_body`` writes every column of a
body row consistently: pose, previous pose, velocities, mass, inverse inertia, lock owner,
generation, sweep order), or from the host with ``load_scene`` (tests, benchmarks, fixed
scenes). ``check_body_specs`` and ``check_bodies``
refuse degenerate shapes (zero, negative or non-finite sizes), non-finite poses and
non-positive masses of dynamic bodies, naming the entry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import warp as wp

import ecs

from . import collision, solver
from .geometry import ShapeType, inverse_inertia
from .rigid_body import BODY_COMPONENTS, JOINT_COMPONENTS, Response

wp.set_module_options({"enable_backward": False})

# PhysicsConfig.solver_layout: the solver a thread per world or a block of lanes per world (the same result bit for
# bit), or "auto": a thread per world on CPU, a block per world on CUDA. On an H100 the block ran hide-and-seek's
# step 12x as fast as a thread per world at 1,024 worlds and 1.8x at 65,536 (examples/benchmarks/results/gpu); on
# CPU a block's lanes take turns on one core. PhysicsConfig.solver_staged splits either into four kernels per substep
# (solver.STAGED), each with fewer registers per thread than the whole; the same result again. Its "auto" (the
# default) runs them on CUDA and the whole kernel on CPU: on an H100 (results/gpu/h100-2026-11-27) the block staged
# ran hide-and-seek 1.7x as fast as the block whole at 1,024 worlds and 2.2x at 16,384; on CPU staged ran 18 %
# slower than whole (256 worlds, one process side by side). PhysicsConfig.solver_cache "auto" (the default) keeps
# the block's cache on CUDA wherever the tables fit it (1.1x again at 1,024 worlds staged, 1.2x whole), not on CPU.
SOLVER_LAYOUTS = ("auto", "world", "block")
# PhysicsConfig.solver_world_from's default: "auto" on CUDA from this many worlds (a process's num_worlds) on, where
# the CUDA build is staged and not forced to keep the cache, runs a thread per world, staged, in place of the block
# staged and cached. Once the worlds outnumber the blocks a GPU holds at once, a thread per world wastes no lanes on
# a world's serial parts: on an H200 (results/gpu/h200-2026-11-27) it ran hide-and-seek 1.16x as fast at 262,144
# worlds (266k against 229k env steps/s) and held 265k to a million worlds, where on an H100 at 65,536 the two were
# even (180k and 184k) and at 16,384 the block ran 1.6x as fast. Those timings predate the ranked last pass and
# sleeping bodies (a thread per world's solve stage now spills, results/gpu/registers-sm90.md): gpu-report's solver
# stage times both forms again, at 131,072 worlds too.
AUTO_WORLD_FROM = 262_144


@dataclass(frozen=True)
class PhysicsConfig:
    """Solver settings and table capacities. Field names are the kernels' resource names."""

    physics_dt: float = 1.0 / 30.0  # s per step
    physics_substeps: int = 4  # XPBD substeps per step, >= 1
    # Gauss-Seidel passes over a world's contact manifolds per substep, >= 1 (the last propagates shocks up stacks).
    # Fewer substeps of more passes cost less, and leave bodies deeper inside each other in hide-and-seek.
    contact_passes: int = solver.CONTACT_PASSES
    gravity: float = -9.8  # m/s^2 along world z
    linear_damping: float = 0.0  # 1/s: the speed shrinks by (1 - linear_damping * h) per substep
    angular_damping: float = 0.0  # 1/s, likewise for the angular velocity
    contact_margin: float = (
        0.001  # m: shapes this close count as touching in the tables (the solver only pushes on overlap)
    )
    # Substeps a body must end at rest (under solver.SLEEP_SPEED and SLEEP_SPIN) before it sleeps: the solver then
    # holds it still, as a locked body, until something moving touches it, a force, torque or joint acts on it, or
    # its pose or velocity is written. 0: no body sleeps.
    sleep_substeps: int = 0
    # With sleeping bodies: a pair of bodies held still since the substep before (asleep through it, or static and
    # not moved) keeps the contact rows it made then instead of being collided again (solver.kept_rows), the rows
    # the narrowphase would make, bit for bit. False collides every pair every substep, with the same results.
    keep_resting_contacts: bool = True
    broadphase: int = int(collision.Broadphase.SORT_SWEEP)  # collision.Broadphase
    max_bodies: int = 32  # rows of the body table per world
    max_pairs: int = 256  # broadphase candidate pairs per world
    max_contacts: int = 256  # contacts per world
    max_joints: int = 4  # fixed joints per world
    # "world": step_bodies, a thread per world; "block": step_bodies_block, solver.SOLVER_LANES lanes per world;
    # "auto": "world" on CPU, "block" on CUDA, and "world" staged on CUDA from solver_world_from worlds on
    solver_layout: str = "auto"
    # The "auto" layout's CUDA build (staged, not forced to keep the cache): a thread per world in simulations of at
    # least this many worlds (a process's num_worlds), a block per world below (AUTO_WORLD_FROM).
    solver_world_from: int = AUTO_WORLD_FROM
    # The solver of solver_layout as four kernels per substep (solver.STAGED: collide, prepare,
    # solve, velocity), each holding less than the whole kernel, and end_substeps; the profiler times each. The same
    # results.
    solver_staged: bool | str = "auto"  # True, False or "auto": staged on CUDA, whole on CPU
    # The solver's kernels keep a world's hot columns (poses, velocities, the level solve's sums, the contact rows in
    # use and their impulses) in a cache of its own while they run (solver.CACHE_COLUMNS: a block's shared memory on
    # CUDA, up to solver.CACHE_BODIES bodies and solver.CACHE_CONTACTS contacts), rather than in the tables. The
    # same results. True, False or "auto": on CUDA, where the layout is a block's and the tables fit the cache.
    solver_cache: bool | str = "auto"
    # False: the solver's kernels compile without fused multiply-adds (Warp's fuse_fp), so that on CUDA every layout,
    # staged or whole, cached or not, leaves the same state bit for bit, as they do on CPU (with them each kernel
    # rounds where its compiler fused, and the states agree only to rounding).
    solver_fma: bool = True
    # A block's lanes per world (solver.LANE_CHOICES: 4, 8, 16 or 32). Below 32 a CUDA block, one warp, holds
    # 32 // solver_lanes worlds, so an SM keeps that many times the worlds at once, each on fewer lanes; a CPU block
    # holds one world. The same results; no cache (solver_cache "auto" leaves it off).
    solver_lanes: int = 32
    # CUDA: at most this many registers per thread of the solver (32..255; None: the compiler's choice). A cap
    # spills to local memory but fits more threads on an SM; the same result bit for bit on CPU.
    solver_registers: int | None = None
    # Lane 0 of each world counts the clock cycles of each stage of the solver into the ``solver_cycles``
    # singleton (solver.SOLVER_STAGES): where a step's time goes on a GPU. The same results otherwise.
    solver_timing: bool = False
    # The thread-per-world staged kernels (solver_layout "world" staged, or "auto"'s CUDA build from solver_world_from
    # worlds), and a CUDA warp's of several worlds (solver_lanes below 32, staged), step the worlds sorted by their work
    # (solver.ORDER_BUCKETS: contact rows with a body that moves), so that a warp's threads step worlds of like cost:
    # four small launches a step (solver.ORDER_KERNELS) sort them. The same results; other forms ignore it.
    solver_order: bool = False

    def __post_init__(self) -> None:
        for name in ("physics_dt",):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ecs.ConfigError(f"{name} must be a finite number > 0, got {getattr(self, name)}")
        for name in ("linear_damping", "angular_damping", "contact_margin"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ecs.ConfigError(f"{name} must be a finite number >= 0, got {getattr(self, name)}")
        if not math.isfinite(self.gravity):
            raise ecs.ConfigError(f"gravity must be finite, got {self.gravity}")
        for name in (
            "physics_substeps",
            "contact_passes",
            "max_bodies",
            "max_pairs",
            "max_contacts",
            "max_joints",
            "solver_world_from",
        ):
            if (
                isinstance(getattr(self, name), bool)
                or not isinstance(getattr(self, name), int)
                or getattr(self, name) < 1
            ):
                raise ecs.ConfigError(f"{name} must be an int >= 1, got {getattr(self, name)!r}")
        if isinstance(self.sleep_substeps, bool) or not isinstance(self.sleep_substeps, int) or self.sleep_substeps < 0:
            raise ecs.ConfigError(
                f"sleep_substeps must be an int >= 0 (0: no body sleeps), got {self.sleep_substeps!r}"
            )
        if not isinstance(self.keep_resting_contacts, bool):
            raise ecs.ConfigError(f"keep_resting_contacts must be True or False, got {self.keep_resting_contacts!r}")
        if self.broadphase not in (int(collision.Broadphase.ALL_PAIRS), int(collision.Broadphase.SORT_SWEEP)):
            raise ecs.ConfigError(
                f"broadphase must be {int(collision.Broadphase.ALL_PAIRS)} (all pairs) or "
                f"{int(collision.Broadphase.SORT_SWEEP)} (sort and sweep), got {self.broadphase!r}"
            )
        if self.solver_layout not in SOLVER_LAYOUTS:
            raise ecs.ConfigError(f"solver_layout must be one of {list(SOLVER_LAYOUTS)}, got {self.solver_layout!r}")
        registers_problem = solver_registers_problem(self.solver_registers)
        if registers_problem:
            raise ecs.ConfigError(f"solver_registers {registers_problem}")
        if not isinstance(self.solver_timing, bool):
            raise ecs.ConfigError(f"solver_timing must be True or False, got {self.solver_timing!r}")
        for name in ("solver_staged", "solver_cache"):
            if not _is_choice(getattr(self, name)):
                raise ecs.ConfigError(f"{name} must be True, False or 'auto', got {getattr(self, name)!r}")
        for name in ("solver_fma", "solver_order"):
            if not isinstance(getattr(self, name), bool):
                raise ecs.ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if isinstance(self.solver_lanes, bool) or self.solver_lanes not in solver.LANE_CHOICES:
            raise ecs.ConfigError(
                f"solver_lanes must be one of {list(solver.LANE_CHOICES)} (lanes per world), got {self.solver_lanes!r}"
            )
        if self.solver_cache is True:
            _check_cache(self.solver_layout, self.max_bodies, self.max_contacts)
            if self.solver_lanes != solver.SOLVER_LANES:
                raise ecs.ConfigError(
                    f"solver_cache keeps one world per block: it needs solver_lanes {solver.SOLVER_LANES}, "
                    f"got {self.solver_lanes}"
                )
        if self.solver_timing and self.solver_staged is True:
            raise ecs.ConfigError(
                "solver_timing counts the stages of one solver kernel; the staged solver's kernels are timed by "
                "the profiler (sim.profile()): set solver_timing=False or solver_staged=False"
            )


def _is_choice(value: Any) -> bool:
    """True, False or "auto" (``solver_staged``, ``solver_cache``)."""
    return isinstance(value, bool) or value == "auto"


def solver_registers_problem(registers: Any) -> str | None:
    if registers is None:
        return None
    if isinstance(registers, bool) or not isinstance(registers, int) or not 32 <= registers <= 255:
        return f"must be None or an int in [32, 255] (registers per thread on CUDA), got {registers!r}"
    return None


def body_components() -> tuple[ecs.Component, ...]:
    """Every component of the ``body`` archetype (pose, velocities, mass, shape, material, solver state)."""
    return (*BODY_COMPONENTS, *collision.SHAPE_COMPONENTS, *solver.STATE_COMPONENTS, *solver.SCRATCH_COMPONENTS)


def archetypes(
    cfg: PhysicsConfig, *, body_extra: Sequence[ecs.Component] = (), grow: Mapping[str, str] | None = None
) -> list[ecs.Archetype]:
    """The ``body``, ``pair``, ``contact`` and ``joint`` archetypes; ``body_extra`` adds env components to bodies.
    ``grow`` maps an archetype's name to how a user of the env raises its capacity (``ecs.Archetype.grow``), where
    the env sets it from a config of its own."""
    grow = dict(grow or {})
    unknown = sorted(set(grow) - {"body", "pair", "contact", "joint"})
    if unknown:
        raise ecs.ConfigError(f"grow names no physics archetype: {unknown} (body, pair, contact or joint)")
    return [
        ecs.Archetype(
            "body",
            (*body_components(), *body_extra),
            capacity=cfg.max_bodies,
            doc="rigid bodies",
            grow=grow.get("body", ""),
        ),
        ecs.Archetype(
            "pair",
            (*collision.PAIR_COMPONENTS, *solver.PAIR_SCRATCH_COMPONENTS),
            capacity=cfg.max_pairs,
            doc="broadphase candidate pairs",
            grow=grow.get("pair", ""),
        ),
        ecs.Archetype(
            "contact",
            (*collision.CONTACT_COMPONENTS, *solver.CONTACT_SCRATCH_COMPONENTS),
            capacity=cfg.max_contacts,
            doc="contacts",
            grow=grow.get("contact", ""),
        ),
        ecs.Archetype(
            "joint", JOINT_COMPONENTS, capacity=cfg.max_joints, doc="fixed joints", grow=grow.get("joint", "")
        ),
    ]


def singletons() -> list[ecs.Component]:
    """Per-world counters: ``pair_count``, ``contact_count`` and the solver's ``solver_cycles`` and
    ``solver_counts``."""
    return [collision.PairCount, collision.ContactCount, solver.SolverCycles, solver.SolverCounts]


def systems(cfg: PhysicsConfig | None = None) -> list[ecs.System]:
    """``find_pairs`` (PHYSICS, a thread per world), ``forget_contacts`` (RESET) and the solver (COLLIDE) in
    ``cfg.solver_layout``."""
    cfg = cfg or PhysicsConfig()
    return [
        ecs.System(collision.find_pairs, ecs.Phase.PHYSICS, dim="world", world_local=True),
        ecs.System(solver.forget_contacts, ecs.Phase.RESET, dim="world", world_local=True),
        *solver_systems(
            cfg.solver_layout,
            cfg.solver_registers,
            timed=cfg.solver_timing,
            staged=cfg.solver_staged,
            cached=cfg.solver_cache,
            fma=cfg.solver_fma,
            lanes=cfg.solver_lanes,
            world_from=cfg.solver_world_from,
            substeps=cfg.physics_substeps,
            max_bodies=cfg.max_bodies,
            max_contacts=cfg.max_contacts,
            ordered=cfg.solver_order,
        ),
    ]


def _check_solver_choice(layout: str, registers: int | None) -> None:
    if layout not in SOLVER_LAYOUTS:
        raise ecs.ConfigError(f"solver layout must be one of {list(SOLVER_LAYOUTS)}, got {layout!r}")
    registers_problem = solver_registers_problem(registers)
    if registers_problem:
        raise ecs.ConfigError(f"solver registers {registers_problem}")


def solver_systems(
    layout: str,
    registers: int | None = None,
    *,
    timed: bool = False,
    staged: bool | str = False,
    cached: bool | str = False,
    fma: bool = True,
    substeps: int = 1,
    max_bodies: int | None = None,
    max_contacts: int | None = None,
    lanes: int = solver.SOLVER_LANES,
    world_from: int = AUTO_WORLD_FROM,
    ordered: bool = False,
) -> list[ecs.System]:
    """The solver's systems: ``[solver_system(...)]``, or with ``staged`` the kernels of
    ``solver.STAGED`` for each of ``substeps`` substeps in ``layout`` (a thread or a block of ``solver.SOLVER_LANES``
    lanes per world; "auto": the first with the second as its CUDA variant), named ``solver_<stage>_<substep>``
    (the profiler times each), and ``end_substeps`` (a thread per contact row). ``cached``: each kernel keeps the
    columns it rewrites in a cache of each world's own (``PhysicsConfig.solver_cache``), which needs the tables'
    ``max_bodies`` and ``max_contacts`` (rows per world) to fit it. ``fma=False``: compiled without fused
    multiply-adds (``PhysicsConfig.solver_fma``). "auto" for ``staged`` or ``cached``: for CPU builds the whole
    kernel without the cache, for CUDA builds ("auto" layout: the block's) the staged kernels (whole where ``timed``)
    with the cache where the layout is a block's and the tables fit it; each a system for its device only
    (``ecs.System.device``) where the two differ. ``lanes``: a block's lanes per world (``solver.LANE_CHOICES``;
    ``PhysicsConfig.solver_lanes``): below ``solver.SOLVER_LANES`` a CUDA block (a warp) holds several worlds, a
    CPU block one; the two builds then have systems of their own (the cache needs a block per world). The "auto"
    layout of 32 lanes, where the CUDA build is staged and ``cached`` is not True, runs on CUDA as a thread per world
    staged (no cache) in simulations of ``world_from`` worlds or more (``ecs.System.min_worlds``;
    ``PhysicsConfig.solver_world_from``). ``ordered``: the thread-per-world staged kernels, and a CUDA build's of
    several worlds a warp, step the worlds sorted by their work (``order_worlds``; ``PhysicsConfig.solver_order``);
    other forms ignore it."""
    _check_solver_choice(layout, registers)
    if isinstance(world_from, bool) or not isinstance(world_from, int) or world_from < 1:
        raise ecs.ConfigError(f"world_from must be an int >= 1 (worlds; solver_world_from), got {world_from!r}")
    sizes = dict(registers=registers, timed=timed, fma=fma, substeps=substeps, max_bodies=max_bodies)
    sizes |= dict(max_contacts=max_contacts, ordered=bool(ordered))
    # The CUDA build staged (staged True, or "auto" and not timed) may be a thread per world's at many worlds.
    cuda_staged = staged is True or (staged == "auto" and not timed)
    if layout == "auto" and lanes == solver.SOLVER_LANES and cached is not True and cuda_staged:
        few = _solver_systems(layout, staged, cached, lanes, sizes)
        many = _solver_systems("world", True, False, lanes, sizes)
        below = [] if world_from == 1 else [s for s in few if s.runs_on(False)]  # 1: a thread per world at any count
        return [
            *(_for_device(s, "cpu") for s in few if s.runs_on(True)),
            *(_for_device(s, "cuda", max_worlds=world_from - 1) for s in below),
            *(_for_device(s, "cuda", min_worlds=world_from) for s in many),
        ]
    return _solver_systems(layout, staged, cached, lanes, sizes)


def _solver_systems(layout: str, staged: Any, cached: Any, lanes: int, sizes: dict[str, Any]) -> list[ecs.System]:
    """``solver_systems`` for any world count; ``sizes``: its ``registers``, ``timed``, ``fma``, ``substeps``,
    ``max_bodies``, ``max_contacts`` and ``ordered``."""
    if lanes not in solver.LANE_CHOICES:
        raise ecs.ConfigError(f"solver lanes must be one of {list(solver.LANE_CHOICES)} (per world), got {lanes!r}")
    if lanes != solver.SOLVER_LANES and cached is True:
        raise ecs.ConfigError(
            f"solver_cache keeps one world per block: it needs solver_lanes {solver.SOLVER_LANES}, got {lanes}"
        )
    for name, value in (("staged", staged), ("cached", cached)):
        if not _is_choice(value):
            raise ecs.ConfigError(f"{name} must be True, False or 'auto', got {value!r}")
    if staged == "auto" or cached == "auto":
        # "auto": the CPU build whole and without the cache; the CUDA build staged (whole where timed) and cached
        # where the layout is a block's and the tables fit.
        cuda_layout = "block" if layout == "auto" else layout
        cpu_form = (False if staged == "auto" else staged, False if cached == "auto" else cached)
        fits = _cache_fits(cuda_layout, sizes["max_bodies"], sizes["max_contacts"], lanes)
        cuda_form = ((not sizes["timed"]) if staged == "auto" else staged, fits if cached == "auto" else cached)
        if cpu_form == cuda_form:
            return _solver_systems(layout, *cpu_form, lanes, sizes)
        cpu = _solver_systems(layout, *cpu_form, lanes, sizes)
        cuda = _solver_systems(cuda_layout, *cuda_form, lanes, sizes)
        return [
            *(_for_device(s, "cpu") for s in cpu if s.runs_on(True)),
            *(_for_device(s, "cuda") for s in cuda if s.runs_on(False)),
        ]
    fixed = dict(sizes, staged=staged, cached=cached)
    if lanes != solver.SOLVER_LANES and layout != "world":
        # A block of ``lanes`` lanes per world on CPU (a thread per world for "auto"); on CUDA a warp of worlds.
        # A CPU build of fewer lanes a world keeps the worlds' own order.
        cpu = _fixed_systems(
            "world" if layout == "auto" else "block", lanes=lanes, group=1, **dict(fixed, ordered=False)
        )
        cuda = _fixed_systems("block", lanes=lanes, group=solver.SOLVER_LANES // lanes, **fixed)
        return [*(_for_device(s, "cpu") for s in cpu), *(_for_device(s, "cuda") for s in cuda)]
    return _fixed_systems(layout, lanes=solver.SOLVER_LANES, group=1, **fixed)


def _fixed_systems(
    layout: str,
    *,
    registers: int | None,
    timed: bool,
    staged: bool,
    cached: bool,
    fma: bool,
    substeps: int,
    max_bodies: int | None,
    max_contacts: int | None,
    lanes: int,
    group: int,
    ordered: bool = False,
) -> list[ecs.System]:
    """``solver_systems`` once "auto" is resolved: ``layout``'s block kernels with ``lanes`` lanes per world and
    ``group`` worlds per block; ``ordered``, a thread per world's staged kernels, or a block's of several worlds, in
    the order of ``order_worlds``."""
    if not staged:
        return [
            solver_system(
                layout,
                registers,
                timed=timed,
                cached=cached,
                fma=fma,
                max_bodies=max_bodies,
                max_contacts=max_contacts,
                lanes=lanes,
                group=group,
            )
        ]
    if cached:
        _check_cache(layout, max_bodies, max_contacts)
    if timed:
        raise ecs.ConfigError("a staged solver is timed by the profiler: drop timed=True or staged=True")
    if isinstance(substeps, bool) or not isinstance(substeps, int) or substeps < 1:
        raise ecs.ConfigError(f"substeps must be an int >= 1 (physics_substeps), got {substeps!r}")

    def stage_system(stage: str, sub: int) -> ecs.System:
        name = f"solver_{stage}_{sub}"
        sorted_block = ordering and group > 1
        kernel = solver.step_kernel(
            True, registers, stage=stage, cached=cached, fma=fma, width=lanes, group=group, ordered=sorted_block
        )
        block = _block_system(kernel, name, lanes, group)
        if layout == "block":
            return block
        if ordering:
            kernel = solver.step_kernel(False, registers, stage=stage, fma=fma, ordered=True)
            return ecs.System(kernel, ecs.Phase.COLLIDE, name=name, dim="world")
        kernel = solver.step_kernel(False, registers, stage=stage, fma=fma)
        cuda = block if layout == "auto" else None
        return ecs.System(kernel, ecs.Phase.COLLIDE, name=name, dim="world", world_local=True, cuda=cuda)

    ordering = ordered and (layout == "world" or (layout == "block" and group > 1))
    end = ecs.System(solver.end_substeps, ecs.Phase.COLLIDE, dim="entity", world_local=True)
    stages = [stage_system(stage, sub) for sub in range(substeps) for stage in solver.STAGED]
    return [*(order_worlds() if ordering else ()), *stages, end]


def order_worlds() -> list[ecs.System]:
    """The launches that sort the worlds by their work before an ordered solver's first stage of a step
    (``solver.ORDER_KERNELS``, PHYSICS: from the last step's contacts and sleepers): each world's bucket, the
    buckets' counts, their first slots, each world's slot. Not world-local: they read and write every world's
    ``SolverCounts``."""
    return [
        ecs.System(kernel, ecs.Phase.PHYSICS, dim=_one if kernel is solver.start_buckets else "world")
        for kernel in solver.ORDER_KERNELS
    ]


def _one(sim: Any) -> int:
    """A launch of one thread."""
    return 1


def _for_device(
    system: ecs.System, device: str, *, min_worlds: int | None = None, max_worlds: int | None = None
) -> ecs.System:
    """``system`` for builds on ``device`` ("cpu" or "cuda") only, of ``min_worlds`` to ``max_worlds`` worlds."""
    return ecs.System(
        system.fn,
        system.phase,
        name=system.name,
        dim=system.dim,
        world_local=system.world_local,
        block_dim=system.block_dim,
        cuda=system.cuda if device == "cuda" else None,
        device=device,
        min_worlds=min_worlds,
        max_worlds=max_worlds,
    )


def _block_system(kernel: wp.Kernel, name: str | None, lanes: int, group: int) -> ecs.System:
    """A block kernel's system: blocks of ``lanes * group`` lanes, one per ``group`` worlds (a world-local launch
    over the worlds where a block holds one)."""
    dim = "world" if group == 1 else _grouped_dim(group)
    block_dim = lanes * group
    return ecs.System(kernel, ecs.Phase.COLLIDE, name=name, dim=dim, world_local=group == 1, block_dim=block_dim)


def _grouped_dim(group: int) -> Callable[[Any], int]:
    """A launch of one block per ``group`` worlds."""

    def blocks(sim: Any) -> int:
        return (sim.num_worlds + group - 1) // group

    return blocks


def _cache_fits(layout: str, max_bodies: int | None, max_contacts: int | None, lanes: int = 32) -> bool:
    """Whether ``solver_cache="auto"`` keeps the cache: a block's layout of one world per block, tables that fit."""
    return (
        lanes == solver.SOLVER_LANES
        and layout != "world"
        and max_bodies is not None
        and max_contacts is not None
        and max_bodies <= solver.CACHE_BODIES
        and max_contacts <= solver.CACHE_CONTACTS
    )


def _check_cache(layout: str, max_bodies: int | None, max_contacts: int | None) -> None:
    """Refuses a solver cache (``solver_cache``) that a thread per world or tables of these sizes cannot have."""
    if layout == "world":
        raise ecs.ConfigError(
            "solver_cache keeps a world's columns in its block's shared memory: it needs solver_layout 'block' or "
            "'auto', not 'world'"
        )
    if max_bodies is None or max_contacts is None:
        raise ecs.ConfigError(
            "solver_cache needs max_bodies= and max_contacts= (rows per world) to check they fit the cache"
        )
    if max_bodies > solver.CACHE_BODIES or max_contacts > solver.CACHE_CONTACTS:
        raise ecs.ConfigError(
            f"solver_cache holds at most {solver.CACHE_BODIES} bodies and {solver.CACHE_CONTACTS} contacts per world, "
            f"got max_bodies={max_bodies}, max_contacts={max_contacts}: lower them or set solver_cache=False"
        )


def solver_system(
    layout: str,
    registers: int | None = None,
    *,
    timed: bool = False,
    cached: bool = False,
    fma: bool = True,
    max_bodies: int | None = None,
    max_contacts: int | None = None,
    lanes: int = solver.SOLVER_LANES,
    group: int = 1,
) -> ecs.System:
    """The solver's system: ``step_bodies`` for layout "world", ``step_bodies_block`` (``solver.SOLVER_LANES``
    lanes per world, a tiled launch) for "block", the first with the second as its CUDA variant for "auto"; with
    ``registers``, capped at that many registers per thread on CUDA (``step_bodies_r128``, ...; see
    ``PhysicsConfig.solver_registers``); ``timed``, counting each stage's cycles (``PhysicsConfig.solver_timing``);
    ``cached``, with a cache of each world's own (``PhysicsConfig.solver_cache``; the CPU build of "auto" runs
    without it), for tables of at most ``max_bodies`` and ``max_contacts`` rows per world; ``fma=False``, compiled
    without fused multiply-adds (``PhysicsConfig.solver_fma``); the block's kernel with ``lanes`` lanes per world and
    ``group`` worlds per block (``solver.step_kernel``'s ``width`` and ``group``; more than one: a CUDA build's)."""
    _check_solver_choice(layout, registers)
    if not isinstance(cached, bool):
        raise ecs.ConfigError(f"cached must be True or False (solver_systems also takes 'auto'), got {cached!r}")
    if cached:
        _check_cache(layout, max_bodies, max_contacts)
    if layout == "auto":
        sizes = dict(max_bodies=max_bodies, max_contacts=max_contacts, lanes=lanes, group=group)
        block = solver_system("block", registers, timed=timed, cached=cached, fma=fma, **sizes)
        return ecs.System(
            solver.step_kernel(False, registers, timed=timed, fma=fma),
            ecs.Phase.COLLIDE,
            dim="world",
            world_local=True,
            cuda=block,
        )
    if layout == "block":
        kernel = solver.step_kernel(True, registers, timed=timed, cached=cached, fma=fma, width=lanes, group=group)
        return _block_system(kernel, None, lanes, group)
    kernel = solver.step_kernel(False, registers, timed=timed, cached=cached, fma=fma)
    return ecs.System(kernel, ecs.Phase.COLLIDE, dim="world", world_local=True)


def with_solver(
    spec: ecs.EnvSpec,
    *,
    layout: str,
    registers: int | None = None,
    timed: bool = False,
    staged: bool | str = False,
    cached: bool | str = False,
    fma: bool = True,
    lanes: int = solver.SOLVER_LANES,
) -> ecs.EnvSpec:
    """``spec`` with its solver's systems swapped for those of ``layout``, ``registers``, ``staged`` and ``cached``
    (see ``PhysicsConfig.solver_layout``, ``solver_registers``, ``solver_staged`` and ``solver_cache``; the cache is
    checked against the spec's body and contact capacities): to time them against each other, or to check one
    against another, in an env that builds its own ``PhysicsConfig``. ``fma=False``: see ``solver_fma``."""
    is_solver = [solver.is_step_kernel(getattr(s, "fn", None)) for s in spec.systems]
    if not any(is_solver):
        raise ecs.ConfigError(f"env {spec.name!r} has no solver system to lay out")
    substeps = spec.resources.get("physics_substeps", getattr(spec.config, "physics_substeps", None))
    if staged and substeps is None:
        raise ecs.ConfigError(
            f"env {spec.name!r} names no physics_substeps (resource or config field) for the staged solver's launches"
        )
    capacity = {a.name: a.capacity for a in spec.archetypes}
    new = solver_systems(
        layout,
        registers,
        timed=timed,
        staged=staged,
        cached=cached,
        fma=fma,
        lanes=lanes,
        substeps=substeps or 1,
        max_bodies=capacity.get("body"),
        max_contacts=capacity.get("contact"),
    )
    first = is_solver.index(True)
    kept = [s for s, old in zip(spec.systems, is_solver, strict=True) if not old]
    return replace(spec, systems=kept[:first] + new + kept[first:])


def resources(cfg: PhysicsConfig) -> dict[str, Any]:
    """The solver's scalar resources (``physics_dt``, ``gravity``, ...) from ``cfg``."""
    return {
        "physics_dt": float(cfg.physics_dt),
        "physics_substeps": int(cfg.physics_substeps),
        "contact_passes": int(cfg.contact_passes),
        "gravity": float(cfg.gravity),
        "linear_damping": float(cfg.linear_damping),
        "angular_damping": float(cfg.angular_damping),
        "contact_margin": float(cfg.contact_margin),
        "sleep_substeps": int(cfg.sleep_substeps),
        "keep_resting_contacts": int(cfg.keep_resting_contacts),
        "broadphase": int(cfg.broadphase),
    }


@dataclass(frozen=True)
class SceneConfig:
    """A physics-only environment has nothing to configure beyond its ``PhysicsConfig``."""


def scene_env(cfg: PhysicsConfig, *, name: str = "physics_scene") -> ecs.EnvSpec:
    """A physics-only environment: the archetypes, singletons, systems and resources of ``cfg``, no reset and no
    horizon. Scenes go in with ``load_scene`` (benchmarks, scene suites)."""
    return ecs.EnvSpec(
        name=name,
        config=SceneConfig(),
        archetypes=archetypes(cfg),
        singletons=singletons(),
        systems=systems(cfg),
        resources=resources(cfg),
    )


# -- host-side scenes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BodySpec:
    """One body of a scene, for ``load_scene``.

    Attributes:
        shape: a ``ShapeType``.
        size: shape dimensions [m] (see ``systems.geometry``).
        position: centre of mass [m].
        rotation: unit quaternion (x, y, z, w); normalised when loaded.
        mass: [kg], > 0 for dynamic bodies.
        response: a ``Response``; planes must be static.
        friction: Coulomb coefficient, >= 0.
        restitution: in [0, 1].
        linear_velocity: [m/s].
        angular_velocity: [rad/s], world frame.
        drag: [N s/m] along each world axis, >= 0 (``rigid_body.Drag``).
    """

    shape: int
    size: tuple[float, float, float] = (0.5, 0.5, 0.5)
    position: tuple[float, float, float] = (0.0, 0.0, 0.0)
    rotation: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 1.0)
    mass: float = 1.0
    response: int = int(Response.DYNAMIC)
    friction: float = 0.5
    restitution: float = 0.0
    linear_velocity: tuple[float, float, float] = (0.0, 0.0, 0.0)
    angular_velocity: tuple[float, float, float] = (0.0, 0.0, 0.0)
    drag: tuple[float, float, float] = (0.0, 0.0, 0.0)
    extra: dict[str, Any] = field(default_factory=dict)


def _size_problem(shape: int, size: np.ndarray) -> str | None:
    if not np.all(np.isfinite(size)):
        return f"size {size.tolist()} is not finite"
    needed = {ShapeType.SPHERE: (0,), ShapeType.CAPSULE: (0, 1), ShapeType.BOX: (0, 1, 2), ShapeType.WEDGE: (0, 1, 2)}
    names = {
        ShapeType.SPHERE: ("radius",),
        ShapeType.CAPSULE: ("radius", "half_length"),
        ShapeType.BOX: ("half extent x", "half extent y", "half extent z"),
        ShapeType.WEDGE: ("half extent x", "half extent y", "half extent z"),
    }
    for k, name in zip(needed.get(ShapeType(shape), ()), names.get(ShapeType(shape), ()), strict=True):
        if not size[k] > 0:
            return f"{name} (size[{k}]) is {size[k]}; it must be > 0"
    return None


def body_problem(
    shape: int, size: Any, position: Any, rotation: Any, mass: float, response: int, friction: float, restitution: float
) -> str | None:
    """What makes a body invalid, or None. Shared by ``check_body_specs`` and ``check_bodies``."""
    if shape not in {int(s) for s in ShapeType} or shape == ShapeType.NONE:
        return f"shape {shape!r} is not a ShapeType (1 sphere .. 5 plane)"
    if response not in (int(Response.DYNAMIC), int(Response.STATIC), int(Response.KINEMATIC)):
        return f"response {response!r} is not a Response (1 dynamic, 2 static, 3 kinematic)"
    problem = _size_problem(shape, np.asarray(size, dtype=np.float64))
    if problem:
        return problem
    pos, rot = np.asarray(position, dtype=np.float64), np.asarray(rotation, dtype=np.float64)
    if not np.all(np.isfinite(pos)):
        return f"position {pos.tolist()} is not finite"
    if not np.all(np.isfinite(rot)) or not np.linalg.norm(rot) > 1e-6:
        return f"rotation {rot.tolist()} is not a finite non-zero quaternion"
    if response == Response.DYNAMIC and not (math.isfinite(mass) and mass > 0):
        return f"mass is {mass}; a dynamic body needs a finite mass > 0"
    if shape == ShapeType.PLANE and response != Response.STATIC:
        return "a plane must be static"
    if not (math.isfinite(friction) and friction >= 0):
        return f"friction is {friction}; it must be finite and >= 0"
    if not 0 <= restitution <= 1:
        return f"restitution is {restitution}; it must be in [0, 1]"
    return None


def check_body_specs(bodies: Sequence[BodySpec], *, capacity: int | None = None) -> None:
    """Raises ``ecs.ConfigError`` naming the first invalid body (degenerate shape, non-finite pose, bad mass)."""
    if capacity is not None and len(bodies) > capacity:
        raise ecs.ConfigError(
            f"the scene has {len(bodies)} bodies but the body table holds {capacity}; raise max_bodies"
        )
    for i, b in enumerate(bodies):
        problem = body_problem(
            int(b.shape), b.size, b.position, b.rotation, float(b.mass), int(b.response), b.friction, b.restitution
        )
        if problem is None and not (np.all(np.isfinite(b.linear_velocity)) and np.all(np.isfinite(b.angular_velocity))):
            problem = "velocity is not finite"
        if problem is None and not (np.all(np.isfinite(b.drag)) and np.all(np.asarray(b.drag) >= 0)):
            problem = f"drag {list(b.drag)} must be finite and >= 0"
        if problem:
            name = ShapeType(b.shape).name.lower() if b.shape in {int(s) for s in ShapeType} else "?"
            raise ecs.ConfigError(f"body {i} ({name}): {problem}")


def check_bodies(sim: ecs.BatchSim) -> None:
    """Checks every live row of a simulation's body table; raises ``ecs.SchemaError`` naming world and row."""
    t = {k: v.numpy() for k, v in sim.tables["body"].items()}
    for world, row in zip(*np.nonzero(t["alive"]), strict=True):
        problem = body_problem(
            int(t["shape"][world, row]),
            t["size"][world, row],
            t["position"][world, row],
            t["rotation"][world, row],
            float(t["mass"][world, row]),
            int(t["response"][world, row]),
            float(t["friction"][world, row]),
            float(t["restitution"][world, row]),
        )
        if problem:
            raise ecs.SchemaError(f"body row {row} of world {world}: {problem}")


@wp.kernel
def fill_inverse_inertia(
    shape: wp.array2d[wp.int32],
    size: wp.array2d[wp.vec3],
    mass: wp.array2d[wp.float32],
    inv_inertia: wp.array2d[wp.mat33],
):
    world, row = wp.tid()
    inv_inertia[world, row] = inverse_inertia(shape[world, row], size[world, row], mass[world, row])


def load_scene(
    sim: ecs.BatchSim, bodies: Sequence[BodySpec] | Callable[[int], Sequence[BodySpec]], *, check: bool = True
) -> None:
    """Writes a scene into every world's body table (rows beyond the scene are freed) and forgets every world's
    contacts, as a reset does (``solver.forget_contacts``): the next step's solve starts cold.

    Args:
        sim: a simulation whose env includes ``archetypes(cfg)``.
        bodies: one list for every world, or ``bodies(world)`` giving each world its own.
        check: validate with ``check_body_specs`` first (``ecs.ConfigError`` naming the body).
    """
    table = sim.tables["body"]
    cap = table["alive"].shape[1]
    cols = {k: v.numpy().copy() for k, v in table.items()}
    for world in range(sim.num_worlds):
        scene = bodies(world) if callable(bodies) else bodies
        if check:
            check_body_specs(scene, capacity=cap)
        cols["alive"][world] = 0
        cols["generation"][world, : len(scene)] += 1
        cols["alive"][world, : len(scene)] = 1
        for row, b in enumerate(scene):
            rot = np.asarray(b.rotation, dtype=np.float64)
            rot = rot / np.linalg.norm(rot)
            values = {
                "shape": int(b.shape),
                "size": b.size,
                "position": b.position,
                "rotation": rot,
                "linear_velocity": b.linear_velocity,
                "angular_velocity": b.angular_velocity,
                "mass": b.mass if b.response == Response.DYNAMIC else 0.0,
                "response": int(b.response),
                "friction": b.friction,
                "restitution": b.restitution,
                "force": (0.0, 0.0, 0.0),
                "torque": (0.0, 0.0, 0.0),
                "drag": b.drag,
                "prev_position": b.position,
                "prev_rotation": rot,
                "locked_by": 0,
                "sleep_count": 0,  # awake
                "sweep_order": -1,
                **b.extra,
            }
            for name, value in values.items():
                cols[name][world, row] = value
    for name, arr in table.items():
        arr.assign(cols[name])
    wp.launch(
        fill_inverse_inertia,
        dim=table["alive"].shape,
        inputs=[table["shape"], table["size"], table["mass"], table["inv_inertia"]],
        device=sim.device,
    )
    sim.singletons["contact_count"].zero_()
    sim.tables["contact"]["alive"].zero_()
    wp.synchronize_device(sim.device)
