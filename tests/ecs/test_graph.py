"""The task graph: binding kernel parameters by name, queries, edges, validation errors, shuffled schedules.

Dummy systems are named by their access (``ro_position`` reads position, ``rw_velocity`` writes
velocity), as in EnTT's organizer tests.
"""

from dataclasses import dataclass

import numpy as np
import pytest
import torch
import warp as wp

import ecs

wp.set_module_options({"enable_backward": False})

# -- schema shared by the toy environments ---------------------------------------------------


@ecs.component
class Position:
    """Position along a line [m]."""

    value: wp.float32


@ecs.component
class Velocity:
    """Velocity along a line [m/s]."""

    value: wp.float32


@ecs.component
class Mass:
    """Mass [kg]."""

    value: wp.float32


@ecs.component
class Charge:
    """Charge [C]."""

    value: wp.float32


@ecs.component(singleton=True)
class Gravity:
    """Acceleration of every body of the world [m/s^2]."""

    value: wp.float32


@ecs.component(singleton=True)
class Total:
    """A per-world sum."""

    value: wp.float32


@ecs.component(singleton=True)
class Scaled:
    """Gravity times the world's gain."""

    value: wp.float32


@ecs.component(singleton=True)
class Counter:
    """A per-world counter."""

    value: wp.int32


BALL = ecs.Archetype("ball", (Position, Velocity), capacity=4)
BOX = ecs.Archetype("box", (Position, Velocity, Charge), capacity=3)
WALL = ecs.Archetype("wall", (Position, Mass), capacity=2)


@dataclass(frozen=True)
class ToyConfig:
    dt: float = 0.1  # s


def put(sim: ecs.BatchSim, archetype: str, component: str, value) -> None:
    """Writes ``value`` into a column through its zero-copy torch view."""
    view = sim.tensor(archetype, component)
    view.copy_(torch.as_tensor(np.asarray(value), dtype=view.dtype, device=view.device))
    if view.is_cuda:
        torch.cuda.synchronize(view.device)


def get(sim: ecs.BatchSim, archetype: str, component: str) -> np.ndarray:
    wp.synchronize_device(sim.device)
    return sim.tensor(archetype, component).cpu().numpy().copy()


# -- binding by parameter name -----------------------------------------------------------------


@wp.kernel
def push_velocity(
    # Resources:
    dt: float,
    bonus: float,
    gain: wp.array(dtype=wp.float32),
    # Components in:
    world_gravity_in: wp.array(dtype=wp.float32),
    alive_in: wp.array2d(dtype=wp.int32),
    # Components out:
    velocity_out: wp.array2d(dtype=wp.float32),
):
    world, row = wp.tid()
    if alive_in[world, row] == 0:
        return
    accel = world_gravity_in[world] * ecs.per_world(gain, world) + bonus
    velocity_out[world, row] = velocity_out[world, row] + accel * dt


@wp.func
def integrate_position(dt: float, velocity_in: wp.float32, position_out: wp.float32):
    return position_out + velocity_in * dt


@wp.func
def tag_charge(world: wp.int32, row: wp.int32, charge_out: wp.float32):
    return float(world * 10 + row)


@wp.kernel
def sum_ball_positions(
    ball__alive_in: wp.array2d(dtype=wp.int32),
    ball__position_in: wp.array2d(dtype=wp.float32),
    world_total_out: wp.array(dtype=wp.float32),
):
    world = wp.tid()
    total = wp.float32(0.0)
    for row in range(ball__position_in.shape[1]):
        if ball__alive_in[world, row] != 0:
            total += ball__position_in[world, row]
    world_total_out[world] = total


@wp.func
def tally_steps(step_bonus: wp.int32, world_counter_out: wp.int32):
    return world_counter_out + step_bonus


@wp.func
def scale_gravity(gain: wp.float32, world_gravity_in: wp.float32, world_scaled_out: wp.float32):
    return gain * world_gravity_in


