"""The block layout of the solver (``step_bodies_block``: ``SOLVER_LANES`` lanes per world) gives the
thread-per-world kernel's result bit for bit.

The lanes keep and prepare contact rows, integrate bodies, warm-start manifolds, solve the manifolds of a
level side by side (each its own where no body is moved by two of them, else their Jacobi corrections) and
update velocities; they collide a pair each into stages of their own and copy the rows into the table in
the serial order, rank the manifolds by height, sum each body's corrections and run the velocity pass in
batches of manifolds that move no body in common, and the joints in such batches too; they share each
level's check for a body moved by two of its manifolds; lane 0 alone ends the velocity pass's batches. On CPU the lanes run side by side only with Warp's cooperative CPU blocks
(``wp.config.enable_cpu_blocks``); the tests turn them on, so a barrier missing between two stages shows up
as a different result. Scenes: stacks listed bottom first, top first and interleaved, with and without
offsets; the 10-cube pyramid in several orders (its levels share cubes: Jacobi steps); a row thrown at a wall
(ranks, ``rank_level``) beside two cubes thrown at each other; heaps with static and
kinematic bodies and spheres; hide-and-seek under random moves, grabs and locks, captured, eager and with CPU
threads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
import torch
import warp as wp

import ecs
import envs
from systems import physics, solver
from systems.collision import Contacts
from systems.geometry import ShapeType
from systems.grab import GrabJoints
from systems.physics import BodySpec, PhysicsConfig
from systems.rigid_body import Response
from systems.solver import SOLVER_LANES

from . import scene

HALF = 0.25  # m, half edge of a 0.5 m cube
LAYOUTS = ("world", "block")
STATE = (
    "position",
    "rotation",
    "linear_velocity",
    "angular_velocity",
    "prev_position",
    "prev_rotation",
    "sleep_count",
    "motion_lock",  # scratch, but what every layout leaves there: each body's lock as the last substep saw it
)
CONTACT = (
    "contact_body_a",
    "contact_body_b",
    "contact_normal",
    "contact_offset_a",
    "contact_offset_b",
    "contact_depth",
    "contact_impulse",
    "contact_friction",
)


def cube(x: float, y: float, z: float, **kw) -> BodySpec:
    return BodySpec(ShapeType.BOX, size=(HALF,) * 3, position=(x, y, z), **kw)


def stack(n: int, offset: float, order: str) -> list[BodySpec]:
    """``n`` cubes on a floor, level ``i`` shifted ``i * offset`` along x, listed in ``order``."""
    levels = list(range(n))
    if order == "top_first":
        levels = levels[::-1]
    elif order == "interleaved":
        levels = levels[1::2] + levels[0::2]
    return [scene.floor(), *(cube(offset * i, 0.0, HALF + 2 * HALF * i) for i in levels)]


def pyramid(order: str, gap: float = 0.01) -> list[BodySpec]:
    """Rows of 4, 3, 2 and 1 cubes ``gap`` apart, listed bottom row first, top first or shuffled."""
    cubes = []
    for level, count in enumerate((4, 3, 2, 1)):
        for k in range(count):
            cubes.append(cube((k - (count - 1) / 2) * (2 * HALF + gap), 0.0, HALF + 2 * HALF * level))
    if order == "top_first":
        cubes = cubes[::-1]
    elif order == "shuffled":
        cubes = [cubes[i] for i in np.random.default_rng(4).permutation(len(cubes))]
    return [scene.floor(), *cubes]


def heap(seed: int) -> list[BodySpec]:
    """Boxes and spheres dropped in a 1.5 m square, onto each other, a static box and a kinematic slab."""
    rng = np.random.default_rng(seed)
    bodies = [
        scene.floor(),
        cube(0.3, -0.2, HALF, response=Response.STATIC),
        BodySpec(
            ShapeType.BOX,
            size=(0.6, 0.3, 0.05),
            position=(-0.4, 0.3, 0.05),
            response=Response.KINEMATIC,
            linear_velocity=(0.2, 0.0, 0.0),
        ),
    ]
    for k in range(9):
        x, y = rng.uniform(-0.75, 0.75, 2)
        z = 0.3 + 0.45 * k
        if k % 3 == 2:
            bodies.append(BodySpec(ShapeType.SPHERE, size=(0.2, 0.0, 0.0), position=(x, y, z), mass=0.5))
        else:
            bodies.append(cube(x, y, z, mass=rng.uniform(0.5, 2.0), rotation=(*rng.normal(size=3) * 0.2, 1.0)))
    return bodies


def row_into_a_wall(order: str) -> list[BodySpec]:
    """Four touching cubes thrown at 2 m/s against a static wall (a level ranked outwards from the wall in the last
    pass, ``rank_level``) and, apart, two cubes thrown at each other (manifolds no anchor reaches), in ``order``."""
    wall = BodySpec(ShapeType.BOX, size=(0.1, 1.0, 0.5), position=(0.1, 0.0, 0.5), response=Response.STATIC)
    row = [cube(-HALF - 2 * HALF * i, 0.0, HALF, linear_velocity=(2.0, 0.0, 0.0)) for i in range(4)]
    pair = [cube(-1.0 + 1.01 * HALF * s, 3.0, HALF, linear_velocity=(-s * 1.0, 0.0, 0.0)) for s in (-1.0, 1.0)]
    bodies = [wall, *row, *pair]
    if order == "shuffled":
        bodies = [bodies[i] for i in np.random.default_rng(2).permutation(len(bodies))]
    return [scene.floor(), *bodies]


SCENES: dict[str, Callable[[], list[BodySpec]]] = {
    "stack 8 interleaved 2 cm": lambda: stack(8, 0.02, "interleaved"),
    "stack 5 top first 1 cm": lambda: stack(5, 0.01, "top_first"),
    "stack 3 bottom first": lambda: stack(3, 0.0, "bottom_first"),
    "pyramid bottom first": lambda: pyramid("bottom_first"),
    "pyramid shuffled, touching": lambda: pyramid("shuffled", gap=0.0),
    "heap 0": lambda: heap(0),
    "heap 1": lambda: heap(1),
    "row into a wall": lambda: row_into_a_wall("listed"),
    "row into a wall, shuffled": lambda: row_into_a_wall("shuffled"),
}


def solver_lanes(sim: ecs.BatchSim) -> int:
    """Lanes per world of the solver's launch (of each launch of the staged solver)."""
    launches = [
        launch
        for launch in sim.executor.recorder.launches.values()
        if launch.name.startswith(("step_bodies", "solver_"))
    ]
    lanes = {launch.block_dim or 1 for launch in launches}
    assert len(lanes) == 1 and (len(launches) == 1 or len(launches) % len(solver.STAGED) == 0), [
        x.name for x in launches
    ]
    return lanes.pop()


