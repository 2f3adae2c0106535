"""Sleeping bodies (``PhysicsConfig.sleep_substeps``): a body at rest for that many substeps is held still by the
solver, as a locked body is, until something moving touches it or it is acted on; its contacts with static and
sleeping bodies then cost no solve. The reference is the same scene without sleeping: a sleeper must end where the
awake body ends, and wake into the motion the awake body has."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ecs
import envs
from systems import solver
from systems.geometry import ShapeType
from systems.physics import BodySpec, PhysicsConfig
from systems.rigid_body import Response

from . import scene

HALF = 0.25  # m, half edge of the cubes
BALL = 0.15  # m, radius of the ball


def build(bodies: list[BodySpec], sleep: int) -> ecs.BatchSim:
    return scene.build(bodies, PhysicsConfig(max_bodies=8, sleep_substeps=sleep))


def asleep(sim: ecs.BatchSim) -> np.ndarray:
    """Which bodies of world 0 slept in the last substep."""
    return scene.column(sim, "motion_lock")[0] == solver.SLEEPING


def cube(x: float, y: float = 0.0, z: float = HALF) -> BodySpec:
    return BodySpec(ShapeType.BOX, size=(HALF,) * 3, position=(x, y, z))


def ball(x: float) -> BodySpec:
    return BodySpec(ShapeType.SPHERE, size=(BALL, 0, 0), position=(x, 0.0, BALL), mass=5.0, friction=0.1)


@pytest.mark.parametrize("drop", [0.0, 0.05, 0.3])
def test_a_resting_box_falls_asleep_and_then_holds_still_bit_for_bit(drop):
    """A cube dropped onto the floor sleeps once it has ended ``sleep_substeps`` substeps at rest, and from then on
    its pose does not change by a bit and its velocity is zero; where it rests is where the same cube rests without
    sleeping (within 0.01 mm), which never sleeps."""
    bodies = [scene.floor(), cube(0.1, -0.2, HALF + drop)]
    sims = {sleep: build(bodies, sleep) for sleep in (0, 8)}
    first = None
    for step in range(30):
        for sim in sims.values():
            sim.step()
        assert not asleep(sims[0]).any()
        if first is None and asleep(sims[8])[1]:
            first = step
            pose = scene.column(sims[8], "position")[0, 1], scene.column(sims[8], "rotation")[0, 1]
    assert first is not None and first >= 2, first  # 8 substeps at rest: two steps of 4 at the least
    np.testing.assert_array_equal(scene.column(sims[8], "position")[0, 1], pose[0])
    np.testing.assert_array_equal(scene.column(sims[8], "rotation")[0, 1], pose[1])
    assert not scene.column(sims[8], "linear_velocity")[0, 1].any()
    assert not scene.column(sims[8], "angular_velocity")[0, 1].any()
    assert scene.column(sims[8], "sleep_count")[0, 1] >= 8 and scene.column(sims[0], "sleep_count")[0, 1] == 0
    np.testing.assert_allclose(pose[0], scene.column(sims[0], "position")[0, 1], atol=1e-5)


def pusher(kind: str) -> BodySpec:
    """A 5 kg body short of the row: a ball 1 m off, which rolls once pushed, or a box 0.5 m off, which slides."""
    if kind == "ball":
        return ball(-1.0)
    return BodySpec(ShapeType.BOX, size=(0.15, 0.2, 0.15), position=(-0.5, 0.0, 0.15), mass=5.0)


@pytest.mark.parametrize("speed", [3.0, 4.5, 5.4])
@pytest.mark.parametrize("row", [1, 2, 3])
@pytest.mark.parametrize("kind", ["ball", "box"])
def test_a_body_pushed_into_a_sleeping_row_wakes_it_and_pushes_it_as_if_awake(kind, row, speed):
    """A row of ``row`` cubes 0.5 mm apart falls asleep; a 5 kg ball or box then gets a push towards it: the cube it
    hits wakes in the substep of the touch, and the others through the cubes that touch them, in that same substep, so
    the row moves as the same row never put to sleep moves: within 2 mm 0.5 s after the push, through the impacts, and
    within 1.5 cm after 2 s, pushed 0.3-4.5 m. (Cubes that then rock on an edge amplify what differs: struck by the
    ball at 5 to 7 m/s in steps of 0.2, two or three cubes end 0.2-108 mm from their awake twins after 2 s, where
    the far one rocks back; 6 m/s, once 1.4 mm, is 16 mm since edge axes near a face axis give a face's contacts. A
    hair's turn between two cubes at rest once gave their faces' contact a fifth point, anywhere along an edge, which
    took a share of the push: three cubes struck by the box at 3 to 6.2 m/s were then 1.4-20 mm off their twins after
    0.5 s and up to 38 mm after 2 s.)"""
    cubes = [cube(0.5 + i * (2 * HALF + 0.0005)) for i in range(row)]
    bodies = [scene.floor(), pusher(kind), *cubes]
    sims = {sleep: build(bodies, sleep) for sleep in (0, 8)}
    for _ in range(10):
        for sim in sims.values():
            sim.step()
    assert asleep(sims[8])[1 : 2 + row].all()  # the pusher and every cube sleep
    for sim in sims.values():
        velocity = scene.column(sim, "linear_velocity")
        velocity[0, 1] = (speed, 0.0, 0.0)
        sim.tables["body"]["linear_velocity"].assign(velocity)
    for step in range(60):
        for sim in sims.values():
            sim.step()
        if step == 14:  # 0.5 s
            got, want = (scene.column(sim, "position")[0] for sim in (sims[8], sims[0]))
            np.testing.assert_allclose(got[1 : 2 + row], want[1 : 2 + row], atol=2e-3)
    got, want = (scene.column(sim, "position")[0] for sim in (sims[8], sims[0]))
    moved = got[2 : 2 + row, 0] - np.array([c.position[0] for c in cubes])
    assert moved[-1] > 0.05, moved  # the push reached the far end of the row
    np.testing.assert_allclose(got[1 : 2 + row], want[1 : 2 + row], atol=1.5e-2)


@pytest.mark.parametrize("how", ["force", "torque", "lift", "velocity", "spin"])
def test_a_force_or_a_written_pose_or_velocity_wakes_a_sleeper(how):
    """Whatever acts on a sleeping cube wakes it in the next substep: a force or torque, or a pose or velocity
    written into its columns. It then moves as the same cube never put to sleep moves (within 0.1 mm)."""
    bodies = [scene.floor(), cube(0.0)]
    sims = {sleep: build(bodies, sleep) for sleep in (0, 8)}
    for _ in range(6):
        for sim in sims.values():
            sim.step()
    assert asleep(sims[8])[1]
    column, value = {
        "force": ("force", (30.0, 0.0, 0.0)),
        "torque": ("torque", (0.0, 0.0, 8.0)),
        "lift": ("position", None),
        "velocity": ("linear_velocity", (0.0, 2.0, 0.0)),
        "spin": ("angular_velocity", (0.0, 0.0, 3.0)),
    }[how]
    for sim in sims.values():
        values = scene.column(sim, column)
        values[0, 1] = values[0, 1] + (0.0, 0.0, 0.4) if value is None else value
        sim.tables["body"][column].assign(values)
    start = scene.column(sims[8], "position")[0, 1], scene.column(sims[8], "rotation")[0, 1]
    for step in range(5):
        for sim in sims.values():
            sim.step()
        if step == 0:
            assert not asleep(sims[8])[1]
    moved = np.abs(scene.column(sims[8], "position")[0, 1] - start[0]).max()
    turned = np.abs(scene.column(sims[8], "rotation")[0, 1] - start[1]).max()
    assert max(moved, turned) > 0.01, (moved, turned)
    for name in ("position", "rotation", "linear_velocity"):
        np.testing.assert_allclose(scene.column(sims[8], name)[0, 1], scene.column(sims[0], name)[0, 1], atol=1e-4)


def edit(sim: ecs.BatchSim, column: str, row: int, value) -> None:
    """Writes body ``row``'s ``column`` in world 0 by hand, as a user writes the table between steps."""
    values = scene.column(sim, column)
    values[0, row] = value
    sim.tables["body"][column].assign(values)


