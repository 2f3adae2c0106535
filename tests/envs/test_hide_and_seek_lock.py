"""Hide-and-seek: OpenAI's lock rules (``lock_type``), against a numpy reference and in scripted scenes.

Every step, before physics, each box and ramp (ramps with ``lock_ramps``) is locked or unlocked from the
agents acting on it: alive, with the object in view in the observation they acted on, and their centre
within ``lock_radius`` of its solid. ``reference_locks`` below is the four rules written from their
description in numpy; the random test feeds it what the simulation holds before each step (positions,
visibility, actions, locks and lockers) and compares the locks after it. The scripted scenes are built
turned and shifted (``Scene``), with other listing orders of the agents and both teams, so that a rule
cannot hold by accident of one layout.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import ecs
import envs
from envs.hide_and_seek import Kind
from envs.hide_and_seek.kernels import MAX_TEAM
from systems.geometry import ShapeType

from .test_hide_and_seek_strategies import TURNS, Scene, build, rows

HIDER, SEEKER = 0, MAX_TEAM  # first slot of each team
RULES = ("any_lock", "all_lock", "any_lock_specific", "all_lock_team_specific")
NEAR = 0.45  # m from a 0.5 m cube's centre: the agent's centre 0.20 m from its face, inside the 0.25 m radius
FAR = 0.52  # m: 0.27 m from its face, outside the radius but within reach (0.12 m between the surfaces)
EDGE = 1e-4  # m: a distance this close to the radius may round either way in float32


# -- the numpy reference ------------------------------------------------------------------------------------------


def reference_locks(
    lock_type: str, locked: np.ndarray, locker: np.ndarray, acting: np.ndarray, wants: np.ndarray, team: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One step of OpenAI's lock rules for ``O`` objects and ``A`` agents.

    Args:
        lock_type: one of ``RULES``.
        locked: ``[O]`` bool, locked before the step.
        locker: ``[O]`` int, the agent that locked each object last (agent 0 for one never locked).
        acting: ``[A, O]`` bool, agent a is in range of object o and was allowed to lock it (saw it).
        wants: ``[A]`` bool, the agent's lock action.
        team: ``[A]`` int.

    Returns:
        ``[O]`` bool locked after the step, and ``[A, O]`` bool: for an object that gets a new locker, the agents
        it is drawn among (all False for the others).
    """
    desired = wants[:, None] & acting
    not_desired = ~wants[:, None] & acting
    relock = np.zeros_like(locked)
    if lock_type == "any_lock":
        to_lock = desired.any(0)
        to_unlock = not_desired.any(0) & ~to_lock
    elif lock_type == "all_lock":
        to_unlock = not_desired.any(0)
        to_lock = desired.any(0) & ~to_unlock
    elif lock_type == "any_lock_specific":
        is_locker = np.arange(len(wants))[:, None] == locker[None, :]
        to_unlock = (not_desired & is_locker & locked[None, :]).any(0)
        to_lock = desired.any(0)
        relock = to_unlock & to_lock
        to_unlock = to_unlock & ~to_lock
    elif lock_type == "all_lock_team_specific":
        can_unlock = team[:, None] == team[locker][None, :]
        to_unlock = (not_desired & can_unlock).any(0)
        to_lock = desired.any(0) & ~to_unlock
    else:
        raise ValueError(lock_type)
    after = (locked & ~to_unlock) | to_lock
    drawn = to_lock & (~locked | relock)
    return after, desired & drawn[None, :]


def quat_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrix of a unit quaternion (x, y, z, w)."""
    x, y, z, w = (float(v) for v in q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def wedge_planes(size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A ramp's solid as ``normals @ x <= offsets`` in its frame (origin at the centroid of its right triangle
    (-hx, -hz), (hx, -hz), (hx, hz) of the x-z plane, extruded over |y| <= hy)."""
    hx, hy, hz = (float(v) for v in size)
    slope = np.array([-hz, 0.0, hx]) / math.hypot(hx, hz)
    normals = np.array([[0, 0, -1], [1, 0, 0], [0, -1, 0], [0, 1, 0], slope], dtype=np.float64)
    offsets = np.array([2 * hz / 3, 2 * hx / 3, hy, hy, slope @ np.array([-4 * hx / 3, 0.0, -2 * hz / 3])])
    return normals, offsets


