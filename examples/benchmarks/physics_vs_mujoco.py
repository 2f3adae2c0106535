"""The physics scene suite: ``systems.physics`` against MuJoCo on the scenes a researcher builds first.

Every scene is described once (bodies, constant forces, duration) and run in both engines with the
same masses, sizes and friction: ours at the default ``PhysicsConfig`` (1/30 s steps, 4 substeps),
MuJoCo at 1 ms steps with condim 3 and elliptic friction cones (ramps are convex meshes of the same
six vertices). Each scene reports one number per engine, measured the same way on both:

| scene | number | target for this engine |
|---|---|---|
| stacks of 3, 5, 8 cubes (aligned, 1 cm and 2 cm offsets; bottom first, top first, interleaved) | largest horizontal cube drift after 10 s [mm] | < 1 mm |
| a pyramid of 10 cubes | largest horizontal cube drift after 10 s [mm] | < 1 mm |
| free spin at 20 rad/s about x, y, z and tumbling (3, 0.5, 2) rad/s, no gravity | kinetic energy change after 10 s [%] | < 1 % |
| 0.2 m and 0.5 m cubes at 1-20 m/s against 1 cm and 10 cm fixed walls | speeds (of 6) at which the cube ends beyond the wall | 0 |
| a cube pressed into a 1 cm wall by 1, 5, 10, 20 times its weight | deepest reach past the wall's face [mm] | < 10 mm up to 10 x |
| a 2 kg ramp pushed by a 1 kg cube at 10, 20, 40 N, from its low end and from its high end | ramp travel after 2 s [m] | within 10 % of MuJoCo (at 20 N from the low end, MuJoCo's soft contacts let the cube creep up the slope where Coulomb friction holds it: ``coulomb_ramp`` is the reference there) |
| a box pushed by 8 N for 1 s, then released | stop distance [m] | within 10 % of MuJoCo |
| the low-end ramp push, a symmetric scene (unstable in yaw: MuJoCo drifts too from 0.1 um off centre) | sideways drift of the cube [mm] | < 1 mm |
| 2 and 3 cubes in a row pressed together by equal forces at both ends (stable symmetric scenes; both listing orders) | largest drift of the row's centre [mm] | < 1 mm |

    python examples/benchmarks/physics_vs_mujoco.py                    # table; JSON, markdown and PNG in results/
    python examples/benchmarks/physics_vs_mujoco.py --quick --out /tmp/physics   # shorter scenes, for smoke tests

Needs ``mujoco`` (in the project's test extra) and, for the plot, matplotlib.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

DT = 1.0 / 30.0
MJ_STEP = 0.001
HALF = 0.25  # m, half edge of the 0.5 m cube
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


@dataclass(frozen=True)
class Body:
    """One body, shared by both engines. ``half``: half extents (box, wedge) or (radius, 0, 0)."""

    kind: str  # "plane", "box", "wedge"
    half: tuple[float, float, float] = (HALF, HALF, HALF)
    pos: tuple[float, float, float] = (0.0, 0.0, 0.0)
    quat: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 1.0)  # x, y, z, w
    mass: float = 1.0
    friction: float = 0.5
    static: bool = False
    vel: tuple[float, float, float] = (0.0, 0.0, 0.0)
    angvel: tuple[float, float, float] = (0.0, 0.0, 0.0)


@dataclass
class Scene:
    """Bodies, constant forces per body index, duration, and the number it reports."""

    name: str
    group: str
    bodies: list[Body]
    seconds: float
    metric: Callable[[dict[str, np.ndarray]], float]
    unit: str
    target: str
    forces: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    release_after: float | None = None  # forces stop after this many seconds
    gravity: float = -9.8
    relative: bool = False  # the target is relative to MuJoCo: report the error in percent


# -- engines ---------------------------------------------------------------------------------------------


def run_ours(scene: Scene) -> dict[str, np.ndarray]:
    """Per-step position, rotation (x, y, z, w), linear and angular velocity of every body, ``[T, n, 3|4]``."""
    import ecs
    from systems import physics
    from systems.geometry import ShapeType
    from systems.physics import BodySpec, PhysicsConfig
    from systems.rigid_body import Response

    cfg = PhysicsConfig(gravity=scene.gravity, max_bodies=max(16, len(scene.bodies)))
    sim = ecs.BatchSim(physics.scene_env(cfg), 1, device="cpu")
    shapes = {"plane": ShapeType.PLANE, "box": ShapeType.BOX, "wedge": ShapeType.WEDGE}
    specs = [
        BodySpec(
            int(shapes[b.kind]),
            size=b.half,
            position=b.pos,
            rotation=b.quat,
            mass=b.mass,
            response=int(Response.STATIC if b.static or b.kind == "plane" else Response.DYNAMIC),
            friction=b.friction,
            linear_velocity=b.vel,
            angular_velocity=b.angvel,
        )
        for b in scene.bodies
    ]
    physics.load_scene(sim, specs)
    force = sim.tensor("body", "force")
    for i, f in scene.forces.items():
        force[0, i] = force.new_tensor(f)
    n, steps = len(scene.bodies), round(scene.seconds / DT)
    out = {k: [] for k in ("position", "rotation", "linear_velocity", "angular_velocity")}
    for step in range(steps):
        if scene.release_after is not None and step == round(scene.release_after / DT):
            force.zero_()
        sim.step()
        for k in out:
            out[k].append(sim.tensor("body", k).numpy()[0, :n].copy())
    return {k: np.array(v) for k, v in out.items()}


def mjcf(scene: Scene) -> str:
    from systems.geometry import wedge_vertices_np

    assets, bodies = [], []
    for i, b in enumerate(scene.bodies):
        fr = f'friction="{b.friction} 0 0"'
        x, y, z, w = b.quat
        pose = f'pos="{b.pos[0]} {b.pos[1]} {b.pos[2]}" quat="{w} {x} {y} {z}"'
        if b.kind == "plane":
            bodies.append(f'<geom type="plane" size="50 50 0.1" {pose} {fr}/>')
            continue
        if b.kind == "box":
            geom = f'type="box" size="{b.half[0]} {b.half[1]} {b.half[2]}"'
        else:
            verts = " ".join(f"{v:.9g}" for v in np.asarray(wedge_vertices_np(b.half)).reshape(-1))
            assets.append(f'<mesh name="wedge{i}" vertex="{verts}"/>')
            geom = f'type="mesh" mesh="wedge{i}"'
        if b.static:
            bodies.append(f"<geom {geom} {pose} {fr}/>")
        else:
            bodies.append(f'<body name="b{i}" {pose}><freejoint/><geom {geom} mass="{b.mass}" {fr}/></body>')
    return (
        f'<mujoco><option timestep="{MJ_STEP}" gravity="0 0 {scene.gravity}" cone="elliptic"/>'
        f"<asset>{''.join(assets)}</asset><worldbody>{''.join(bodies)}</worldbody></mujoco>"
    )


def run_mujoco(scene: Scene) -> dict[str, np.ndarray]:
    """The same arrays as ``run_ours``, sampled at our step times (static bodies stay at their pose)."""
    import mujoco

    model = mujoco.MjModel.from_xml_string(mjcf(scene))
    data = mujoco.MjData(model)
    ids = {}
    for i, b in enumerate(scene.bodies):
        if not (b.static or b.kind == "plane"):
            ids[i] = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, f"b{i}")
            adr = model.jnt_dofadr[model.body_jntadr[ids[i]]]
            data.qvel[adr : adr + 3] = b.vel
            # MuJoCo's free-joint angular velocity is in the body frame.
            q = np.array([b.quat[3], *b.quat[:3]])
            local = np.zeros(3)
            neg = q * np.array([1, -1, -1, -1])
            mujoco.mju_rotVecQuat(local, np.asarray(b.angvel, dtype=np.float64), neg)
            data.qvel[adr + 3 : adr + 6] = local
    per_step, steps = round(DT / MJ_STEP), round(scene.seconds / DT)
    n = len(scene.bodies)
    out = {
        k: np.zeros((steps, n, 4 if k == "rotation" else 3))
        for k in ("position", "rotation", "linear_velocity", "angular_velocity")
    }
    for i, b in enumerate(scene.bodies):
        out["position"][:, i] = b.pos
        out["rotation"][:, i] = b.quat
    vel = np.zeros(6)
    for step in range(steps):
        for _ in range(per_step):
            on = scene.release_after is None or (step * per_step) * MJ_STEP < scene.release_after - 1e-9
            for i, f in scene.forces.items():
                data.xfrc_applied[ids[i], :3] = f if on else (0.0, 0.0, 0.0)
            mujoco.mj_step(model, data)
        for i, bid in ids.items():
            out["position"][step, i] = data.xpos[bid]
            w, x, y, z = data.xquat[bid]
            out["rotation"][step, i] = (x, y, z, w)
            mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_BODY, bid, vel, 0)
            out["angular_velocity"][step, i] = vel[:3]
            out["linear_velocity"][step, i] = vel[3:]
    return out


# -- metrics -----------------------------------------------------------------------------------------------


def max_drift_mm(rows: list[int]) -> Callable[[dict[str, np.ndarray]], float]:
    def metric(run: dict[str, np.ndarray]) -> float:
        p = run["position"][:, rows, :2]  # horizontal: MuJoCo's soft contacts also sink a little
        return float(np.linalg.norm(p[-1] - p[0], axis=-1).max() * 1e3)

    return metric


def rotation_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrices ``[..., 3, 3]`` of quaternions ``[..., 4]`` (x, y, z, w), normalised first."""
    x, y, z, w = np.moveaxis(q / np.linalg.norm(q, axis=-1, keepdims=True), -1, 0)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
            np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
            np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def energy_change_pct(half: tuple[float, float, float], mass: float, omega0: np.ndarray):
    a, b, c = half
    inertia = mass / 3.0 * np.diag([b * b + c * c, a * a + c * c, a * a + b * b])
    start = 0.5 * omega0 @ inertia @ omega0

    def metric(run: dict[str, np.ndarray]) -> float:
        r = rotation_matrix(run["rotation"][-1, 0])
        w = run["angular_velocity"][-1, 0]
        return float(abs(0.5 * w @ (r @ inertia @ r.T) @ w / start - 1.0) * 100)

    return metric


