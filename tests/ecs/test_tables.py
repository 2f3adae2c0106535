"""Tables: shapes and dtypes of columns, spawning and despawning in kernels, entity handles, capacity
errors, and properties of the step (dead rows never change, worlds are independent)."""

from dataclasses import dataclass

import numpy as np
import pytest
import torch
import warp as wp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ecs

wp.set_module_options({"enable_backward": False})

vec5 = wp.types.vector(5, wp.float32)


def put(sim: ecs.BatchSim, archetype: str, component: str, value) -> None:
    """Writes ``value`` into a column through its zero-copy torch view."""
    view = sim.tensor(archetype, component)
    view.copy_(torch.as_tensor(np.asarray(value), dtype=view.dtype, device=view.device))
    if view.is_cuda:
        torch.cuda.synchronize(view.device)


def get(sim: ecs.BatchSim, archetype: str, component: str) -> np.ndarray:
    wp.synchronize_device(sim.device)
    return sim.tensor(archetype, component).cpu().numpy().copy()


def set_actions(sim: ecs.BatchSim, **actions) -> None:
    for key, value in actions.items():
        view = sim.actions[key]
        view.copy_(torch.as_tensor(np.asarray(value), dtype=view.dtype))
        if view.is_cuda:
            torch.cuda.synchronize(view.device)


# -- shapes and dtypes -----------------------------------------------------------------------


@ecs.component
class Position:
    """Position [m], exported ``[num_worlds, capacity, 3]``."""

    value: wp.vec3


@ecs.component
class Frame:
    """A 2x2 frame, exported ``[num_worlds, capacity, 2, 2]``."""

    value: wp.mat22


@ecs.component
class Features:
    """Five features, exported ``[num_worlds, capacity, 5]``."""

    value: vec5


@ecs.component(shape=(3,))
class History:
    """Last three values, exported ``[num_worlds, capacity, 3]``."""

    value: wp.float32


@ecs.component(shape=(2,))
class Trail:
    """Two 2-d points, exported ``[num_worlds, capacity, 2, 2]``."""

    value: wp.vec2


@ecs.component(shape=(2, 2))
class Grid:
    """A 2x2 integer grid, exported ``[num_worlds, capacity, 2, 2]``."""

    value: wp.int32


@ecs.component(singleton=True)
class Score:
    value: wp.float32


@ecs.component(singleton=True)
class Heading:
    value: wp.vec3


@ecs.component(singleton=True)
class Basis:
    value: wp.mat33


@ecs.component(singleton=True, shape=(4,))
class Board:
    value: wp.int32


@ecs.component(singleton=True, shape=(4,))
class Spots:
    value: wp.vec2


@ecs.component(singleton=True, shape=(2, 2, 2))
class Cube:
    value: wp.float32


@wp.kernel
def fill_thing(
    position_out: wp.array2d(dtype=wp.vec3),
    frame_out: wp.array2d(dtype=wp.mat22),
    features_out: wp.array2d(dtype=vec5),
    history_out: wp.array3d(dtype=wp.float32),
    trail_out: wp.array3d(dtype=wp.vec2),
    grid_out: wp.array4d(dtype=wp.int32),
):
    world, row = wp.tid()
    b = float(world * 100 + row * 10)
    position_out[world, row] = wp.vec3(b, b + 1.0, b + 2.0)
    frame_out[world, row] = wp.mat22(b, b + 1.0, b + 2.0, b + 3.0)
    features_out[world, row] = vec5(b, b + 1.0, b + 2.0, b + 3.0, b + 4.0)
    for k in range(3):
        history_out[world, row, k] = b + float(k)
    for k in range(2):
        trail_out[world, row, k] = wp.vec2(b + float(2 * k), b + float(2 * k + 1))
    for i in range(2):
        for j in range(2):
            grid_out[world, row, i, j] = world * 100 + row * 10 + i * 2 + j


