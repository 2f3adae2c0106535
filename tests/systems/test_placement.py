"""``systems.place_body``: every column of a placed body, against a numpy reference; and a scene
placed at reset steps bit-identically to the same scene loaded from the host (``load_scene``),
whatever the rows held before (velocities, forces, locks, previous poses, sweep order).
"""

from __future__ import annotations

import math

import numpy as np
import warp as wp

import ecs
import systems
from systems import physics, solver
from systems.geometry import BOX, CAPSULE, PLANE, SPHERE, WEDGE, ShapeType, wedge_vertices_np
from systems.physics import BodySpec
from systems.placement import BodyColumns, place_body
from systems.rigid_body import DYNAMIC, KINEMATIC, STATIC, Response

from .scene import make_env

wp.set_module_options({"enable_backward": False})

# BodyColumns field -> (warp dtype, numpy shape of one entry)
COLUMNS = {
    "alive": (wp.int32, ()),
    "generation": (wp.int32, ()),
    "shape": (wp.int32, ()),
    "size": (wp.vec3, (3,)),
    "position": (wp.vec3, (3,)),
    "rotation": (wp.quat, (4,)),
    "linear_velocity": (wp.vec3, (3,)),
    "angular_velocity": (wp.vec3, (3,)),
    "mass": (wp.float32, ()),
    "inv_inertia": (wp.mat33, (3, 3)),
    "response": (wp.int32, ()),
    "friction": (wp.float32, ()),
    "restitution": (wp.float32, ()),
    "force": (wp.vec3, (3,)),
    "torque": (wp.vec3, (3,)),
    "drag": (wp.vec3, (3,)),
    "prev_position": (wp.vec3, (3,)),
    "prev_rotation": (wp.quat, (4,)),
    "locked_by": (wp.int32, ()),
    "sleep_count": (wp.int32, ()),
    "sweep_order": (wp.int32, ()),
}


def test_body_columns_are_the_physics_body_columns():
    names = {c.name for c in physics.body_components()} | {"alive", "generation"}
    placed = set(BodyColumns.vars)
    # Everything but the broadphase boxes and the solver's scratch, which find_pairs and step_bodies
    # recompute before reading them, and the solver's record of each body (body_before), which place_body need not
    # write: a placed body's rest count starts again anyway, and the next substep records it anew.
    scratch = {
        "body_before",
        "aabb_lower",
        "aabb_upper",
        "broadphase_reach",
        "split_count",
        "split_move",
        "split_turn",
        "split_rank",
        "substep_reach",
        "velocity_batch",
        "body_vertices",
        "motion_lock",
        "motion_inertia",
    }
    assert names - placed == scratch and placed <= names
    assert systems.place_body is place_body and systems.BodyColumns is BodyColumns


@wp.kernel
def place_many(
    worlds: wp.array[wp.int32],
    rows: wp.array[wp.int32],
    shapes: wp.array[wp.int32],
    sizes: wp.array[wp.vec3],
    positions: wp.array[wp.vec3],
    rotations: wp.array[wp.quat],
    masses: wp.array[wp.float32],
    responses: wp.array[wp.int32],
    frictions: wp.array[wp.float32],
    restitutions: wp.array[wp.float32],
    bodies: BodyColumns,
    generation_returned: wp.array[wp.int32],
):
    i = wp.tid()
    generation_returned[i] = place_body(
        bodies,
        worlds[i],
        rows[i],
        shapes[i],
        sizes[i],
        positions[i],
        rotations[i],
        masses[i],
        responses[i],
        frictions[i],
        restitutions[i],
    )