def polytope_distance(p: np.ndarray, normals: np.ndarray, offsets: np.ndarray) -> float:
    """Distance from ``p`` to the convex solid ``normals @ x <= offsets`` (0 inside). The nearest point is the
    projection of ``p`` onto the planes of the face, edge or vertex it lies on, so it is the nearest of the
    projections onto 1..3 of the planes that lie in the solid."""
    if (normals @ p <= offsets).all():
        return 0.0
    best = math.inf
    for k in (1, 2, 3):
        for planes in itertools.combinations(range(len(normals)), k):
            n, d = normals[list(planes)], offsets[list(planes)]
            gram = n @ n.T
            if abs(np.linalg.det(gram)) < 1e-12:
                continue
            x = p - n.T @ np.linalg.solve(gram, n @ p - d)
            if (normals @ x <= offsets + 1e-9).all():
                best = min(best, float(np.linalg.norm(x - p)))
    return best


def solid_distance(p: np.ndarray, shape: int, size: np.ndarray, position: np.ndarray, rotation: np.ndarray) -> float:
    """Distance from point ``p`` to a box's cuboid or a ramp's wedge (0 inside)."""
    local = quat_matrix(rotation).T @ (np.asarray(p, np.float64) - position)
    if shape == ShapeType.BOX:
        return float(np.linalg.norm(local - np.clip(local, -size, size)))
    assert shape == ShapeType.WEDGE, shape
    return polytope_distance(local, *wedge_planes(size))


def snapshot(sim: ecs.BatchSim) -> dict[str, np.ndarray]:
    """What the lock rules read, as the simulation holds it before a step."""
    out = {name: sim.tensor("body", name).numpy().astype(np.float64) for name in ("position", "rotation", "size")}
    for name in ("shape", "kind", "locked_by", "locker"):
        out[name] = sim.tensor("body", name).numpy().copy()
    for name in ("alive", "body_row", "team", "visible"):
        out["agent_" + name] = sim.tensor("agent", name).numpy().copy()
    out["lock"] = sim.actions["lock"].numpy().copy()
    out["episode_step"] = sim.tensor("world", "episode_step").numpy().copy()
    return out


def expected_locks(s: dict[str, np.ndarray], world: int, cfg) -> dict[str, np.ndarray]:
    """The reference fed one world of a snapshot: ``objects`` (body rows), ``locked`` after the step, ``candidates``
    (lockers ``[A, O]``), ``desired`` (some agent acting on it wants it locked) and ``edge`` (objects whose outcome
    rests on a distance within ``EDGE`` of the radius)."""
    kind = s["kind"][world]
    lockable = (kind == Kind.BOX) | ((kind == Kind.RAMP) & cfg.lock_ramps)
    objects = np.nonzero(lockable)[0]
    alive = s["agent_alive"][world] != 0
    dist = np.full((len(alive), len(objects)), math.inf)
    for a in np.nonzero(alive)[0]:
        p = s["position"][world, s["agent_body_row"][world, a]]
        for j, o in enumerate(objects):
            # Past a bound well beyond the radius (the size's diagonal bounds a box or ramp from its origin), the
            # exact distance is not needed.
            bound = np.linalg.norm(p - s["position"][world, o]) - 2 * np.linalg.norm(s["size"][world, o])
            if s["agent_visible"][world, a, o] and bound < cfg.lock_radius + 0.1:
                dist[a, j] = solid_distance(
                    p, s["shape"][world, o], s["size"][world, o], s["position"][world, o], s["rotation"][world, o]
                )
    acting = dist <= cfg.lock_radius
    edge = (np.abs(dist - cfg.lock_radius) < EDGE).any(0)
    team = s["agent_team"][world]
    prep = s["episode_step"][world] + 1 <= cfg.prep_steps  # the step about to run
    wants = (s["lock"][world] != 0) & ~(prep & (team == 1))  # a frozen seeker's action reads 0
    locked = s["locked_by"][world, objects] != 0
    after, candidates = reference_locks(cfg.lock_type, locked, s["locker"][world, objects], acting, wants, team)
    desired = (wants[:, None] & acting).any(0)
    return {"objects": objects, "locked": after, "candidates": candidates, "desired": desired, "edge": edge}