@wp.kernel
def fill_world(
    world_score_out: wp.array(dtype=wp.float32),
    world_heading_out: wp.array(dtype=wp.vec3),
    world_basis_out: wp.array(dtype=wp.mat33),
    world_board_out: wp.array2d(dtype=wp.int32),
    world_spots_out: wp.array2d(dtype=wp.vec2),
    world_cube_out: wp.array4d(dtype=wp.float32),
):
    world = wp.tid()
    b = float(world * 100)
    world_score_out[world] = b
    world_heading_out[world] = wp.vec3(b, b + 1.0, b + 2.0)
    m = wp.mat33()
    for i in range(3):
        for j in range(3):
            m[i, j] = b + float(3 * i + j)
    world_basis_out[world] = m
    for k in range(4):
        world_board_out[world, k] = world * 100 + k
        world_spots_out[world, k] = wp.vec2(b + float(2 * k), b + float(2 * k + 1))
    for i in range(2):
        for j in range(2):
            for k in range(2):
                world_cube_out[world, i, j, k] = b + float(4 * i + 2 * j + k)


THING = ecs.Archetype("thing", (Position, Frame, Features, History, Trail, Grid), capacity=3)


def test_columns_have_the_documented_shapes_and_dtypes(device):
    W, cap = 2, THING.capacity
    env = ecs.EnvSpec(
        name="tables_shapes",
        config=None,
        archetypes=[THING],
        singletons=[Score, Heading, Basis, Board, Spots, Cube],
        systems=[ecs.System(fill_thing, ecs.Phase.PHYSICS), ecs.System(fill_world, ecs.Phase.PHYSICS)],
    )
    sim = ecs.BatchSim(env, W, device=device)
    entity_shapes = {
        "position": (3,),
        "frame": (2, 2),
        "features": (5,),
        "history": (3,),
        "trail": (2, 2),
        "grid": (2, 2),
        "alive": (),
        "generation": (),
    }
    world_shapes = {"score": (), "heading": (3,), "basis": (3, 3), "board": (4,), "spots": (4, 2), "cube": (2, 2, 2)}
    # Warp arrays: (num_worlds, capacity, *shape) and (num_worlds, *shape); the dtype adds the rest on export.
    assert sim.tables["thing"]["trail"].shape == (W, cap, 2)
    assert sim.tables["thing"]["grid"].shape == (W, cap, 2, 2)
    assert sim.tables["thing"]["features"].shape == (W, cap)
    assert sim.singletons["spots"].shape == (W, 4)
    assert sim.singletons["cube"].shape == (W, 2, 2, 2)
    for name, shape in entity_shapes.items():
        view = sim.tensor("thing", name)
        assert tuple(view.shape) == (W, cap, *shape), name
        assert view.dtype == (torch.int32 if name in ("grid", "alive", "generation") else torch.float32), name
        assert view.device.type == torch.device(device).type
    for name, shape in world_shapes.items():
        view = sim.tensor("world", name)
        assert tuple(view.shape) == (W, *shape), name
        assert view.dtype == (torch.int32 if name == "board" else torch.float32), name
    assert sim.tensor("thing", "position") is sim.tensor("thing", "position")  # persistent view

    sim.step()
    # Each element holds its own flat index within the entity (or world) plus a base: the layout is
    # row-major over (world, row, *shape, *dtype shape), as numpy and torch expect.
    for name, shape in entity_shapes.items():
        if name in ("alive", "generation"):
            continue
        n = int(np.prod(shape))
        base = np.arange(W)[:, None, None] * 100 + np.arange(cap)[None, :, None] * 10
        expected = (base + np.arange(n)[None, None, :]).reshape(W, cap, *shape)
        np.testing.assert_array_equal(get(sim, "thing", name), expected, err_msg=name)
    for name, shape in world_shapes.items():
        n = int(np.prod(shape, dtype=int))
        expected = (np.arange(W)[:, None] * 100 + np.arange(n)[None, :]).reshape(W, *shape)
        np.testing.assert_array_equal(get(sim, "world", name), expected, err_msg=name)

    with pytest.raises(ecs.EcsError, match=r"no archetype 'things'"):
        sim.tensor("things", "position")
    with pytest.raises(ecs.EcsError, match=r"has no component 'score'"):
        sim.tensor("thing", "score")
    with pytest.raises(ecs.EcsError, match=r"no singleton 'position'"):
        sim.tensor("world", "position")


# -- spawning, despawning and handles ----------------------------------------------------------


@ecs.component
class Weight:
    """Mass of a ball [kg]."""

    value: wp.float32