def binding_env() -> ecs.EnvSpec:
    return ecs.EnvSpec(
        name="graph_bind",
        config=ToyConfig(),
        archetypes=[BALL, BOX, WALL],
        singletons=[Gravity, Total, Scaled, Counter],
        systems=[
            ecs.System(push_velocity, ecs.Phase.PHYSICS),
            ecs.System(integrate_position, ecs.Phase.PHYSICS),
            ecs.System(tag_charge, ecs.Phase.PHYSICS),
            ecs.System(sum_ball_positions, ecs.Phase.REWARD),
            ecs.System(tally_steps, ecs.Phase.REWARD),
            ecs.System(scale_gravity, ecs.Phase.REWARD),
        ],
        params=[ecs.Param("gain", wp.float32, [1.0, 2.0, 3.0])],
        resources={"bonus": 0.5, "step_bonus": 2},
    )


def test_binding_by_parameter_name(device):
    W = 3
    sim = ecs.BatchSim(binding_env(), W, device=device, seed=1)
    rng = np.random.default_rng(0)
    state = {}
    for arch in (BALL, BOX, WALL):
        alive = (rng.random((W, arch.capacity)) < 0.6).astype(np.int32)
        alive[:, 0] = 1
        alive[:, 1] = 0  # at least one live and one dead row everywhere
        put(sim, arch.name, "alive", alive)
        state[arch.name, "alive"] = alive
        for comp in arch.components:
            value = rng.uniform(-2.0, 2.0, (W, arch.capacity)).astype(np.float32)
            put(sim, arch.name, comp.name, value)
            state[arch.name, comp.name] = value
    gravity = np.array([-9.8, 1.5, 4.0], np.float32)
    put(sim, "world", "gravity", gravity)
    put(sim, "world", "counter", [5, 6, 7])

    sim.step()

    dt, bonus, gain = 0.1, 0.5, np.array([1.0, 2.0, 3.0], np.float32)
    accel = (gravity * gain + bonus)[:, None]
    for arch in ("ball", "box"):
        alive = state[arch, "alive"] != 0
        v0, p0 = state[arch, "velocity"], state[arch, "position"]
        v1 = np.where(alive, v0 + accel * dt, v0)
        p1 = np.where(alive, p0 + v1 * dt, p0)
        np.testing.assert_allclose(get(sim, arch, "velocity"), v1, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(get(sim, arch, "position"), p1, rtol=1e-5, atol=1e-6)
        if arch == "ball":
            total = np.where(alive, p1, 0.0).sum(axis=1)
            np.testing.assert_allclose(get(sim, "world", "total"), total, rtol=1e-5, atol=1e-5)
    # world and row reach a @wp.func as indices; only box holds charge.
    box_alive = state["box", "alive"] != 0
    tags = np.arange(W)[:, None] * 10.0 + np.arange(BOX.capacity)[None, :]
    np.testing.assert_array_equal(get(sim, "box", "charge"), np.where(box_alive, tags, state["box", "charge"]))
    # wall holds position but no velocity: the query skipped it entirely.
    np.testing.assert_array_equal(get(sim, "wall", "position"), state["wall", "position"])
    np.testing.assert_array_equal(get(sim, "wall", "mass"), state["wall", "mass"])
    np.testing.assert_array_equal(get(sim, "world", "counter"), [7, 8, 9])
    np.testing.assert_allclose(get(sim, "world", "scaled"), gravity * gain, rtol=1e-6)


def test_query_launches_once_per_matching_archetype():
    sim = ecs.BatchSim(binding_env(), 3, device="cpu")
    tasks = {t.name: t for t in sim.graph.tasks}
    assert {n for n in tasks if n.startswith("push_velocity")} == {"push_velocity[ball]", "push_velocity[box]"}
    assert {n for n in tasks if n.startswith("integrate_position")} == {
        "integrate_position[ball]",
        "integrate_position[box]",
    }
    assert tasks["tag_charge"].archetype == "box"  # one match: no suffix
    assert not any(t.archetype == "wall" for t in sim.graph.tasks)
    push = tasks["push_velocity[box]"]
    assert push.archetype == "box"
    assert push.writes == {("column", "box", "velocity")}
    assert push.reads == {("column", "box", "alive"), ("singleton", "gravity"), ("param", "gain")}
    total = tasks["sum_ball_positions"]
    assert total.archetype is None
    assert total.reads == {("column", "ball", "alive"), ("column", "ball", "position")}
    assert total.writes == {("singleton", "total")}
    # Resources and config fields are bound as values.
    sources = dict(push.sources)
    assert (sources["dt"].kind, sources["dt"].value) == ("value", 0.1)
    assert (sources["bonus"].kind, sources["bonus"].value) == ("value", 0.5)


# -- edges from read/write conflicts -----------------------------------------------------------


@wp.kernel
def ro_position(position_in: wp.array2d(dtype=wp.float32)):
    world, row = wp.tid()
    x = position_in[world, row]  # noqa: F841


@wp.kernel
def ro_velocity(velocity_in: wp.array2d(dtype=wp.float32)):
    world, row = wp.tid()
    v = velocity_in[world, row]  # noqa: F841


@wp.kernel
def rw_position(position_out: wp.array2d(dtype=wp.float32)):
    world, row = wp.tid()
    position_out[world, row] = position_out[world, row] + 1.0


@wp.kernel
def rw_velocity(velocity_out: wp.array2d(dtype=wp.float32)):
    world, row = wp.tid()
    velocity_out[world, row] = velocity_out[world, row] * 0.5


@wp.kernel
def rw_position_ro_velocity(velocity_in: wp.array2d(dtype=wp.float32), position_out: wp.array2d(dtype=wp.float32)):
    world, row = wp.tid()
    position_out[world, row] = position_out[world, row] + velocity_in[world, row]


BODY = ecs.Archetype("body", (Position, Velocity), capacity=2)


def edges_env() -> ecs.EnvSpec:
    P, R = ecs.Phase.PHYSICS, ecs.Phase.REWARD
    return ecs.EnvSpec(
        name="graph_raw",
        config=None,
        archetypes=[BODY],
        systems=[
            # Registered out of phase order on purpose: phases first, registration order second.
            ecs.System(rw_velocity, R, name="rw_velocity_late"),
            ecs.System(rw_velocity, P),
            ecs.System(rw_position, P),
            ecs.System(rw_position_ro_velocity, P),
            ecs.System(ro_position, P),
            ecs.System(ro_velocity, P),
        ],
    )


def test_edges_from_conflicts():
    sim = ecs.BatchSim(edges_env(), 2, device="cpu")
    graph = sim.graph
    index = {t.name: t.index for t in graph.tasks}
    names = [t.name for t in graph.tasks]
    assert names == [
        "rw_velocity",
        "rw_position",
        "rw_position_ro_velocity",
        "ro_position",
        "ro_velocity",
        "rw_velocity_late",
    ]
    preds = {t.name: {names[i] for i in graph.edges[t.index]} for t in graph.tasks}
    assert preds == {
        "rw_velocity": set(),
        "rw_position": set(),  # different columns: independent
        "rw_position_ro_velocity": {"rw_velocity", "rw_position"},  # read after write, write after write
        "ro_position": {"rw_position", "rw_position_ro_velocity"},
        "ro_velocity": {"rw_velocity"},  # reads never order each other
        "rw_velocity_late": set(),  # other phase: phase order handles it
    }
    assert graph.phases() == [ecs.Phase.PHYSICS, ecs.Phase.REWARD]
    assert [t.name for t in graph.order(ecs.Phase.REWARD)] == ["rw_velocity_late"]

    text = str(graph)
    assert "'graph_raw'" in text and "6 tasks" in text
    assert text.index("PHYSICS") < text.index("REWARD")
    for name in names:
        assert name in text
    ro_line = next(line for line in text.splitlines() if "ro_position (" in line)
    assert f"after [{index['rw_position']}], [{index['rw_position_ro_velocity']}]" in ro_line
    assert "reads:  body.position" in text
    assert "writes: body.velocity" in text


def test_order_shuffles_and_respects_edges():
    graph = ecs.BatchSim(edges_env(), 1, device="cpu").graph
    phase = ecs.Phase.PHYSICS
    registered = [t.index for t in graph.order(phase)]
    assert registered == sorted(registered)
    orders = set()
    for seed in range(30):
        order = [t.index for t in graph.order(phase, seed)]
        assert sorted(order) == registered
        position = {i: k for k, i in enumerate(order)}
        for task, preds in graph.edges.items():
            for pred in preds:
                if task in position:
                    assert position[pred] < position[task], (seed, order)
        orders.add(tuple(order))
        assert [t.index for t in graph.order(phase, seed)] == order  # a seed gives one order
    assert len(orders) > 3


# -- errors ----------------------------------------------------------------------------------


@wp.kernel
def read_typo(positon_in: wp.array2d(dtype=wp.float32)):
    _world, _row = wp.tid()


@wp.kernel
def read_singleton_typo(world_gravty_in: wp.array(dtype=wp.float32)):
    _world = wp.tid()


@wp.kernel
def read_singleton_as_column(gravity_in: wp.array2d(dtype=wp.float32)):
    _world, _row = wp.tid()


@wp.kernel
def read_column_as_singleton(world_position_in: wp.array(dtype=wp.float32)):
    _world = wp.tid()


@wp.kernel
def read_unknown_archetype(bal__position_in: wp.array2d(dtype=wp.float32)):
    _world = wp.tid()


@wp.kernel
def read_missing_qualified_column(wall__velocity_in: wp.array2d(dtype=wp.float32)):
    _world = wp.tid()


@wp.kernel
def read_unmatched_query(velocity_in: wp.array2d(dtype=wp.float32), mass_in: wp.array2d(dtype=wp.float32)):
    _world, _row = wp.tid()


@wp.kernel
def write_singleton_per_entity(position_in: wp.array2d(dtype=wp.float32), world_total_out: wp.array(dtype=wp.float32)):
    _world, _row = wp.tid()


@wp.func
def write_singleton_per_entity_func(position_in: wp.float32, world_total_out: wp.float32):
    return position_in


@wp.kernel
def read_wrong_dtype(position_in: wp.array2d(dtype=wp.vec3)):
    _world, _row = wp.tid()


@wp.kernel
def read_wrong_ndim(position_in: wp.array(dtype=wp.float32)):
    _world = wp.tid()


@wp.kernel
def read_singleton_wrong_ndim(world_gravity_in: wp.array2d(dtype=wp.float32)):
    _world = wp.tid()


@wp.kernel
def read_param_wrong_dtype(gain: wp.array(dtype=wp.int32)):
    _world = wp.tid()


@wp.kernel
def read_column_as_scalar(position_in: wp.float32):
    _world = wp.tid()


@wp.kernel
def read_missing_resource(stiffness: float, position_out: wp.array2d(dtype=wp.float32)):
    _world, _row = wp.tid()


@wp.kernel
def read_resource_as_array(bonus: wp.array(dtype=wp.float32)):
    _world = wp.tid()


@wp.func
def no_output(position_in: wp.float32):
    return position_in


@wp.func
def func_with_qualified(ball__position_in: wp.float32, position_out: wp.float32):
    return ball__position_in


def error_env(*systems: ecs.System) -> ecs.EnvSpec:
    return ecs.EnvSpec(
        name="graph_errors",
        config=ToyConfig(),
        archetypes=[BALL, BOX, WALL],
        singletons=[Gravity, Total, Counter],
        systems=list(systems),
        params=[ecs.Param("gain", wp.float32, 1.0)],
        resources={"bonus": 0.5},
    )


def graph_error(*systems: ecs.System) -> str:
    """The GraphError message of building an env with ``systems``; building stops before any compile."""
    with pytest.raises(ecs.GraphError) as info:
        ecs.BatchSim(error_env(*systems), 2, device="cpu")
    assert isinstance(info.value, ecs.EcsError)
    return str(info.value)


P = ecs.Phase.PHYSICS


def test_error_unknown_column():
    msg = graph_error(ecs.System(read_typo, P))
    assert "'read_typo' (PHYSICS)" in msg
    assert "'positon_in'" in msg and "no component 'positon'" in msg
    assert "['charge', 'mass', 'position', 'velocity']" in msg  # the known components


def test_error_unknown_singleton():
    msg = graph_error(ecs.System(read_singleton_typo, P))
    assert "no singleton 'gravty'" in msg
    assert "'gravity'" in msg and "'counter'" in msg  # lists the singletons


def test_error_singleton_named_like_a_column_gets_a_hint():
    msg = graph_error(ecs.System(read_singleton_as_column, P))
    assert "'gravity' is a singleton" in msg
    assert "world_gravity_in" in msg


def test_error_column_named_like_a_singleton_gets_a_hint():
    msg = graph_error(ecs.System(read_column_as_singleton, P))
    assert "no singleton 'position'" in msg
    assert "'position' is an entity component" in msg
    assert "name the parameter position_in" in msg


def test_error_unknown_archetype_in_qualified_name():
    msg = graph_error(ecs.System(read_unknown_archetype, P))
    assert "no archetype 'bal'" in msg
    assert "['ball', 'box', 'wall']" in msg
    msg = graph_error(ecs.System(read_missing_qualified_column, P))
    assert "archetype 'wall' has no component 'velocity'" in msg
    assert "['mass', 'position']" in msg


def test_error_query_matches_no_archetype():
    msg = graph_error(ecs.System(read_unmatched_query, P))
    assert "no archetype holds all of ['mass', 'velocity']" in msg
    assert "wall['mass', 'position']" in msg and "ball['position', 'velocity']" in msg


@pytest.mark.parametrize("fn", [write_singleton_per_entity, write_singleton_per_entity_func])
def test_error_per_entity_system_writes_singleton(fn):
    msg = graph_error(ecs.System(fn, P))
    assert "per-entity system may not write singleton 'total'" in msg
    assert "world_total_out" in msg and "dim='world'" in msg


def test_error_stale_read():
    msg = graph_error(ecs.System(ro_position, P), ecs.System(rw_position, P))
    assert "stale read in phase PHYSICS" in msg
    assert "ro_position[ball]" in msg and "rw_position[ball]" in msg
    assert "ball.position" in msg
    # The same systems in the write-then-read order, or in different phases, are fine.
    env = error_env(ecs.System(rw_position, P), ecs.System(ro_position, P))
    assert len(ecs.BatchSim(env, 1, device="cpu", capture=False).graph.tasks) == 6
    env = error_env(ecs.System(ro_position, P), ecs.System(rw_position, ecs.Phase.REWARD))
    assert len(ecs.BatchSim(env, 1, device="cpu", capture=False).graph.tasks) == 6


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (read_wrong_dtype, "'position_in' has dtype vec3f, but the column holds float32"),
        (read_wrong_ndim, "'position_in' must have 2 dims"),
        (read_singleton_wrong_ndim, "'world_gravity_in' must have 1 dims"),
        (read_param_wrong_dtype, "'gain' has dtype int32, but the column holds float32"),
        (read_column_as_scalar, "'position_in' must be a Warp array of 2 dims"),
    ],
)
def test_error_wrong_array_annotation(fn, expected):
    assert expected in graph_error(ecs.System(fn, P, dim="world" if fn is read_column_as_scalar else None))


