"""Bodies held by a fixed joint (a grab) to a holder that turns about the vertical only, as hide-and-seek's agents
do: the joint keeps the held body's pose relative to the holder, so a body that could tilt on its own cannot while
held (``solver.hold_upright``), and tilts freely again once let go.

The references are the joint's own invariants (the held body's tilt stays what it was at the grab, its turn about
the vertical follows the holder's), the contacts' (a held body pushed into a slope, or dragged into a corner, stays
out of it and the floor), a weld's (what stops the held body stops its holder: the held anchor stays at the holder),
and a free cube's rest (let go on an edge, it falls onto a face).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from systems.geometry import ShapeType, wedge_vertices_np
from systems.physics import BodySpec, PhysicsConfig
from systems.rigid_body import Response

from . import scene

HALF = 0.25  # the held cube's half extent [m] (hide-and-seek's boxes)
RADIUS = 0.15  # the holder's (an agent's) radius [m]
DRAG = 10.0  # the agent's drag [N s/m] (hide-and-seek's move_damping)
HNS = PhysicsConfig(physics_dt=0.075, physics_substeps=8, gravity=-50.0, max_bodies=5, max_joints=2)


def cube_corners(q: np.ndarray) -> np.ndarray:
    signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=np.float64)
    return HALF * signs @ scene.quat_matrix(q).T


def held_cube_scene(
    tilt: float, yaw: float, slope_at: float, cube_first: bool, holders: int
) -> tuple[list[BodySpec], list[int], int]:
    """A floor; ``holders`` agents side by side 0.4 m apart, facing +x turned by ``yaw`` (balls that will turn about z
    only, ``grab``); ahead of them a free cube tilted by ``tilt`` about their heading, its lowest corner 2 mm above
    the floor and its nearest 2 cm from the agents' line; and a static 45-degree wedge whose slope faces them, its
    low edge ``slope_at`` ahead of the cube's front. Listed floor, agents, cube, wedge, or floor, cube, agents, wedge.
    Returns the bodies, the agents' rows and the cube's."""
    turn = scene.turn((0.0, 0.0, 1.0), yaw)
    heading = np.array([math.cos(yaw), math.sin(yaw), 0.0])
    left = np.array([-math.sin(yaw), math.cos(yaw), 0.0])
    corners = cube_corners(scene.turn((1.0, 0.0, 0.0), tilt))  # in the agents' frame
    ahead = RADIUS + 0.02 - corners[:, 0].min()
    cube = BodySpec(
        ShapeType.BOX,
        size=(HALF,) * 3,
        position=tuple(ahead * heading + np.array([0.0, 0.0, 0.002 - corners[:, 2].min()])),
        rotation=tuple(scene.compose(turn, scene.turn((1.0, 0.0, 0.0), tilt))),
        friction=0.2,
    )
    agents = [
        BodySpec(
            ShapeType.SPHERE,
            size=(RADIUS, 0.0, 0.0),
            position=tuple((k - (holders - 1) / 2) * 0.4 * left + np.array([0.0, 0.0, RADIUS])),
            friction=0.01,
            drag=(DRAG, DRAG, 0.0),
        )
        for k in range(holders)
    ]
    # The wedge's slope faces -x in its own frame (its low edge at its least x): turned by yaw, it faces the agents.
    turned = wedge_vertices_np((HALF,) * 3) @ scene.quat_matrix(turn).T
    front = ahead + corners[:, 0].max()
    wedge = BodySpec(
        ShapeType.WEDGE,
        size=(HALF,) * 3,
        position=tuple((front + slope_at - (turned @ heading).min()) * heading + np.array([0.0, 0.0, 2 * HALF / 3])),
        rotation=tuple(turn),
        response=Response.STATIC,
    )
    if cube_first:
        return [scene.floor(0.2), cube, *agents, wedge], list(range(2, 2 + holders)), 1
    return [scene.floor(0.2), *agents, cube, wedge], list(range(1, 1 + holders)), 1 + holders


def grab(sim, agents: np.ndarray, cubes: np.ndarray) -> None:
    """Each world's agents (rows ``agents[w]``) hold its cube (``cubes[w]``), a joint each, as hide-and-seek's
    ``grab.hold`` makes them: anchored at the agent's centre, the cube's pose relative to it fixed. The agents turn
    about z only."""
    worlds = np.arange(sim.num_worlds)
    inv = scene.column(sim, "inv_inertia")
    for k in range(agents.shape[1]):
        inv[worlds, agents[:, k]] = 0.0
        inv[worlds, agents[:, k], 2, 2] = 1.0 / (0.4 * RADIUS * RADIUS)  # a solid ball of 1 kg about z
    sim.tables["body"]["inv_inertia"].assign(inv)
    x, q = scene.column(sim, "position"), scene.column(sim, "rotation")
    conjugate = np.array([-1.0, -1.0, -1.0, 1.0])
    for k in range(agents.shape[1]):
        a = agents[:, k]
        values = {
            "alive": np.ones(len(worlds), np.int32),
            "joint_body_a": a.astype(np.int32),
            "joint_body_b": cubes.astype(np.int32),
            "joint_anchor_a": np.zeros((len(worlds), 3), np.float32),
            "joint_anchor_b": np.stack(
                [scene.quat_matrix(q[w, cubes[w]]).T @ (x[w, a[w]] - x[w, cubes[w]]) for w in worlds]
            ).astype(np.float32),
            "joint_rotation": np.stack([scene.compose(q[w, a[w]] * conjugate, q[w, cubes[w]]) for w in worlds]).astype(
                np.float32
            ),
        }
        for name, value in values.items():
            full = scene.column(sim, name, "joint")
            full[:, k] = value
            sim.tables["joint"][name].assign(full)


def deepest_contact(sim, rows: np.ndarray) -> np.ndarray:
    """Each world's deepest live contact of its body ``rows[w]`` [m] (0 where none overlaps)."""
    alive = scene.column(sim, "alive", "contact").astype(bool)
    a, b = (scene.column(sim, f"contact_body_{s}", "contact") for s in "ab")
    mine = alive & ((a == rows[:, None]) | (b == rows[:, None]))
    return np.where(mine, scene.column(sim, "contact_depth", "contact"), 0.0).max(axis=1)