# -- scenes ------------------------------------------------------------------------------------------------


def floor(friction: float = 0.5) -> Body:
    return Body("plane", static=True, friction=friction)


def stack(n: int, offset: float, order: str, seconds: float) -> Scene:
    levels = list(range(n))
    if order == "top first":
        levels = levels[::-1]
    elif order == "interleaved":
        levels = levels[1::2] + levels[0::2]
    cubes = [Body("box", pos=(offset * i, 0.0, HALF + 2 * HALF * i)) for i in levels]
    return Scene(
        f"{n} cubes, {offset * 100:g} cm offset, {order}",
        "stack",
        [floor(), *cubes],
        seconds,
        max_drift_mm(list(range(1, n + 1))),
        "mm drift",
        "< 1",
    )


def pyramid(seconds: float) -> Scene:
    cubes = []
    for level, count in enumerate((4, 3, 2, 1)):
        for k in range(count):
            x = (k - (count - 1) / 2) * (2 * HALF + 0.01)
            cubes.append(Body("box", pos=(x, 0.0, HALF + 2 * HALF * level)))
    return Scene(
        "10 cubes, rows 4-3-2-1",
        "pyramid",
        [floor(), *cubes],
        seconds,
        max_drift_mm(list(range(1, 11))),
        "mm drift",
        "< 1",
    )


