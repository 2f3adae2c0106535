"""Ray casting against every body of a world: closest hit distance and body row; lidar, line-of-sight
visibility and reach tests built on it.

``cast_ray`` visits every live body of the world (about 30), culled by a bounding sphere; a per-world
BVH would pay off only at hundreds of bodies per world. A ray from inside a solid hits it at
distance 0 (``skip`` excludes the caster's own body). Rays have unit direction.

Sensor systems run over any archetype holding ``body_row`` (the row of the entity's own body in
the ``body`` table) and their output column:

| system | output | resources |
|---|---|---|
| ``cast_lidar`` (``cast_lidar_rays``) | ``lidar`` (distance, float32 ``[num_rays]``) and ``lidar_hit`` (body row, int32 ``[num_rays]``, -1 miss) | ``lidar_range`` [m]: a miss reads the range; ``lidar_height`` [m]: ray origin above the body centre |
| ``observe_visibility`` (``observe_visibility_targets``) | ``visible`` (int32 ``[max_bodies]``: 1 where that body row is seen) | ``view_half_angle`` [rad], around the body's +x axis |
| ``find_reach_targets`` (``measure_reach`` then ``pick_reach_targets``) | ``reach_target`` (int32: body row, -1 none) | ``reach_distance`` [m] between surfaces, ``view_half_angle`` |

The names in brackets are the wide forms (a thread per ray, per target) with bit-identical results;
``sensor_systems(wide=...)`` returns one form or the other with its launch shape. The wide reach sensor
also needs the scratch column ``reach_gap`` (``reach_gap_component(max_bodies)``) beside ``reach_target``.

Lidar ray ``i`` of ``n`` points at angle ``2 pi i / n`` from the body's +x axis, turning about
its +z axis, in the body's frame. A body is visible when its centre lies inside the view cone (a
sector of the ground plane around the body's heading, so height does not matter, as in OpenAI's
hide-and-seek; a centre straight above or below counts as inside) and the ray towards its centre
meets it before anything else. A reach target is the nearest
visible dynamic body whose surface lies within ``reach_distance`` of the caster's surface along
that ray (the caster's surface distance is its ray-exit distance).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import warp as wp

import ecs

from .geometry import (
    BIG,
    CAPSULE,
    PLANE,
    SPHERE,
    along_face_normal,
    bounding_radius,
    face_offset,
    num_faces,
)

wp.set_module_options({"enable_backward": False})


@ecs.component(index_of="body")
class BodyRow:
    """Row of this entity's rigid body in the ``body`` table (agents and sensors point at their body)."""

    value: wp.int32


@ecs.component(index_of="body", nullable=True)
class ReachTarget:
    """Body row this entity can grab or lock now (nearest visible dynamic body within reach), -1 for none."""

    value: wp.int32


def lidar_components(num_rays: int) -> tuple[ecs.Component, ecs.Component]:
    """The ``lidar`` (distance [m], float32 ``[num_rays]``) and ``lidar_hit`` (body row or -1) components."""
    return (
        ecs.Component(
            "lidar",
            wp.float32,
            shape=(num_rays,),
            doc="distance to the first hit per ray [m]; a miss reads lidar_range",
        ),
        ecs.Component(
            "lidar_hit",
            wp.int32,
            shape=(num_rays,),
            doc="body row of the first hit per ray, -1 for a miss",
            index_of="body",
            nullable=True,
        ),
    )


def reach_gap_component(max_bodies: int) -> ecs.Component:
    """The ``reach_gap`` component of the wide reach sensor: float32 ``[max_bodies]``, scratch of ``measure_reach``
    (the gap to each body row in reach and view, ``BIG`` for the others) for ``pick_reach_targets``."""
    return ecs.Component(
        "reach_gap",
        wp.float32,
        shape=(max_bodies,),
        doc="sensor scratch: surface gap [m] to body row k when it is a visible dynamic body within reach, else 1e30",
    )


def visible_component(max_bodies: int) -> ecs.Component:
    """The ``visible`` component: int32 ``[max_bodies]``, 1 where that body row is in view and not occluded."""
    return ecs.Component(
        "visible", wp.int32, shape=(max_bodies,), doc="1 where body row k is in the view cone and unoccluded"
    )


# -- ray / shape intersection ----------------------------------------------------------------------