def test_error_missing_resource():
    msg = graph_error(ecs.System(read_missing_resource, P))
    assert "'stiffness'" in msg and "no resource or config field" in msg
    assert "Resources: ['bonus']" in msg and "config fields: ['dt']" in msg and "parameters: ['gain']" in msg
    assert "__config__" not in msg  # the engine's own key is no resource a user can name
    assert "resource 'bonus' is a scalar" in graph_error(ecs.System(read_resource_as_array, P))


def test_error_func_system_without_output():
    msg = graph_error(ecs.System(no_output, P))
    assert "'no_output'" in msg and "at least one _out parameter" in msg
    msg = graph_error(ecs.System(func_with_qualified, P))
    assert "'ball__position_in' is a view of the archetype's rows in this world" in msg
    assert "wp.array(dtype=float32, ndim=1)" in msg


def test_error_bad_system_declarations():
    with pytest.raises(ecs.GraphError, match=r"expected a @wp.kernel or @wp.func"):
        ecs.System(lambda: None, P)
    with pytest.raises(ecs.GraphError, match=r"phase must be an ecs.Phase other than NONE"):
        ecs.System(ro_position, ecs.Phase.NONE)
    with pytest.raises(ecs.GraphError, match=r"dim must be 'entity', 'world' or a callable"):
        ecs.System(ro_position, P, dim="rows")
    with pytest.raises(ecs.GraphError, match=r"drop dim="):
        ecs.System(integrate_position, P, dim="world")
    with pytest.raises(ecs.GraphError, match=r"world_local must be True or False, got 'yes'"):
        ecs.System(ro_position, P, world_local="yes")
    with pytest.raises(ecs.GraphError, match=r"world-local by contract; drop world_local="):
        ecs.System(integrate_position, P, world_local=True)
    for bad in (0, 2048, 4.0, True):
        with pytest.raises(ecs.GraphError, match=r"block_dim must be an int in \[1, 1024\] on a raw kernel"):
            ecs.System(ro_position, P, block_dim=bad)
    with pytest.raises(ecs.GraphError, match=r"block_dim must be an int in \[1, 1024\] on a raw kernel"):
        ecs.System(integrate_position, P, block_dim=4)
    assert "systems must be ecs.System" in graph_error(ro_position)
    # dim="entity" without a query needs exactly one named archetype for its capacity.
    assert "dim='entity' needs" in graph_error(ecs.System(read_singleton_wrong_ndim, P, dim="entity"))