def state(sim: ecs.BatchSim) -> dict[str, np.ndarray]:
    """The bodies, each world's contact rows in use and its manifolds' order (the solver's scratch columns hold
    other things past them: the block's narrowphase stages its rows in some)."""
    out = {c: sim.tensor("body", c).numpy().copy() for c in STATE}
    counts = sim.tensor("world", "contact_count").numpy()
    out["contact_count"] = counts.copy()
    out["contact_alive"] = sim.tensor("contact", "alive").numpy().copy()  # the rows in use marked alive, no others
    pairs = np.stack([sim.tensor("contact", c).numpy() for c in ("contact_body_a", "contact_body_b")], axis=-1)
    order = sim.tensor("contact", "contact_order").numpy()
    for w, n in enumerate(counts):
        for c in CONTACT:
            out[f"{c}[{w}]"] = sim.tensor("contact", c).numpy()[w, :n].copy()
        manifolds = 1 + int(np.any(pairs[w, 1:n] != pairs[w, : n - 1], axis=-1).sum()) if n else 0
        out[f"contact_order[{w}]"] = order[w, :manifolds].copy()
    return out


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray], label: str) -> None:
    for column in a:
        np.testing.assert_array_equal(a[column], b[column], err_msg=f"{label}: {column}")


def scene_sim(name: str, layout: str, staged: bool = False, cached: bool = False, max_bodies: int = 16) -> ecs.BatchSim:
    # Two worlds with the same scene: the lanes of each block must keep to their own world.
    cfg = PhysicsConfig(max_bodies=max_bodies, solver_layout=layout, solver_staged=staged, solver_cache=cached)
    return scene.build(SCENES[name](), cfg, num_worlds=2)


@pytest.mark.parametrize("name", list(SCENES))
def test_the_block_layout_gives_the_world_layout_result_on_scenes(cpu_blocks, name):
    """The block kernel, the staged kernels of either layout (their work in four launches a substep), and the
    block's kernels with their cache (``solver_cache``), whole and staged."""
    world, block = scene_sim(name, "world"), scene_sim(name, "block")
    staged = {layout: scene_sim(name, layout, staged=True) for layout in ("world", "block")}
    cached = {"whole": scene_sim(name, "block", cached=True), "staged": scene_sim(name, "block", True, True)}
    assert [solver_lanes(s) for s in (world, block, staged["world"], staged["block"])] == [1, SOLVER_LANES] * 2
    assert {solver_lanes(s) for s in cached.values()} == {SOLVER_LANES}
    manifolds = 0
    for step in range(45):
        for sim in (world, block, *staged.values(), *cached.values()):
            sim.step()
        if step % 15 == 14:
            assert_same(state(world), state(block), f"{name}, step {step}")
            for layout, sim in staged.items():
                assert_same(state(world), state(sim), f"{name}, {layout} staged, step {step}")
            for kind, sim in cached.items():
                assert_same(state(world), state(sim), f"{name}, block {kind} cached, step {step}")
        manifolds = max(manifolds, len(np.unique(world.tensor("contact", "contact_order").numpy()[0])))
    assert manifolds >= 3  # the scene has levels to solve


def random_play(sim: ecs.BatchSim, gen: torch.Generator) -> None:
    for key, a in sim.actions.items():
        high = 11 if key == "move" else 2  # move bins 0..10; grab and lock 0 or 1
        a.copy_(torch.randint(0, high, tuple(a.shape), generator=gen, dtype=torch.int32))
    sim.step()


@pytest.mark.parametrize(("tilting", "sleep"), [(False, 0), (True, 0), (False, 8)])
def test_the_block_layout_gives_the_world_layout_result_in_hide_and_seek(cpu_blocks, tilting, sleep):
    """Random moves, grabs (held joints) and locks, with the resets they bring; boxes that turn only about z
    (OpenAI's) and boxes that tilt; bodies that fall asleep after a step at rest (``sleep_substeps`` 8) and wake.
    The block kernel captured, eager, and with CPU threads (it runs whole)."""

    def make(layout: str, staged: bool = False, cached: bool = False, **options) -> ecs.BatchSim:
        spec = envs.make(
            "hide_and_seek", prep_fraction=0.0, objects_turn_only_about_z=not tilting, sleep_substeps=sleep
        )
        spec = physics.with_solver(spec, layout=layout, staged=staged, cached=cached)
        return ecs.BatchSim(spec, 3, device="cpu", seed=3, **options)

    sims = {
        "world": make("world"),
        "block captured": make("block"),
        "block eager": make("block", capture=False),
        "block threads": make("block", cpu_threads=2),
        "block staged": make("block", staged=True),
        "block staged threads": make("block", staged=True, cpu_threads=2),
        "world staged": make("world", staged=True),
        "block cached threads": make("block", cached=True, cpu_threads=2),
        "block staged cached": make("block", staged=True, cached=True),
    }
    assert [solver_lanes(s) for s in sims.values()] == [1] + [SOLVER_LANES] * 5 + [1] + [SOLVER_LANES] * 2
    gens = {label: torch.Generator().manual_seed(5) for label in sims}
    held = asleep = 0
    for step in range(30):
        for label, sim in sims.items():
            random_play(sim, gens[label])
        held += int((sims["world"].tensor("joint", "alive").numpy() != 0).sum())
        if step % 10 == 9:
            for label, sim in sims.items():
                assert_same(state(sims["world"]), state(sim), f"{label}, step {step}")
        asleep += int((sims["world"].tensor("body", "motion_lock").numpy() == solver.SLEEPING).sum())
    assert held > 0  # grabs were held: the joints were solved
    assert (asleep > 0) == (sleep > 0), asleep  # bodies slept where they may


def test_without_cpu_blocks_the_block_kernel_runs_one_lane_with_the_same_result():
    before = wp.config.enable_cpu_blocks
    wp.config.enable_cpu_blocks = False
    try:
        world, block = scene_sim("pyramid bottom first", "world"), scene_sim("pyramid bottom first", "block")
    finally:
        wp.config.enable_cpu_blocks = before
    assert solver_lanes(block) == 1
    for _ in range(10):
        world.step()
        block.step()
    assert_same(state(world), state(block), "one lane")


def test_the_rows_a_gpu_thread_recomputes_give_what_the_cpu_keeps():
    """``manifold_corrections`` keeps each point's rows, and the narrowphase each pair's world vertices, on the CPU;
    on CUDA it finds the rows again and reads the vertices from a table of every body's, written once a substep
    (``BodyVertices``); ``step_kernel(recompute=True)`` runs the CUDA path on the CPU, which must give the same
    result."""
    kernel = solver.step_kernel(False, None, recompute=True)
    assert solver.is_step_kernel(kernel) and kernel is not solver.step_bodies

    def swapped(spec: ecs.EnvSpec) -> ecs.EnvSpec:
        system = ecs.System(kernel, ecs.Phase.COLLIDE, dim="world", world_local=True)
        return replace(spec, systems=[system if s.name == "step_bodies" else s for s in spec.systems])

    for name in ("heap 1", "pyramid shuffled, touching"):
        cfg = PhysicsConfig(max_bodies=16)
        kept = scene.build(SCENES[name](), cfg)
        recomputed = ecs.BatchSim(swapped(scene.make_env(cfg)), 1, device="cpu")
        physics.load_scene(recomputed, SCENES[name]())
        for _ in range(30):
            kept.step()
            recomputed.step()
        assert_same(state(kept), state(recomputed), name)
    spec = envs.make("hide_and_seek", prep_fraction=0.0, objects_turn_only_about_z=False)  # boxes that tilt
    sims = [ecs.BatchSim(s, 3, device="cpu", seed=3) for s in (spec, swapped(spec))]
    gens = [torch.Generator().manual_seed(5) for _ in sims]
    for _ in range(25):
        for sim, gen in zip(sims, gens, strict=True):
            random_play(sim, gen)
    assert_same(state(sims[0]), state(sims[1]), "hide-and-seek")