# -- scripted scenes ----------------------------------------------------------------------------------------------


def lock_of(sim: ecs.BatchSim, row: int, world: int = 0) -> tuple[int, int]:
    """(``locked_by``, ``locker``) of a body: 0 unlocked or the locking team + 1, and the locking agent slot."""
    return int(sim.tensor("body", "locked_by")[world, row]), int(sim.tensor("body", "locker")[world, row])


def around_a_cube(scene: Scene, sides: dict[str, int], *, first: str = "near") -> dict:
    """A cube at the scene's origin and one agent of team ``sides[side]`` on each named side (``west``, ``east``,
    ``south``, ``north``), its centre ``NEAR`` from the cube's centre and facing it, plus a far hider and seeker
    in a corner; ``first`` lists the near agents first, or the far ones."""
    spots = {
        "west": (-NEAR, 0.0, 0.0),
        "east": (NEAR, 0.0, math.pi),
        "south": (0.0, -NEAR, math.pi / 2),
        "north": (0.0, NEAR, -math.pi / 2),
    }
    near = [scene.agent(team, *spots[side]) for side, team in sides.items()]
    far = [scene.agent(0, -2.5, -2.5, 0.0), scene.agent(1, 2.5, 2.5, 0.0)]
    agents = near + far if first == "near" else far + near
    return {"fixed_boxes": (scene.placed(0.0, 0.0, 0.0),), "fixed_agents": tuple(agents)}


def slots(layout: dict) -> list[int]:
    """Agent slot of each entry of ``fixed_agents``: hiders fill slots 0.., seekers MAX_TEAM.., in listing order."""
    out, count = [], [0, 0]
    for team, *_ in layout["fixed_agents"]:
        out.append(int(team) * MAX_TEAM + count[int(team)])
        count[int(team)] += 1
    return out


def step_with(sim: ecs.BatchSim, locks: dict[int, int]) -> None:
    for slot, value in locks.items():
        sim.actions["lock"][0, slot] = value
    sim.step()


@pytest.mark.parametrize("lock_type", RULES)
@pytest.mark.parametrize("first", ["near", "far"])
@pytest.mark.parametrize(("quarter", "offset"), TURNS[:3])
def test_an_agent_locks_a_box_in_range_that_it_sees(lock_type, first, quarter, offset):
    """One hider (or seeker) presses lock beside a cube it sees, nobody else is near: locked by its team, the
    pressing slot is the locker; it stays locked while held and frozen in place."""
    scene = Scene(quarter, offset)
    for team in (0, 1):
        layout = around_a_cube(scene, {"west": team}, first=first)
        sim = build(lock_type=lock_type, **layout)
        box, me = rows(sim, Kind.BOX)[0], slots(layout)[0 if first == "near" else 2]
        assert sim.obs["boxes_mask"][0, me, 0] == 1.0  # it sees the cube
        assert lock_of(sim, box) == (0, 0)
        start = sim.tensor("body", "position").numpy()[0, box].copy()
        for _ in range(3):
            step_with(sim, {me: 1})
            assert lock_of(sim, box) == (team + 1, me)
        np.testing.assert_array_equal(sim.tensor("body", "position").numpy()[0, box], start)