def spin(omega: tuple[float, float, float], seconds: float) -> Scene:
    half = (0.3, 0.2, 0.1)
    return Scene(
        f"box 0.6 x 0.4 x 0.2 m at {omega} rad/s",
        "free spin",
        [Body("box", half=half, pos=(0, 0, 2), angvel=omega)],
        seconds,
        energy_change_pct(half, 1.0, np.array(omega)),
        "% energy change",
        "< 1",
        gravity=0.0,
    )


SPEEDS = (1.0, 2.0, 5.0, 9.0, 14.0, 20.0)


def wall_scenes(half: float, thickness: float, seconds: float) -> list[Scene]:
    out = []
    for v in SPEEDS:
        bodies = [
            Body("box", half=(thickness / 2, 2.0, 1.0), pos=(0, 0, 1), static=True, friction=0.0),
            Body("box", half=(half,) * 3, pos=(-1.0 - half, 0, 1), vel=(v, 0, 0), friction=0.0),
        ]

        def metric(run, thickness=thickness):
            return float(run["position"][-1, 1, 0] > thickness / 2)

        out.append(
            Scene(
                f"{2 * half:g} m cube at {v:g} m/s, {thickness * 100:g} cm wall",
                "wall",
                bodies,
                seconds,
                metric,
                "passed",
                "0",
                gravity=0.0,
            )
        )
    return out