def awake_and_asleep(bodies: list[BodySpec], steps: int) -> dict[tuple[int, bool], ecs.BatchSim]:
    """The scene never put to sleep, and sleeping after 8 substeps with and without kept rows (keyed by
    ``(sleep_substeps, keep_resting_contacts)``), each stepped ``steps`` times."""
    sims = {
        (sleep, keep): scene.build(
            bodies, PhysicsConfig(max_bodies=8, sleep_substeps=sleep, keep_resting_contacts=keep)
        )
        for sleep, keep in ((0, False), (8, True), (8, False))
    }
    for _ in range(steps):
        for sim in sims.values():
            sim.step()
    return sims


@pytest.mark.parametrize(
    "how", ["platform made thinner", "sleeper grown", "sleeper made a ball", "platform made dynamic"]
)
def test_a_shape_size_or_response_written_by_hand_wakes_the_sleepers_it_concerns(how):
    """A cube asleep on a static platform 1 m up, another asleep on the floor. By hand: the platform's half height
    goes from 10 to 6 cm (its top drops 4 cm), the cube on the floor grows to 30 cm half edges (5 cm into the
    floor), or turns into a ball of radius 30 cm (the same), or the platform becomes a dynamic body of 2 kg (it falls
    0.9 m to the floor with the cube on it). The platform stirs the sleeper it touched, the changed body wakes
    (neither pose was written), and the rows of their pairs are made again, not kept: each moves as the same body
    never put to sleep moves (within 1 mm), with and without kept rows."""
    bodies = KEEP_SCENES["cube on a static platform"]()
    sims = awake_and_asleep(bodies, 10)
    assert asleep(sims[8, True])[2:4].all()
    row, column, value, moved = {
        "platform made thinner": (2, "size", None, 0.04),
        "sleeper grown": (3, "size", (0.3, 0.3, 0.3), 0.05),
        "sleeper made a ball": (3, "shape", int(ShapeType.SPHERE), 0.05),
        "platform made dynamic": (1, "response", int(Response.DYNAMIC), 0.9),
    }[how]
    start = {k: scene.column(sim, "position")[0, row] for k, sim in sims.items()}
    for sim in sims.values():
        if how == "platform made thinner":
            edit(sim, "size", 1, (0.4, 0.4, 0.06))
        elif how == "sleeper made a ball":
            edit(sim, "shape", 3, int(ShapeType.SPHERE))
            edit(sim, "size", 3, (0.3, 0.0, 0.0))
        elif how == "platform made dynamic":
            mass, (a, b, c) = 2.0, (0.4, 0.4, 0.1)  # kg; half extents [m]
            edit(sim, "response", 1, value)
            edit(sim, "mass", 1, mass)
            edit(sim, "inv_inertia", 1, np.diag([3.0 / (mass * (y * y + z * z)) for y, z in ((b, c), (a, c), (a, b))]))
        else:
            edit(sim, column, row, value)
    for _ in range(20):
        for sim in sims.values():
            sim.step()
    got = {k: scene.column(sim, "position")[0, row] for k, sim in sims.items()}
    drop = start[0, False][2] - got[0, False][2]
    assert abs(abs(drop) - moved) < 0.005, (how, drop)  # awake: it moved by what the write asks
    for key in ((8, True), (8, False)):
        np.testing.assert_allclose(got[key], got[0, False], atol=1e-3, err_msg=f"{how}, sleep and keep {key}")