@pytest.mark.parametrize(("quarter", "offset"), TURNS)
def test_only_the_lockers_team_unlocks_under_the_default(quarter, offset):
    """all_lock_team_specific: a seeker in range that does not press neither blocks the hiders' lock nor
    unlocks it; a hider in range that does not press unlocks it, even while another hider holds lock."""
    scene = Scene(quarter, offset)
    layout = around_a_cube(scene, {"west": 0, "east": 1, "north": 0})
    west, east, north = slots(layout)[:3]
    sim = build(**layout)
    box = rows(sim, Kind.BOX)[0]
    assert sim.env.config.lock_type == "all_lock_team_specific"
    assert sim.obs["boxes_mask"][0, [west, east, north], 0].tolist() == [1.0, 1.0, 1.0]
    step_with(sim, {west: 1, north: 1, east: 0})
    by, locker = lock_of(sim, box)
    assert by == 1 and locker in (west, north)
    for k in range(4):  # the seeker presses on and off; the hiders hold lock
        step_with(sim, {east: 1 - k % 2})
        assert lock_of(sim, box) == (1, locker)
    step_with(sim, {north: 0})  # a hider lets go: unlocked, though the other hider still presses
    assert lock_of(sim, box)[0] == 0
    step_with(sim, {west: 0, north: 1})  # now the north hider alone presses and the west one does not
    assert lock_of(sim, box)[0] == 0
    step_with(sim, {west: 1})  # both press: locked again, the seeker still idle
    assert lock_of(sim, box)[0] == 1


@pytest.mark.parametrize(("quarter", "offset"), TURNS)
def test_a_never_locked_box_counts_as_locked_by_agent_0s_team(quarter, offset):
    """As in OpenAI, an object nobody locked has agent 0 (a hider) as its locker: under the default rules a
    hider in range that does not press keeps the seekers from locking it. Once a seeker locked it, the seekers
    decide: an idle hider no longer blocks or unlocks it, an idle seeker unlocks it."""
    scene = Scene(quarter, offset)
    layout = around_a_cube(scene, {"west": 0, "east": 1, "south": 1}, first="far")
    west, east, south = slots(layout)[2:]
    sim = build(**layout)
    box = rows(sim, Kind.BOX)[0]
    for _ in range(2):
        step_with(sim, {east: 1, south: 1, west: 0})
        assert lock_of(sim, box) == (0, 0), "an idle hider in range must block the seekers"
    # As if the east seeker had locked it before and it was unlocked since (a locker is kept).
    sim.tensor("body", "locker")[0, box] = east
    step_with(sim, {})  # the seekers still press, the hider is idle
    by, locker = lock_of(sim, box)
    assert by == 2 and locker in (east, south)
    step_with(sim, {east: 0})  # an idle seeker unlocks it, though the other one presses
    assert lock_of(sim, box) == (0, locker)
    step_with(sim, {east: 1})
    assert lock_of(sim, box)[0] == 2 and lock_of(sim, box)[1] in (east, south)


@pytest.mark.parametrize(("quarter", "offset"), TURNS[:2])
def test_all_lock_needs_every_agent_in_range_and_any_lock_one(quarter, offset):
    """all_lock: one agent in range that does not press (either team) blocks a lock, and unlocks a locked box;
    any_lock: one that presses is enough, and one that does not unlocks only when nobody presses."""
    scene = Scene(quarter, offset)
    for idle_team in (0, 1):
        layout = around_a_cube(scene, {"west": 0, "south": idle_team})
        west, south = slots(layout)[:2]
        sim = build(lock_type="all_lock", **layout)
        box = rows(sim, Kind.BOX)[0]
        step_with(sim, {west: 1, south: 0})
        assert lock_of(sim, box)[0] == 0
        step_with(sim, {south: 1})
        assert lock_of(sim, box)[0] == 1 + (idle_team if lock_of(sim, box)[1] == south else 0)
        step_with(sim, {south: 0})
        assert lock_of(sim, box)[0] == 0
        sim = build(lock_type="any_lock", **layout)
        step_with(sim, {west: 1, south: 0})
        assert lock_of(sim, box) == (1, west)
        step_with(sim, {west: 0, south: 0})
        assert lock_of(sim, box)[0] == 0