def pressed(factor: float, seconds: float) -> Scene:
    thickness = 0.01
    bodies = [
        floor(),
        Body("box", half=(thickness / 2, 2.0, 1.0), pos=(0, 0, 1), static=True, friction=0.0),
        Body("box", pos=(-HALF - thickness / 2 - 0.02, 0, HALF)),
    ]

    def metric(run):
        front = run["position"][:, 2, 0] + HALF + thickness / 2
        return float(max(front.max(), 0.0) * 1e3)

    return Scene(
        f"0.5 m cube, {factor:g} x its weight",
        "pressed",
        bodies,
        seconds,
        metric,
        "mm past the face",
        "< 10",
        forces={2: (factor * 9.8, 0, 0)},
    )


def ramp_push(force: float, end: str, seconds: float) -> Scene:
    """A 2 kg ramp (half extents 0.25) on the floor, a 1 kg cube pushing it along +x from one end."""
    ramp_half = (HALF, HALF, HALF)
    # Body frame of the wedge: the slope rises towards +x; turning it by 180 degrees about z puts
    # its vertical face towards the cube (the "high end").
    turned = end == "high end"
    quat = (0.0, 0.0, 1.0, 0.0) if turned else (0.0, 0.0, 0.0, 1.0)
    low_x = -4.0 / 3.0 * HALF  # the slope's foot, body frame
    back_x = 2.0 / 3.0 * HALF  # the vertical face
    near = -back_x if turned else low_x  # the ramp's face (or foot) nearest the cube, world x
    ramp = Body("wedge", half=ramp_half, pos=(0.0, 0.0, 2.0 / 3.0 * HALF), quat=quat, mass=2.0, friction=0.3)
    # The cube's half height 0.1 m: it meets the low end's slope, or the high end's vertical face.
    cube_half = 0.1
    cube = Body("box", half=(cube_half,) * 3, pos=(near - cube_half - 0.01, 0.0, cube_half), friction=0.3)

    def metric(run):
        return float(run["position"][-1, 1, 0] - run["position"][0, 1, 0])

    return Scene(
        f"{force:g} N from the {end}",
        "ramp push",
        [floor(0.3), ramp, cube],
        seconds,
        metric,
        "m ramp travel",
        "within 10 % of MuJoCo",
        forces={2: (force, 0, 0)},
        relative=True,
    )


# The ramp's slope in its body frame (``ramp_push``: a wedge of half extents HALF): rising towards +x by 2 HALF over
# the 2 HALF from its foot to its vertical face, 45 degrees.
SLOPE = float(np.arctan2(2.0 * HALF, 2.0 / 3.0 * HALF + 4.0 / 3.0 * HALF))


def coulomb_ramp(force: float, cube_mass: float, ramp_mass: float, mu: float, g: float, slope: float = SLOPE) -> dict:
    """Rigid bodies and Coulomb friction (one ``mu`` for every contact), for a cube lying flat on a free ramp's
    slope and pushed horizontally by ``force`` towards the ramp, which slides on the floor without turning.

    Returns ``slide``: the cube's acceleration up the slope relative to the ramp while it slides up it [m/s^2]
    (negative: the slide slows down); ``ramp_sliding``: the ramp's acceleration meanwhile; ``sticks``: whether
    static friction can hold the cube on the slope once the slide stops; ``together``: the acceleration of
    cube and ramp as one body then."""
    s, c = np.sin(slope), np.cos(slope)
    # Unknowns: the cube's acceleration (ax, az), the ramp's (A), the slope's normal force on the cube (N), the
    # floor's on the ramp (Nf). Kinetic friction mu N acts on the cube down the slope, mu Nf on the ramp backwards.
    lhs = np.array(
        [
            [cube_mass, 0.0, 0.0, s + mu * c, 0.0],  # cube, x: m ax = F - N s - mu N c
            [0.0, cube_mass, 0.0, -(c - mu * s), 0.0],  # cube, z: m az = -m g + N c - mu N s
            [0.0, 0.0, ramp_mass, -(s + mu * c), mu],  # ramp, x: M A = N s + mu N c - mu Nf
            [0.0, 0.0, 0.0, -(c - mu * s), 1.0],  # ramp, z: Nf = M g + N c - mu N s
            [-s, c, s, 0.0, 0.0],  # the cube stays on the slope: its relative acceleration is along it
        ]
    )
    ax, az, ramp_a, _, _ = np.linalg.solve(lhs, [force, -cube_mass * g, 0.0, ramp_mass * g, 0.0])
    together = (force - mu * (cube_mass + ramp_mass) * g) / (cube_mass + ramp_mass)
    # Held: the slope's force on the cube is (m a - F, m g) in x, z; its parts along the slope and normal to it.
    fx, fz = cube_mass * together - force, cube_mass * g
    normal, along = -fx * s + fz * c, fx * c + fz * s
    return {
        "slide": float((ax - ramp_a) * c + az * s),
        "ramp_sliding": float(ramp_a),
        "sticks": bool(abs(along) <= mu * normal),
        "together": float(together),
    }