def test_a_friction_written_by_hand_wakes_a_sleeper_held_on_a_slope():
    """A cube asleep on a static slope of 20 degrees, held by friction 0.6 (more than tan 20 = 0.36). By hand, the
    friction of both goes to 0.05: the slope stirs the sleeper and the cube wakes, and it slides down as the same
    cube never put to sleep does (about 0.3 m in 0.5 s, within 1 mm of it), with and without kept rows."""
    angle = math.radians(20.0)
    turn = (0.0, math.sin(angle / 2), 0.0, math.cos(angle / 2))  # about y: the slope falls towards +x
    normal = np.array([math.sin(angle), 0.0, math.cos(angle)])
    slope = BodySpec(
        ShapeType.BOX,
        size=(1.0, 0.5, 0.05),
        position=(0.0, 0.0, 1.0),
        rotation=turn,
        response=Response.STATIC,
        friction=0.6,
    )
    along = np.array([math.cos(angle), 0.0, -math.sin(angle)])  # down the slope
    centre = np.array([0.0, 0.0, 1.0]) - 0.3 * along + normal * (0.05 + HALF + 0.0005)
    box = BodySpec(ShapeType.BOX, size=(HALF,) * 3, position=tuple(centre), rotation=turn, friction=0.6)
    bodies = [scene.floor(), slope, box]
    sims = awake_and_asleep(bodies, 15)
    assert asleep(sims[8, True])[2]
    start = scene.column(sims[0, False], "position")[0, 2]
    for sim in sims.values():
        edit(sim, "friction", 1, 0.05)
        edit(sim, "friction", 2, 0.05)
    for _ in range(15):
        for sim in sims.values():
            sim.step()
    got = {k: scene.column(sim, "position")[0, 2] for k, sim in sims.items()}
    assert 0.2 < (got[0, False] - start) @ along < 0.5, (start, got[0, False])  # slid down the slope
    for key in ((8, True), (8, False)):
        np.testing.assert_allclose(got[key], got[0, False], atol=1e-3, err_msg=f"sleep and keep {key}")