def up_in_body(q: np.ndarray) -> np.ndarray:
    """The world's vertical in the body's frame."""
    return scene.quat_matrix(q).T @ np.array([0.0, 0.0, 1.0])


def yaw_of(q: np.ndarray) -> float:
    m = scene.quat_matrix(q)
    return math.atan2(m[1, 0], m[0, 0])


PUSHES = [  # tilt [rad], yaw [rad], force [N] on each agent along its heading, the cube listed first
    (tilt, yaw, force, first)
    for tilt in (0.0, 0.35)
    for yaw in (0.0, 0.6)
    for force in (90.0, 180.0)
    for first in (True, False)
]


@pytest.mark.parametrize("holders", [1, 2])
def test_a_held_cube_driven_into_a_slope_stays_out_of_it_and_keeps_its_tilt(holders):
    """One or two agents that hold a free cube (tilted 0 or 20 degrees about their heading) drive it into the foot of
    a static 45-degree slope, each with one or two agents' force, for 3 s at hide-and-seek's step: the cube keeps out
    of the slope and the floor (within 5 mm), its tilt stays what it was at the grab (the world's vertical in its
    frame moves by less than 1e-3), it turns about the vertical with the agents (its yaw less theirs stays within
    0.02 rad of what it was: solved before the contacts, the joints leave a held body lagging a little), and nothing moves faster than the agents' top speed against their drag. (With its own
    inertia, a contact's correction tilted the cube out of the slope and the joints tilted it back in the next pass;
    its contacts, found before it moved, never saw the corners that the tilt pushed in: two hiders drove a box held
    so 84 mm into a locked ramp's slope, tumbling boxes allowed.)"""
    built = [held_cube_scene(tilt, yaw, 0.05, first, holders) for tilt, yaw, _, first in PUSHES]
    sim = scene.build(lambda w: built[w][0], HNS, num_worlds=len(PUSHES))
    agents = np.array([a for _, a, _ in built])
    cube = np.array([c for _, _, c in built])
    grab(sim, agents, cube)
    worlds = np.arange(len(PUSHES))
    q = scene.column(sim, "rotation")
    up0 = np.stack([up_in_body(q[w, cube[w]]) for w in worlds])
    yaw0 = np.array([yaw_of(q[w, cube[w]]) - yaw_of(q[w, agents[w, 0]]) for w in worlds])
    force = scene.column(sim, "force")
    for w, (_, yaw, f, _) in enumerate(PUSHES):
        force[w, agents[w]] = (f * math.cos(yaw), f * math.sin(yaw), 0.0)
    sim.tables["body"]["force"].assign(force)
    deepest = np.zeros(len(PUSHES))
    fastest = np.zeros(len(PUSHES))
    for _ in range(40):
        sim.step()
        deepest = np.maximum(deepest, deepest_contact(sim, cube))
        fastest = np.maximum(fastest, np.linalg.norm(scene.column(sim, "linear_velocity"), axis=-1).max(axis=1))
    q = scene.column(sim, "rotation")
    tilted = np.array([np.linalg.norm(up_in_body(q[w, cube[w]]) - up0[w]) for w in worlds])
    turned = np.array(
        [abs(math.remainder(yaw_of(q[w, cube[w]]) - yaw_of(q[w, agents[w, 0]]) - yaw0[w], math.tau)) for w in worlds]
    )
    report = {
        PUSHES[w]: tuple(round(float(v), 4) for v in (deepest[w] * 1e3, tilted[w], turned[w], fastest[w]))
        for w in worlds
    }
    assert (deepest < 0.005).all(), report
    assert (tilted < 1e-3).all() and (turned < 0.02).all(), report
    top = np.array([f for _, _, f, _ in PUSHES]) / DRAG
    assert (fastest < top + 1.0).all(), report