def slope_motion(run: dict[str, np.ndarray], ramp: int = 1, cube: int = 2) -> dict[str, np.ndarray]:
    """Per step of a ``ramp_push`` run from the low end: ``slide``, the cube's speed up the ramp's slope relative to
    the ramp's surface there [m/s]; ``tilt``, the angle between the slope's normal and the nearest of the cube's
    face normals [deg] (0: a face lies flat on the slope); ``ramp_ax``, the ramp's acceleration along x from this
    step to the next [m/s^2]; ``height``, the cube's centre above the floor [m]."""
    pos, vel, ang = run["position"], run["linear_velocity"], run["angular_velocity"]
    turn = rotation_matrix(run["rotation"][:, ramp])
    up = turn @ np.array([np.cos(SLOPE), 0.0, np.sin(SLOPE)])
    normal = turn @ np.array([-np.sin(SLOPE), 0.0, np.cos(SLOPE)])
    surface = vel[:, ramp] + np.cross(ang[:, ramp], pos[:, cube] - pos[:, ramp])
    faces = np.abs(np.einsum("tij,ti->tj", rotation_matrix(run["rotation"][:, cube]), normal)).max(axis=1)
    return {
        "slide": np.einsum("ti,ti->t", vel[:, cube] - surface, up),
        "tilt": np.degrees(np.arccos(np.clip(faces, -1.0, 1.0))),
        "ramp_ax": np.append(np.diff(vel[:, ramp, 0]) / DT, np.nan),
        "height": pos[:, cube, 2],
    }


def symmetric(seconds: float) -> Scene:
    base = ramp_push(20.0, "low end", seconds)

    def metric(run):
        return float(np.abs(run["position"][:, 2, 1]).max() * 1e3)

    return Scene(
        "cube pushing the ramp's low end at 20 N",
        "symmetry",
        base.bodies,
        seconds,
        metric,
        "mm sideways",
        "< 1",
        forces=base.forces,
    )


def pressed_row(n: int, order: str, seconds: float) -> Scene:
    """``n`` cubes in a row along x, 5 cm apart, the outer two pushed inwards by 20 N each.

    A symmetric scene that is stable: the row closes, then stands, pressed together, with its middle
    where it started. ``order``: "left first" or "right first", the listing order of the cubes."""
    xs = [(i - (n - 1) / 2) * (2 * HALF + 0.05) for i in range(n)]
    cubes = [Body("box", pos=(x, 0.0, HALF)) for x in xs]
    if order == "right first":
        cubes = cubes[::-1]
    left = 1 + [b.pos[0] for b in cubes].index(min(xs))
    right = 1 + [b.pos[0] for b in cubes].index(max(xs))

    def metric(run):
        # The row's centre: where the outer cubes' mid-point went [mm].
        p = run["position"]
        return float(np.abs(p[:, left, 0] + p[:, right, 0]).max() / 2 * 1e3)

    return Scene(
        f"{n} cubes pressed together by 20 N each side, {order}",
        "symmetry",
        [floor(), *cubes],
        seconds,
        metric,
        "mm off centre",
        "< 1",
        forces={left: (20.0, 0, 0), right: (-20.0, 0, 0)},
    )


def push_release(seconds: float) -> Scene:
    def metric(run):
        return float(run["position"][-1, 1, 0] - run["position"][0, 1, 0])

    return Scene(
        "box pushed by 8 N for 1 s, then released",
        "push and release",
        [floor(), Body("box", pos=(0, 0, HALF))],
        seconds,
        metric,
        "m travelled",
        "within 10 % of MuJoCo",
        forces={1: (8.0, 0, 0)},
        release_after=1.0,
        relative=True,
    )


