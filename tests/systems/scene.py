"""A minimal physics environment for the tests: the physics archetypes and systems, nothing else.

Scenes are written into the tables with ``physics.load_scene`` after the simulation is built; the
env has no reset system and no horizon, so ``reset()`` leaves the bodies alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import warp as wp

import ecs
from systems import physics, solver
from systems.collision import Contacts, Poses
from systems.geometry import ShapeType
from systems.physics import BodySpec
from systems.rigid_body import Response


@dataclass(frozen=True)
class SceneConfig:
    """Nothing to configure beyond physics; the dataclass only satisfies EnvSpec."""


def make_env(
    cfg: physics.PhysicsConfig, *, extra_systems: Sequence[ecs.System] = (), name: str = "physics_test", **kw: Any
) -> ecs.EnvSpec:
    return ecs.EnvSpec(
        name=name,
        config=SceneConfig(),
        archetypes=[*physics.archetypes(cfg), *kw.pop("archetypes", ())],
        singletons=[*physics.singletons(), *kw.pop("singletons", ())],
        systems=[*physics.systems(cfg), *extra_systems],
        resources={**physics.resources(cfg), **kw.pop("resources", {})},
        **kw,
    )


def build(
    bodies: Sequence[BodySpec] | Callable[[int], Sequence[BodySpec]],
    cfg: physics.PhysicsConfig | None = None,
    *,
    num_worlds: int = 1,
    device: str = "cpu",
    cpu_threads: int | None = None,
    **kw: Any,
) -> ecs.BatchSim:
    cfg = cfg or physics.PhysicsConfig()
    sim = ecs.BatchSim(make_env(cfg, **kw), num_worlds, device=device, cpu_threads=cpu_threads)
    physics.load_scene(sim, bodies)
    return sim


def column(sim: ecs.BatchSim, name: str, archetype: str = "body") -> np.ndarray:
    return sim.tables[archetype][name].numpy().copy()


def floor(friction: float = 0.5, restitution: float = 0.0) -> BodySpec:
    return BodySpec(ShapeType.PLANE, response=Response.STATIC, friction=friction, restitution=restitution)


def box_inertia(half: tuple[float, float, float], mass: float) -> np.ndarray:
    """Inertia tensor of a box of half extents ``half`` about its centre, body frame [kg m^2]."""
    a, b, c = half
    return mass / 3.0 * np.diag([b * b + c * c, a * a + c * c, a * a + b * b])


def upright(sim: ecs.BatchSim, row: int, half: tuple[float, float, float], mass: float) -> None:
    """Makes body ``row`` (a box of half extents ``half`` and ``mass``) of every world turn about its z axis only, as
    hide-and-seek's agents, boxes and ramps do."""
    inv = column(sim, "inv_inertia")
    inv[:, row] = 0.0
    inv[:, row, 2, 2] = 1.0 / box_inertia(half, mass)[2, 2]
    sim.tables["body"]["inv_inertia"].assign(inv)
    wp.synchronize_device(sim.device)


def ball_depth(
    centre: np.ndarray, radius: float, x: np.ndarray, q: np.ndarray, size: Sequence[float], shape: int = ShapeType.BOX
) -> float:
    """How far a ball of ``radius`` at ``centre`` reaches into an upright body of pose ``x``, ``q`` and ``size``, seen
    from above, from the poses alone (negative: apart): a ball by the distance of the centres, a box by its oriented
    footprint, a ramp by its bounding box's (a wedge's origin is its centroid, a third of ``size[0]`` off the box's)."""
    if shape in (ShapeType.SPHERE, ShapeType.CAPSULE):
        return radius + float(size[0]) - float(np.linalg.norm(np.asarray(centre)[:2] - np.asarray(x)[:2]))
    local = quat_matrix(q).T @ np.array([centre[0] - x[0], centre[1] - x[1], 0.0])
    along = local[0] + (size[0] / 3.0 if shape == ShapeType.WEDGE else 0.0)
    out = np.abs([along, local[1]]) - np.asarray(size[:2])
    return radius - (float(np.linalg.norm(np.maximum(out, 0.0))) + min(float(out.max()), 0.0))


def turn(axis: tuple[float, float, float], angle: float) -> np.ndarray:
    """The quaternion (x, y, z, w) of a turn by ``angle`` about ``axis`` (normalised here)."""
    a = np.asarray(axis, dtype=np.float64)
    return np.array([*(np.sin(angle / 2) * a / np.linalg.norm(a)), np.cos(angle / 2)])


def compose(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The quaternion of turning by ``q``, then by ``p``."""
    (px, py, pz, pw), (qx, qy, qz, qw) = p, q
    return np.array(
        [
            pw * qx + px * qw + py * qz - pz * qy,
            pw * qy - px * qz + py * qw + pz * qx,
            pw * qz + px * qy - py * qx + pz * qw,
            pw * qw - px * qx - py * qy - pz * qz,
        ]
    )


def quat_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrix of the unit quaternion ``q`` (x, y, z, w)."""
    x, y, z, w = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def poses(body: dict) -> Poses:
    """The narrowphase's view (``collision.Poses``) of a world table ``body`` (from ``solver_views``), keeping each
    pair's vertices as a CPU thread does."""
    out = Poses()
    out.shape, out.size, out.position, out.rotation = body["shape"], body["size"], body["position"], body["rotation"]
    out.keep_vertices = True
    return out


def solver_views(sim: ecs.BatchSim) -> tuple[dict, dict, solver.Bodies, solver.Splits, Contacts]:
    """Copies of world tables ``body`` and ``contact``, and the solver's structs over the copies, for
    tests that call the solver's functions directly (the simulation itself is left alone)."""
    body = {name: wp.clone(col) for name, col in sim.tables["body"].items()}
    contact = {name: wp.clone(col) for name, col in sim.tables["contact"].items()}
    bodies = solver.Bodies()
    for field in ("alive", "mass", "inv_inertia", "response", "locked_by", "friction", "restitution"):
        setattr(bodies, field, body[field])
    for field in ("position", "rotation", "prev_position", "prev_rotation", "linear_velocity", "angular_velocity"):
        setattr(bodies, field, body[field])
    splits = solver.Splits()
    splits.count, splits.move, splits.turn = body["split_count"], body["split_move"], body["split_turn"]
    splits.rank = body["split_rank"]
    splits.move_a, splits.turn_a = contact["contact_move_a"], contact["contact_turn_a"]
    splits.move_b, splits.turn_b = contact["contact_move_b"], contact["contact_turn_b"]
    c = Contacts()
    for field in ("body_a", "body_b", "normal", "offset_a", "offset_b", "depth"):
        setattr(c, field, contact[f"contact_{field}"])
    c.count = wp.zeros(1, dtype=wp.int32, device=body["alive"].device)
    c.overflow = wp.zeros(1, dtype=wp.int32, device=body["alive"].device)
    c.end = contact["contact_body_a"].shape[1]
    c.counts_overflow = True
    return body, contact, bodies, splits, c