@pytest.mark.parametrize("tilt", [0.35, -0.6])
def test_a_cube_held_on_its_edge_stays_so_and_falls_onto_a_face_once_let_go(tilt):
    """An agent holds a free cube tilted about its heading, its lowest edge 2 mm above the floor: held for 1.5 s, the
    cube stays tilted as it was (the world's vertical in its frame moves by less than 1e-3) and its edge on the
    floor; let go, it has its own inertia again and falls onto a face: within 3 s one of its axes is vertical
    (within 0.01 rad) and it rests (slower than 1 cm/s)."""
    bodies, agents, cube = held_cube_scene(tilt, 0.3, 2.0, True, 1)
    sim = scene.build(bodies, HNS)
    grab(sim, np.array([agents]), np.array([cube]))
    up0 = up_in_body(scene.column(sim, "rotation")[0, cube])
    for _ in range(20):
        sim.step()
    held = scene.column(sim, "rotation")[0, cube]
    assert np.linalg.norm(up_in_body(held) - up0) < 1e-3
    lowest = scene.column(sim, "position")[0, cube, 2] - HALF * np.abs(scene.quat_matrix(held)[2]).sum()
    assert abs(lowest) < 0.005, lowest
    alive = scene.column(sim, "alive", "joint")
    alive[0, 0] = 0
    sim.tables["joint"]["alive"].assign(alive)
    for _ in range(40):
        sim.step()
    up = up_in_body(scene.column(sim, "rotation")[0, cube])
    assert np.abs(up).max() > math.cos(0.01), up
    assert np.linalg.norm(scene.column(sim, "linear_velocity")[0, cube]) < 0.01