def scenes(quick: bool = False) -> list[Scene]:
    long = 2.0 if quick else 10.0
    out = []
    sizes = (3, 5) if quick else (3, 5, 8)
    for n in sizes:
        for offset in (0.0, 0.01, 0.02):
            for order in ("bottom first", "top first", "interleaved"):
                if quick and order == "interleaved":
                    continue
                out.append(stack(n, offset, order, long))
    out.append(pyramid(long))
    for omega in ((20.0, 0.0, 0.0), (0.0, 20.0, 0.0), (0.0, 0.0, 20.0), (3.0, 0.5, 2.0)):
        out.append(spin(omega, long))
    for half in (0.1, 0.25):
        for thickness in (0.01, 0.1):
            out += wall_scenes(half, thickness, 1.0 if quick else 2.0)
    for factor in (1.0, 5.0, 10.0, 20.0):
        out.append(pressed(factor, 1.0 if quick else 3.0))
    for end in ("low end", "high end"):
        for force in (10.0, 20.0, 40.0):
            out.append(ramp_push(force, end, 1.0 if quick else 2.0))
    out.append(push_release(2.0))
    out.append(symmetric(1.0 if quick else 2.0))
    for n in (2, 3):
        for order in ("left first", "right first"):
            out.append(pressed_row(n, order, 2.0))
    return out


# -- report ------------------------------------------------------------------------------------------------


def error(row: dict) -> str:
    """Percent of MuJoCo's figure where the target is relative to it, else the plain difference."""
    ours, ref = row["ours"], row["mujoco"]
    if row["relative"] and ref != 0.0:
        return f"{(ours - ref) / abs(ref) * 100:+.1f} %"
    return f"{ours - ref:+.3g}"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter scenes and fewer stacks, for smoke tests")
    parser.add_argument("--out", default=RESULTS, help=f"folder for the JSON, markdown and PNG (default {RESULTS})")
    parser.add_argument("--no-plot", action="store_true", help="write no PNG")
    args = parser.parse_args(argv)
    import warp as wp

    wp.config.log_level = wp.LOG_WARNING
    rows = []
    for sc in scenes(args.quick):
        ours, ref = sc.metric(run_ours(sc)), sc.metric(run_mujoco(sc))
        row = {"group": sc.group, "scene": sc.name, "unit": sc.unit, "ours": ours, "mujoco": ref}
        rows.append({**row, "target": sc.target, "relative": sc.relative})
        print(
            f"{sc.group:>16} | {sc.name:<46} | {ours:>10.4g} | {ref:>10.4g} | {error(rows[-1]):>9} | "
            f"{sc.unit}, target {sc.target}"
        )
    os.makedirs(args.out, exist_ok=True)
    meta = {
        "engine": "systems.physics, PhysicsConfig() (1/30 s, 4 substeps), device cpu",
        "mujoco": "1 ms steps, condim 3, elliptic cones",
        "quick": args.quick,
        "machine": platform.processor() or platform.machine(),
    }
    with open(os.path.join(args.out, "physics_vs_mujoco.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    lines = ["| group | scene | this engine | MuJoCo | error | unit | target |", "|---|---|---|---|---|---|---|"]
    lines += [
        f"| {r['group']} | {r['scene']} | {r['ours']:.4g} | {r['mujoco']:.4g} | {error(r)} | {r['unit']} | {r['target']} |"
        for r in rows
    ]
    with open(os.path.join(args.out, "physics_vs_mujoco.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if not args.no_plot:
        plot(rows, os.path.join(args.out, "physics_vs_mujoco.png"))
    return rows


def plot(rows: list[dict], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    groups = ["stack", "pyramid", "free spin", "pressed", "ramp push", "push and release", "symmetry"]
    fig, axes = plt.subplots(1, len(groups), figsize=(3.0 * len(groups), 3.6))
    for ax, group in zip(axes, groups, strict=True):
        sel = [r for r in rows if r["group"] == group]
        x = np.arange(len(sel))
        ax.bar(x - 0.2, [max(r["ours"], 1e-4) for r in sel], 0.4, label="this engine", color="tab:blue")
        ax.bar(x + 0.2, [max(r["mujoco"], 1e-4) for r in sel], 0.4, label="MuJoCo", color="tab:orange")
        ax.set_title(group, fontsize=9)
        ax.set_ylabel(sel[0]["unit"] if sel else "", fontsize=8)
        if group in ("stack", "pyramid", "free spin", "pressed", "symmetry"):
            ax.set_yscale("log")
            limit = {"pressed": 10.0}.get(group, 1.0)
            ax.axhline(limit, color="k", ls="--", lw=0.8, label="target")
        ax.set_xticks(x)
        ax.set_xticklabels([str(i + 1) for i in x], fontsize=6)
    axes[0].legend(fontsize=7)
    fig.suptitle(
        "systems.physics (1/30 s, 4 substeps) vs MuJoCo (1 ms): scene numbers as in physics_vs_mujoco.md", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


if __name__ == "__main__":
    main()