def test_a_register_cap_gives_the_same_result():
    """``solver_registers``: a kernel of its own (``__maxnreg__`` on CUDA), the same arithmetic on CPU."""
    world = scene.build(SCENES["heap 0"](), PhysicsConfig(max_bodies=16))
    capped = scene.build(SCENES["heap 0"](), PhysicsConfig(max_bodies=16, solver_registers=128))
    assert [t.name for t in capped.graph.tasks if t.phase == ecs.Phase.COLLIDE] == ["step_bodies_r128"]
    for _ in range(20):
        world.step()
        capped.step()
    assert_same(state(world), state(capped), "registers 128")


def test_the_layout_is_a_config_choice():
    whole = PhysicsConfig(solver_layout="block", solver_staged=False, solver_cache=False)
    solver = [s for s in physics.systems(whole) if s.phase == ecs.Phase.COLLIDE]
    assert [(s.name, s.block_dim) for s in solver] == [("step_bodies_block", SOLVER_LANES)]
    spec = envs.make("hide_and_seek", solver_layout="block", solver_staged=False, solver_cache=False)
    assert "step_bodies_block" in {s.name for s in spec.systems}
    spec = physics.with_solver(spec, layout="world")
    names = {s.name for s in spec.systems}
    assert "step_bodies" in names and "step_bodies_block" not in names
    with pytest.raises(ecs.ConfigError, match=r"solver_layout must be one of \['auto', 'world', 'block'\], got 'warp'"):
        PhysicsConfig(solver_layout="warp")
    with pytest.raises(ValueError, match=r"solver_layout must be one of \['auto', 'world', 'block'\], got 'tiles'"):
        envs.make("hide_and_seek", solver_layout="tiles")
    with pytest.raises(ecs.ConfigError, match=r"env 'cartpole' has no solver system to lay out"):
        physics.with_solver(envs.make("cartpole"), layout="block")
    with pytest.raises(ecs.ConfigError, match=r"solver layout must be one of"):
        physics.with_solver(envs.make("hide_and_seek"), layout="wide")
    spec = physics.with_solver(envs.make("hide_and_seek"), layout="block", registers=96)
    assert [(s.name, s.block_dim) for s in spec.systems if s.phase == ecs.Phase.COLLIDE] == [
        ("step_bodies_block_r96", SOLVER_LANES)
    ]
    assert physics.solver_system("block", 96).fn is physics.solver_system("block", 96).fn  # built once
    for bad in (16, 256, 128.0, True):
        with pytest.raises(ecs.ConfigError, match=r"solver_registers must be None or an int in \[32, 255\]"):
            PhysicsConfig(solver_registers=bad)
    with pytest.raises(ecs.ConfigError, match=r"solver registers must be None or an int in \[32, 255\]"):
        physics.with_solver(envs.make("hide_and_seek"), layout="world", registers=8)
    with pytest.raises(ecs.ConfigError, match=r"solver_registers must be None or an int in \[32, 255\]"):
        envs.make("hide_and_seek", solver_registers=300)


def test_the_cache_holds_the_most_bodies_and_contacts_it_takes(cpu_blocks):
    """A world's cache filled to the last row: ``CACHE_BODIES`` body rows (a heap of 12 bodies, the rest dead) and
    ``CACHE_CONTACTS`` contact rows, the block whole and staged against a thread per world at the same sizes. The
    cached columns, every row of them, equal the block's without a cache: the rows the cache writes back are the
    ones it read in or wrote (on CPU it starts as 0xff bytes, NaN or -1, so a row written back unread shows up)."""
    cfg = PhysicsConfig(max_bodies=solver.CACHE_BODIES, max_contacts=solver.CACHE_CONTACTS)
    sims = {
        label: scene.build(SCENES["heap 1"](), replace(cfg, **kw), num_worlds=3)
        for label, kw in {
            "world": dict(solver_layout="world"),
            "block": dict(solver_layout="block"),
            "block cached": dict(solver_layout="block", solver_cache=True),
            "block staged": dict(solver_layout="block", solver_staged=True),
            "block staged cached": dict(solver_layout="block", solver_cache=True, solver_staged=True),
        }.items()
    }
    for sim in sims.values():
        assert sim.tensor("body", "position").shape[1] == solver.CACHE_BODIES
    for step in range(40):
        for sim in sims.values():
            sim.step()
        if step % 20 == 19:
            for label, sim in sims.items():
                assert_same(state(sims["world"]), state(sim), f"{label}, step {step}")
            for kind in ("block", "block staged"):
                for name, _size, rows in solver.CACHE_COLUMNS:
                    table = "body" if rows == "bodies" else "contact"
                    np.testing.assert_array_equal(
                        sims[kind].tensor(table, name).numpy(),
                        sims[f"{kind} cached"].tensor(table, name).numpy(),
                        err_msg=f"{kind} cached, step {step}: {name}",
                    )