# -- shuffled schedules give identical results -------------------------------------------------


@ecs.component
class ColA:
    value: wp.float32


@ecs.component
class ColB:
    value: wp.float32


@ecs.component
class ColC:
    value: wp.float32


@ecs.component
class ColD:
    value: wp.float32


@ecs.component(singleton=True)
class Spin:
    value: wp.float32


CELL = ecs.Archetype("cell", (ColA, ColB, ColC, ColD), capacity=3)


@wp.func
def rw_col_a(col_a_out: wp.float32):
    return col_a_out * 0.5 + 1.0


@wp.func
def rw_col_b(col_b_out: wp.float32):
    return col_b_out * 0.75 - 0.5


@wp.func
def rw_col_c(col_c_out: wp.float32):
    return col_c_out * 0.25 + 2.0


@wp.func
def rw_spin(world_spin_out: wp.float32):
    return world_spin_out * 0.5 + 3.0


@wp.kernel
def rw_col_a_ro_col_b(
    alive_in: wp.array2d(dtype=wp.int32),
    col_b_in: wp.array2d(dtype=wp.float32),
    col_a_out: wp.array2d(dtype=wp.float32),
):
    world, row = wp.tid()
    if alive_in[world, row] != 0:
        col_a_out[world, row] = col_a_out[world, row] - 0.5 * col_b_in[world, row]