@pytest.mark.parametrize(("quarter", "offset"), TURNS[:2])
def test_any_lock_specific_lets_only_the_locker_unlock(quarter, offset):
    """any_lock_specific: a teammate of the locker that does not press does not unlock; the locker letting go
    while another agent presses hands the lock to that agent (a seeker here, so the team changes)."""
    scene = Scene(quarter, offset)
    layout = around_a_cube(scene, {"south": 0, "west": 0, "east": 1})
    south, west, east = slots(layout)[:3]
    sim = build(lock_type="any_lock_specific", **layout)
    box = rows(sim, Kind.BOX)[0]
    step_with(sim, {west: 1, south: 0, east: 0})
    assert lock_of(sim, box) == (1, west)
    step_with(sim, {})  # the others idle in range
    assert lock_of(sim, box) == (1, west)
    step_with(sim, {west: 0, east: 1})
    assert lock_of(sim, box) == (2, east)
    step_with(sim, {east: 0})
    assert lock_of(sim, box) == (0, east)


@pytest.mark.parametrize("lock_type", ["all_lock_team_specific", "any_lock"])
@pytest.mark.parametrize(("quarter", "offset"), TURNS)
def test_a_box_out_of_range_or_out_of_view_is_not_locked(lock_type, quarter, offset):
    """A hider pressing with its centre 0.27 m from a cube (within reach, so "toggle" locks it) does not lock
    it; nor does one 0.20 m from it that faces away, or sideways, so that the cube is outside its view cone.
    A larger ``lock_radius`` reaches the first."""
    scene = Scene(quarter, offset)
    cube = (scene.placed(0.0, 0.0, 0.0),)
    seeker = scene.agent(1, 2.5, 2.5, 0.0)
    for hider, seen, radius, toggle in (
        (scene.agent(0, -FAR, 0.0, 0.0), 1.0, 0.25, 1),
        (scene.agent(0, -FAR, 0.0, 0.0), 1.0, 0.3, 1),
        (scene.agent(0, -NEAR, 0.0, math.pi), 0.0, 0.25, 0),
        (scene.agent(0, 0.0, NEAR, 0.0), 0.0, 0.25, 0),
    ):
        expected = int(seen == 1.0 and radius > FAR - 0.25)
        for kind, locks in ((lock_type, expected), ("toggle", toggle)):
            sim = build(lock_type=kind, lock_radius=radius, fixed_boxes=cube, fixed_agents=(hider, seeker))
            box = rows(sim, Kind.BOX)[0]
            assert sim.obs["boxes_mask"][0, HIDER, 0] == seen
            step_with(sim, {HIDER: 1})
            assert lock_of(sim, box)[0] == locks, (kind, hider, radius)


@pytest.mark.parametrize(("quarter", "offset"), TURNS)
def test_a_locked_box_does_not_move_when_pushed(quarter, offset):
    """A hider holds lock beside a cube while a seeker drives into it from the other side and tries to grab it:
    the cube stays put (an unlocked one is pushed away)."""
    scene = Scene(quarter, offset)
    moved = {}
    for lock in (0, 1):
        layout = around_a_cube(scene, {"west": 0, "east": 1})
        sim = build(**layout)
        box = rows(sim, Kind.BOX)[0]
        start = sim.tensor("body", "position").numpy()[0, box].copy()
        scene.drive(sim, SEEKER, forward=-1)
        sim.actions["grab"][0, SEEKER] = 1
        for _ in range(20):
            step_with(sim, {HIDER: lock})
            assert lock_of(sim, box)[0] == lock
            assert int(sim.tensor("agent", "holding")[0, SEEKER]) == 0 or not lock
        moved[lock] = float(np.linalg.norm(sim.tensor("body", "position").numpy()[0, box] - start))
    assert moved[1] == 0.0 and moved[0] > 0.1, moved


@pytest.mark.parametrize("lock_ramps", [True, False])
@pytest.mark.parametrize(("quarter", "offset"), TURNS[:2])
def test_ramps_lock_only_with_lock_ramps(lock_ramps, quarter, offset):
    """A hider beside a cube and a seeker facing a ramp's high end, 0.2 m from it, both press: the cube locks
    either way, the ramp only with ``lock_ramps``."""
    scene = Scene(quarter, offset)
    sim = build(
        lock_ramps=lock_ramps,
        fixed_boxes=(scene.placed(0.0, 1.5, 0.0),),
        fixed_ramps=(scene.placed(0.0, -1.5, 0.0),),  # the high end faces +x, 0.5 / 3 m from the ramp's origin
        fixed_agents=(scene.agent(1, 0.5 / 3 + 0.2, -1.5, math.pi), scene.agent(0, -NEAR, 1.5, 0.0)),
    )
    box, ramp = rows(sim, Kind.BOX)[0], rows(sim, Kind.RAMP)[0]
    assert sim.obs["ramps_mask"][0, SEEKER, 0] == 1.0
    step_with(sim, {HIDER: 1, SEEKER: 1})
    assert lock_of(sim, box) == (1, HIDER)
    assert lock_of(sim, ramp) == ((2, SEEKER) if lock_ramps else (0, 0))