CORNER = [  # ramp mass [kg], ramp yaw [rad], force on the agent [N], torque on it [N m], the ramp listed first
    (mass, yaw, force, torque, first)
    for mass in (0.2, 1.0)
    for yaw in (1.35, 0.9)
    for force in ((-90.0, -40.0), (-60.0, 60.0), (60.0, 60.0), (-90.0, 0.0))
    for torque in (-3.0, 3.0)
    for first in (True, False)
]


def corner_scene(mass: float, yaw: float, first: bool, shift: float) -> tuple[list[BodySpec], int, int]:
    """A floor, a static wall whose face is the plane x = ``shift``, and a static ball (a frozen seeker, 0.15 m) out
    from it; between them an upright ramp of ``mass`` (hide-and-seek's: a 0.5 m wedge) turned by ``yaw``, 3 mm
    off the wall, and an agent 0.47 m from the ramp along the ramp's x axis, 1 cm from the ball, that will hold it.
    Listed floor, wall, ramp, agent, ball, or floor, ball, agent, wall, ramp. Returns the bodies, the agent's row and
    the ramp's."""
    along = np.array([math.cos(yaw), math.sin(yaw), 0.0])
    # The wedge's bounding box centre is a third of its half length behind its origin: 3 mm clear of the wall.
    footprint = HALF * (abs(math.cos(yaw)) + abs(math.sin(yaw)))
    ramp_at = np.array([shift + 0.003 + footprint + HALF / 3 * math.cos(yaw), 1.1, 2 * HALF / 3])
    agent_at = ramp_at + 0.47 * along
    agent_at[2] = RADIUS
    ball_at = agent_at + (2 * RADIUS + 0.01) * np.array([1.0, -1.0, 0.0]) / math.sqrt(2.0)
    ramp = BodySpec(
        ShapeType.WEDGE,
        size=(HALF,) * 3,
        position=tuple(ramp_at),
        rotation=tuple(scene.turn((0.0, 0.0, 1.0), yaw)),
        mass=mass,
        friction=0.01,
    )
    agent = BodySpec(
        ShapeType.SPHERE,
        size=(RADIUS, 0.0, 0.0),
        position=tuple(agent_at),
        friction=0.01,
        drag=(DRAG, DRAG, 0.0),
    )
    wall = BodySpec(
        ShapeType.BOX,
        size=(0.05, 3.0, 1.0),
        position=(shift - 0.05, 0.0, 1.0),
        response=Response.STATIC,
        friction=0.01,
    )
    ball = BodySpec(
        ShapeType.SPHERE,
        size=(RADIUS, 0.0, 0.0),
        position=tuple(ball_at),
        response=Response.STATIC,
        friction=0.01,
    )
    if first:
        return [scene.floor(0.2), wall, ramp, agent, ball], 3, 2
    return [scene.floor(0.2), ball, agent, wall, ramp], 2, 4