@wp.kernel
def rw_col_d_ro_col_a_col_c(
    alive_in: wp.array2d(dtype=wp.int32),
    col_a_in: wp.array2d(dtype=wp.float32),
    col_c_in: wp.array2d(dtype=wp.float32),
    col_d_out: wp.array2d(dtype=wp.float32),
):
    world, row = wp.tid()
    if alive_in[world, row] != 0:
        col_d_out[world, row] = col_d_out[world, row] * 0.5 + col_a_in[world, row] * col_c_in[world, row]


@wp.kernel
def rw_total_ro_col_d_spin(
    cell__alive_in: wp.array2d(dtype=wp.int32),
    cell__col_d_in: wp.array2d(dtype=wp.float32),
    world_spin_in: wp.array(dtype=wp.float32),
    world_total_out: wp.array(dtype=wp.float32),
):
    world = wp.tid()
    total = world_total_out[world] * 0.5 + world_spin_in[world]
    for row in range(cell__col_d_in.shape[1]):
        if cell__alive_in[world, row] != 0:
            total += cell__col_d_in[world, row]
    world_total_out[world] = total


def shuffle_env() -> ecs.EnvSpec:
    P = ecs.Phase.PHYSICS
    return ecs.EnvSpec(
        name="graph_shuffle",
        config=None,
        archetypes=[CELL],
        singletons=[Spin, Total],
        systems=[
            ecs.System(rw_col_a, P),
            ecs.System(rw_col_b, P),
            ecs.System(rw_col_c, P),
            ecs.System(rw_spin, P),
            ecs.System(rw_col_a_ro_col_b, P),
            ecs.System(rw_col_d_ro_col_a_col_c, P),
            ecs.System(rw_total_ro_col_d_spin, P),
        ],
    )