@ecs.component(singleton=True)
class Cmd:
    """Action: 0 nothing, 1 spawns a ball, 2 despawns the ball in row ``slot``."""

    value: wp.int32


@ecs.component(singleton=True)
class Slot:
    """Action: the row that command 2 despawns."""

    value: wp.int32


@ecs.component(singleton=True)
class Keep:
    """Handle of the first ball spawned in the world (0 until then)."""

    value: wp.int64


@ecs.component(singleton=True)
class Spawned:
    """Row given by this step's spawn, or -1."""

    value: wp.int32


@ecs.component(singleton=True)
class Live:
    """1 while the kept handle names a live entity."""

    value: wp.int32


@ecs.component(singleton=True)
class KeptRow:
    value: wp.int32


@ecs.component(singleton=True)
class KeptGeneration:
    value: wp.int32


BALL_ID = 3
BALLS = ecs.Archetype("ball", (Weight,), capacity=3)


@wp.kernel
def manage_balls(
    # Components in:
    world_cmd_in: wp.array(dtype=wp.int32),
    world_slot_in: wp.array(dtype=wp.int32),
    # Components out:
    ball__alive_out: wp.array2d(dtype=wp.int32),
    ball__generation_out: wp.array2d(dtype=wp.int32),
    ball__overflow_out: wp.array(dtype=wp.int32),
    ball__weight_out: wp.array2d(dtype=wp.float32),
    world_keep_out: wp.array(dtype=wp.int64),
    world_spawned_out: wp.array(dtype=wp.int32),
):
    world = wp.tid()
    cmd = world_cmd_in[world]
    world_spawned_out[world] = -1
    if cmd == 1:
        row = ecs.spawn(ball__alive_out, ball__generation_out, ball__overflow_out, world)
        world_spawned_out[world] = row
        if row >= 0:
            ball__weight_out[world, row] = float(world) + 0.5
            if world_keep_out[world] == wp.int64(ecs.NULL_HANDLE):
                world_keep_out[world] = ecs.make_handle(BALL_ID, row, ball__generation_out[world, row])
    if cmd == 2:
        ecs.despawn(ball__alive_out, world, world_slot_in[world])


@wp.kernel
def check_kept_handle(
    # Components in:
    world_keep_in: wp.array(dtype=wp.int64),
    ball__alive_in: wp.array2d(dtype=wp.int32),
    ball__generation_in: wp.array2d(dtype=wp.int32),
    # Components out:
    world_live_out: wp.array(dtype=wp.int32),
    world_kept_row_out: wp.array(dtype=wp.int32),
    world_kept_generation_out: wp.array(dtype=wp.int32),
):
    world = wp.tid()
    handle = world_keep_in[world]
    world_live_out[world] = wp.where(ecs.is_live(handle, ball__alive_in, ball__generation_in, world), 1, 0)
    world_kept_row_out[world] = ecs.handle_row(handle)
    world_kept_generation_out[world] = ecs.handle_generation(handle)


def spawn_env() -> ecs.EnvSpec:
    return ecs.EnvSpec(
        name="tables_spawn",
        config=None,
        archetypes=[BALLS],
        singletons=[Cmd, Slot, Keep, Spawned, Live, KeptRow, KeptGeneration],
        systems=[ecs.System(manage_balls, ecs.Phase.ACT), ecs.System(check_kept_handle, ecs.Phase.SENSE)],
        actions={"cmd": ecs.Action(Cmd, low=0, high=2), "slot": ecs.Action(Slot, low=0, high=BALLS.capacity - 1)},
    )


def step(sim: ecs.BatchSim, cmd, slot=(0, 0)) -> None:
    set_actions(sim, cmd=cmd, slot=slot)
    sim.step()


