"""Bodies held by a fixed joint (a grab) to a holder that turns about the vertical only, as hide-and-seek's agents
do: the joint keeps the held body's pose relative to the holder, so a body that could tilt on its own cannot while
held (``solver.hold_upright``), and tilts freely again once let go.

The references are the joint's own invariants (the held body's tilt stays what it was at the grab, its turn about
the vertical follows the holder's), the contacts' (a held body pushed into a slope stays out of it and the floor),
and a free cube's rest (let go on an edge, it falls onto a face).
"""

from __future__ import annotations

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
        alive = scene.column(sim, "alive", "contact").astype(bool)
        a, b = (scene.column(sim, f"contact_body_{s}", "contact") for s in "ab")
        mine = alive & ((a == cube[:, None]) | (b == cube[:, None]))
        deepest = np.maximum(deepest, np.where(mine, scene.column(sim, "contact_depth", "contact"), 0.0).max(axis=1))
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