@wp.func
def ray_sphere(o: wp.vec3, d: wp.vec3, c: wp.vec3, r: float) -> float:
    """Distance along unit ``d`` from ``o`` to the solid sphere; 0 from inside; BIG for a miss."""
    oc = o - c
    cc = wp.dot(oc, oc) - r * r
    if cc <= 0.0:
        return 0.0
    b = wp.dot(oc, d)
    disc = b * b - cc
    if b >= 0.0 or disc < 0.0:
        return BIG
    return -b - wp.sqrt(disc)


@wp.func
def ray_capsule_local(o: wp.vec3, d: wp.vec3, r: float, hl: float) -> float:
    best = wp.min(ray_sphere(o, d, wp.vec3(0.0, 0.0, -hl), r), ray_sphere(o, d, wp.vec3(0.0, 0.0, hl), r))
    if best == 0.0:
        return 0.0
    # Inside the cylinder part.
    if o[0] * o[0] + o[1] * o[1] <= r * r and wp.abs(o[2]) <= hl:
        return 0.0
    a = d[0] * d[0] + d[1] * d[1]
    if a > 1.0e-12:
        b = o[0] * d[0] + o[1] * d[1]
        c = o[0] * o[0] + o[1] * o[1] - r * r
        disc = b * b - a * c
        if disc >= 0.0:
            t = (-b - wp.sqrt(disc)) / a
            if t >= 0.0 and wp.abs(o[2] + t * d[2]) <= hl:
                best = wp.min(best, t)
    return best


@wp.func
def ray_convex_local(shape: wp.int32, size: wp.vec3, o: wp.vec3, d: wp.vec3) -> float:
    """Ray against the intersection of a shape's face half-spaces (boxes, wedges, planes)."""
    near = wp.float32(-BIG)
    far = wp.float32(BIG)
    for i in range(num_faces(shape)):
        # >= 0 when o is inside this face's half-space
        gap = face_offset(shape, size, i) - along_face_normal(shape, size, i, o)
        denom = along_face_normal(shape, size, i, d)
        if wp.abs(denom) < 1.0e-12:
            if gap < 0.0:
                return BIG
        else:
            t = gap / denom
            if denom < 0.0:
                near = wp.max(near, t)
            else:
                far = wp.min(far, t)
    if near > far or far < 0.0:
        return BIG
    return wp.max(near, 0.0)


@wp.func
def ray_body(shape: wp.int32, size: wp.vec3, x: wp.vec3, q: wp.quat, o: wp.vec3, d: wp.vec3) -> float:
    """Distance from ``o`` along unit ``d`` to the body's solid; BIG for a miss."""
    if shape == SPHERE:
        return ray_sphere(o, d, x, size[0])
    ol = wp.quat_rotate_inv(q, o - x)
    dl = wp.quat_rotate_inv(q, d)
    if shape == CAPSULE:
        return ray_capsule_local(ol, dl, size[0], size[1])
    if shape == 0:
        return BIG
    return ray_convex_local(shape, size, ol, dl)


@wp.func
def cast_ray(
    alive: wp.array2d[wp.int32],
    shape: wp.array2d[wp.int32],
    size: wp.array2d[wp.vec3],
    position: wp.array2d[wp.vec3],
    rotation: wp.array2d[wp.quat],
    world: int,
    o: wp.vec3,
    d: wp.vec3,
    max_t: float,
    skip: int,
):
    """Closest hit within ``max_t`` of every live body of ``world`` but ``skip``: (distance, body row), (max_t, -1) for a miss."""
    best = float(max_t)
    hit = wp.int32(-1)
    for i in range(alive.shape[1]):
        if alive[world, i] != 0 and i != skip:
            s = shape[world, i]
            x = position[world, i]
            go = bool(True)  # noqa: UP018 (Warp: a variable changed in a branch must be declared dynamic)
            if s != PLANE:
                # Bounding-sphere cull: skip bodies the ray cannot reach before ``best``.
                r = bounding_radius(s, size[world, i])
                oc = x - o
                along = wp.dot(oc, d)
                off2 = wp.dot(oc, oc) - along * along
                if off2 > r * r or along + r < 0.0 or along - r > best:
                    go = False
            if go:
                t = ray_body(s, size[world, i], x, rotation[world, i], o, d)
                if t < best:
                    best = t
                    hit = i
    return best, hit