def test_the_cache_is_a_config_choice_for_tables_that_fit_it():
    """``solver_cache``: the block's kernels with the cache ("auto": only the CUDA build, a block); a thread per world
    has none (its block holds many worlds), and tables larger than the cache are refused, with what fits."""
    from ecs.graph import TaskGraph

    systems = physics.systems(PhysicsConfig(solver_layout="block", solver_cache=True, solver_staged=False))
    assert [s.name for s in systems if s.phase == ecs.Phase.COLLIDE] == ["step_bodies_block_cached"]
    staged = physics.systems(PhysicsConfig(solver_layout="block", solver_cache=True, solver_staged=True))
    assert {s.fn.key for s in staged if s.name.startswith("solver_")} == {
        f"step_bodies_{stage}_block_cached" for stage in solver.STAGED
    }
    spec = envs.make("hide_and_seek", solver_cache=True, solver_staged=False, max_episode_steps=8)
    sim = ecs.BatchSim(spec, 2, device="cpu", seed=0)
    for is_cpu, key in ((True, "step_bodies"), (False, "step_bodies_block_cached")):
        graph = TaskGraph(
            spec.systems, sim.storage.layout, device_is_cpu=is_cpu, num_worlds=sim.num_worlds, env_name=spec.name
        )
        assert [t.kernel.key for t in graph.tasks if t.phase == ecs.Phase.COLLIDE] == [key]
    # "auto" (the default): the cache on CUDA where the layout is a block's and the tables fit, never on CPU (a
    # block there runs without it), and without complaint where they do not fit.
    for layout, fits, cuda_key in (
        ("auto", True, "step_bodies_block_cached"),
        ("block", True, "step_bodies_block_cached"),
        ("block", False, "step_bodies_block"),
        ("world", True, "step_bodies"),
    ):
        sizes = dict(max_bodies=solver.CACHE_BODIES + (0 if fits else 1))
        cfg = PhysicsConfig(solver_layout=layout, solver_staged=False, **sizes)
        cpu_key = "step_bodies_block" if layout == "block" else "step_bodies"
        keys = {
            is_cpu: [s.on(is_cpu).fn.key for s in physics.systems(cfg) if s.runs_on(is_cpu)][2:]
            for is_cpu in (True, False)
        }
        assert keys == {True: [cpu_key], False: [cuda_key]}, (layout, fits)
    with pytest.raises(ecs.ConfigError, match=r"solver_cache keeps a world's columns in its block's shared memory"):
        PhysicsConfig(solver_layout="world", solver_cache=True)
    for sizes in (dict(max_bodies=solver.CACHE_BODIES + 1), dict(max_contacts=solver.CACHE_CONTACTS + 1)):
        with pytest.raises(ecs.ConfigError, match=r"solver_cache holds at most 64 bodies and 256 contacts per world"):
            PhysicsConfig(solver_cache=True, **sizes)
    with pytest.raises(ecs.ConfigError, match=r"solver_cache must be True, False or 'auto', got 1"):
        PhysicsConfig(solver_cache=1)
    with pytest.raises(ValueError, match=r"solver_cache must be true, false or auto, got 'on'"):
        envs.make("hide_and_seek", solver_cache="on")
    with pytest.raises(ecs.ConfigError, match=r"solver_cache needs max_bodies= and max_contacts="):
        physics.solver_systems("block", cached=True)
    with pytest.raises(ecs.ConfigError, match=r"it needs solver_layout 'block' or 'auto', not 'world'"):
        physics.with_solver(envs.make("hide_and_seek"), layout="world", cached=True)
    big = envs.make("hide_and_seek", max_walls=60)  # 78 bodies a world, and the contact rows they allow
    assert big.config.contact_rows == 864
    with pytest.raises(ecs.ConfigError, match=r"got max_bodies=78, max_contacts=864"):
        physics.with_solver(big, layout="block", cached=True)
    with pytest.raises(
        ValueError, match=r"at most 64 bodies \(the floor, max_walls, max_boxes, 2 ramps and 6 agents: 78\)"
    ):
        envs.make("hide_and_seek", max_walls=60, solver_cache=True)
    with pytest.raises(ValueError, match=r"cached=True needs block=True"):
        solver.step_kernel(False, cached=True)


def test_solver_fma_false_compiles_every_solver_kernel_without_fused_multiply_adds():
    """``solver_fma=False``: each of the solver's kernels, whole or staged, a thread or a block per world, cached or
    not, is built with Warp's ``fuse_fp`` off (its own module), and only those; the default keeps it on.
    (gpu-report's solver stage checks on a GPU that the layouts then agree bit for bit; on CPU, with the quick
    report, that the block without FMA equals a thread per world without.)"""

    def solver_kernels(systems):
        out = []
        for s in systems:  # what a CPU build runs, then what a CUDA one does
            for k in (s.on(is_cpu).fn for is_cpu in (True, False) if s.runs_on(is_cpu)):
                if solver.is_step_kernel(k) and k is not solver.end_substeps:
                    out.append(k)
        return out

    for staged, cached in ((False, False), (True, False), (False, True), (True, True)):
        cfg = dict(solver_layout="auto", solver_staged=staged, solver_cache=cached)
        plain = solver_kernels(physics.systems(PhysicsConfig(**cfg)))
        exact = solver_kernels(physics.systems(PhysicsConfig(**cfg, solver_fma=False)))
        # A thread per world on CPU and a block on CUDA; staged without the cache, a thread per world on CUDA too
        # from physics.AUTO_WORLD_FROM worlds on (the CPU's kernels again).
        forms = 3 if staged and not cached else 2
        launches = len(solver.STAGED) * PhysicsConfig().physics_substeps if staged else 1
        assert len(plain) == len(exact) == forms * launches
        assert all(k.module.options.get("fuse_fp", True) for k in plain)
        assert all(k.module.options["fuse_fp"] is False and k.key.endswith("_nofma") for k in exact)
        assert not {id(k.module) for k in plain} & {id(k.module) for k in exact}
    spec = physics.with_solver(envs.make("hide_and_seek"), layout="block", staged=True, cached=True, fma=False)
    assert all(k.module.options["fuse_fp"] is False for k in solver_kernels(spec.systems))
    assert envs.make("hide_and_seek", solver_fma=False).config.solver_fma is False
    with pytest.raises(ecs.ConfigError, match=r"solver_fma must be True or False, got 0"):
        PhysicsConfig(solver_fma=0)
    with pytest.raises(ValueError, match=r"solver_fma must be true or false, got 'no'"):
        envs.make("hide_and_seek", solver_fma="no")


def test_a_staged_solver_is_four_launches_a_substep():
    """``solver_staged``: collide, prepare, solve and velocity for every substep, named by
    stage and substep, then ``end_substeps`` (a thread per contact row), in the solver's layout ("auto": a thread per world on CPU, a block on CUDA, as the whole
    kernel); ``with_solver`` swaps the lot either way."""
    from ecs.graph import TaskGraph

    spec = envs.make("hide_and_seek", solver_layout="block", solver_staged=True, solver_cache=False, physics_substeps=3)
    collide = [(s.name, s.block_dim) for s in spec.systems if s.phase == ecs.Phase.COLLIDE]
    stages = [f"solver_{stage}_{sub}" for sub in range(3) for stage in solver.STAGED]
    names = [*stages, "end_substeps"]
    assert [n for n, _ in collide] == names and {d for n, d in collide[:-1]} == {SOLVER_LANES}
    assert collide[-1][1] is None
    block = physics.with_solver(spec, layout="block")  # staged=False, cached=False: the whole kernel
    assert [s.name for s in block.systems if s.phase == ecs.Phase.COLLIDE] == ["step_bodies_block"]
    assert [s.name for s in block.systems] == [
        "step_bodies_block" if s.name == "solver_collide_0" else s.name
        for s in spec.systems
        if s.name == "solver_collide_0" or not (s.name.startswith("solver_") or s.name == "end_substeps")
    ]
    again = physics.with_solver(block, layout="block", staged=True)
    assert [s.name for s in again.systems] == [s.name for s in spec.systems]
    sim = ecs.BatchSim(spec, 2, device="cpu", seed=0)
    assert [t.name for t in sim.graph.tasks if t.phase == ecs.Phase.COLLIDE] == names
    profile = str(sim.profile(2))
    assert all(name in profile for name in names)
    auto = envs.make("hide_and_seek", solver_staged=True, solver_cache=False, physics_substeps=2)
    for is_cpu, lanes, key in ((True, None, "step_bodies_solve"), (False, SOLVER_LANES, "step_bodies_solve_block")):
        graph = TaskGraph(
            auto.systems, sim.storage.layout, device_is_cpu=is_cpu, num_worlds=sim.num_worlds, env_name=auto.name
        )
        tasks = [t for t in graph.tasks if t.name.startswith("solver_solve_")]
        assert [(t.system.block_dim, t.kernel.key) for t in tasks] == [(lanes, key)] * 2
    with pytest.raises(ecs.ConfigError, match=r"the staged solver's kernels are timed by the profiler"):
        PhysicsConfig(solver_staged=True, solver_timing=True)
    with pytest.raises(ValueError, match=r"solver_timing counts the stages of one solver kernel"):
        envs.make("hide_and_seek", solver_staged=True, solver_timing=True)
    with pytest.raises(ecs.ConfigError, match=r"solver_staged must be True, False or 'auto', got 1"):
        PhysicsConfig(solver_staged=1)
    with pytest.raises(ecs.ConfigError, match=r"staged must be True, False or 'auto', got 'yes'"):
        physics.solver_systems("block", staged="yes", substeps=2)
    with pytest.raises(ecs.ConfigError, match=r"substeps must be an int >= 1"):
        physics.solver_systems("block", staged=True, substeps=0)
    with pytest.raises(ecs.ConfigError, match=r"solver registers must be None or an int"):
        physics.solver_systems("world", 16, staged=True, substeps=2)
    with pytest.raises(ecs.ConfigError, match=r"solver layout must be one of"):
        physics.solver_systems("staged", staged=True, substeps=2)
    with pytest.raises(ValueError, match=r"stage must be one of \['collide', 'prepare', 'solve', 'velocity'\]"):
        solver.step_kernel(True, stage="narrowphase")