def shuffle_reference(state: dict[str, np.ndarray], steps: int) -> dict[str, np.ndarray]:
    """The systems of ``shuffle_env`` in registration order, in float32 numpy."""
    s = {k: v.copy() for k, v in state.items()}
    live = s["alive"] != 0
    f = np.float32
    for _ in range(steps):
        s["col_a"] = np.where(live, s["col_a"] * f(0.5) + f(1.0), s["col_a"])
        s["col_b"] = np.where(live, s["col_b"] * f(0.75) - f(0.5), s["col_b"])
        s["col_c"] = np.where(live, s["col_c"] * f(0.25) + f(2.0), s["col_c"])
        s["spin"] = s["spin"] * f(0.5) + f(3.0)
        s["col_a"] = np.where(live, s["col_a"] - f(0.5) * s["col_b"], s["col_a"])
        s["col_d"] = np.where(live, s["col_d"] * f(0.5) + s["col_a"] * s["col_c"], s["col_d"])
        s["total"] = s["total"] * f(0.5) + s["spin"] + np.where(live, s["col_d"], f(0)).sum(axis=1, dtype=np.float32)
    return s


def test_shuffled_schedules_give_identical_results(device):
    W, steps, seeds = 4, 3, [None, 0, 1, 2, 3, 4]
    rng = np.random.default_rng(7)
    state = {c.name: rng.uniform(-3.0, 3.0, (W, CELL.capacity)).astype(np.float32) for c in CELL.components}
    state["alive"] = np.array([[1, 0, 1], [1, 1, 1], [0, 1, 0], [1, 1, 0]], np.int32)
    state["spin"] = rng.uniform(-1.0, 1.0, W).astype(np.float32)
    state["total"] = rng.uniform(-1.0, 1.0, W).astype(np.float32)
    results = []
    for seed in seeds:
        sim = ecs.BatchSim(shuffle_env(), W, device=device, schedule_seed=seed)
        for name, value in state.items():
            put(sim, "world" if name in ("spin", "total") else "cell", name, value)
        for _ in range(steps):
            sim.step()
        results.append({n: get(sim, "world" if n in ("spin", "total") else "cell", n) for n in state})
    for seed, result in zip(seeds[1:], results[1:], strict=True):
        for name in state:
            np.testing.assert_array_equal(result[name], results[0][name], err_msg=f"schedule_seed={seed}: {name}")
    expected = shuffle_reference(state, steps)
    for name in state:
        np.testing.assert_allclose(results[0][name], expected[name], rtol=1e-5, atol=1e-5, err_msg=name)

    # The seeds really drew other orders than registration order, and every order kept the edges.
    graph = sim.graph
    registered = [t.index for t in graph.order(ecs.Phase.PHYSICS)]
    shuffled = [[t.index for t in graph.order(ecs.Phase.PHYSICS, s)] for s in seeds[1:]]
    assert any(o != registered for o in shuffled)
    names = {t.index: t.name for t in graph.tasks}
    for order in shuffled:
        done = set()
        for i in order:
            assert graph.edges[i] <= done, f"{names[i]} ran before {[names[j] for j in graph.edges[i] - done]}"
            done.add(i)