def sleeping_stack() -> dict[int, ecs.BatchSim]:
    """Two cubes stacked on the floor, stepped 10 times: with ``sleep_substeps`` 8 (both asleep by then) and 0."""
    bodies = [scene.floor(), cube(0.0), cube(0.0, z=3 * HALF + 0.001)]
    sims = {sleep: build(bodies, sleep) for sleep in (0, 8)}
    for _ in range(10):
        for sim in sims.values():
            sim.step()
    assert asleep(sims[8])[1:3].all()
    return sims


def test_a_box_on_a_sleeping_box_sleeps_and_both_wake_when_the_lower_is_pushed():
    """Two cubes stacked sleep; a force on the lower one wakes it, and the upper one, resting on it, wakes with it
    and rides along: it stays on top (within 1 cm) as in the same stack never put to sleep."""
    sims = sleeping_stack()
    for sim in sims.values():
        force = scene.column(sim, "force")
        force[0, 1] = (12.0, 0.0, 0.0)  # slides both (mu 0.5, 2 kg on the floor: 9.8 N to start)
        sim.tables["body"]["force"].assign(force)
    for _ in range(30):
        for sim in sims.values():
            sim.step()
    assert not asleep(sims[8])[1:3].any()
    position = {k: scene.column(sim, "position")[0] for k, sim in sims.items()}
    assert position[8][1, 0] > 0.2 and abs(position[8][2, 0] - position[8][1, 0]) < 0.01, position[8]
    np.testing.assert_allclose(position[8][1:3], position[0][1:3], atol=1e-2)


def test_sleep_substeps_is_checked():
    for bad in (-1, True, 2.5):
        with pytest.raises(ecs.ConfigError, match=r"sleep_substeps must be an int >= 0 \(0: no body sleeps\), got"):
            PhysicsConfig(sleep_substeps=bad)
    assert PhysicsConfig().sleep_substeps == 0  # a physics scene sleeps only when asked
    with pytest.raises(ValueError, match=r"sleep_substeps must be an int >= 0 \(0: nothing sleeps\), got -2"):
        envs.make("hide_and_seek", sleep_substeps=-2)
    assert envs.make("hide_and_seek").config.sleep_substeps == 16  # hide-and-seek's bodies sleep after two steps