def test_a_light_held_ramp_dragged_into_a_corner_stays_out_of_it_and_stops_its_holder():
    """An agent holds a ramp of 0.2 or 1 kg (turned two ways) and is driven, with hide-and-seek's force and a torque
    either way, into the corner between a wall and a frozen seeker or along it, the ramp listed before or after the
    others, for 3 s: no contact of the ramp is ever deeper than 12 mm, the ramp turns with its holder (their spins
    about the vertical differ by less than 8 rad/s at the end of every step) and its anchor stays within 3 cm of the
    holder's centre: what stops the ramp stops its holder. (With the joint solved once a pass, split by inverse
    masses, it moved the 0.2 kg ramp five times as far as its holder: the holder pressed on, each pass pulled the ramp
    back into the wall or the seeker and the contacts undid it only in part: up to 136 mm deep, the anchor 27 cm from
    the holder, and the pulls, turned into spin, swung the ramp at up to 52 rad/s against its holder.)"""
    built = [corner_scene(mass, yaw, first, 0.1 * (w % 3)) for w, (mass, yaw, _, _, first) in enumerate(CORNER)]
    sim = scene.build(lambda w: built[w][0], HNS, num_worlds=len(CORNER))
    agent = np.array([a for _, a, _ in built])
    ramp = np.array([r for _, _, r in built])
    worlds = np.arange(len(CORNER))
    inv = scene.column(sim, "inv_inertia")
    for w, (mass, *_) in enumerate(CORNER):  # upright, its moment about z its bounding box's
        inv[w, ramp[w]] = 0.0
        inv[w, ramp[w], 2, 2] = 1.0 / scene.box_inertia((HALF,) * 3, mass)[2, 2]
    sim.tables["body"]["inv_inertia"].assign(inv)
    grab(sim, agent[:, None], ramp)
    anchor = scene.column(sim, "joint_anchor_b", "joint")[:, 0]
    force, torque = scene.column(sim, "force"), scene.column(sim, "torque")
    for w, (_, _, (fx, fy), tz, _) in enumerate(CORNER):
        force[w, agent[w]] = (fx, fy, 0.0)
        torque[w, agent[w]] = (0.0, 0.0, tz)
    sim.tables["body"]["force"].assign(force)
    sim.tables["body"]["torque"].assign(torque)
    deepest, spin, lag = (np.zeros(len(CORNER)) for _ in range(3))
    for _ in range(40):
        sim.step()
        deepest = np.maximum(deepest, deepest_contact(sim, ramp))
        w_z = scene.column(sim, "angular_velocity")[..., 2]
        spin = np.maximum(spin, np.abs(w_z[worlds, ramp] - w_z[worlds, agent]))
        x, q = scene.column(sim, "position"), scene.column(sim, "rotation")
        held_at = np.stack([x[w, ramp[w]] + scene.quat_matrix(q[w, ramp[w]]) @ anchor[w] for w in worlds])
        lag = np.maximum(lag, np.linalg.norm(held_at - x[worlds, agent], axis=1))
    report = {CORNER[w]: tuple(round(float(v), 3) for v in (deepest[w] * 1e3, spin[w], lag[w] * 1e3)) for w in worlds}
    assert (deepest < 0.012).all(), report
    assert (spin < 8.0).all() and (lag < 0.03).all(), report


LINE = [  # the angle of the holder's push off the line towards the wall along it [rad], the push [N], the ramp's
    # mass [kg], the gap between the ramp and the box [m]
    (angle, force, ramp_mass, gap)
    for angle in (0.0, 0.3, 0.6)
    for force in (90.0, 180.0)
    for ramp_mass in (0.2, 1.0)
    for gap in (0.0, 0.05)
]


def line_scene(world: int) -> list[BodySpec]:
    """World ``world``'s line (``LINE``): a floor; a static wall A along x (its face the plane y = 0) and a static
    wall C across it (its face the plane x = 0); against C a hider (a ball, 0.15 m), then a free 1 kg cube, then a
    ramp (a 0.5 m wedge, its high end's face towards the cube) resting against A, and behind it, 1 cm off its 45-degree
    slope, its holder (an agent, rows 3, 4, 5 and 6 after the floor and the walls)."""
    _angle, _force, ramp_mass, gap = LINE[world]
    box_x = -2 * RADIUS - HALF - 0.001
    # The wedge's bounding box centre is a third of its half length behind its origin.
    ramp_x = box_x - 2 * HALF - 0.001 - gap - HALF / 3
    ball = {"friction": 0.01, "drag": (DRAG, DRAG, 0.0)}
    return [
        scene.floor(0.2),
        BodySpec(ShapeType.BOX, size=(3.0, 0.05, 0.5), position=(-1.5, -0.05, 0.5), response=Response.STATIC),
        BodySpec(ShapeType.BOX, size=(0.05, 3.0, 0.5), position=(0.05, 1.5, 0.5), response=Response.STATIC),
        BodySpec(ShapeType.SPHERE, size=(RADIUS, 0.0, 0.0), position=(-RADIUS, 0.4, RADIUS), **ball),
        BodySpec(ShapeType.BOX, size=(HALF,) * 3, position=(box_x, 0.4, HALF), friction=0.2),
        BodySpec(
            ShapeType.WEDGE,
            size=(HALF,) * 3,
            position=(ramp_x, HALF + 0.001, 2 * HALF / 3),
            mass=ramp_mass,
            friction=0.01,
        ),
        BodySpec(
            ShapeType.SPHERE,
            size=(RADIUS, 0.0, 0.0),
            position=(ramp_x - 4 * HALF / 3 + RADIUS - (RADIUS + 0.01) * math.sqrt(2.0), HALF, RADIUS),
            **ball,
        ),
    ]