def shape_inertia_np(shape: int, size: np.ndarray, mass: float) -> np.ndarray:
    """Inertia about the centre of mass in the body frame, of a uniform solid, in float64."""
    r, h = float(size[0]), 2.0 * float(size[1])
    if shape == ShapeType.SPHERE:
        return np.eye(3) * 0.4 * mass * r * r
    if shape == ShapeType.BOX:
        x, y, z = 2.0 * np.asarray(size, dtype=np.float64)
        return mass / 12.0 * np.diag([y * y + z * z, x * x + z * z, x * x + y * y])
    if shape == ShapeType.CAPSULE:
        # A cylinder of height h and two hemispheres (centroid 3r/8 from the flat face), by parallel axes.
        vc, vs = math.pi * r * r * h, 4.0 / 3.0 * math.pi * r**3
        mc, ms = mass * vc / (vc + vs), mass * vs / (vc + vs)
        axial = mc * r * r / 2 + ms * 2 * r * r / 5
        d = h / 2 + 3 * r / 8  # hemisphere centroids from the centre
        hemi = ms * (83.0 / 320.0 * r * r + d * d)  # both hemispheres: own centroidal inertia, moved by d
        side = mc * (h * h / 12 + r * r / 4) + hemi
        return np.diag([side, side, axial])
    if shape == ShapeType.WEDGE:
        # A prism over a triangle in the x-z plane: quadratic moments over the triangle are exact
        # with the edge-midpoint rule; y is uniform over [-hy, hy].
        v = wedge_vertices_np(size)[:3][:, [0, 2]]
        (ax, az), (bx, bz) = v[1] - v[0], v[2] - v[0]
        area = 0.5 * abs(ax * bz - az * bx)
        mids = (v + np.roll(v, -1, axis=0)) / 2
        xx, zz, xz = (
            area / 3 * np.sum(a * b)
            for a, b in ((mids[:, 0], mids[:, 0]), (mids[:, 1], mids[:, 1]), (mids[:, 0], mids[:, 1]))
        )
        hy = float(size[1])
        rho = mass / (area * 2 * hy)
        yy = area * (2 * hy) ** 3 / 12
        ixx, iyy, izz = 2 * hy * (zz) + yy, 2 * hy * (xx + zz), 2 * hy * xx + yy
        return rho * np.array([[ixx, 0, -2 * hy * xz], [0, iyy, 0], [-2 * hy * xz, 0, izz]])
    return np.zeros((3, 3))