@wp.func
def exit_distance(shape: wp.int32, size: wp.vec3, x: wp.vec3, q: wp.quat, d: wp.vec3) -> float:
    """How far a ray from the body's centre along unit ``d`` runs inside the body (its surface distance)."""
    # Cast back from outside the bounding sphere towards the centre.
    r = bounding_radius(shape, size) + 1.0
    t = ray_body(shape, size, x, q, x + d * r, -d)
    return wp.max(r - t, 0.0)


# -- systems ------------------------------------------------------------------------------------------

# The body columns every sensor reads, as one kernel parameter ``body_in`` (whole columns, ``[world, row]``).
BodyView = ecs.bundle(
    "BodyView",
    [
        "alive",
        ("shape", wp.int32),
        ("size", wp.vec3),
        ("position", wp.vec3),
        ("rotation", wp.quat),
        ("response", wp.int32),
    ],
)


@wp.func
def lidar_ray(
    lidar_range: float,
    lidar_height: float,
    body_row: wp.array2d[wp.int32],
    b: BodyView,
    world: int,
    row: int,
    k: int,
    n: int,
):
    """Distance and body row of lidar ray ``k`` of ``n`` from the body of entity ``row``."""
    me = body_row[world, row]
    q = b.rotation[world, me]
    o = b.position[world, me] + wp.vec3(0.0, 0.0, lidar_height)
    angle = 2.0 * wp.pi * float(k) / float(n)
    d = wp.quat_rotate(q, wp.vec3(wp.cos(angle), wp.sin(angle), 0.0))
    return cast_ray(b.alive, b.shape, b.size, b.position, b.rotation, world, o, d, lidar_range, me)


@wp.kernel
def cast_lidar(
    # Resources:
    lidar_range: float,
    lidar_height: float,
    # Components in:
    alive_in: wp.array2d[wp.int32],
    body_row_in: wp.array2d[wp.int32],
    body_in: BodyView,
    # Components out:
    lidar_out: wp.array3d[wp.float32],
    lidar_hit_out: wp.array3d[wp.int32],
):
    """Lidar rays in the body's horizontal plane, one thread per entity; a miss reads ``lidar_range`` and hit -1."""
    world, row = wp.tid()
    if alive_in[world, row] == 0:
        return
    n = lidar_out.shape[2]
    for k in range(n):
        t, hit = lidar_ray(lidar_range, lidar_height, body_row_in, body_in, world, row, k, n)
        lidar_out[world, row, k] = t
        lidar_hit_out[world, row, k] = hit


@wp.kernel
def cast_lidar_rays(
    # Resources:
    lidar_range: float,
    lidar_height: float,
    # Components in:
    alive_in: wp.array2d[wp.int32],
    body_row_in: wp.array2d[wp.int32],
    body_in: BodyView,
    # Components out:
    lidar_out: wp.array3d[wp.float32],
    lidar_hit_out: wp.array3d[wp.int32],
):
    """``cast_lidar`` with one thread per (world, entity, ray): the same results, more parallel work for a GPU."""
    world, row, k = wp.tid()
    if alive_in[world, row] == 0:
        return
    t, hit = lidar_ray(lidar_range, lidar_height, body_row_in, body_in, world, row, k, lidar_out.shape[2])
    lidar_out[world, row, k] = t
    lidar_hit_out[world, row, k] = hit


@wp.func
def sees(
    alive: wp.array2d[wp.int32],
    shape: wp.array2d[wp.int32],
    size: wp.array2d[wp.vec3],
    position: wp.array2d[wp.vec3],
    rotation: wp.array2d[wp.quat],
    world: int,
    me: int,
    target: int,
    cos_half_angle: float,
) -> float:
    """Distance along the line of sight at which ``me`` first meets ``target`` if it sees it, else -1."""
    if target == me or alive[world, target] == 0 or shape[world, target] == PLANE:
        return -1.0
    o = position[world, me]
    to = position[world, target] - o
    dist = wp.length(to)
    if dist < 1.0e-9:
        return -1.0
    d = to / dist
    # The cone is a sector of the ground plane, as in OpenAI's hide-and-seek (in_cone2d): what
    # matters is the bearing of the target, not how far above or below the caster it lies, so a
    # box the caster stands on, or an agent on a box beside it, is in view when ahead.
    forward = wp.quat_rotate(rotation[world, me], wp.vec3(1.0, 0.0, 0.0))
    ahead = wp.vec2(forward[0], forward[1])
    bearing = wp.vec2(to[0], to[1])
    flat = wp.length(bearing)
    if flat > 1.0e-6 and wp.length(ahead) > 1.0e-6:  # noqa: SIM102 (Warp evaluates every operand of `and`)
        if wp.dot(wp.normalize(ahead), bearing / flat) < cos_half_angle:
            return -1.0
    t, hit = cast_ray(alive, shape, size, position, rotation, world, o, d, dist + 1.0e-3, me)
    if hit != target:
        return -1.0
    return t