def test_the_auto_layout_runs_a_thread_per_world_on_cpu_and_a_block_on_cuda():
    """The default, "auto" layout, staging and cache: ``step_bodies`` in a CPU build; in a CUDA one the block's
    staged kernels with its cache (``solver_<stage>_<substep>``), each a system for that device only."""
    from ecs.graph import TaskGraph

    assert PhysicsConfig().solver_layout == "auto"
    auto = physics.solver_system("auto")
    assert (auto.name, auto.block_dim, auto.cuda.name, auto.cuda.block_dim) == (
        "step_bodies",
        None,
        "step_bodies_block",
        SOLVER_LANES,
    )
    capped = physics.solver_system("auto", 128)
    assert (capped.name, capped.cuda.name) == ("step_bodies_r128", "step_bodies_block_r128")
    spec = envs.make("hide_and_seek", max_episode_steps=8)
    sim = ecs.BatchSim(spec, 2, device="cpu", seed=0)
    layout = sim.storage.layout
    collide = {True: [], False: []}
    for is_cpu in (True, False):
        graph = TaskGraph(spec.systems, layout, device_is_cpu=is_cpu, num_worlds=sim.num_worlds, env_name=spec.name)
        collide[is_cpu] = [(t.name, t.kernel.key) for t in graph.tasks if t.phase == ecs.Phase.COLLIDE]
    assert collide[True] == [("step_bodies", "step_bodies")]
    substeps = spec.config.physics_substeps
    assert collide[False] == [
        *(
            (f"solver_{stage}_{sub}", f"step_bodies_{stage}_block_cached")
            for sub in range(substeps)
            for stage in solver.STAGED
        ),
        ("end_substeps", "end_substeps"),
    ]
    whole = envs.make("hide_and_seek", max_episode_steps=8, solver_staged=False, solver_cache=False)
    graph = TaskGraph(whole.systems, layout, device_is_cpu=False, num_worlds=sim.num_worlds, env_name=whole.name)
    assert [t.kernel.key for t in graph.tasks if t.phase == ecs.Phase.COLLIDE] == ["step_bodies_block"]
    timed = envs.make("hide_and_seek", max_episode_steps=8, solver_timing=True)  # timing counts the whole kernel
    graph = TaskGraph(timed.systems, layout, device_is_cpu=False, num_worlds=sim.num_worlds, env_name=timed.name)
    assert [t.kernel.key for t in graph.tasks if t.phase == ecs.Phase.COLLIDE] == ["step_bodies_block_timed_cached"]
    assert [t.name for t in sim.graph.tasks if t.phase == ecs.Phase.COLLIDE] == ["step_bodies"]
    # the same state as a sim built with the thread per world named
    world = ecs.BatchSim(envs.make("hide_and_seek", max_episode_steps=8, solver_layout="world"), 2, device="cpu")
    for _ in range(10):
        sim.step()
        world.step()
    a, b = sim.state_dict()["arrays"], world.state_dict()["arrays"]
    assert a.keys() == b.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("layout", ["world", "block"])
def test_a_timed_solver_counts_every_stage_and_changes_nothing_else(cpu_blocks, layout):
    """``solver_timing``: lane 0 adds each stage's clock cycles to ``world.solver_cycles``; every other array
    steps as the untimed solver's, and an untimed solver leaves the column at zero."""
    sims = {
        timed: ecs.BatchSim(
            envs.make("hide_and_seek", solver_layout=layout, solver_timing=timed, max_episode_steps=9),
            3,
            device="cpu",
            seed=4,
        )
        for timed in (False, True)
    }
    assert [t.name for t in sims[True].graph.tasks if t.phase == ecs.Phase.COLLIDE] == [
        "step_bodies" + ("_block" if layout == "block" else "") + "_timed"
    ]
    gen = torch.Generator().manual_seed(5)
    for _ in range(12):  # an episode ends on the way: a world reset between steps
        move = torch.randint(0, 11, tuple(sims[True].actions["move"].shape), generator=gen, dtype=torch.int32)
        for sim in sims.values():
            sim.actions["move"].copy_(move)
            sim.step()
    cycles = sims[True].tensor("world", "solver_cycles")
    assert tuple(cycles.shape) == (3, len(solver.SOLVER_STAGES))
    counted = cycles.numpy().copy()
    assert (counted > 0).all(), dict(zip(solver.SOLVER_STAGES, counted.T.tolist(), strict=True))
    assert not sims[False].tensor("world", "solver_cycles").numpy().any()
    plain, timed = sims[False].state_dict()["arrays"], sims[True].state_dict()["arrays"]
    assert [k for k in plain if not np.array_equal(plain[k], timed[k])] == ["singleton/solver_cycles"]
    cycles.zero_()  # counts start again from zero, and add up over steps
    sims[True].step()
    one = cycles.numpy().copy()
    sims[True].step()
    assert (one > 0).all() and (cycles.numpy() > one).all()
    with pytest.raises(ecs.ConfigError, match="solver_timing must be True or False, got 1"):
        PhysicsConfig(solver_timing=1)
    with pytest.raises(ValueError, match="solver_timing must be true or false, got 'yes'"):
        envs.make("hide_and_seek", solver_timing="yes")