def test_toggle_reproduces_the_press():
    """lock_type "toggle": a press locks the reach target for the team, holding or letting go changes nothing,
    the other team's presses do nothing, a second press of the team unlocks."""
    layout = around_a_cube(Scene(0, (0.0, 0.0)), {"west": 0, "east": 1})
    sim = build(lock_type="toggle", **layout)
    box = rows(sim, Kind.BOX)[0]
    for locks, expected in (
        ({HIDER: 1}, 1),
        ({HIDER: 1}, 1),
        ({HIDER: 0}, 1),
        ({SEEKER: 1}, 1),
        ({SEEKER: 0}, 1),
        ({HIDER: 1}, 0),
        ({HIDER: 0, SEEKER: 1}, 2),
    ):
        step_with(sim, locks)
        assert lock_of(sim, box)[0] == expected, locks


@pytest.mark.parametrize("lock_type", ["all_lock", "all_lock_team_specific"])
def test_frozen_seekers_lock_nothing_and_read_as_not_pressing(lock_type):
    """In preparation a seeker's lock action reads 0: pressing alone it locks nothing; beside a hider that
    presses it blocks the lock under all_lock (it acts, not wanting a lock), not under the default (it is not
    of the team of agent 0, the never-locked cube's locker)."""
    layout = around_a_cube(Scene(1, (0.05, 0.02)), {"west": 0, "east": 1})
    sim = build(lock_type=lock_type, prep_fraction=0.5, max_episode_steps=8, **layout)
    box = rows(sim, Kind.BOX)[0]
    step_with(sim, {SEEKER: 1})
    assert lock_of(sim, box)[0] == 0
    step_with(sim, {HIDER: 1, SEEKER: 1})
    assert lock_of(sim, box)[0] == (0 if lock_type == "all_lock" else 1)


def test_the_locker_is_drawn_among_the_agents_that_lock():
    """A hider and a seeker press beside a fresh cube at once in 32 worlds: each world draws its locker from its
    own RNG, both teams win somewhere; ``locked_by`` is the locker's team + 1. A reset clears locks and lockers."""
    env = envs.make("hide_and_seek", prep_fraction=0.0, **around_a_cube(Scene(0, (0.0, 0.0)), {"west": 0, "east": 1}))
    lockers = []
    for _ in range(2):
        sim = ecs.BatchSim(env, 32, device="cpu", seed=3)
        sim.actions["move"].fill_(5)
        sim.actions["lock"].zero_()
        sim.actions["lock"][:, [HIDER, SEEKER]] = 1
        sim.step()
        box = rows(sim, Kind.BOX)[0]
        by, locker = sim.tensor("body", "locked_by")[:, box].numpy(), sim.tensor("body", "locker")[:, box].numpy()
        assert set(locker.tolist()) == {HIDER, SEEKER}
        np.testing.assert_array_equal(by, np.where(locker == HIDER, 1, 2))
        lockers.append(locker.copy())
    np.testing.assert_array_equal(lockers[0], lockers[1])  # the same seed, the same draws
    sim.reset()
    assert (sim.tensor("body", "locked_by").numpy() == 0).all() and (sim.tensor("body", "locker").numpy() == 0).all()
    sim.reset()
    assert (sim.tensor("body", "locked_by").numpy() == 0).all() and (sim.tensor("body", "locker").numpy() == 0).all()