# -- generated wrappers: dead rows and reset worlds ----------------------------------------------


@ecs.component(singleton=True)
class Stop:
    """Action: 1 terminates the episode at this step."""

    value: wp.int32


@ecs.component(singleton=True)
class Resets:
    """Times the world was reset."""

    value: wp.int32


MOTE = ecs.Archetype("mote", (Position,), capacity=4)


@wp.func
def bump_position(position_out: wp.float32):
    return position_out + 1.0


@wp.func
def judge_stop(world_stop_in: wp.int32, world_terminated_out: wp.bool):
    return world_stop_in != 0


@wp.func
def count_reset(world_resets_out: wp.int32):
    return world_resets_out + 1


@wp.func
def reset_position(position_out: wp.float32):
    return -5.0 - position_out * 0.0


def lifecycle_env() -> ecs.EnvSpec:
    return ecs.EnvSpec(
        name="graph_life",
        config=None,
        archetypes=[MOTE],
        singletons=[Stop, Resets],
        systems=[
            ecs.System(bump_position, ecs.Phase.PHYSICS),
            ecs.System(judge_stop, ecs.Phase.REWARD),
            ecs.System(count_reset, ecs.Phase.RESET),
            ecs.System(reset_position, ecs.Phase.RESET),
        ],
        actions={"stop": ecs.Action(Stop, low=0, high=1)},
    )