@pytest.mark.parametrize("how", ["removed", "moved away"])
def test_a_sleeper_wakes_and_falls_when_its_support_is_removed_or_moved_away(how):
    """Two stacked cubes sleep; the lower one is removed (``alive`` 0) or put 2 m away (its pose written): no
    contact row joins the two any more, but the upper one touched it in the substep before, so it wakes and falls
    onto the floor, as the same cube never put to sleep does (within 1 cm)."""
    sims = sleeping_stack()
    for sim in sims.values():
        column = "alive" if how == "removed" else "position"
        values = scene.column(sim, column)
        if how == "removed":
            values[0, 1] = 0
        else:
            values[0, 1, 0] += 2.0
        sim.tables["body"][column].assign(values)
    for _ in range(15):
        for sim in sims.values():
            sim.step()
    upper = {k: scene.column(sim, "position")[0, 2] for k, sim in sims.items()}
    assert abs(upper[8][2] - HALF) < 0.01, upper  # on the floor
    np.testing.assert_allclose(upper[8], upper[0], atol=1e-2)


def test_a_kinematic_body_moving_into_a_sleeper_wakes_and_pushes_it():
    """A kinematic slab driven at 1 m/s into a sleeping cube wakes it and pushes it along, as it pushes the same
    cube never put to sleep (within 1 mm); standing still, it wakes nothing."""
    slab = BodySpec(ShapeType.BOX, size=(0.1, 0.5, 0.2), position=(-1.0, 0.0, 0.2), response=Response.KINEMATIC)
    bodies = [scene.floor(), cube(0.0), slab]
    sims = {sleep: build(bodies, sleep) for sleep in (0, 8)}
    for _ in range(10):
        for sim in sims.values():
            sim.step()
    assert asleep(sims[8])[1]
    for sim in sims.values():
        velocity = scene.column(sim, "linear_velocity")
        velocity[0, 2] = (1.0, 0.0, 0.0)
        sim.tables["body"]["linear_velocity"].assign(velocity)
    for _ in range(30):
        for sim in sims.values():
            sim.step()
    got, want = (scene.column(sim, "position")[0, 1] for sim in (sims[8], sims[0]))
    assert got[0] > 0.3, got  # pushed: the slab reached the cube after 0.65 s and drove it on 0.35 m
    np.testing.assert_allclose(got, want, atol=1e-3)


def wall(x: float, y: float = 0.0, z: float = 0.5, half: tuple = (0.1, 0.6, 0.5)) -> BodySpec:
    return BodySpec(ShapeType.BOX, size=half, position=(x, y, z), response=Response.STATIC)


# Scenes whose bodies fall asleep against each other, the floor and static walls, listed in other orders.
KEEP_SCENES = {
    "stack of three, offset": lambda: [
        scene.floor(),
        *(cube(0.03 * i, z=HALF + i * (2 * HALF + 0.001)) for i in range(3)),
    ],
    "row pressed into a wall": lambda: [
        wall(2 * HALF + 0.1005),
        scene.floor(),
        *(cube(-i * (2 * HALF + 0.0005)) for i in range(3)),
    ],
    "cube between two walls, ball and capsule": lambda: [
        cube(0.0),
        wall(-HALF - 0.1002),
        ball(-1.0),
        BodySpec(
            ShapeType.CAPSULE, size=(0.1, 0.3, 0.0), position=(1.0, 0.5, 0.1), rotation=(0.0, 0.7071068, 0.0, 0.7071068)
        ),
        wall(HALF + 0.1002),
        scene.floor(),
    ],
    "slowly rolling ball and cubes": lambda: [
        scene.floor(),
        cube(1.0),
        BodySpec(
            ShapeType.SPHERE,
            size=(BALL, 0, 0),
            position=(0.0, 0.0, BALL),
            linear_velocity=(0.006, 0.0, 0.0),
            angular_velocity=(0.0, 0.006 / BALL, 0.0),
        ),
        cube(-1.0, 0.4),
    ],
    "cube on a static platform": lambda: [
        scene.floor(),
        BodySpec(ShapeType.BOX, size=(0.4, 0.4, 0.1), position=(0.0, 0.0, 1.0), response=Response.STATIC),
        cube(0.05, 0.02, 1.1 + HALF),
        cube(1.5),
    ],
}