def test_spawn_despawn_generations_and_stale_handles(device):
    sim = ecs.BatchSim(spawn_env(), 2, device=device)
    assert get(sim, "world", "live").tolist() == [0, 0]  # the null handle is never live
    assert get(sim, "ball", "alive").sum() == 0

    step(sim, cmd=[1, 1])
    assert get(sim, "world", "spawned").tolist() == [0, 0]
    assert get(sim, "ball", "alive").tolist() == [[1, 0, 0], [1, 0, 0]]
    assert get(sim, "ball", "generation").tolist() == [[1, 0, 0], [1, 0, 0]]
    assert get(sim, "ball", "weight")[:, 0].tolist() == [0.5, 1.5]
    assert get(sim, "world", "live").tolist() == [1, 1]
    assert get(sim, "world", "kept_row").tolist() == [0, 0]
    assert get(sim, "world", "kept_generation").tolist() == [1, 1]
    keep = get(sim, "world", "keep")
    assert keep.tolist() == [(BALL_ID << 48) | 1] * 2  # archetype << 48 | row << 32 | generation

    step(sim, cmd=[1, 0])  # a second ball in world 0 takes the next free row
    assert get(sim, "ball", "alive").tolist() == [[1, 1, 0], [1, 0, 0]]
    assert get(sim, "world", "spawned").tolist() == [1, -1]

    step(sim, cmd=[2, 2], slot=[0, 0])  # despawn the kept balls: the handles go stale at once
    assert get(sim, "ball", "alive").tolist() == [[0, 1, 0], [0, 0, 0]]
    assert get(sim, "world", "live").tolist() == [0, 0]
    assert get(sim, "ball", "generation").tolist() == [[1, 1, 0], [1, 0, 0]]

    step(sim, cmd=[1, 1])  # row 0 is reused with a new generation: the old handle stays stale
    assert get(sim, "world", "spawned").tolist() == [0, 0]
    assert get(sim, "ball", "alive").tolist() == [[1, 1, 0], [1, 0, 0]]
    assert get(sim, "ball", "generation").tolist() == [[2, 1, 0], [2, 0, 0]]
    assert get(sim, "world", "live").tolist() == [0, 0]
    assert get(sim, "world", "kept_generation").tolist() == [1, 1]
    np.testing.assert_array_equal(get(sim, "world", "keep"), keep)  # not overwritten: only the first is kept

    for _ in range(2):  # every spawn of a row bumps its generation
        step(sim, cmd=[2, 0], slot=[0, 0])
        step(sim, cmd=[1, 0])
    assert get(sim, "ball", "generation").tolist() == [[4, 1, 0], [2, 0, 0]]


def test_spawn_beyond_capacity_raises_at_next_sync_and_sim_recovers(device):
    sim = ecs.BatchSim(spawn_env(), 2, device=device)
    for _ in range(3):
        step(sim, cmd=[0, 1])
    assert get(sim, "ball", "alive").tolist() == [[0, 0, 0], [1, 1, 1]]
    with pytest.raises(ecs.CapacityError) as info:
        step(sim, cmd=[1, 1])
        sim.check()  # on CPU step() raised already; on CUDA the next sync does
    msg = str(info.value)
    assert "'ball'" in msg and "capacity is 3" in msg and "world 1" in msg and "1 spawn(s) failed" in msg
    assert "raise capacity in Archetype('ball', ..., capacity=...)" in msg  # the archetype has no ``grow`` of its own
    assert isinstance(info.value, ecs.EcsError)
    # The failed spawn changed nothing in world 1; world 0's spawn went through.
    assert get(sim, "ball", "alive").tolist() == [[1, 0, 0], [1, 1, 1]]
    assert get(sim, "ball", "generation").tolist() == [[1, 0, 0], [1, 1, 1]]
    assert get(sim, "world", "spawned").tolist() == [0, -1]

    # The error was reported once; the simulation keeps working.
    step(sim, cmd=[0, 2], slot=[0, 1])
    sim.check()
    step(sim, cmd=[0, 1])
    sim.check()
    assert get(sim, "ball", "alive").tolist() == [[1, 0, 0], [1, 1, 1]]
    assert get(sim, "ball", "generation").tolist() == [[1, 0, 0], [1, 2, 1]]
    assert get(sim, "world", "spawned").tolist() == [-1, 1]


@wp.kernel
def roundtrip_handles(
    archetype: wp.array(dtype=wp.int32),
    row: wp.array(dtype=wp.int32),
    generation: wp.array(dtype=wp.int32),
    decoded: wp.array2d(dtype=wp.int32),
):
    i = wp.tid()
    h = ecs.make_handle(archetype[i], row[i], generation[i])
    decoded[i, 0] = ecs.handle_archetype(h)
    decoded[i, 1] = ecs.handle_row(h)
    decoded[i, 2] = ecs.handle_generation(h)