def test_a_held_ramp_pushed_along_a_wall_into_a_line_against_another_keeps_the_line_out_of_each_other():
    """An agent holds a ramp of 0.2 or 1 kg resting against a wall and drives it, at hide-and-seek's force or twice
    that, straight or 17 or 34 degrees into the wall, into a cube (touching it or 5 cm off) in front of a hider
    against a second wall across the first, for 3 s: no contact of the scene is ever deeper than 6 mm. The ramp is
    stopped from the side by the wall, so its manifolds and its joint are swept on after the line's chain sweeps
    (``solver.mark_stopped_holds``); solved in the sweep of its rank alone, the chain was left to those sweeps, which
    pushed the cube on into the hider: up to 22 mm (56 mm in a soak with ``floor_size: 3``). The objects turn about
    the vertical only, as in hide-and-seek."""
    sim = scene.build(line_scene, dataclasses.replace(HNS, max_bodies=8), num_worlds=len(LINE))
    inv = scene.column(sim, "inv_inertia")
    for w, (_angle, _force, ramp_mass, _gap) in enumerate(LINE):
        for row, mass in ((4, 1.0), (5, ramp_mass)):
            inv[w, row] = 0.0
            inv[w, row, 2, 2] = 1.0 / scene.box_inertia((HALF,) * 3, mass)[2, 2]
        inv[w, 3] = 0.0
        inv[w, 3, 2, 2] = 1.0 / (0.4 * RADIUS * RADIUS)
    sim.tables["body"]["inv_inertia"].assign(inv)
    grab(sim, np.full((len(LINE), 1), 6), np.full(len(LINE), 5))
    force = scene.column(sim, "force")
    for w, (angle, push, *_rest) in enumerate(LINE):
        force[w, 6] = (push * math.cos(angle), -push * math.sin(angle), 0.0)
    sim.tables["body"]["force"].assign(force)
    deepest = np.zeros(len(LINE))
    for _ in range(40):
        sim.step()
        alive = scene.column(sim, "alive", "contact").astype(bool)
        deepest = np.maximum(deepest, np.where(alive, scene.column(sim, "contact_depth", "contact"), 0.0).max(axis=1))
    deep = {LINE[w]: round(float(deepest[w]) * 1000, 1) for w in np.nonzero(deepest > 0.006)[0]}
    assert not deep, f"(angle, push, ramp mass, gap) -> deepest [mm]: {deep}"


SQUEEZES = [  # the push on the cube [N], the cube's yaw [rad], the gap between it and its holder [m], holder first
    (force, yaw, gap, first)
    for force in (90.0, 180.0, 360.0)
    for yaw in (0.0, 0.3)
    for gap in (0.0, 0.02)
    for first in (True, False)
]