def test_generated_wrappers_skip_dead_rows_and_reset_only_reset_worlds(device):
    W = 3
    sim = ecs.BatchSim(lifecycle_env(), W, device=device)
    np.testing.assert_array_equal(get(sim, "world", "resets"), [1, 1, 1])  # the constructor resets all
    alive = np.array([[1, 0, 1, 0], [0, 1, 1, 1], [1, 1, 0, 0]], np.int32)
    live = alive != 0
    pos = np.random.default_rng(3).uniform(1.0, 2.0, (W, 4)).astype(np.float32)
    put(sim, "mote", "alive", alive)
    put(sim, "mote", "position", pos)

    sim.step()
    np.testing.assert_array_equal(get(sim, "mote", "position"), np.where(live, pos + 1.0, pos))
    np.testing.assert_array_equal(get(sim, "world", "resets"), [1, 1, 1])

    sim.reset(torch.tensor([False, True, False]))
    np.testing.assert_array_equal(get(sim, "world", "resets"), [1, 2, 1])
    expected = np.where(live, pos + 1.0, pos)
    expected[1] = np.where(live[1], -5.0, pos[1])
    np.testing.assert_array_equal(get(sim, "mote", "position"), expected)

    # World 0 terminates: its same-step reset runs the RESET functions there only.
    sim.actions["stop"].copy_(torch.tensor([1, 0, 0], dtype=torch.int32))
    if sim.actions["stop"].is_cuda:
        torch.cuda.synchronize()
    sim.step()
    np.testing.assert_array_equal(get(sim, "world", "terminated"), [True, False, False])
    np.testing.assert_array_equal(get(sim, "world", "resets"), [2, 2, 1])
    expected = np.where(live, expected + 1.0, expected)
    expected[0] = np.where(live[0], -5.0, pos[0])
    np.testing.assert_array_equal(get(sim, "mote", "position"), expected)
    np.testing.assert_array_equal(get(sim, "mote", "alive"), alive)