def test_handle_fields_roundtrip():
    rng = np.random.default_rng(5)
    n = 64
    fields = [rng.integers(1, 2**15, n), rng.integers(0, 2**16, n), rng.integers(1, 2**31 - 1, n)]
    arrays = [wp.array(f.astype(np.int32), dtype=wp.int32, device="cpu") for f in fields]
    decoded = wp.zeros((n, 3), dtype=wp.int32, device="cpu")
    wp.launch(roundtrip_handles, dim=n, inputs=[*arrays, decoded], device="cpu")
    np.testing.assert_array_equal(decoded.numpy(), np.stack(fields, axis=1))


# -- a per-entity function against numpy ---------------------------------------------------------


@ecs.component
class Velocity:
    """Velocity [m/s]."""

    value: wp.vec3


@ecs.component
class Mass:
    """Mass [kg], > 0."""

    value: wp.float32


@dataclass(frozen=True)
class SpringConfig:
    dt: float = 0.05  # s
    damping: float = 0.3  # 1/s


@wp.func
def step_spring(
    # Resources:
    dt: float,
    damping: float,
    stiffness: wp.float32,
    # Components in:
    mass_in: wp.float32,
    # Components out:
    position_out: wp.vec3,
    velocity_out: wp.vec3,
):
    """Semi-implicit Euler step of a damped spring anchored at the origin."""
    accel = -(stiffness / mass_in) * position_out - damping * velocity_out
    v = velocity_out + accel * dt
    return position_out + v * dt, v