def test_place_body_writes_every_column(device):
    rng = np.random.default_rng(7)
    num_worlds, cap = 3, 6
    # Every column starts as garbage, so a column left unwritten shows.
    cols = {}
    for name, (dtype, shape) in COLUMNS.items():
        if dtype == wp.int32:
            values = rng.integers(-5, 50, size=(num_worlds, cap)).astype(np.int32)
        else:
            values = rng.normal(size=(num_worlds, cap, *shape)).astype(np.float32)
        cols[name] = values
    bodies = BodyColumns()
    for name, (dtype, _) in COLUMNS.items():
        setattr(bodies, name, wp.array(cols[name], dtype=dtype, device=device))

    shapes = [SPHERE, CAPSULE, BOX, WEDGE, PLANE, BOX, WEDGE, SPHERE]
    responses = [DYNAMIC, DYNAMIC, DYNAMIC, DYNAMIC, STATIC, STATIC, KINEMATIC, DYNAMIC]
    worlds = [0, 0, 1, 1, 2, 0, 2, 1]
    rows = [0, 4, 1, 5, 2, 2, 5, 3]
    n = len(shapes)
    sizes = rng.uniform(0.1, 0.8, size=(n, 3)).astype(np.float32)
    positions = rng.normal(size=(n, 3)).astype(np.float32)
    quats = rng.normal(size=(n, 4))
    rotations = (quats / np.linalg.norm(quats, axis=1, keepdims=True)).astype(np.float32)
    masses = rng.uniform(0.5, 3.0, size=n).astype(np.float32)
    frictions = rng.uniform(0.0, 1.0, size=n).astype(np.float32)
    restitutions = rng.uniform(0.0, 1.0, size=n).astype(np.float32)
    returned = wp.zeros(n, dtype=wp.int32, device=device)
    wp.launch(
        place_many,
        dim=n,
        inputs=[
            wp.array(worlds, dtype=wp.int32, device=device),
            wp.array(rows, dtype=wp.int32, device=device),
            wp.array(shapes, dtype=wp.int32, device=device),
            wp.array(sizes, dtype=wp.vec3, device=device),
            wp.array(positions, dtype=wp.vec3, device=device),
            wp.array(rotations, dtype=wp.quat, device=device),
            wp.array(masses, dtype=wp.float32, device=device),
            wp.array(responses, dtype=wp.int32, device=device),
            wp.array(frictions, dtype=wp.float32, device=device),
            wp.array(restitutions, dtype=wp.float32, device=device),
            bodies,
            returned,
        ],
        device=device,
    )
    got = {name: getattr(bodies, name).numpy() for name in COLUMNS}

    expected = {name: values.copy() for name, values in cols.items()}
    for i, (w, r) in enumerate(zip(worlds, rows, strict=True)):
        dynamic = responses[i] == DYNAMIC
        mass = float(masses[i]) if dynamic else 0.0
        inertia = shape_inertia_np(shapes[i], sizes[i], mass)
        expected["alive"][w, r] = 1
        expected["generation"][w, r] = cols["generation"][w, r] + 1
        expected["shape"][w, r] = shapes[i]
        expected["size"][w, r] = sizes[i]
        expected["position"][w, r] = positions[i]
        expected["rotation"][w, r] = rotations[i]
        expected["linear_velocity"][w, r] = 0.0
        expected["angular_velocity"][w, r] = 0.0
        expected["mass"][w, r] = mass
        expected["inv_inertia"][w, r] = np.linalg.inv(inertia) if mass > 0 and shapes[i] != PLANE else 0.0
        expected["response"][w, r] = responses[i]
        expected["friction"][w, r] = frictions[i]
        expected["restitution"][w, r] = restitutions[i]
        expected["force"][w, r] = 0.0
        expected["torque"][w, r] = 0.0
        expected["drag"][w, r] = 0.0
        expected["prev_position"][w, r] = positions[i]
        expected["prev_rotation"][w, r] = rotations[i]
        expected["locked_by"][w, r] = 0
        expected["sleep_count"][w, r] = 0  # awake
        expected["sweep_order"][w, 0] = -1  # the world's order is stale: find_pairs rebuilds it
    for name in COLUMNS:
        if name == "inv_inertia":
            np.testing.assert_allclose(got[name], expected[name], rtol=2e-5, atol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    assert returned.numpy().tolist() == [int(cols["generation"][w, r]) + 1 for w, r in zip(worlds, rows, strict=True)]


# -- a scene placed at reset against the same scene loaded from the host ----------------------------

CFG = physics.PhysicsConfig(max_bodies=8, max_pairs=32, max_contacts=64, max_joints=1)


@wp.kernel
def reset_scene(
    # Components in:
    world_reset_in: wp.array[wp.int32],
    # Components out:
    body__alive_out: wp.array2d[wp.int32],
    body__generation_out: wp.array2d[wp.int32],
    body__shape_out: wp.array2d[wp.int32],
    body__size_out: wp.array2d[wp.vec3],
    body__position_out: wp.array2d[wp.vec3],
    body__rotation_out: wp.array2d[wp.quat],
    body__linear_velocity_out: wp.array2d[wp.vec3],
    body__angular_velocity_out: wp.array2d[wp.vec3],
    body__mass_out: wp.array2d[wp.float32],
    body__inv_inertia_out: wp.array2d[wp.mat33],
    body__response_out: wp.array2d[wp.int32],
    body__friction_out: wp.array2d[wp.float32],
    body__restitution_out: wp.array2d[wp.float32],
    body__force_out: wp.array2d[wp.vec3],
    body__torque_out: wp.array2d[wp.vec3],
    body__drag_out: wp.array2d[wp.vec3],
    body__prev_position_out: wp.array2d[wp.vec3],
    body__prev_rotation_out: wp.array2d[wp.quat],
    body__locked_by_out: wp.array2d[wp.int32],
    body__sleep_count_out: wp.array2d[wp.int32],
    body__sweep_order_out: wp.array2d[wp.int32],
):
    """The scene of ``scene_specs``: a floor, two boxes stacked (equal x extents: a tie in the sweep), a ball,
    a wedge and a kinematic capsule; the stack shifts 1 cm per world."""
    world = wp.tid()
    if world_reset_in[world] == 0:
        return
    b = BodyColumns(
        alive=body__alive_out,
        generation=body__generation_out,
        shape=body__shape_out,
        size=body__size_out,
        position=body__position_out,
        rotation=body__rotation_out,
        linear_velocity=body__linear_velocity_out,
        angular_velocity=body__angular_velocity_out,
        mass=body__mass_out,
        inv_inertia=body__inv_inertia_out,
        response=body__response_out,
        friction=body__friction_out,
        restitution=body__restitution_out,
        force=body__force_out,
        torque=body__torque_out,
        drag=body__drag_out,
        prev_position=body__prev_position_out,
        prev_rotation=body__prev_rotation_out,
        locked_by=body__locked_by_out,
        sleep_count=body__sleep_count_out,
        sweep_order=body__sweep_order_out,
    )
    for row in range(body__alive_out.shape[1]):
        ecs.despawn(body__alive_out, world, row)
    x = 0.01 * float(world)
    half = wp.vec3(0.25, 0.25, 0.25)
    q = wp.quat_identity()
    place_body(b, world, 0, PLANE, wp.vec3(0.0, 0.0, 0.0), wp.vec3(0.0, 0.0, 0.0), q, 0.0, STATIC, 0.6, 0.0)
    place_body(b, world, 1, BOX, half, wp.vec3(x, 0.0, 0.75), q, 1.0, DYNAMIC, 0.5, 0.0)
    place_body(b, world, 2, BOX, half, wp.vec3(x, 0.0, 0.24), q, 2.0, DYNAMIC, 0.5, 0.1)
    place_body(b, world, 3, SPHERE, wp.vec3(0.2, 0.0, 0.0), wp.vec3(x + 0.6, 0.1, 0.4), q, 0.5, DYNAMIC, 0.4, 0.3)
    yaw = wp.quat(0.0, 0.0, 0.6, 0.8)
    place_body(b, world, 4, WEDGE, wp.vec3(0.3, 0.2, 0.15), wp.vec3(-0.7, 0.0, 0.2), yaw, 1.5, DYNAMIC, 0.5, 0.0)
    place_body(b, world, 5, CAPSULE, wp.vec3(0.1, 0.2, 0.0), wp.vec3(0.0, 0.9, 0.3), q, 2.0, KINEMATIC, 0.5, 0.0)


def scene_specs(world: int) -> list[BodySpec]:
    x = float(np.float32(0.01) * np.float32(world))
    return [
        BodySpec(ShapeType.PLANE, size=(0, 0, 0), response=Response.STATIC, friction=0.6),
        BodySpec(ShapeType.BOX, size=(0.25, 0.25, 0.25), position=(x, 0, 0.75), mass=1.0),
        BodySpec(ShapeType.BOX, size=(0.25, 0.25, 0.25), position=(x, 0, 0.24), mass=2.0, restitution=0.1),
        BodySpec(
            ShapeType.SPHERE, size=(0.2, 0, 0), position=(x + 0.6, 0.1, 0.4), mass=0.5, friction=0.4, restitution=0.3
        ),
        BodySpec(ShapeType.WEDGE, size=(0.3, 0.2, 0.15), position=(-0.7, 0, 0.2), rotation=(0, 0, 0.6, 0.8), mass=1.5),
        BodySpec(ShapeType.CAPSULE, size=(0.1, 0.2, 0), position=(0, 0.9, 0.3), mass=2.0, response=Response.KINEMATIC),
    ]


def dirty(sim: ecs.BatchSim, seed: int) -> None:
    """Fills every body column with what an old episode could leave: motion, forces, locks, a reversed sweep."""
    rng = np.random.default_rng(seed)
    table = sim.tables["body"]
    for name, arr in table.items():
        a = arr.numpy()
        if name == "sweep_order":
            a[:] = np.arange(a.shape[1])[::-1]
        elif name == "generation":
            a[:] = rng.integers(0, 100, size=a.shape)
        elif name in ("locked_by", "alive"):
            a[:] = 1
        elif name in ("shape", "response"):
            continue
        elif a.dtype.kind == "f":
            a[:] = rng.normal(size=a.shape)
        arr.assign(a)


def test_scene_placed_at_reset_steps_like_the_loaded_scene():
    num_worlds = 3
    placed = ecs.BatchSim(
        make_env(CFG, name="placed", extra_systems=[ecs.System(reset_scene, ecs.Phase.RESET, dim="world")]),
        num_worlds,
        device="cpu",
    )
    loaded = ecs.BatchSim(make_env(CFG, name="loaded"), num_worlds, device="cpu")
    for sim in (placed, loaded):
        for _ in range(3):  # some history: the loaded scene falls a little
            sim.step()
        dirty(sim, seed=5)
    placed.reset()
    physics.load_scene(loaded, scene_specs)

    def columns(sim):
        return {k: v.numpy().copy() for k, v in sim.tables["body"].items()}

    a, b = columns(placed), columns(loaded)
    live = a["alive"] != 0
    assert live.sum(axis=1).tolist() == [6] * num_worlds
    np.testing.assert_array_equal(a["alive"], b["alive"])
    np.testing.assert_array_equal(a["generation"], b["generation"])
    # The solver's scratch is written before it is read in every substep (``mark_chains`` leaves which bodies move in
    # ``split_rank``): what the three steps before left there differs, and the steps below show it does not matter.
    scratch = {c.name for c in solver.SCRATCH_COMPONENTS}
    for name in a:
        if name == "sweep_order":  # both stale, so find_pairs sorts from row order
            assert (a[name][:, 0] == -1).all() and (b[name][:, 0] == -1).all()
        elif name not in ("aabb_lower", "aabb_upper", *scratch):  # recomputed before use
            np.testing.assert_array_equal(a[name][live], b[name][live], err_msg=name)
    for _ in range(30):
        placed.step()
        loaded.step()
    a, b = columns(placed), columns(loaded)
    for name in a:
        if name != "sweep_order":
            np.testing.assert_array_equal(a[name][live], b[name][live], err_msg=f"{name} after 30 steps")
    np.testing.assert_array_equal(a["sweep_order"], b["sweep_order"])
    # The bodies did move: the top box settled on the lower one, which settled on the floor.
    assert np.all(np.abs(a["position"][:, 1, 2] - 0.75) < 0.05) and np.all(a["position"][:, 2, 2] > 0.2)
    assert np.all(a["position"][:, 3, 2] < 0.25)