def held_pairs(sim: ecs.BatchSim, sleep: int) -> int:
    """Pairs of the step whose two bodies the next narrowphase finds held still (``solver.held_still``)."""
    count = scene.column(sim, "sleep_count")
    static = scene.column(sim, "response") == int(Response.STATIC)
    held = (count > sleep) & ((scene.column(sim, "motion_lock") == solver.SLEEPING) | static)
    a, b = (scene.column(sim, c, "pair") for c in ("pair_body_a", "pair_body_b"))
    n = sim.tensor("world", "pair_count").numpy()
    return sum(int((held[w][a[w, : n[w]]] & held[w][b[w, : n[w]]]).sum()) for w in range(sim.num_worlds))


def nudge(sim: ecs.BatchSim, step: int) -> None:
    """Wakes bodies now and then: a push on the last body, a lift of the first dynamic one, a static body moved,
    the last dynamic one grown by 2 % (its size written by hand), the last static box made a dynamic one of 1 kg."""
    response = scene.column(sim, "response")[0]
    if step == 12:
        velocity = scene.column(sim, "linear_velocity")
        velocity[0, len(response) - 1 - np.argmax(response[::-1] == int(Response.DYNAMIC))] = (0.0, 1.5, 0.0)
        sim.tables["body"]["linear_velocity"].assign(velocity)
    if step == 24:
        position = scene.column(sim, "position")
        position[0, np.argmax(response == int(Response.DYNAMIC)), 2] += 0.02
        sim.tables["body"]["position"].assign(position)
    if step == 36:
        shape = scene.column(sim, "shape")[0]
        static = np.flatnonzero((response == int(Response.STATIC)) & (shape != int(ShapeType.PLANE)))
        if len(static):
            position = scene.column(sim, "position")
            position[0, static[0], 0] += 0.3
            sim.tables["body"]["position"].assign(position)
    if step == 40:
        size = scene.column(sim, "size")
        size[0, len(response) - 1 - np.argmax(response[::-1] == int(Response.DYNAMIC))] *= 1.02
        sim.tables["body"]["size"].assign(size)
    if step == 44:
        shape = scene.column(sim, "shape")[0]
        static = np.flatnonzero((response == int(Response.STATIC)) & (shape == int(ShapeType.BOX)))
        if len(static):
            a, b, c = scene.column(sim, "size")[0, static[-1]]
            edit(sim, "response", static[-1], int(Response.DYNAMIC))
            edit(sim, "mass", static[-1], 1.0)
            edit(sim, "inv_inertia", static[-1], np.diag([3.0 / (y * y + z * z) for y, z in ((b, c), (a, c), (a, b))]))


def assert_same_tables(a: ecs.BatchSim, b: ecs.BatchSim, *, rows_in_use: bool, label: str) -> None:
    """Every column of the body, pair and contact tables equal bit for bit; with ``rows_in_use`` the contact table's
    only in each world's rows in use (a block's narrowphase stages rows in scratch columns past them, and a kept
    pair's stage leaves out the bodies, which the pair gives)."""
    counts = a.tensor("world", "contact_count").numpy()
    np.testing.assert_array_equal(counts, b.tensor("world", "contact_count").numpy(), err_msg=label)
    for archetype in ("body", "pair", "contact"):
        for column, values in a.tables[archetype].items():
            got, want = values.numpy(), b.tables[archetype][column].numpy()
            for w in range(a.num_worlds):
                rows = counts[w] if archetype == "contact" and rows_in_use else got.shape[1]
                np.testing.assert_array_equal(got[w, :rows], want[w, :rows], err_msg=f"{column}[{w}], {label}")


