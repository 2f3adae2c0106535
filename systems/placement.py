"""Placing a rigid body from a kernel: ``place_body`` writes every column of a ``body`` row consistently.

A reset (or any system that puts a body somewhere new) must set more than the pose. The solver
and broadphase also read the mass and inverse inertia, the previous pose, the lock owner, the
external force and torque, and the world's sort-and-sweep order; the row's generation makes old
handles to it stale. ``place_body`` writes all of them:

| column | written |
|---|---|
| ``alive``, ``generation`` | 1; generation + 1 (handles made before no longer match, as after ``ecs.spawn``) |
| ``shape``, ``size``, ``position``, ``rotation`` | as given (``rotation`` must be a unit quaternion) |
| ``mass`` | as given for a dynamic body, 0 for a static or kinematic one |
| ``inv_inertia`` | ``geometry.inverse_inertia(shape, size, mass)``, body frame (zero when the mass is 0) |
| ``response``, ``friction``, ``restitution`` | as given |
| ``linear_velocity``, ``angular_velocity``, ``force``, ``torque`` | zero (write a start velocity after the call) |
| ``drag`` | zero (write a body's drag after the call) |
| ``prev_position``, ``prev_rotation`` | the new pose, so no substep sees a jump from the old one |
| ``locked_by`` | 0: unlocked, whoever locked the row's previous body |
| ``sleep_count`` | 0: awake (a body the solver let sleep stays where it slept until something wakes it) |
| ``sweep_order`` | entry 0 of the world set to -1: the next ``find_pairs`` sorts the world from row order, so the pairs (and contacts) of a rebuilt world come in the same order as in a freshly loaded one |

The broadphase boxes (``aabb_lower``, ``aabb_upper``) are left alone: ``find_pairs`` recomputes
them from the pose before anything reads them. To remove a body, set its ``alive`` to 0
(``ecs.despawn``).

``BodyColumns`` is an ``ecs.bundle``: a system takes it as one parameter that the engine binds to
those columns (and declares as written):

```python
@wp.kernel
def reset_scene(box_size: float, world_reset_in: wp.array[wp.int32], body_out: BodyColumns):
    world = wp.tid()
    if world_reset_in[world] == 0:
        return
    half = wp.vec3(box_size, box_size, box_size) * 0.5
    place_body(body_out, world, 1, BOX, half, wp.vec3(0.0, 0.0, half[2]), wp.quat_identity(), 1.0, DYNAMIC, 0.5, 0.0)
```

A system that takes other body columns too builds a ``BodyColumns`` from its own arrays
(``BodyColumns(alive=..., ...)``), as hide-and-seek's level generator does.
"""

from __future__ import annotations

import warp as wp

import ecs

from .geometry import inverse_inertia
from .rigid_body import DYNAMIC

wp.set_module_options({"enable_backward": False})


# The columns of the ``body`` archetype that ``place_body`` writes, whole tables ``(num_worlds, max_bodies)``.
# An ``ecs.bundle``: a system may take it as one parameter (``body_out: BodyColumns``) bound by the engine.
# Column specs of BodyColumns, for envs whose own bundles add columns to them.
PLACED_COLUMNS = [
    "alive",
    "generation",
    ("shape", wp.int32),
    ("size", wp.vec3),
    ("position", wp.vec3),
    ("rotation", wp.quat),
    ("linear_velocity", wp.vec3),
    ("angular_velocity", wp.vec3),
    ("mass", wp.float32),
    ("inv_inertia", wp.mat33),
    ("response", wp.int32),
    ("friction", wp.float32),
    ("restitution", wp.float32),
    ("force", wp.vec3),
    ("torque", wp.vec3),
    ("drag", wp.vec3),
    ("prev_position", wp.vec3),
    ("prev_rotation", wp.quat),
    ("locked_by", wp.int32),
    ("sleep_count", wp.int32),
    ("sweep_order", wp.int32),
]
BodyColumns = ecs.bundle("BodyColumns", PLACED_COLUMNS)


@wp.func
def place_body(
    bodies: BodyColumns,
    world: int,
    row: int,
    shape: int,
    size: wp.vec3,
    position: wp.vec3,
    rotation: wp.quat,
    mass: float,
    response: int,
    friction: float,
    restitution: float,
) -> int:
    """Makes ``row`` of ``world`` a live body at rest at the given pose; returns its new generation.

    Args:
        bodies: the body columns (``BodyColumns``).
        world: the world index.
        row: the body row, in ``[0, max_bodies)``.
        shape: a ``geometry.ShapeType``.
        size: shape dimensions [m] (``systems.geometry``).
        position: centre of mass in the world frame [m].
        rotation: body to world, a unit quaternion (x, y, z, w); not renormalised.
        mass: [kg], > 0 for a dynamic body; stored as 0 for static and kinematic ones.
        response: a ``rigid_body.Response``.
        friction: Coulomb coefficient, >= 0.
        restitution: in [0, 1].
    """
    generation = bodies.generation[world, row] + 1
    bodies.alive[world, row] = 1
    bodies.generation[world, row] = generation
    bodies.shape[world, row] = shape
    bodies.size[world, row] = size
    bodies.position[world, row] = position
    bodies.rotation[world, row] = rotation
    bodies.linear_velocity[world, row] = wp.vec3(0.0, 0.0, 0.0)
    bodies.angular_velocity[world, row] = wp.vec3(0.0, 0.0, 0.0)
    m = wp.where(response == DYNAMIC, mass, 0.0)
    bodies.mass[world, row] = m
    bodies.inv_inertia[world, row] = inverse_inertia(shape, size, m)
    bodies.response[world, row] = response
    bodies.friction[world, row] = friction
    bodies.restitution[world, row] = restitution
    bodies.force[world, row] = wp.vec3(0.0, 0.0, 0.0)
    bodies.torque[world, row] = wp.vec3(0.0, 0.0, 0.0)
    bodies.drag[world, row] = wp.vec3(0.0, 0.0, 0.0)
    bodies.prev_position[world, row] = position
    bodies.prev_rotation[world, row] = rotation
    bodies.locked_by[world, row] = 0
    bodies.sleep_count[world, row] = 0
    # Any entry outside [0, max_bodies) marks the order stale (find_pairs checks for a permutation).
    bodies.sweep_order[world, 0] = -1
    return generation