@pytest.mark.parametrize(
    ("name", "max_contacts"), [("pyramid shuffled, touching", 112), ("heap 1", 48), ("heap 1", 64)]
)
def test_the_lanes_narrowphase_gives_the_serial_table_when_stages_are_small(cpu_blocks, name, max_contacts):
    """The lanes collide a pair each into a stage of ``max_contacts / pairs`` rows: with a small table most rounds
    have a pair that makes more rows than that, and lane 0 redoes the round alone; some rounds fit. Either way the
    table is the serial narrowphase's, row for row."""
    cfg = {layout: PhysicsConfig(max_bodies=16, max_contacts=max_contacts, solver_layout=layout) for layout in LAYOUTS}
    world, block = (scene.build(SCENES[name](), cfg[layout], num_worlds=2) for layout in LAYOUTS)
    most = 0
    for step in range(40):
        world.step()
        block.step()
        most = max(most, int(world.tensor("world", "contact_count").numpy().max()))
        if step % 10 == 9:
            assert_same(state(world), state(block), f"{name}, {max_contacts} contacts, step {step}")
    assert most > max_contacts // 3  # the table is well used


def test_a_full_contact_table_is_reported_by_both_layouts(cpu_blocks):
    """Past the table's capacity the lanes count the rows they could not copy, as the serial narrowphase does."""
    cfg = {layout: PhysicsConfig(max_bodies=16, max_contacts=12, solver_layout=layout) for layout in LAYOUTS}
    messages = {}
    for layout in LAYOUTS:
        sim = scene.build(SCENES["pyramid bottom first"](), cfg[layout], num_worlds=2)
        with pytest.raises(ecs.CapacityError, match=r"archetype 'contact' is full: \d+ spawn\(s\) failed") as err:
            for _ in range(3):
                sim.step()
        messages[layout] = str(err.value)
        counts = sim.tensor("world", "contact_count").numpy()
        assert (counts == 12).all(), counts
    assert messages["world"] == messages["block"]


def test_the_lanes_narrowphase_takes_more_pairs_than_lanes_in_rounds(cpu_blocks):
    """Two layers of 4 x 3 touching cubes: about 60 candidate pairs, so the lanes collide them in two rounds and
    more, the later ones starting past the rows of the earlier."""
    cubes = [
        cube((i - 1.5) * 2 * HALF, (j - 1) * 2 * HALF, HALF + 2 * HALF * level + 0.001 * (i + j))
        for level in range(2)
        for i in range(4)
        for j in range(3)
    ]
    bodies = [scene.floor(), *cubes[::-1]]
    world, block = (
        scene.build(bodies, PhysicsConfig(max_bodies=32, max_contacts=1024, solver_layout=layout), num_worlds=2)
        for layout in LAYOUTS
    )
    pairs = 0
    for step in range(30):
        world.step()
        block.step()
        pairs = max(pairs, int(world.tensor("world", "pair_count").numpy().max()))
        if step % 10 == 9:
            assert_same(state(world), state(block), f"two layers, step {step}")
    assert pairs > 2 * SOLVER_LANES, pairs


# The batches below are solved side by side on the block's lanes. On CPU the lanes of a block run one after another
# between barriers, in lane order, so a batch that wrongly holds two joints or manifolds moving one body could still
# give the serial result there; the batch ends are therefore checked against a numpy reference.


@wp.kernel
def joint_batch_ends(bodies: solver.Bodies, joints: GrabJoints, lanes: int, ends: wp.array[wp.int32]):
    start = wp.int32(0)
    i = wp.int32(0)
    while start < joints.alive.shape[1]:
        start = solver.joint_batch_end(bodies, joints, 0, start, lanes)
        ends[i] = start
        i += 1


@wp.kernel
def velocity_batch_ends(bodies: solver.Bodies, c: Contacts, marks: wp.array2d[wp.int32], ends: wp.array[wp.int32]):
    start = wp.int32(0)
    i = wp.int32(0)
    count = c.count[0]
    while start < count:
        start = solver.velocity_batch(bodies, c, marks, 0, start, count)
        ends[i] = start
        i += 1


def moving(body: dict) -> np.ndarray:
    """Which bodies of world 0 the solver moves (dynamic, not locked, with mass)."""
    response = body["response"].numpy()[0]
    return (response == int(Response.DYNAMIC)) & (body["locked_by"].numpy()[0] == 0) & (body["mass"].numpy()[0] > 0)


def greedy_ends(items: list[tuple[int, int] | None], moves: np.ndarray, most: int) -> list[int]:
    """Batch ends of ``items`` (body pairs; None for a free row) taken in order: a batch ends before an item that
    moves a body an earlier item of the batch moves, or after ``most`` rows."""
    ends, start, taken = [], 0, set()
    for k, item in enumerate(items):
        bodies = {b for b in (item or ()) if moves[b]}
        if k - start == most or bodies & taken:
            ends.append(k)
            start, taken = k, set()
        taken |= bodies
    return [*ends, len(items)]


@pytest.mark.parametrize("lanes", [1, 2, 3, SOLVER_LANES])
def test_joint_batches_never_hold_two_joints_moving_one_body(lanes):
    specs = [
        scene.floor(),
        *(cube(1.0 * i, 0.0, HALF) for i in range(5)),
        cube(6.0, 0.0, HALF, response=Response.STATIC),
    ]
    sim = scene.build(specs, PhysicsConfig(max_bodies=8, max_joints=8))
    body, _, bodies, _, _ = scene.solver_views(sim)
    # Rows: free ones (None), joints sharing a moving cube, and joints sharing only the static cube or the floor.
    rows = [(1, 2), (3, 4), None, (2, 5), (6, 1), (6, 5), (0, 3), (1, 4)]
    joints = GrabJoints()
    joints.alive = wp.array([[0 if r is None else 1 for r in rows]], dtype=wp.int32)
    joints.joint_body_a = wp.array([[(r or (2, 3))[0] for r in rows]], dtype=wp.int32)
    joints.joint_body_b = wp.array([[(r or (2, 3))[1] for r in rows]], dtype=wp.int32)
    for name, dtype in (("joint_anchor_a", wp.vec3), ("joint_anchor_b", wp.vec3), ("joint_rotation", wp.quat)):
        setattr(joints, name, wp.zeros((1, len(rows)), dtype=dtype))
    ends = wp.full(len(rows), -1, dtype=wp.int32)
    wp.launch(joint_batch_ends, dim=1, inputs=[bodies, joints, lanes, ends], device="cpu")
    expected = greedy_ends(rows, moving(body), lanes)
    assert ends.numpy()[: len(expected)].tolist() == expected
    if lanes == SOLVER_LANES:
        assert expected == [3, 5, 8]


