"""Warm start (``solver.warm_start``): each contact point starts a substep's solve from the impulses of
the nearest point of its pair in the substep before (within ``WARM_RADIUS`` on either body), applied to
the bodies at once, in levels whose manifolds share a body too. Checked against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from systems import physics, solver
from systems.collision import Contacts
from systems.geometry import ShapeType
from systems.physics import BodySpec, PhysicsConfig

from . import scene

HALF = 0.25  # m, half edge of the cubes
GRAVITY = -9.8
H = 1.0 / 120.0  # s, the substep


@wp.kernel
def warm_one_world(
    bodies: solver.Bodies,
    splits: solver.Splits,
    c: Contacts,
    before: solver.LastContacts,
    impulse: wp.array2d[wp.float32],
    friction: wp.array2d[wp.vec3],
    order: wp.array2d[wp.int32],
    height: wp.array2d[wp.float32],
    levels: wp.array2d[wp.int32],
    count: int,
    last_count: int,
):
    world = wp.tid()
    manifolds = solver.order_manifolds(bodies, c, order, height, world, count, GRAVITY)
    solver.find_levels(bodies, c, order, height, levels, world, manifolds)
    solver.warm_start(bodies, splits, c, before, impulse, friction, order, world, count, manifolds, last_count, H)


def row_on_floor(device: str, xs: tuple[float, ...]):
    """Cubes at ``xs`` on a floor after one step: floor manifolds, and a cube-cube manifold where two touch."""
    cubes = [BodySpec(ShapeType.BOX, size=(HALF,) * 3, position=(x, 0.0, HALF), friction=0.6) for x in xs]
    sim = scene.build([scene.floor(), *cubes], PhysicsConfig(max_bodies=8), device=device)
    sim.step()
    return sim


def quat_rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    return scene.quat_matrix(q) @ v


def rotate_by(q: np.ndarray, dq: np.ndarray) -> np.ndarray:
    """``q`` turned by the rotation vector ``dq`` (world frame), as ``rigid_body.rotate_by``."""
    angle = np.linalg.norm(dq)
    s = np.sin(angle / 2) / angle if angle > 1e-12 else 0.5
    x, y, z, w = (*(dq * s), np.cos(angle / 2))
    qx, qy, qz, qw = q
    out = np.array(
        [
            w * qx + x * qw + y * qz - z * qy,
            w * qy - x * qz + y * qw + z * qx,
            w * qz + x * qy - y * qx + z * qw,
            w * qw - x * qx - y * qy - z * qz,
        ]
    )
    return out / np.linalg.norm(out)


def order_columns(contact: dict) -> list[wp.array]:
    return [contact["contact_order"], contact["contact_height"], contact["contact_level"]]


def run(
    sim,
    shift: np.ndarray,
    last_impulse: np.ndarray,
    last_friction: np.ndarray,
    *,
    reverse_last: bool = False,
):
    """Warm-starts the world's contacts from a substep before whose anchors were ``shift`` [m] away
    (per contact, on both bodies) and whose impulses are given. Returns the impulses, friction,
    positions and rotations after, and the inputs the reference needs."""
    body, contact, bodies, splits, c = scene.solver_views(sim)
    device = body["alive"].device
    count = int(contact["alive"].numpy()[0].sum())
    # The substep before: the same pairs and points, moved by ``shift``, listed in either order.
    rows = np.arange(count)[::-1] if reverse_last else np.arange(count)
    cap = contact["alive"].shape[1]

    def column(values: np.ndarray, dtype) -> wp.array:
        full = np.zeros((1, cap, *values.shape[1:]), dtype=values.dtype)
        full[0, :count] = values[rows]
        return wp.array(full, dtype=dtype, device=device)

    a, b = contact["contact_body_a"].numpy()[0, :count], contact["contact_body_b"].numpy()[0, :count]
    off_a, off_b = contact["contact_offset_a"].numpy()[0, :count], contact["contact_offset_b"].numpy()[0, :count]
    before = solver.LastContacts()
    before.body_a, before.body_b = column(a, wp.int32), column(b, wp.int32)
    before.offset_a = column((off_a + shift).astype(np.float32), wp.vec3)
    before.offset_b = column((off_b + shift).astype(np.float32), wp.vec3)
    before.impulse = column(last_impulse.astype(np.float32), wp.float32)
    before.friction = column(last_friction.astype(np.float32), wp.vec3)
    impulse = wp.zeros_like(contact["contact_impulse"])
    friction = wp.zeros_like(contact["contact_friction"])
    x0, q0 = body["position"].numpy()[0].copy(), body["rotation"].numpy()[0].copy()
    wp.launch(
        warm_one_world,
        dim=1,
        inputs=[bodies, splits, c, before, impulse, friction, *order_columns(contact), count, count],
        device=device,
    )
    return {
        "impulse": impulse.numpy()[0, :count],
        "friction": friction.numpy()[0, :count],
        "position": body["position"].numpy()[0],
        "rotation": body["rotation"].numpy()[0],
        "split_count": body["split_count"].numpy()[0],
        "x0": x0,
        "q0": q0,
        "a": a,
        "b": b,
        "normal": contact["contact_normal"].numpy()[0, :count],
        "off_a": off_a,
        "off_b": off_b,
        "mass": body["mass"].numpy()[0],
        "inv_inertia": body["inv_inertia"].numpy()[0],
    }


def reference(r: dict, taken: np.ndarray, last_impulse: np.ndarray, last_friction: np.ndarray):
    """Numpy: the impulses each point takes (``taken``: which points match; the normal one at most the impulse that
    pushes the pair apart at ``WARM_LIMIT`` over a substep, ``WARM_LIMIT h^2 / (1/m_a + 1/m_b)``, and the friction
    impulse at most the one that slides the lighter body so, ``WARM_LIMIT h^2 / max(1/m_a, 1/m_b)``), and the bodies
    moved by the sum of ``lam n + f`` on B and its opposite on A at the anchors."""
    inv_mass = np.where(r["mass"] > 0.0, 1.0 / np.where(r["mass"] > 0.0, r["mass"], 1.0), 0.0)
    limit = float(solver.WARM_LIMIT) * H * H / (inv_mass[r["a"]] + inv_mass[r["b"]])
    lam = np.where(taken, np.minimum(last_impulse, limit), 0.0)
    slide = float(solver.WARM_LIMIT) * H * H / np.maximum(inv_mass[r["a"]], inv_mass[r["b"]])
    length = np.linalg.norm(last_friction, axis=1)
    shrink = np.minimum(1.0, slide / np.maximum(length, 1e-30))
    fric = np.where(taken[:, None], last_friction * shrink[:, None], 0.0)
    x, q = r["x0"].astype(np.float64), r["q0"].astype(np.float64)
    dx, dq = np.zeros_like(x), np.zeros_like(x)
    for k in range(len(lam)):
        total = r["normal"][k] * lam[k] + fric[k]
        for body, offset, sign in ((r["a"][k], r["off_a"][k], -1.0), (r["b"][k], r["off_b"][k], 1.0)):
            if r["mass"][body] <= 0.0:
                continue
            rot = scene.quat_matrix(q[body])
            arm = rot @ offset
            world_inv_inertia = rot @ r["inv_inertia"][body] @ rot.T
            dx[body] += sign * total / r["mass"][body]
            dq[body] += sign * world_inv_inertia @ np.cross(arm, total)
    position = x + dx
    rotation = np.array([rotate_by(q[i], dq[i]) if np.any(dq[i]) else q[i] for i in range(len(q))])
    return lam, fric, position, rotation


@pytest.mark.parametrize("reverse_last", [False, True])
def test_points_take_the_impulses_of_the_nearest_point_within_reach(device, reverse_last):
    """Two cubes side by side on a floor (two floor manifolds and one between the cubes, each its own
    level): every point whose anchor moved 1 mm takes its impulses, every one that moved 3 mm (past
    WARM_RADIUS) starts from zero; the bodies move as numpy says."""
    sim = row_on_floor(device, (-0.3, 0.2))
    contact = sim.tables["contact"]
    count = int(contact["alive"].numpy()[0].sum())
    between = (contact["contact_body_a"].numpy()[0, :count] > 0) & (contact["contact_body_b"].numpy()[0, :count] > 0)
    assert count - between.sum() == 8 and between.sum() >= 2, "expected the two floor faces and the cubes' faces"
    rng = np.random.default_rng(3)
    far = np.arange(count) % 3 == 1
    direction = rng.normal(size=(count, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    shift = direction * np.where(far, 3e-3, 1e-3)[:, None]
    last_impulse = rng.uniform(1e-4, 2e-3, size=count)
    last_friction = rng.normal(scale=2e-4, size=(count, 3))
    r = run(sim, shift, last_impulse, last_friction, reverse_last=reverse_last)
    lam, fric, position, rotation = reference(r, ~far, last_impulse, last_friction)
    np.testing.assert_allclose(r["impulse"], lam, rtol=1e-6)
    np.testing.assert_allclose(r["friction"], fric, rtol=1e-6, atol=1e-12)
    assert np.abs(position - r["x0"]).max() > 1e-4  # the impulses did move the cubes
    np.testing.assert_allclose(r["position"], position, atol=2e-7)
    np.testing.assert_allclose(r["rotation"], rotation, atol=2e-7)
    assert not r["split_count"].any(), "the solver scratch is left cleared"


@pytest.mark.parametrize("scale", [0.4, 2.0, 8.0])
def test_a_point_takes_at_most_the_impulse_that_pushes_its_pair_apart_at_the_warm_limit(device, scale):
    """Impulses of the substep before up to ``scale`` times the limit: each point takes its normal impulse up to the
    one that would push its pair apart at ``WARM_LIMIT`` over the substep, so that a body jammed between two
    immovable ones does not pile up impulse substep after substep; its friction impulse up to the one that would
    slide the lighter body at that acceleration (uncapped, the friction of a full load turned a cube crushed by one
    1000 times its mass 150 degrees in the warm start alone, ``test_reach.py``); as numpy says."""
    sim = row_on_floor(device, (-0.3, 0.2))
    count = int(sim.tables["contact"]["alive"].numpy()[0].sum())
    rng = np.random.default_rng(5)
    floor_limit = float(solver.WARM_LIMIT) * H * H  # 1 kg on a floor; half of it between two 1 kg cubes
    last_impulse = rng.uniform(0.05, 1.0, size=count) * scale * floor_limit
    along = rng.normal(size=(count, 3))
    along /= np.linalg.norm(along, axis=1, keepdims=True)
    last_friction = along * (rng.uniform(0.05, 1.0, size=count) * scale * floor_limit)[:, None]
    r = run(sim, np.zeros((count, 3)), last_impulse, last_friction)
    lam, fric, position, rotation = reference(r, np.ones(count, dtype=bool), last_impulse, last_friction)
    np.testing.assert_allclose(r["impulse"], lam, rtol=2e-6)
    np.testing.assert_allclose(r["friction"], fric, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(r["position"], position, atol=2e-7)
    np.testing.assert_allclose(r["rotation"], rotation, atol=2e-7)
    capped = r["impulse"] < last_impulse * (1.0 - 1e-6)
    assert capped.any() == (scale > 0.5) and not capped.all()  # below half the floor's limit, no point is capped
    shrunk = np.linalg.norm(r["friction"], axis=1) < np.linalg.norm(last_friction, axis=1) * (1.0 - 1e-6)
    assert shrunk.any() == (scale > 1.0) and (scale > 4.0 or not shrunk.all())  # each body's slide limit: 1 kg


def test_a_level_whose_manifolds_share_a_body_starts_from_all_its_impulses(device):
    """Three cubes in a row: the two cube-cube manifolds are a level that shares the middle cube, solved
    by Jacobi steps; its points start from all the impulses of the substep before, as the floor manifolds do (from
    none, the row's friction was found afresh each substep and let a pressed row slide; from part of them, a row
    pressed by one contact pass rocked by centimetres once the solve was warm-started across steps)."""
    sim = row_on_floor(device, (-0.5, 0.0, 0.5))
    count = int(sim.tables["contact"]["alive"].numpy()[0].sum())
    rng = np.random.default_rng(4)
    last_impulse = rng.uniform(1e-4, 2e-3, size=count)
    last_friction = rng.normal(scale=2e-4, size=(count, 3))
    r = run(sim, np.zeros((count, 3)), last_impulse, last_friction)
    floor = (r["a"] == 0) | (r["b"] == 0)
    assert floor.sum() == 12 and (~floor).sum() >= 2, "expected three floor faces and two cube-cube manifolds"
    lam, fric, position, rotation = reference(r, np.ones(count, dtype=bool), last_impulse, last_friction)
    np.testing.assert_allclose(r["impulse"], lam, rtol=1e-6)
    np.testing.assert_allclose(r["friction"], fric, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(r["position"], position, atol=2e-7)
    np.testing.assert_allclose(r["rotation"], rotation, atol=2e-7)


def test_a_resting_box_carries_its_weight_from_substep_to_substep(device):
    """A box at rest on the floor: each substep's normal impulses sum to ``m |g| h^2`` (the sag they
    undo), and with the warm start the box neither sinks nor rises over 5 s."""
    cfg = PhysicsConfig()
    box = BodySpec(ShapeType.BOX, size=(0.82, 0.08, 0.25), position=(0.3, -0.2, 0.25), mass=2.0)
    sim = scene.build([scene.floor(), box], cfg, device=device)
    for _ in range(150):
        sim.step()
    h = cfg.physics_dt / cfg.physics_substeps
    impulse = sim.tables["contact"]["contact_impulse"].numpy()[0]
    alive = sim.tables["contact"]["alive"].numpy()[0] != 0
    np.testing.assert_allclose(impulse[alive].sum(), 2.0 * 9.8 * h * h, rtol=2e-3)
    position = scene.column(sim, "position")[0, 1]
    assert abs(position[2] - 0.25) < 1e-4 and np.hypot(position[0] - 0.3, position[1] + 0.2) < 1e-4


def test_a_world_reset_or_placed_anew_starts_its_solve_cold():
    """``forget_contacts`` (RESET phase) and ``load_scene``: a world whose bodies are placed anew keeps no contacts
    of the step before, whose impulses would push its new bodies, so its next steps are those of a new scene bit for
    bit; a world not reset keeps them, and its solve goes on from their impulses."""
    box = BodySpec(ShapeType.BOX, size=(0.3, 0.2, 0.25), position=(0.1, -0.2, 0.25), mass=2.0)
    top = BodySpec(ShapeType.BOX, size=(0.2, 0.2, 0.2), position=(0.12, -0.18, 0.7), mass=1.0)
    bodies = [scene.floor(), box, top]
    sim = scene.build(bodies, PhysicsConfig(), num_worlds=2)
    for _ in range(20):
        sim.step()
    contact = sim.tables["contact"]
    kept = {name: contact[name].numpy()[1].copy() for name in ("alive", "contact_impulse", "contact_friction")}
    assert int(sim.tensor("world", "contact_count")[1]) == 8 and kept["contact_impulse"].sum() > 0.0
    sim.reset(np.array([True, False]))
    counts = sim.tensor("world", "contact_count").numpy()
    assert counts[0] == 0 and not contact["alive"].numpy()[0].any() and counts[1] == 8
    for name, value in kept.items():
        np.testing.assert_array_equal(contact[name].numpy()[1], value, err_msg=name)
    physics.load_scene(sim, bodies)
    assert not sim.tensor("world", "contact_count").numpy().any() and not contact["alive"].numpy().any()
    fresh = scene.build(bodies, PhysicsConfig(), num_worlds=2)
    for _ in range(5):
        sim.step()
        fresh.step()
    for name in ("position", "rotation", "linear_velocity", "angular_velocity"):
        np.testing.assert_array_equal(scene.column(sim, name), scene.column(fresh, name), err_msg=name)
