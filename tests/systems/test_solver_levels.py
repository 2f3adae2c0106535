"""A level of contact manifolds that share a body is solved by Jacobi steps with mass splitting
(``solver.solve_level``): the result does not depend on the order its manifolds are listed in,
where Gauss-Seidel over the same manifolds (``solver.level_manifold`` one after the other, each applied at once) does.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import warp as wp

from systems import solver
from systems.collision import Contacts, Poses
from systems.geometry import ShapeType
from systems.physics import BodySpec, PhysicsConfig
from systems.rigid_body import Response

from . import scene

HALF = 0.25  # m, half edge of the cubes


@wp.kernel
def solve_one_level(
    bodies: solver.Bodies,
    splits: solver.Splits,
    poses: Poses,
    c: Contacts,
    impulse: wp.array2d[wp.float32],
    friction: wp.array2d[wp.vec3],
    order: wp.array2d[wp.int32],
    manifolds: int,
    count: int,
    jacobi: int,
):
    world = wp.tid()
    up = wp.vec3(0.0, 0.0, 1.0)  # the last pass
    if jacobi != 0:
        solver.solve_level(bodies, splits, poses, c, impulse, friction, order, world, 0, manifolds, count, up)
    else:
        for m in range(manifolds):
            k = order[world, m]
            solver.level_manifold(
                bodies, splits, poses, c, impulse, friction, world, k, count, up, False, solver.ALL_MANIFOLDS
            )


def pressed_row(device: str):
    """Three cubes side by side on a floor after one step, then the outer two pushed 1 and 1.5 mm into
    the middle one and the middle one turned 0.2 degrees about z: the two side manifolds are a level
    that shares the middle cube. Returns the simulation and the first contact of each side manifold."""
    cubes = [BodySpec(ShapeType.BOX, size=(HALF,) * 3, position=(x, 0.0, HALF)) for x in (-0.5, 0.0, 0.5)]
    sim = scene.build([scene.floor(), *cubes], PhysicsConfig(max_bodies=8), device=device)
    sim.step()
    position = sim.tables["body"]["position"].numpy()
    position[0, 1, 0] += 0.001
    position[0, 3, 0] -= 0.0015
    sim.tables["body"]["position"].assign(position)
    rotation = sim.tables["body"]["rotation"].numpy()
    half_angle = np.radians(0.2) / 2
    rotation[0, 2] = (0.0, 0.0, np.sin(half_angle), np.cos(half_angle))
    sim.tables["body"]["rotation"].assign(rotation)
    contact = sim.tables["contact"]
    count = int(contact["alive"].numpy()[0].sum())
    a, b = contact["contact_body_a"].numpy()[0], contact["contact_body_b"].numpy()[0]
    starts = [k for k in range(count) if (k == 0 or (a[k], b[k]) != (a[k - 1], b[k - 1])) and min(a[k], b[k]) > 0]
    assert len(starts) == 2, f"expected the two side manifolds, found pairs {[(a[k], b[k]) for k in starts]}"
    return sim, starts, count


def solve(sim, starts: list[int], count: int, *, jacobi: bool) -> dict[str, np.ndarray]:
    """The level solved from copies of the tables, its manifolds taken in the order of ``starts``."""
    body, contact, bodies, splits, c = scene.solver_views(sim)
    device = body["alive"].device
    poses = scene.poses(body)
    impulse = wp.zeros_like(contact["contact_impulse"])
    friction = wp.zeros_like(contact["contact_friction"])
    order = wp.array([starts], dtype=wp.int32, device=device)
    wp.launch(
        solve_one_level,
        dim=1,
        inputs=[bodies, splits, poses, c, impulse, friction, order, len(starts), count, int(jacobi)],
        device=device,
    )
    return {
        "position": body["position"].numpy()[0, 1:4],
        "rotation": body["rotation"].numpy()[0, 1:4],
        "impulse": impulse.numpy()[0, :count],
    }


def test_a_level_solves_the_same_in_either_order(device):
    sim, starts, count = pressed_row(device)
    before = sim.tables["body"]["position"].numpy()[0, 1:4]
    forward = solve(sim, starts, count, jacobi=True)
    backward = solve(sim, starts[::-1], count, jacobi=True)
    # The outer cubes were pushed back out (by 0.8 and 1 mm: three steps leave a third of the overlap).
    assert forward["position"][0, 0] - before[0, 0] < -5e-4 and forward["position"][2, 0] - before[2, 0] > 5e-4
    for name in ("position", "rotation"):
        gap = np.abs(forward[name] - backward[name]).max()
        assert gap <= 1e-6, f"{name} differs by {gap:.3g} between the two orders"
    np.testing.assert_allclose(forward["impulse"], backward["impulse"], rtol=1e-6, atol=1e-9)


def test_gauss_seidel_over_the_same_level_depends_on_the_order(device):
    """What the Jacobi steps remove: the manifold solved last has the last word on the shared body."""
    sim, starts, count = pressed_row(device)
    forward = solve(sim, starts, count, jacobi=False)
    backward = solve(sim, starts[::-1], count, jacobi=False)
    assert np.abs(forward["position"] - backward["position"]).max() > 1e-4


@wp.kernel
def rank_one_level(
    bodies: solver.Bodies,
    splits: solver.Splits,
    c: Contacts,
    order: wp.array2d[wp.int32],
    manifolds: int,
    ranked: wp.array[wp.int32],
):
    world = wp.tid()
    ranked[world] = solver.rank_level(bodies, splits, c, order, world, 0, manifolds, manifolds, wp.vec3(0.0, 0.0, 1.0))


def bfs_ranks(pairs: list[tuple[int, int]], anchors: set[int]) -> dict[int, int]:
    """Each body's fewest manifolds to an anchor (numpy's reference for ``rank_level``), RANK_FREE where none."""
    free = int(solver.RANK_FREE)
    rank = {b: (0 if b in anchors else free) for pair in pairs for b in pair}
    frontier = [b for b in rank if rank[b] == 0]
    while frontier:
        nxt = []
        for a, b in pairs:
            for x, y in ((a, b), (b, a)):
                if x in frontier and rank[y] > rank[x] + 1:
                    rank[y] = rank[x] + 1
                    nxt.append(y)
        frontier = nxt
    return rank


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("wall_cubes", [1, 4])
def test_ranks_count_the_manifolds_to_the_nearest_wall_in_any_listing_order(wall_cubes, seed):
    """A row of ``wall_cubes`` cubes touching a static wall and, apart, a row of two touching cubes that touch
    nothing fixed: ``rank_level`` over their side manifolds (listed in a shuffled order) gives each cube the number
    of manifolds between it and the wall (numpy's breadth-first search), RANK_FREE to the free pair, and returns
    twice the groups of ranks plus one for the free manifolds."""
    rng = np.random.default_rng(seed)
    wall = BodySpec(ShapeType.BOX, size=(0.1, 2.0, 1.0), position=(0.1, 0, 1.0), response=Response.STATIC)
    row = [
        BodySpec(ShapeType.BOX, size=(HALF,) * 3, position=(-HALF - 2 * HALF * i, 0.0, HALF)) for i in range(wall_cubes)
    ]
    free = [BodySpec(ShapeType.BOX, size=(HALF,) * 3, position=(x, 3.0, HALF)) for x in (-1.0, -1.0 - 2 * HALF)]
    bodies = [scene.floor(), wall, *row, *free]
    listing = rng.permutation(len(bodies) - 1) + 1  # the floor stays first
    sim = scene.build([bodies[0], *(bodies[i] for i in listing)], PhysicsConfig(max_bodies=16))
    sim.step()
    row_of = {int(i): r + 1 for r, i in enumerate(listing)}  # spec index -> table row
    contact = sim.tables["contact"]
    count = int(contact["alive"].numpy()[0].sum())
    a, b = contact["contact_body_a"].numpy()[0], contact["contact_body_b"].numpy()[0]
    normal = contact["contact_normal"].numpy()[0]
    starts = [k for k in range(count) if (k == 0 or (a[k], b[k]) != (a[k - 1], b[k - 1])) and abs(normal[k, 2]) < 0.5]
    pairs = [(int(a[k]), int(b[k])) for k in starts]
    assert len(pairs) == wall_cubes + 1, pairs
    rng.shuffle(starts)
    body, _contact, solver_bodies, splits, c = scene.solver_views(sim)
    ranked = wp.zeros(1, dtype=wp.int32)
    order = wp.array([starts], dtype=wp.int32)
    wp.launch(rank_one_level, dim=1, inputs=[solver_bodies, splits, c, order, len(starts), ranked])
    expected = bfs_ranks(pairs, {row_of[1]})
    got = body["split_rank"].numpy()[0]
    assert {i: int(got[i]) for i in expected} == expected
    assert [expected[row_of[2 + i]] for i in range(wall_cubes)] == list(range(1, wall_cubes + 1))
    assert int(ranked.numpy()[0]) == 2 * wall_cubes + 1


def backed_reference(pairs, normals, outside, outside_normals, fixed):
    """numpy's ``solver.backed`` for each body of the level's ``pairs`` (normals from A to B): a manifold of
    ``outside`` presses it against a ``fixed`` body against a push of the level on it (within ``BACKED_COS``)."""
    cos = float(solver.BACKED_COS)
    out = set()
    for (a, b), n in zip(pairs, normals, strict=True):
        for body, push in ((a, -n), (b, n)):
            for (oa, ob), on in zip(outside, outside_normals, strict=True):
                if body in (oa, ob) and (oa + ob - body) in fixed:
                    along = float(np.dot(on, push))
                    if (along if oa == body else -along) > cos:
                        out.add(body)
    return out


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("wall_cubes", [2, 4])
def test_a_body_backed_by_a_wall_in_another_level_is_an_anchor(wall_cubes, seed):
    """The scene above with the wall's manifold and the floor's listed after the level, as another level would be:
    the cube the others push into the wall is still an anchor (``backed``, numpy's reference), the floor (its
    normals across the pushes) backs nothing, and the ranks count outwards from that cube."""
    rng = np.random.default_rng(seed)
    wall = BodySpec(ShapeType.BOX, size=(0.1, 2.0, 1.0), position=(0.1, 0, 1.0), response=Response.STATIC)
    row = [
        BodySpec(ShapeType.BOX, size=(HALF,) * 3, position=(-HALF - 2 * HALF * i, 0.0, HALF)) for i in range(wall_cubes)
    ]
    free = [BodySpec(ShapeType.BOX, size=(HALF,) * 3, position=(x, 3.0, HALF)) for x in (-1.0, -1.0 - 2 * HALF)]
    sim = scene.build([scene.floor(), wall, *row, *free], PhysicsConfig(max_bodies=16))
    sim.step()
    contact = sim.tables["contact"]
    count = int(contact["alive"].numpy()[0].sum())
    a, b = contact["contact_body_a"].numpy()[0], contact["contact_body_b"].numpy()[0]
    normal = contact["contact_normal"].numpy()[0]
    starts = [k for k in range(count) if k == 0 or (a[k], b[k]) != (a[k - 1], b[k - 1])]
    fixed = {0, 1}  # the floor and the wall
    level = [k for k in starts if not ({int(a[k]), int(b[k])} & fixed)]
    outside = [k for k in starts if {int(a[k]), int(b[k])} & fixed]
    assert len(level) == wall_cubes and any(abs(normal[k, 2]) < 0.5 for k in outside)
    rng.shuffle(level)
    rng.shuffle(outside)
    pair = lambda k: (int(a[k]), int(b[k]))  # noqa: E731
    anchors = backed_reference(
        [pair(k) for k in level],
        [normal[k] for k in level],
        [pair(k) for k in outside],
        [normal[k] for k in outside],
        fixed,
    )
    assert anchors == {2}, anchors  # the cube against the wall (table row 2), whichever side of its pairs it is
    body, _contact, solver_bodies, splits, c = scene.solver_views(sim)
    ranked = wp.zeros(1, dtype=wp.int32)
    order = wp.array([level + outside], dtype=wp.int32)
    wp.launch(rank_level_of_part, dim=1, inputs=[solver_bodies, splits, c, order, len(level), len(starts), ranked])
    expected = bfs_ranks([pair(k) for k in level], anchors)
    got = body["split_rank"].numpy()[0]
    assert {i: int(got[i]) for i in expected} == expected
    assert [expected[2 + i] for i in range(wall_cubes)] == list(range(wall_cubes))
    assert int(ranked.numpy()[0]) == 2 * (wall_cubes - 1) + 1


@wp.kernel
def rank_level_of_part(
    bodies: solver.Bodies,
    splits: solver.Splits,
    c: Contacts,
    order: wp.array2d[wp.int32],
    last: int,
    manifolds: int,
    ranked: wp.array[wp.int32],
):
    world = wp.tid()
    ranked[world] = solver.rank_level(bodies, splits, c, order, world, 0, last, manifolds, wp.vec3(0.0, 0.0, 1.0))


@wp.kernel
def mark_pinched_bodies(
    bodies: solver.Bodies,
    splits: solver.Splits,
    c: Contacts,
    order: wp.array2d[wp.int32],
    manifolds: int,
    found: wp.array[wp.int32],
):
    world = wp.tid()
    found[world] = solver.mark_pinched(bodies, splits, c, order, world, manifolds, wp.vec3(0.0, 0.0, 1.0))


def pinched_reference(pairs, normals, fixed, up=(0.0, 0.0, 1.0)) -> tuple[set[int], list[int], list[int]]:
    """Numpy's ``mark_pinched``: in the manifolds' order, each push on a body that the solver moves from a body that
    cannot move, a support's (within ``SHOCK_COS`` of ``up``) taken as ``up`` or ``-up``, is compared with the first
    two sideways pushes on it and with its supports; opposite within ``BACKED_COS``: the body is pinched. Then each
    manifold of a pinched body against a fixed one pins it when another such manifold pushes it the opposite way: 2
    where one of those pushes meets it at more than ``acos(WEDGE_COS)`` from head-on (a wedge), else 1; 0 for none.
    Returns the pinched bodies, those pins, and the flags ``mark_pinched`` leaves: the pins, but 2 for every manifold
    that moves a wedged body (one that a manifold pins as a wedge) or a body touching one."""
    up = np.asarray(up)

    def snapped(push: np.ndarray) -> np.ndarray:
        along = float(push @ up)
        return np.sign(along) * up if abs(along) >= solver.SHOCK_COS else push

    pushes: dict[int, list[np.ndarray]] = {}
    kept: dict[int, list[np.ndarray]] = {}
    supports: dict[int, list[np.ndarray]] = {}
    pinched = set()
    for (a, b), n in zip(pairs, normals, strict=True):
        if (a in fixed) == (b in fixed):
            continue
        body = b if a in fixed else a
        push = snapped(np.asarray(n) * (-1.0 if a == body else 1.0))
        pushes.setdefault(body, []).append(push)
        if any(np.dot(push, p) < -solver.BACKED_COS for p in kept.get(body, []) + supports.get(body, [])):
            pinched.add(body)
        if abs(push @ up) >= solver.SHOCK_COS:
            supports.setdefault(body, []).append(push)  # a support: compared, and no place taken
        elif len(kept.setdefault(body, [])) < 2:
            kept[body].append(push)
    pins = []
    for (a, b), n in zip(pairs, normals, strict=True):
        body = b if a in fixed else a
        if (a in fixed) == (b in fixed) or body not in pinched:
            pins.append(0)
            continue
        push = snapped(np.asarray(n) * (-1.0 if a == body else 1.0))
        opposed = [float(np.dot(push, p)) for p in pushes[body] if np.dot(push, p) < -solver.BACKED_COS]
        pins.append(max((2 if cos > -solver.WEDGE_COS else 1 for cos in opposed), default=0))
    wedged = {b if a in fixed else a for (a, b), pin in zip(pairs, pins, strict=True) if pin == 2}
    near = wedged | {a + b - w for a, b in pairs for w in wedged if w in (a, b)}
    flags = [
        2 if any(body in near and body not in fixed for body in pair) else pin
        for pair, pin in zip(pairs, pins, strict=True)
    ]
    return pinched, pins, flags


@pytest.mark.parametrize("seed", range(6))
def test_pinched_bodies_are_those_pushed_from_opposite_sides_by_bodies_that_cannot_move(seed):
    """A cube between two walls that both touch it, a cube between a wall and a locked box, a cube against one wall,
    a cube in a corner of two walls, one there with a locked box on its far side from one of them, a cube under the
    edge of a static slab that pushes it 40 degrees below the horizontal (a wedge with the floor), one whose slab
    pushes it 20 degrees below, a cube under a locked box, and a cube beside the wedged one, on a floor, listed and
    their manifolds taken in shuffled orders: ``mark_pinched`` marks the first two, the fifth, the 40-degree wedge and
    the cube under the locked box (numpy's reference), not the others, the manifolds that pin them, those of the
    wedge as such, and every manifold of the wedged cube and the cube beside it as the wedge's. (Before supports were
    compared, no wedge was pinched: a ramp that a hider drove into a wall's foot stayed 94 mm inside the floor.)"""
    rng = np.random.default_rng(seed)
    h = HALF
    wall = lambda x, y, sx, sy: BodySpec(  # noqa: E731
        ShapeType.BOX, size=(sx, sy, 0.5), position=(x, y, 0.5), response=Response.STATIC
    )
    parts = [
        wall(-0.1 - h, 0.0, 0.1, 0.4),  # two walls with a cube between them, 1 mm deep in each
        wall(0.1 + h, 0.0, 0.1, 0.4),
        BodySpec(ShapeType.BOX, size=(h + 0.001, h, h), position=(0.0, 0.0, h)),
        wall(3.0, 0.0, 0.1, 0.4),  # a wall, a cube against it and a locked box beyond that
        BodySpec(ShapeType.BOX, size=(h, h, h), position=(3.0 - 0.1 - h + 0.001, 0.0, h)),
        BodySpec(ShapeType.BOX, size=(h, h, h), position=(3.0 - 0.1 - 3 * h, 0.0, h), extra={"locked_by": 1}),
        wall(0.0, 3.0, 0.1, 0.4),  # a cube against one wall
        BodySpec(ShapeType.BOX, size=(h, h, h), position=(-0.1 - h + 0.001, 3.0, h)),
        wall(-3.0, -3.0, 0.1, 0.6),  # a corner of two walls and a cube in it
        wall(-2.6, -3.0 - 0.6 + 0.1, 0.5, 0.1),
        BodySpec(ShapeType.BOX, size=(h, h, h), position=(-3.0 + 0.1 + h - 0.001, -3.0 - 0.5 + 0.1 + h - 0.001, h)),
        wall(3.0, -3.0, 0.1, 0.6),  # the same corner, and a locked box on the cube's far side from one wall
        wall(2.6, -3.0 - 0.6 + 0.1, 0.5, 0.1),
        BodySpec(ShapeType.BOX, size=(h, h, h), position=(3.0 - 0.1 - h + 0.001, -3.0 - 0.5 + 0.1 + h - 0.001, h)),
        BodySpec(
            ShapeType.BOX,
            size=(h, h, h),
            position=(3.0 - 0.1 - h, -3.0 - 0.5 + 0.1 + 3 * h - 0.002, h),
            extra={"locked_by": 1},
        ),
    ]
    for slope, x in ((50.0, 3.0), (70.0, 1.5)):
        # A static slab whose lower face, ``slope`` degrees from the horizontal, touches the cube's top edge (1 mm
        # deep): its push on the cube, along that face's normal, is 90 - ``slope`` degrees below the horizontal.
        turn = math.radians(slope)  # about y: the slab's -z axis, its lower face's normal, turns to d
        d = np.array([-math.sin(turn), 0.0, -math.cos(turn)])
        centre = np.array([x + h, 3.0, 2.0 * h]) - 0.049 * d
        parts += [
            BodySpec(ShapeType.BOX, size=(h, h, h), position=(x, 3.0, h)),
            BodySpec(
                ShapeType.BOX,
                size=(0.3, 0.4, 0.05),
                position=tuple(float(v) for v in centre),
                rotation=(0.0, math.sin(turn / 2), 0.0, math.cos(turn / 2)),
                response=Response.STATIC,
            ),
        ]
    parts += [  # a cube under a locked box resting on it, 1 mm deep
        BodySpec(ShapeType.BOX, size=(h, h, h), position=(-3.0, 3.0, h)),
        BodySpec(ShapeType.BOX, size=(h, h, h), position=(-3.0, 3.0, 3 * h - 0.001), extra={"locked_by": 1}),
        BodySpec(ShapeType.BOX, size=(h, h, h), position=(3.0 - 2 * h + 0.001, 3.0, h)),  # beside the 40-degree wedge
    ]
    perm = rng.permutation(len(parts))
    bodies = [scene.floor(), *[parts[i] for i in perm]]
    row = {int(p): 1 + i for i, p in enumerate(perm)}  # part -> table row
    sim = scene.build(bodies, PhysicsConfig(max_bodies=24))
    sim.step()
    contact = sim.tables["contact"]
    count = int(contact["alive"].numpy()[0].sum())
    a, b = contact["contact_body_a"].numpy()[0], contact["contact_body_b"].numpy()[0]
    normal = contact["contact_normal"].numpy()[0]
    starts = [k for k in range(count) if k == 0 or (a[k], b[k]) != (a[k - 1], b[k - 1])]
    rng.shuffle(starts)
    body, copied, solver_bodies, splits, c = scene.solver_views(sim)
    locked = sim.tables["body"]["locked_by"].numpy()[0]
    response = sim.tables["body"]["response"].numpy()[0]
    fixed = {i for i in range(len(bodies)) if response[i] != int(Response.DYNAMIC) or locked[i] != 0}
    assert row[5] in fixed and row[4] not in fixed
    splits.count.zero_()
    splits.rank.zero_()
    copied["contact_move_a"].zero_()
    found = wp.zeros(1, dtype=wp.int32)
    wp.launch(
        mark_pinched_bodies,
        dim=1,
        inputs=[solver_bodies, splits, c, wp.array([starts], dtype=wp.int32), len(starts), found],
    )
    pairs = [(int(a[k]), int(b[k])) for k in starts]
    pinched, pins, marks = pinched_reference(pairs, [normal[k] for k in starts], fixed)
    assert pinched == {row[2], row[4], row[13], row[15], row[19]}, (pinched, row)
    got = {i for i in range(len(bodies)) if body["split_rank"].numpy()[0, i] in (-1, -2)}  # pinched, wedged
    assert got == pinched and int(found.numpy()[0]) == 2
    flags = [int(copied["contact_move_a"].numpy()[0, k, 0]) for k in starts]
    # Two walls'; a wall's and a locked box's, twice; the floor's and the locked box's (head-on: 1 each); the floor's
    # and the slab's (a wedge: 2 each).
    assert sorted(pins)[-10:] == [1] * 8 + [2] * 2 and sum(pins) == 12
    # Those, but 2 for each manifold that moves the wedged cube or the cube beside it: the floor's, the slab's and
    # the other cube's under the one, the floor's under the other.
    assert flags == marks and marks.count(2) == 4 and sum(marks) == 8 + 4 * 2, (flags, marks)