@pytest.mark.parametrize("layout", ["world", "block"])
@pytest.mark.parametrize("name", list(KEEP_SCENES))
def test_kept_contact_rows_are_the_rows_the_narrowphase_makes(cpu_blocks, name, layout):
    """A pair of bodies held still since the substep before (asleep through it, or static) keeps the contact rows it
    made then (``keep_resting_contacts``) rather than being collided again: every table, contact rows and pair rows
    included, is the same bit for bit as with every pair collided every substep, through sleeping (a ball falls
    asleep while still rolling, 6 mm/s), wake-ups (a push, a written pose, a static body moved under or beside
    sleepers, a size or response written) and sleeping again; in the scene's order and reversed, a thread or a block of lanes per world."""
    for order in (1, -1):
        bodies = KEEP_SCENES[name]()[::order]
        sims = {
            keep: scene.build(
                bodies,
                PhysicsConfig(max_bodies=8, sleep_substeps=8, keep_resting_contacts=keep, solver_layout=layout),
            )
            for keep in (True, False)
        }
        held = 0
        for step in range(48):
            for sim in sims.values():
                nudge(sim, step)
                sim.step()
            held += held_pairs(sims[True], 8)
            if step % 6 == 5:
                assert_same_tables(sims[True], sims[False], rows_in_use=layout == "block", label=f"step {step}")
        assert held >= 20, held  # the narrowphase kept rows in many substeps


def test_a_sleeper_on_a_static_platform_falls_when_the_platform_is_moved():
    """A cube asleep on a static platform 1 m up: the platform's pose is written 2 m aside. The platform stirs the
    bodies it touched in the substep before, so the cube wakes and falls to the floor as the same cube never put to
    sleep does (within 1 cm)."""
    bodies = KEEP_SCENES["cube on a static platform"]()
    sims = {sleep: build(bodies, sleep) for sleep in (0, 8)}
    for _ in range(10):
        for sim in sims.values():
            sim.step()
    assert asleep(sims[8])[2]
    for sim in sims.values():
        position = scene.column(sim, "position")
        position[0, 1, 0] += 2.0
        sim.tables["body"]["position"].assign(position)
    for _ in range(20):
        for sim in sims.values():
            sim.step()
    got, want = (scene.column(sim, "position")[0, 2] for sim in (sims[8], sims[0]))
    assert abs(got[2] - HALF) < 0.01, got  # on the floor
    np.testing.assert_allclose(got, want, atol=1e-2)


def test_keep_resting_contacts_is_checked():
    for bad in (1, "yes", None):
        with pytest.raises(ecs.ConfigError, match=r"keep_resting_contacts must be True or False, got"):
            PhysicsConfig(keep_resting_contacts=bad)
    with pytest.raises(ValueError, match=r"keep_resting_contacts must be true or false, got 'no'"):
        envs.make("hide_and_seek", keep_resting_contacts="no")


def test_hide_and_seek_keeps_contact_rows_with_the_same_result():
    """Hide-and-seek under random moves, grabs and locks, with the resets they bring, and boxes that fall asleep
    and wake: every state array the same bit for bit after 160 steps with and without ``keep_resting_contacts``.
    Pairs come and go from one step's list to the next, so a pair row's record of an earlier narrowphase must not
    be taken for the last one's."""
    sims = {
        keep: ecs.BatchSim(
            envs.make("hide_and_seek", prep_fraction=0.0, keep_resting_contacts=keep), 12, device="cpu", seed=3
        )
        for keep in (True, False)
    }
    gen = torch.Generator().manual_seed(3)
    held = 0
    for step in range(160):
        actions = {
            key: torch.randint(0, 11 if key == "move" else 2, tuple(a.shape), generator=gen, dtype=torch.int32)
            for key, a in sims[True].actions.items()
        }
        for sim in sims.values():
            for key, a in actions.items():
                sim.actions[key].copy_(a)
            sim.step()
        held += held_pairs(sims[True], 16)
        if step % 40 == 39:
            assert_same_tables(sims[True], sims[False], rows_in_use=False, label=f"step {step}")
    kept, plain = (sim.state_dict()["arrays"] for sim in sims.values())
    for name, values in kept.items():
        np.testing.assert_array_equal(values, plain[name], err_msg=name)
    assert held > 1000, held