@wp.func
def visible_flag(
    view_half_angle: float, body_row: wp.array2d[wp.int32], b: BodyView, world: int, row: int, target: int
) -> wp.int32:
    """1 if entity ``row`` sees body row ``target`` (rows past the body table read 0)."""
    if target >= b.alive.shape[1]:
        return 0
    me = body_row[world, row]
    t = sees(b.alive, b.shape, b.size, b.position, b.rotation, world, me, target, wp.cos(view_half_angle))
    return wp.where(t >= 0.0, 1, 0)


@wp.kernel
def observe_visibility(
    # Resources:
    view_half_angle: float,
    # Components in:
    alive_in: wp.array2d[wp.int32],
    body_row_in: wp.array2d[wp.int32],
    body_in: BodyView,
    # Components out:
    visible_out: wp.array3d[wp.int32],
):
    """1 for every body row inside the view cone with an unoccluded line of sight to its centre; a thread per entity."""
    world, row = wp.tid()
    if alive_in[world, row] == 0:
        return
    for target in range(visible_out.shape[2]):
        visible_out[world, row, target] = visible_flag(view_half_angle, body_row_in, body_in, world, row, target)


@wp.kernel
def observe_visibility_targets(
    # Resources:
    view_half_angle: float,
    # Components in:
    alive_in: wp.array2d[wp.int32],
    body_row_in: wp.array2d[wp.int32],
    body_in: BodyView,
    # Components out:
    visible_out: wp.array3d[wp.int32],
):
    """``observe_visibility`` with one thread per (world, entity, target): the same results, more parallel work."""
    world, row, target = wp.tid()
    if alive_in[world, row] == 0:
        return
    visible_out[world, row, target] = visible_flag(view_half_angle, body_row_in, body_in, world, row, target)


@wp.func
def reach_gap(
    reach_distance: float,
    view_half_angle: float,
    body_row: wp.array2d[wp.int32],
    b: BodyView,
    world: int,
    row: int,
    target: int,
) -> float:
    """The gap [m] between the surfaces of entity ``row``'s body and body row ``target`` along the line of sight
    when ``target`` is a visible dynamic body within ``reach_distance``; ``BIG`` otherwise (and past the body table)."""
    if target >= b.alive.shape[1]:
        return BIG
    if b.response[world, target] != 1:
        return BIG
    me = body_row[world, row]
    t = sees(b.alive, b.shape, b.size, b.position, b.rotation, world, me, target, wp.cos(view_half_angle))
    if t < 0.0:
        return BIG
    d = wp.normalize(b.position[world, target] - b.position[world, me])
    gap = t - exit_distance(b.shape[world, me], b.size[world, me], b.position[world, me], b.rotation[world, me], d)
    if gap > reach_distance:
        return BIG
    return gap


@wp.kernel
def find_reach_targets(
    # Resources:
    reach_distance: float,
    view_half_angle: float,
    # Components in:
    alive_in: wp.array2d[wp.int32],
    body_row_in: wp.array2d[wp.int32],
    body_in: BodyView,
    # Components out:
    reach_target_out: wp.array2d[wp.int32],
):
    """The nearest visible dynamic body whose surface is within ``reach_distance`` of this body's surface (the
    first such body row on a tie); a thread per entity."""
    world, row = wp.tid()
    if alive_in[world, row] == 0:
        return
    best = wp.float32(BIG)
    best_row = wp.int32(-1)
    for target in range(body_in.alive.shape[1]):
        gap = reach_gap(reach_distance, view_half_angle, body_row_in, body_in, world, row, target)
        if gap < best:
            best = gap
            best_row = target
    reach_target_out[world, row] = best_row