@pytest.mark.parametrize(
    ("name", "shared"), [("pyramid shuffled, touching", True), ("heap 0", True), ("stack 8 interleaved 2 cm", False)]
)
def test_velocity_batches_never_hold_two_manifolds_moving_one_body(name, shared):
    """A stack's manifolds each move a cube the next one moves: a batch apiece. A pyramid's floor manifolds, or a
    heap's, share batches."""
    sim = scene.build(SCENES[name](), PhysicsConfig(max_bodies=16))
    for _ in range(20):
        sim.step()
    body, contact, bodies, _, c = scene.solver_views(sim)
    count = int(sim.tensor("world", "contact_count").numpy()[0])
    c.count = wp.array([count], dtype=wp.int32)
    a, b = (contact[f"contact_body_{side}"].numpy()[0, :count].tolist() for side in "ab")
    pairs = list(zip(a, b, strict=True))
    starts = [k for k in range(count) if k == 0 or pairs[k] != pairs[k - 1]]
    marks = wp.zeros_like(body["velocity_batch"])
    ends = wp.full(count + 1, -1, dtype=wp.int32)
    wp.launch(velocity_batch_ends, dim=1, inputs=[bodies, c, marks, ends], device="cpu")
    manifold_ends = greedy_ends([pairs[k] for k in starts], moving(body), len(starts))
    expected = [([*starts, count])[m] for m in manifold_ends]
    got = ends.numpy()[: len(expected)].tolist()
    assert got == expected, (got, expected)
    assert (len(expected) < len(starts)) == shared and len(expected) > 1, (expected, len(starts))


def _play_moves(sim: ecs.BatchSim, steps: int) -> dict[str, np.ndarray]:
    gen = torch.Generator().manual_seed(3)
    for _ in range(steps):
        sim.actions["move"].copy_(
            torch.randint(0, 11, tuple(sim.actions["move"].shape), generator=gen, dtype=torch.int32)
        )
        sim.step()
    return {k: v.copy() for k, v in sim.state_dict()["arrays"].items()}