def test_a_bad_lock_type_names_the_allowed_ones():
    with pytest.raises(ValueError, match=r"lock_type must be one of .*all_lock_team_specific.*toggle"):
        envs.make("hide_and_seek", lock_type="all_locks")
    with pytest.raises(ValueError, match="lock_radius"):
        envs.make("hide_and_seek", lock_radius=-0.1)


# -- random play against the reference ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lock_type", "lock_ramps", "seed"),
    [(rule, True, k) for k, rule in enumerate(RULES)] + [("all_lock_team_specific", False, 7)],
)
def test_random_play_matches_the_numpy_rules(lock_type, lock_ramps, seed):
    """24 crowded procedural worlds (a 4 m floor, six agents, 6..9 boxes), random moves, grabs and held lock
    actions, a few steps of preparation: before every step the reference gets what the simulation holds, and
    after it every box and ramp is locked as the reference says, by a locker it allows."""
    cfg_overrides = {
        "lock_type": lock_type,
        "lock_ramps": lock_ramps,
        "floor_size": 4.0,
        "min_hiders": 3,
        "min_seekers": 3,
        "min_boxes": 6,
        "min_elongated_boxes": 1,
        "max_elongated_boxes": 2,
        "max_episode_steps": 200,
        "prep_fraction": 0.05,  # 10 steps of preparation
    }
    sim = ecs.BatchSim(envs.make("hide_and_seek", **cfg_overrides), 24, device="cpu", seed=seed)
    cfg = sim.env.config
    gen = torch.Generator().manual_seed(seed)
    lock = torch.zeros(tuple(sim.actions["lock"].shape), dtype=torch.int32)
    seen = dict.fromkeys(("locks", "unlocks", "kept", "blocked", "draws", "edge"), 0)
    for _ in range(70):
        sim.actions["move"].copy_(torch.randint(0, 11, tuple(sim.actions["move"].shape), generator=gen))
        sim.actions["grab"].copy_(torch.randint(0, 2, tuple(sim.actions["grab"].shape), generator=gen))
        flip = torch.rand(tuple(lock.shape), generator=gen) < 0.3  # lock actions held for a few steps
        lock = torch.where(flip, 1 - lock, lock)
        sim.actions["lock"].copy_(lock)
        before = snapshot(sim)
        sim.step()
        after = snapshot(sim)
        for w in range(sim.num_worlds):
            ref = expected_locks(before, w, cfg)
            objects, locked, candidates, edge = ref["objects"], ref["locked"], ref["candidates"], ref["edge"]
            was_locked = before["locked_by"][w, objects] != 0
            by, locker = after["locked_by"][w, objects], after["locker"][w, objects]
            team = before["agent_team"][w]
            for j, o in enumerate(objects):
                if edge[j]:
                    seen["edge"] += 1
                    continue
                assert (by[j] != 0) == locked[j], (w, o, before["locked_by"][w, o], by[j])
                if candidates[:, j].any():
                    assert candidates[locker[j], j], (w, o, locker[j], np.nonzero(candidates[:, j])[0])
                    assert by[j] == team[locker[j]] + 1
                    seen["draws"] += int(candidates[:, j].sum() > 1)
                else:
                    assert locker[j] == before["locker"][w, o]
                    assert by[j] == (before["locked_by"][w, o] if locked[j] else 0)
                seen["locks"] += int(locked[j] and not was_locked[j])
                seen["unlocks"] += int(was_locked[j] and not locked[j])
                seen["kept"] += int(locked[j] and was_locked[j])
            seen["blocked"] += int((ref["desired"] & ~locked & ~edge).sum())
        kind = after["kind"]
        rest = (kind != Kind.BOX) & ~((kind == Kind.RAMP) & lock_ramps)
        assert (after["locked_by"][rest] == 0).all()  # nothing else is ever locked
    # The rules were exercised: locks made, kept and undone, and lockers drawn among several agents.
    assert seen["locks"] >= 50 and seen["unlocks"] >= 30 and seen["kept"] >= 500, seen
    assert seen["blocked"] >= (1 if lock_type.startswith("all_lock") else 0), seen  # any_lock*: a wish locks
    assert seen["draws"] >= (1 if lock_ramps else 0), seen
    assert seen["edge"] <= 0.01 * seen["kept"], seen