@pytest.mark.parametrize("layout", ["world", "block"])
def test_a_pair_listed_again_after_its_bodies_moved_is_collided_again(cpu_blocks, layout):
    """Row 4 of the pair table records cube A and a wall 1 cm apart, both held still; a cube B is removed, so the
    pairs after B's move up a row and row 4 is left with that record. A is put against the wall and falls asleep
    there; B comes back, and the pair of A and the wall lands in row 4 again. The record is of an earlier
    narrowphase than the last, at A's old pose: the pair is collided again and finds the contact, and every table
    is the same bit for bit as with every pair collided every substep."""
    bodies = [
        scene.floor(),
        cube(0.0),  # A
        wall(HALF + 0.1 + 0.01),
        cube(-2.0),  # B
        cube(-2.0 + 2 * HALF + 0.0005),  # beside B: a pair before A's in the sweep
    ]
    sims = {
        keep: scene.build(
            bodies, PhysicsConfig(max_bodies=8, sleep_substeps=8, keep_resting_contacts=keep, solver_layout=layout)
        )
        for keep in (True, False)
    }

    for step in range(40):
        for sim in sims.values():
            if step == 4:
                assert held_pairs(sim, 8) == 5 and sim.tensor("world", "pair_count").numpy()[0] == 5
                edit(sim, "alive", 3, 0)
            if step == 5:
                edit(sim, "position", 1, (0.0095, 0.0, HALF))  # 0.5 mm into the wall
            if step == 20:
                edit(sim, "alive", 3, 1)
            sim.step()
    assert_same_tables(sims[True], sims[False], rows_in_use=layout == "block", label="end")
    a, b = (scene.column(sims[True], c, "contact")[0] for c in ("contact_body_a", "contact_body_b"))
    n = sims[True].tensor("world", "contact_count").numpy()[0]
    assert any({int(x), int(y)} == {1, 2} for x, y in zip(a[:n], b[:n], strict=True))  # A rests against the wall
    assert asleep(sims[True])[1]


@pytest.mark.parametrize("layout", ["world", "block"])
def test_rows_cut_off_by_a_full_table_are_not_kept(cpu_blocks, layout):
    """Three cubes rest on a static slab, 4 contact rows each, and the table holds 11: each step reports the full
    table (``ecs.CapacityError``) and goes on with the rows that fit, so one cube rests on 3 points. They all fall
    asleep; the pair whose rows were cut off is collided again every substep (its record counts 4 rows, more than
    the table kept), the others keep theirs, and every table is the same bit for bit as with every pair collided."""
    slab = BodySpec(ShapeType.BOX, size=(2.0, 1.0, 0.1), position=(0.0, 0.0, -0.1), response=Response.STATIC)
    bodies = [slab, cube(-1.0), cube(0.0, 0.1), cube(1.0, -0.1)]
    sims = {
        keep: scene.build(
            bodies,
            PhysicsConfig(
                max_bodies=8, max_contacts=11, sleep_substeps=8, keep_resting_contacts=keep, solver_layout=layout
            ),
        )
        for keep in (True, False)
    }
    full = held = 0
    for step in range(20):
        for sim in sims.values():
            try:
                sim.step()
            except ecs.CapacityError:
                full += 1
        held += held_pairs(sims[True], 8)
        assert_same_tables(sims[True], sims[False], rows_in_use=layout == "block", label=f"step {step}")
    assert full == 2 * 20 and held > 20, (full, held)
    assert (sims[True].tensor("world", "contact_count").numpy() == 11).all()
    assert asleep(sims[True])[1:4].all()