@pytest.mark.parametrize(("lanes", "staged"), [(8, False), (8, True), (4, False)])
def test_fewer_lanes_per_world_give_a_thread_per_worlds_state(cpu_blocks, lanes, staged):
    """``solver_lanes``: a block of 4 or 8 lanes per world (on CPU a block is a world's; on CUDA a warp holds 32 //
    lanes worlds, launched over ceil(num_worlds / that) blocks) steps hide-and-seek, episodes ending on the way, to
    a thread per world's state bit for bit, but for the solver's scratch columns (what a block's narrowphase and
    stages leave there)."""
    from ecs.graph import TaskGraph

    cfg = dict(max_episode_steps=9, prep_fraction=0.0)
    want = _play_moves(
        ecs.BatchSim(envs.make("hide_and_seek", **cfg, solver_layout="world"), 5, device="cpu", seed=2), 20
    )
    spec = envs.make("hide_and_seek", **cfg, solver_layout="block", solver_lanes=lanes, solver_staged=staged)
    sim = ecs.BatchSim(spec, 5, device="cpu", seed=2)
    solver_tasks = [t for t in sim.graph.tasks if t.system.block_dim]
    assert solver_tasks and {(t.system.block_dim, t.kernel.key.endswith(f"_l{lanes}")) for t in solver_tasks} == {
        (lanes, True)
    }
    got = _play_moves(sim, 20)
    assert want["singleton/episode"].max() >= 2  # worlds were reset between steps
    scratch = {c.name for c in (*solver.SCRATCH_COMPONENTS, *solver.CONTACT_SCRATCH_COMPONENTS, solver.SolverCounts)}
    scratch |= {"contact_order", "contact_normal_speed"}  # the block's narrowphase stages its rows there
    kept = [k for k in want if k.split("/")[-1] not in scratch]
    assert "table/body/position" in kept
    assert [k for k in kept if not np.array_equal(want[k], got[k])] == []
    # The CUDA build: a warp of 32 // lanes worlds per block, one block per that many worlds (5 worlds: 2 blocks).
    graph = TaskGraph(
        spec.systems, sim.storage.layout, device_is_cpu=False, num_worlds=sim.num_worlds, env_name=spec.name
    )
    group = SOLVER_LANES // lanes
    cuda = [t for t in graph.tasks if t.system.block_dim]
    assert {(t.system.block_dim, t.kernel.key.endswith(f"_l{lanes}_g{group}")) for t in cuda} == {(SOLVER_LANES, True)}
    assert {t.system.dim(sim) for t in cuda} == {(5 + group - 1) // group}


def test_the_auto_layout_on_cuda_is_a_thread_per_world_staged_from_many_worlds():
    """On CUDA the default ("auto" layout, staging and cache) runs the block staged and cached below
    ``physics.AUTO_WORLD_FROM`` worlds and a thread per world staged from there on, each substep's four kernels in
    the same order; the CPU build runs the whole kernel at every count. A choice that pins the block (the layout,
    the cache, the whole kernel, timing, fewer lanes) keeps it at every count; ``solver_world_from`` moves the edge."""
    from ecs.graph import TaskGraph

    edge = physics.AUTO_WORLD_FROM
    spec = envs.make("hide_and_seek", max_episode_steps=8, physics_substeps=2)
    layout = ecs.BatchSim(spec, 2, device="cpu", seed=0).storage.layout

    def collide(spec: ecs.EnvSpec, is_cpu: bool, n: int) -> list[str]:
        graph = TaskGraph(spec.systems, layout, device_is_cpu=is_cpu, num_worlds=n, env_name=spec.name)
        return [t.kernel.key for t in graph.tasks if t.phase == ecs.Phase.COLLIDE]

    def staged(suffix: str) -> list[str]:
        return [*(f"step_bodies_{stage}{suffix}" for _ in range(2) for stage in solver.STAGED), "end_substeps"]

    for n in (1, 2, edge - 1, edge, edge + 1, 4 * edge):
        assert collide(spec, True, n) == ["step_bodies"], n
        assert collide(spec, False, n) == staged("_block_cached" if n < edge else ""), n
    # Staged without the cache named: the block below the edge, a thread per world from it.
    uncached = envs.make("hide_and_seek", max_episode_steps=8, physics_substeps=2, solver_cache=False)
    assert [collide(uncached, False, n) for n in (edge - 1, edge)] == [staged("_block"), staged("")]
    assert collide(uncached, True, edge) == ["step_bodies"]
    pinned = {
        "block": (dict(solver_layout="block"), staged("_block_cached"), ["step_bodies_block"]),
        "cached": (dict(solver_cache=True), staged("_block_cached"), ["step_bodies"]),
        "whole": (dict(solver_staged=False), ["step_bodies_block_cached"], ["step_bodies"]),
        "timed": (dict(solver_timing=True), ["step_bodies_block_timed_cached"], ["step_bodies_timed"]),
        "8 lanes": (dict(solver_lanes=8), staged("_block_l8_g4"), ["step_bodies"]),
    }
    for name, (fields, cuda, cpu) in pinned.items():
        pinned_spec = envs.make("hide_and_seek", max_episode_steps=8, physics_substeps=2, **fields)
        for n in (edge - 1, edge, 4 * edge):
            assert collide(pinned_spec, False, n) == cuda, (name, n)
            assert collide(pinned_spec, True, n) == cpu, (name, n)
    # The edge is a config field (solver_world_from); at 1 a thread per world at every count.
    for world_from, thread_from in ((4, 4), (1, 1), (edge * 2, edge * 2)):
        moved = envs.make("hide_and_seek", max_episode_steps=8, physics_substeps=2, solver_world_from=world_from)
        for n in (1, 3, 4, 5, edge, edge * 2):
            assert collide(moved, False, n) == staged("" if n >= thread_from else "_block_cached"), (world_from, n)
            assert collide(moved, True, n) == ["step_bodies"], (world_from, n)
    for bad in (0, -5, 2.5, True, "many"):
        with pytest.raises(ecs.ConfigError, match=r"solver_world_from must be an int >= 1"):
            PhysicsConfig(solver_world_from=bad)
        with pytest.raises(ValueError, match=r"solver_world_from must be an int"):
            envs.make("hide_and_seek", solver_world_from=bad)
    with pytest.raises(ecs.ConfigError, match=r"world_from must be an int >= 1"):
        physics.solver_systems("auto", staged=True, world_from=0)


def test_solver_lanes_is_checked_and_leaves_the_cache_off():
    with pytest.raises(
        ecs.ConfigError, match=r"solver_lanes must be one of \[4, 8, 16, 32\] \(lanes per world\), got 12"
    ):
        PhysicsConfig(solver_lanes=12)
    with pytest.raises(
        ecs.ConfigError, match=r"solver_cache keeps one world per block: it needs solver_lanes 32, got 8"
    ):
        PhysicsConfig(solver_lanes=8, solver_cache=True)
    with pytest.raises(ValueError, match=r"solver_lanes must be one of \[4, 8, 16, 32\], got 2"):
        envs.make("hide_and_seek", solver_lanes=2)
    with pytest.raises(ValueError, match=r"it needs solver_lanes 32, got 16"):
        envs.make("hide_and_seek", solver_lanes=16, solver_cache=True)
    with pytest.raises(ecs.ConfigError, match=r"solver lanes must be one of \[4, 8, 16, 32\] \(per world\), got 64"):
        physics.solver_systems("block", lanes=64)
    with pytest.raises(ValueError, match=r"width must be one of \[4, 8, 16, 32\]"):
        solver.step_kernel(True, width=8, group=2)
    # "auto" (the default): on CUDA the staged block of 8 lanes a world, 4 worlds a warp, without the cache; on CPU
    # the whole kernel of a thread per world.
    systems = physics.systems(PhysicsConfig(solver_lanes=8))
    cpu = [s.fn.key for s in systems if s.runs_on(True) and s.phase == ecs.Phase.COLLIDE]
    cuda = [s.on(False).fn.key for s in systems if s.runs_on(False) and s.phase == ecs.Phase.COLLIDE]
    assert cpu == ["step_bodies"]
    assert cuda[-1] == "end_substeps"
    assert set(cuda[:-1]) == {f"step_bodies_{stage}_block_l8_g4" for stage in solver.STAGED}


def _lane_probe(width: int, group: int) -> wp.Kernel:
    """A tiled kernel of ``group`` worlds of ``width`` lanes per block that runs the solver's lane primitives."""

    def probe(values: wp.array[wp.int32], shared_out: wp.array[wp.int32], any_out: wp.array[wp.int32]):
        tile, thread = wp.tid()
        world = tile * wp.static(group) + thread // wp.static(width)
        lane = thread - (thread // wp.static(width)) * wp.static(width)
        i = world * wp.static(width) + lane
        v = values[i]
        shared = solver.block_share(v, wp.static(width))
        seen = solver.block_any(v == 7, wp.static(width))
        solver.block_sync(wp.static(width))
        shared_out[i] = shared
        any_out[i] = wp.where(seen, 1, 0)

    options = {"block_dim": width * group, "enable_backward": False}
    return wp.kernel(probe, name=f"lane_probe_{width}_{group}", module="unique", module_options=options)


def test_the_lane_primitives_meet_over_a_worlds_lanes(cpu_blocks, device):
    """``block_share`` and ``block_any`` over a world's lanes: a block of one world (CPU and CUDA), and on CUDA a
    warp of 4 worlds of 8 lanes (``solver_lanes: 8``), whose worlds share and vote apart."""
    forms = [(8, 1)] + ([(8, 4), (4, 8), (16, 2)] if device.startswith("cuda") else [])
    for width, group in forms:
        worlds = 3 * group
        values = np.arange(worlds * width, dtype=np.int32) + 100
        values[width * 1 + 3] = 7  # world 1 has a 7 on its lane 3
        arrays = [wp.array(values, dtype=wp.int32, device=device)]
        arrays += [wp.zeros(worlds * width, dtype=wp.int32, device=device) for _ in range(2)]
        wp.launch_tiled(
            _lane_probe(width, group), dim=[worlds // group], inputs=arrays, block_dim=width * group, device=device
        )
        shared, seen = arrays[1].numpy().reshape(worlds, width), arrays[2].numpy().reshape(worlds, width)
        assert (shared == values.reshape(worlds, width)[:, :1]).all(), (width, group, shared)
        assert (seen == (np.arange(worlds) == 1)[:, None]).all(), (width, group, seen)


@pytest.mark.parametrize(
    "layout,staged,cached,lanes",
    [
        ("world", False, False, 32),
        ("block", False, False, 32),
        ("world", True, False, 32),
        ("block", True, True, 32),
        ("block", True, False, 8),
    ],
)
def test_each_solver_kernel_holds_one_copy_of_the_contact_solve(layout, staged, cached, lanes):
    """The CUDA source of a solver kernel calls ``manifold_corrections`` (the contact solve, inlined by the compiler)
    in one place: a manifold on its own and a Jacobi step share it (``level_manifold``) and the contact passes are a
    loop, not unrolled (Warp unrolls a constant range that holds a static branch). Four copies of it made the
    staged solve kernel 2.4 times the instructions (``registers-sm90.md``, code size)."""
    import re

    tables = {"max_bodies": solver.CACHE_BODIES, "max_contacts": solver.CACHE_CONTACTS}
    systems = physics.solver_systems(layout, None, staged=staged, cached=cached, lanes=lanes, **tables)
    kernels = [s.on(False).fn for s in systems if s.runs_on(False) and s.on(False).fn is not solver.end_substeps]
    assert len(kernels) == (len(solver.STAGED) if staged else 1)
    for kernel in kernels:
        module = kernel.module
        module.hash_module()  # the module's hashers, which its code generation reads
        options = {**module.options, "block_dim": module.options.get("block_dim", 256)}
        source = module._run_codegen(options, is_cpu=False)[0]  # CUDA source, without compiling it
        # Call sites of each function on the way to the solve, less its definition: the code holds as many
        # copies of the solve as the product of these.
        calls = {f: len(re.findall(rf"\b{f}_\w*\(", source)) - 1 for f in ("level_manifold", "manifold_corrections")}
        solves = "solve" in kernel.key or not staged
        assert calls == dict.fromkeys(calls, 1 if solves else -1), (kernel.key, calls)