def squeeze_scene(world: int) -> list[BodySpec]:
    """World ``world``'s squeeze (``SQUEEZES``): a floor; a static wall whose face is the plane x = 0; against it an
    agent (the holder), then, on its -x side, a free cube turned by ``yaw`` about the vertical, ``gap`` off the
    agent; behind the cube a second agent (the pusher), 5 cm off it and a little to the side. Rows: the floor, the
    wall, then the holder and the cube (rows 2, 3, or 3, 2 where ``first`` is false), then the pusher (4)."""
    _force, yaw, gap, first = SQUEEZES[world]
    ball = {"friction": 0.01, "drag": (DRAG, DRAG, 0.0)}
    holder_x = -RADIUS - 0.001
    cube_x = holder_x - RADIUS - gap - HALF * (math.cos(yaw) + math.sin(yaw))
    holder = BodySpec(ShapeType.SPHERE, size=(RADIUS, 0.0, 0.0), position=(holder_x, 0.0, RADIUS), **ball)
    cube = BodySpec(
        ShapeType.BOX,
        size=(HALF,) * 3,
        position=(cube_x, 0.0, HALF),
        rotation=tuple(scene.turn((0.0, 0.0, 1.0), yaw)),
        friction=0.2,
    )
    pusher_x = cube_x - HALF * (math.cos(yaw) + math.sin(yaw)) - RADIUS - 0.05
    pusher = BodySpec(
        ShapeType.SPHERE, size=(RADIUS, 0.0, 0.0), position=(pusher_x, 0.03 * (world % 3), RADIUS), **ball
    )
    wall = BodySpec(ShapeType.BOX, size=(0.05, 3.0, 0.5), position=(0.05, 0.0, 0.5), response=Response.STATIC)
    return [scene.floor(0.2), wall, *((holder, cube) if first else (cube, holder)), pusher]


def test_a_held_cube_pushed_into_its_holder_against_a_wall_stays_out_of_it():
    """An agent against a wall holds a cube (square to it or turned 17 degrees, touching it or 2 cm off) that a second
    agent drives into it with one, two or four times hide-and-seek's force, for 3 s: the holder never reaches more
    than 6 mm into the cube it holds, measured from the poses (``scene.ball_depth``), as a weld's two bodies that
    still collide would not. With no contacts between a held body and its holder (the joint alone between them,
    solved before the contacts), the push drove the cube up to 28 mm into its holder, which no contact saw: in a
    soak with ``floor_size: 3``, a seeker whose held plank was pushed 81 mm into it ended steps 74.5 mm inside the
    locked boxes around it once the plank was locked and let go. The objects turn about the vertical only."""
    sim = scene.build(squeeze_scene, dataclasses.replace(HNS, max_bodies=6), num_worlds=len(SQUEEZES))
    worlds = np.arange(len(SQUEEZES))
    holder = np.array([2 if first else 3 for *_rest, first in SQUEEZES])
    cube = 5 - holder
    inv = scene.column(sim, "inv_inertia")
    inv[worlds, cube] = 0.0
    inv[worlds, cube, 2, 2] = 1.0 / scene.box_inertia((HALF,) * 3, 1.0)[2, 2]
    inv[:, 4] = 0.0
    inv[:, 4, 2, 2] = 1.0 / (0.4 * RADIUS * RADIUS)
    sim.tables["body"]["inv_inertia"].assign(inv)
    grab(sim, holder[:, None], cube)
    force = scene.column(sim, "force")
    force[:, 4] = np.array([[f, 0.0, 0.0] for f, *_rest in SQUEEZES])
    sim.tables["body"]["force"].assign(force)
    inside = np.zeros(len(SQUEEZES))
    for _ in range(40):
        sim.step()
        x, q = scene.column(sim, "position"), scene.column(sim, "rotation")
        for w in worlds:
            depth = scene.ball_depth(x[w, holder[w]], RADIUS, x[w, cube[w]], q[w, cube[w]], (HALF,) * 3)
            inside[w] = max(inside[w], depth)
    x = scene.column(sim, "position")
    assert (x[worlds, 4, 0] > x[worlds, cube, 0] - HALF * 1.5 - RADIUS).all()  # the pusher still presses the cube
    report = {SQUEEZES[w]: round(float(inside[w]) * 1000, 1) for w in worlds}
    assert (inside < 0.006).all(), report