def test_per_entity_function_matches_numpy(device):
    W, cap = 4, 5
    stiffness = np.array([1.0, 2.5, 4.0, 0.5], np.float32)
    env = ecs.EnvSpec(
        name="tables_spring",
        config=SpringConfig(),
        archetypes=[ecs.Archetype("spring", (Position, Velocity, Mass), capacity=cap)],
        systems=[ecs.System(step_spring, ecs.Phase.PHYSICS)],
        params=[ecs.Param("stiffness", wp.float32, stiffness)],
    )
    sim = ecs.BatchSim(env, W, device=device)
    rng = np.random.default_rng(11)
    alive = (rng.random((W, cap)) < 0.7).astype(np.int32)
    alive[:, 0], alive[:, -1] = 1, 0
    x = rng.uniform(-2.0, 2.0, (W, cap, 3)).astype(np.float32)
    v = rng.uniform(-1.0, 1.0, (W, cap, 3)).astype(np.float32)
    m = rng.uniform(0.5, 3.0, (W, cap)).astype(np.float32)
    for name, value in (("alive", alive), ("position", x), ("velocity", v), ("mass", m)):
        put(sim, "spring", name, value)

    xs, vs = x.astype(np.float64), v.astype(np.float64)
    live = (alive != 0)[..., None]
    for _ in range(3):
        sim.step()
        accel = -(stiffness[:, None, None] / m[..., None]) * xs - 0.3 * vs
        v_new = vs + accel * 0.05
        xs, vs = np.where(live, xs + v_new * 0.05, xs), np.where(live, v_new, vs)
    np.testing.assert_allclose(get(sim, "spring", "position"), xs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(get(sim, "spring", "velocity"), vs, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(get(sim, "spring", "position")[alive == 0], x[alive == 0])
    assert not np.allclose(xs[alive != 0], x[alive != 0])  # the live rows did move


# -- properties: dead rows never change; worlds are independent ----------------------------------


@ecs.component
class Drift:
    """Velocity of a mote [m/s]."""

    value: wp.vec2


@ecs.component
class Spot:
    """Position of a mote [m]."""

    value: wp.vec2


@ecs.component(singleton=True)
class Kick:
    """Action: acceleration added to every mote of the world [m/s^2], in [-1, 1]."""

    value: wp.vec2


MOTES = ecs.Archetype("mote", (Spot, Drift), capacity=5)


@wp.kernel
def populate_motes(
    world_reset_in: wp.array(dtype=wp.int32),
    world_rng_out: wp.array(dtype=wp.uint32),
    mote__alive_out: wp.array2d(dtype=wp.int32),
    mote__generation_out: wp.array2d(dtype=wp.int32),
    mote__overflow_out: wp.array(dtype=wp.int32),
    mote__spot_out: wp.array2d(dtype=wp.vec2),
    mote__drift_out: wp.array2d(dtype=wp.vec2),
):
    """Despawns every mote, then spawns one to capacity - 1 fresh ones at random."""
    world = wp.tid()
    if world_reset_in[world] == 0:
        return
    state = world_rng_out[world]
    for row in range(mote__alive_out.shape[1]):
        ecs.despawn(mote__alive_out, world, row)
    n = wp.randi(state, 1, mote__alive_out.shape[1])
    for _i in range(n):
        row = ecs.spawn(mote__alive_out, mote__generation_out, mote__overflow_out, world)
        mote__spot_out[world, row] = wp.vec2(wp.randf(state, -2.0, 2.0), wp.randf(state, -2.0, 2.0))
        mote__drift_out[world, row] = wp.vec2(wp.randf(state, -1.0, 1.0), wp.randf(state, -1.0, 1.0))
    world_rng_out[world] = state


@wp.kernel
def command_motes(
    world_cmd_in: wp.array(dtype=wp.int32),
    world_slot_in: wp.array(dtype=wp.int32),
    world_rng_out: wp.array(dtype=wp.uint32),
    mote__alive_out: wp.array2d(dtype=wp.int32),
    mote__generation_out: wp.array2d(dtype=wp.int32),
    mote__overflow_out: wp.array(dtype=wp.int32),
    mote__spot_out: wp.array2d(dtype=wp.vec2),
    mote__drift_out: wp.array2d(dtype=wp.vec2),
):
    world = wp.tid()
    cmd = world_cmd_in[world]
    if cmd == 1:
        free = wp.int32(0)
        for row in range(mote__alive_out.shape[1]):
            if mote__alive_out[world, row] == 0:
                free += 1
        if free > 0:
            state = world_rng_out[world]
            row = ecs.spawn(mote__alive_out, mote__generation_out, mote__overflow_out, world)
            mote__spot_out[world, row] = wp.vec2(0.0, 0.0)
            mote__drift_out[world, row] = wp.vec2(wp.randf(state, -1.0, 1.0), wp.randf(state, -1.0, 1.0))
            world_rng_out[world] = state
    if cmd == 2:
        ecs.despawn(mote__alive_out, world, world_slot_in[world])


@wp.func
def kick_motes(dt: float, world_kick_in: wp.vec2, drift_out: wp.vec2):
    return drift_out + world_kick_in * dt


@wp.func
def move_motes(dt: float, drift_in: wp.vec2, spot_out: wp.vec2):
    return spot_out + drift_in * dt


@wp.kernel
def cull_motes(spot_in: wp.array2d(dtype=wp.vec2), alive_out: wp.array2d(dtype=wp.int32)):
    """Despawns motes that left the 3 m box."""
    world, row = wp.tid()
    p = spot_in[world, row]
    if alive_out[world, row] != 0 and (wp.abs(p[0]) > 3.0 or wp.abs(p[1]) > 3.0):
        ecs.despawn(alive_out, world, row)


PROP_WORLDS = 3
_PROP_SIMS: dict[str, tuple[ecs.BatchSim, dict]] = {}


def prop_sim(device: str) -> tuple[ecs.BatchSim, dict]:
    """One simulation per device, shared by the examples, with its state after reset.

    Dead rows are filled with non-zero garbage before the snapshot so that a write to one shows.
    """
    if device not in _PROP_SIMS:
        env = ecs.EnvSpec(
            name="tables_prop",
            config=None,
            archetypes=[MOTES],
            singletons=[Cmd, Slot, Kick],
            systems=[
                ecs.System(command_motes, ecs.Phase.ACT),
                ecs.System(kick_motes, ecs.Phase.PHYSICS),
                ecs.System(move_motes, ecs.Phase.PHYSICS),
                ecs.System(cull_motes, ecs.Phase.COLLIDE),
                ecs.System(populate_motes, ecs.Phase.RESET),
            ],
            actions={
                "cmd": ecs.Action(Cmd, low=0, high=2),
                "slot": ecs.Action(Slot, low=0, high=MOTES.capacity - 1),
                "kick": ecs.Action(Kick, low=-1.0, high=1.0),
            },
            max_episode_steps=3,
            resources={"dt": 0.5},
        )
        sim = ecs.BatchSim(env, PROP_WORLDS, device=device, seed=3)
        dead = get(sim, "mote", "alive") == 0
        assert dead.any() and (~dead).any()
        rng = np.random.default_rng(0)
        for name in ("spot", "drift"):
            value = get(sim, "mote", name)
            value[dead] = rng.uniform(5.0, 9.0, value[dead].shape)
            put(sim, "mote", name, value)
        _PROP_SIMS[device] = (sim, sim.state_dict())
    return _PROP_SIMS[device]


def world_actions(n_steps: int):
    """Per step: (cmd, slot, kick) for every world."""
    one = st.tuples(
        st.lists(st.integers(0, 2), min_size=PROP_WORLDS, max_size=PROP_WORLDS),
        st.lists(st.integers(0, MOTES.capacity - 1), min_size=PROP_WORLDS, max_size=PROP_WORLDS),
        st.lists(st.floats(-1.0, 1.0, width=32, allow_nan=False), min_size=2 * PROP_WORLDS, max_size=2 * PROP_WORLDS),
    )
    return st.lists(one, min_size=n_steps, max_size=n_steps)


def snapshot(sim: ecs.BatchSim) -> dict[str, np.ndarray]:
    out = {c: get(sim, "mote", c) for c in ("alive", "generation", "spot", "drift")}
    for s in ("rng", "episode", "episode_step", "reward", "terminated", "truncated"):
        out["world." + s] = get(sim, "world", s)
    return out


def run(sim: ecs.BatchSim, start: dict, actions, check_dead_rows: bool = False) -> dict[str, np.ndarray]:
    """Steps ``actions`` from ``start``; with ``check_dead_rows``, checks that no dead row changed.

    A dead row may legitimately change only by being spawned, which bumps its generation (a row
    spawned by a command and despawned by the same step's reset is dead before and after, yet it
    was written), so the rows checked are those dead before the step whose generation did not move.
    """
    sim.load_state_dict(start)
    checked = 0
    for cmd, slot, kick in actions:
        before = snapshot(sim)
        set_actions(sim, cmd=cmd, slot=slot, kick=np.reshape(kick, (PROP_WORLDS, 2)))
        sim.step()
        after = snapshot(sim)
        if check_dead_rows:
            assert (after["generation"] >= before["generation"]).all()
            untouched = (before["alive"] == 0) & (after["generation"] == before["generation"])
            for name in ("alive", "spot", "drift"):
                np.testing.assert_array_equal(after[name][untouched], before[name][untouched], err_msg=name)
            checked += int(untouched.sum())
    if check_dead_rows:
        assert checked > 0
    return snapshot(sim)


PROPERTY = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
    database=None,
)


@PROPERTY
@given(actions=world_actions(6))
def test_dead_rows_never_change(device, actions):
    sim, start = prop_sim(device)
    end = run(sim, start, actions, check_dead_rows=True)
    assert end["world.episode"].min() >= 1  # six steps with a horizon of 3: every world was reset


@PROPERTY
@given(data=st.data(), world=st.integers(0, PROP_WORLDS - 1))
def test_worlds_are_independent(device, data, world):
    sim, start = prop_sim(device)
    actions = data.draw(world_actions(4), label="actions")
    changed = data.draw(world_actions(4), label="other actions for one world")
    mixed = []
    for (cmd, slot, kick), (cmd2, slot2, kick2) in zip(actions, changed, strict=True):
        cmd, slot, kick = list(cmd), list(slot), list(kick)
        cmd[world], slot[world] = cmd2[world], slot2[world]
        kick[2 * world : 2 * world + 2] = kick2[2 * world : 2 * world + 2]
        mixed.append((cmd, slot, kick))
    a = run(sim, start, actions)
    b = run(sim, start, mixed)
    others = [w for w in range(PROP_WORLDS) if w != world]
    for name in a:
        np.testing.assert_array_equal(a[name][others], b[name][others], err_msg=name)
    # Replaying the same actions from the same state is bit-identical.
    c = run(sim, start, actions)
    for name in a:
        np.testing.assert_array_equal(a[name], c[name], err_msg=name)