@wp.kernel
def measure_reach(
    # Resources:
    reach_distance: float,
    view_half_angle: float,
    # Components in:
    alive_in: wp.array2d[wp.int32],
    body_row_in: wp.array2d[wp.int32],
    body_in: BodyView,
    # Components out:
    reach_gap_out: wp.array3d[wp.float32],
):
    """The wide reach sensor's first half, a thread per (world, entity, target): ``reach_gap`` per body row."""
    world, row, target = wp.tid()
    if alive_in[world, row] == 0:
        return
    reach_gap_out[world, row, target] = reach_gap(
        reach_distance, view_half_angle, body_row_in, body_in, world, row, target
    )


@wp.kernel
def pick_reach_targets(
    # Components in:
    alive_in: wp.array2d[wp.int32],
    reach_gap_in: wp.array3d[wp.float32],
    # Components out:
    reach_target_out: wp.array2d[wp.int32],
):
    """The wide reach sensor's second half, a thread per entity: the body row of the smallest ``reach_gap`` (the
    first on a tie), as ``find_reach_targets`` picks it."""
    world, row = wp.tid()
    if alive_in[world, row] == 0:
        return
    best = wp.float32(BIG)
    best_row = wp.int32(-1)
    for target in range(reach_gap_in.shape[2]):
        gap = reach_gap_in[world, row, target]
        if gap < best:
            best = gap
            best_row = target
    reach_target_out[world, row] = best_row


def _wide_dim(column: str) -> Callable[[Any], tuple[int, int, int]]:
    """Launch shape ``(num_worlds, capacity, n)`` of the one archetype holding ``column`` (``[n]`` per entity)."""

    def dim(sim: Any) -> tuple[int, int, int]:
        holders = [name for name, cols in sim.tables.items() if column in cols]
        if len(holders) != 1:
            raise ecs.GraphError(
                f"the per-ray / per-target sensor systems need exactly one archetype with {column!r}, found {holders}; "
                "use wide=False in raycast.sensor_systems"
            )
        return tuple(sim.tables[holders[0]][column].shape)

    return dim


def sensor_systems(*, wide: bool = True, phase: ecs.Phase = ecs.Phase.SENSE) -> list[ecs.System]:
    """Lidar, visibility and reach systems for the one archetype that holds the sensor columns.

    Args:
        wide: lidar with a thread per (world, entity, ray), visibility and the reach test with a thread per
            (world, entity, target) (``cast_lidar_rays``, ``observe_visibility_targets``, ``measure_reach``,
            whose nearest target ``pick_reach_targets`` then takes per entity; the archetype needs
            ``reach_gap_component``); False runs a thread per entity that loops (``cast_lidar``,
            ``observe_visibility``, ``find_reach_targets``). The results are
            bit-identical; the wide form gives a GPU 30 to 40 times the threads at the same world count,
            and costs about 3 % (lidar) and 12 % (visibility) more on the CPU backend (1024
            hide-and-seek worlds, median of 5).
        phase: the phase they run in.
    """
    if wide:
        return [
            ecs.System(cast_lidar_rays, phase, dim=_wide_dim("lidar"), world_local=True),
            ecs.System(observe_visibility_targets, phase, dim=_wide_dim("visible"), world_local=True),
            ecs.System(measure_reach, phase, dim=_wide_dim("reach_gap"), world_local=True),
            ecs.System(pick_reach_targets, phase, dim="entity", world_local=True),
        ]
    return [
        ecs.System(cast_lidar, phase, dim="entity", world_local=True),
        ecs.System(observe_visibility, phase, dim="entity", world_local=True),
        ecs.System(find_reach_targets, phase, dim="entity", world_local=True),
    ]


def default_resources(
    *,
    lidar_range: float = 6.0,
    lidar_height: float = 0.0,
    view_half_angle: float = math.radians(67.5),
    reach_distance: float = 0.25,
) -> dict[str, float]:
    """Resources of the sensor systems with hide-and-seek's defaults (lidar 6 m, 135 degree cone, reach 0.25 m)."""
    return {
        "lidar_range": float(lidar_range),
        "lidar_height": float(lidar_height),
        "view_half_angle": float(view_half_angle),
        "reach_distance": float(reach_distance),
    }
