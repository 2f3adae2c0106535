"""Rigid bodies in 3D: components of the ``body`` archetype, fixed joints, and the device functions
the XPBD solver (``systems.solver``) builds on.

Every physical thing of a world (agents, boxes, ramps, walls, the floor) is one row of one
``body`` archetype, so the broadphase and solver of a world see all of them at once. Other
archetypes point at their body by row (``systems.raycast.BodyRow``).

| ``Response`` | moves? | pushed by contacts and joints? |
|---|---|---|
| ``DYNAMIC`` | gravity, external force and torque, contacts, joints | yes |
| ``STATIC`` | never (walls, floor) | no |
| ``KINEMATIC`` | with its own linear and angular velocity | no |

A dynamic body that is locked (``systems.locking.LockedBy`` non-zero) acts as a static one: it
keeps its pose and its velocity reads zero until it is unlocked.
"""

from __future__ import annotations

import enum

import warp as wp

import ecs

from .locking import LockedBy

wp.set_module_options({"enable_backward": False})


class Response(enum.IntEnum):
    """How a body responds to the solver (the ``response`` component)."""

    NONE = 0
    DYNAMIC = 1
    STATIC = 2
    KINEMATIC = 3


DYNAMIC = wp.constant(int(Response.DYNAMIC))
STATIC = wp.constant(int(Response.STATIC))
KINEMATIC = wp.constant(int(Response.KINEMATIC))
GYRO_NEWTON = wp.constant(2)  # Newton iterations of the implicit gyroscopic step (``gyroscopic_step``)


# -- components ---------------------------------------------------------------------------------


@ecs.component
class Position:
    """Centre of mass in the world frame [m]."""

    value: wp.vec3


@ecs.component
class Rotation:
    """Orientation, body frame to world frame, unit quaternion (x, y, z, w)."""

    value: wp.quat


@ecs.component
class LinearVelocity:
    """Velocity of the centre of mass in the world frame [m/s]."""

    value: wp.vec3


@ecs.component
class AngularVelocity:
    """Angular velocity in the world frame [rad/s]."""

    value: wp.vec3


@ecs.component
class Mass:
    """Mass [kg], > 0 for dynamic bodies (ignored for static and kinematic ones)."""

    value: wp.float32


@ecs.component
class InvInertia:
    """Inverse inertia tensor about the centre of mass in the body frame [1/(kg m^2)]; ``geometry.inverse_inertia``."""

    value: wp.mat33


@ecs.component(name="response")
class BodyResponse:
    """A ``Response``: 1 dynamic, 2 static, 3 kinematic."""

    value: wp.int32


@ecs.component
class Friction:
    """Coulomb friction coefficient, >= 0, static and dynamic alike; a contact uses the larger of its two bodies'."""

    value: wp.float32


@ecs.component
class Restitution:
    """Coefficient of restitution in [0, 1]; a contact uses the larger of its two bodies'."""

    value: wp.float32


@ecs.component
class Force:
    """External force on the centre of mass in the world frame [N]; held until written again."""

    value: wp.vec3


@ecs.component
class Torque:
    """External torque in the world frame [N m]; held until written again."""

    value: wp.vec3


@ecs.component
class Drag:
    """Linear drag along each world axis [N s/m], >= 0: a force ``-drag * velocity`` (component by component),
    integrated implicitly in every substep like a slide joint's damping, so it never reverses a velocity however
    stiff it is. 0 (the default): none."""

    value: wp.vec3


@ecs.component
class PrevPosition:
    """Solver state: the position at the start of the last substep [m]."""

    value: wp.vec3


@ecs.component
class PrevRotation:
    """Solver state: the orientation at the start of the last substep."""

    value: wp.quat


@ecs.component(index_of="body")
class JointBodyA:
    """Fixed joint (``joint`` archetype): body row of the first body."""

    value: wp.int32


@ecs.component(index_of="body")
class JointBodyB:
    """Fixed joint: body row of the second body."""

    value: wp.int32


@ecs.component
class JointAnchorA:
    """Fixed joint: attachment point in body A's frame [m]."""

    value: wp.vec3


@ecs.component
class JointAnchorB:
    """Fixed joint: attachment point in body B's frame [m]; the solver keeps both points together."""

    value: wp.vec3


@ecs.component
class JointRotation:
    """Fixed joint: B's orientation relative to A's, ``inverse(q_a) * q_b``, that the solver holds."""

    value: wp.quat


BODY_COMPONENTS = (
    Position,
    Rotation,
    LinearVelocity,
    AngularVelocity,
    Mass,
    InvInertia,
    BodyResponse,
    Friction,
    Restitution,
    Force,
    Torque,
    Drag,
    PrevPosition,
    PrevRotation,
    LockedBy,
)
JOINT_COMPONENTS = (JointBodyA, JointBodyB, JointAnchorA, JointAnchorB, JointRotation)


# -- device functions ------------------------------------------------------------------------------


@wp.func
def movable(response: wp.int32, locked_by: wp.int32) -> bool:
    """Whether the solver moves the body in response to forces, contacts and joints."""
    return response == DYNAMIC and locked_by == 0


@wp.func
def inverse_mass(mass: float, response: wp.int32, locked_by: wp.int32) -> float:
    if movable(response, locked_by) and mass > 0.0:
        return 1.0 / mass
    return 0.0


@wp.func
def rotate_by(q: wp.quat, dw: wp.vec3) -> wp.quat:
    """``q`` turned by the rotation vector ``dw`` (world frame): by the angle ``|dw|`` about ``dw / |dw|``, renormalised.

    The exact exponential map, so that ``rotation_vector`` recovers ``dw`` from the turn.
    """
    angle = wp.length(dw)
    # sin(angle / 2) / angle is 1/2 to float32 precision below 1e-4 rad (and 0/0 at zero).
    s = wp.where(angle > 1.0e-4, wp.sin(0.5 * angle) / angle, 0.5)
    return wp.normalize(wp.quat(dw[0] * s, dw[1] * s, dw[2] * s, wp.cos(0.5 * angle)) * q)


@wp.func
def rotation_vector(dq: wp.quat) -> wp.vec3:
    """Axis times angle of the unit quaternion ``dq``, the short way round (angle in [0, pi]); inverts ``rotate_by``."""
    v = wp.vec3(dq[0], dq[1], dq[2])
    c = dq[3]
    if c < 0.0:
        v = -v
        c = -c
    s = wp.length(v)
    if s == 0.0:
        return v
    return v * (2.0 * wp.atan2(s, c) / s)


@wp.func
def gyroscopic_step(inertia: wp.mat33, w: wp.vec3, h: float) -> wp.vec3:
    """Body-frame angular velocity after ``h`` seconds of torque-free motion (Euler's equations).

    Implicit midpoint: ``I (w' - w) + h m x I m = 0`` with ``m = (w + w') / 2``, by ``GYRO_NEWTON``
    Newton iterations from ``w' = w``. The midpoint rule keeps both quadratic invariants of Euler's
    equations, the energy ``w . I w / 2`` and ``|I w|``, so a tumbling body neither gains nor loses
    energy (implicit Euler, as in Bullet, loses about 10 % in 10 s at 3.6 rad/s and 1/120 s). Two
    iterations reach float32 rounding up to about 0.3 rad of turn per step (36 rad/s at 1/120 s).
    Far beyond that (a turn of a radian or more per step) the iterate can gain energy, which would
    compound over steps: an iterate that gains more than rounding (1e-6) is scaled back to the
    energy of ``w``. Scaling every iterate would bias the energy down by 5e-5 in 10 s (float32).
    """
    w_new = w
    for _ in range(GYRO_NEWTON):
        m = 0.5 * (w + w_new)
        im = inertia * m
        residual = inertia * (w_new - w) + wp.cross(m, im) * h
        jacobian = inertia + (wp.skew(m) * inertia - wp.skew(im)) * (0.5 * h)
        w_new = w_new - wp.inverse(jacobian) * residual
    energy = wp.dot(w, inertia * w)
    energy_new = wp.dot(w_new, inertia * w_new)
    if energy_new > energy * (1.0 + 1.0e-6):
        w_new = w_new * wp.sqrt(energy / energy_new)
    return w_new


@wp.func
def world_inv_inertia_apply(q: wp.quat, inv_inertia: wp.mat33, v: wp.vec3) -> wp.vec3:
    """World-frame inverse inertia times ``v``: ``R I^-1 R^T v``."""
    return wp.quat_rotate(q, inv_inertia * wp.quat_rotate_inv(q, v))


@wp.func
def generalized_inverse_mass(inv_m: float, q: wp.quat, inv_inertia: wp.mat33, r: wp.vec3, n: wp.vec3) -> float:
    """Inverse mass seen by a correction along unit ``n`` at offset ``r`` from the centre of mass."""
    if inv_m == 0.0:
        return 0.0
    rn = wp.quat_rotate_inv(q, wp.cross(r, n))
    return inv_m + wp.dot(rn, inv_inertia * rn)


@wp.func
def angular_inverse_mass(inv_m: float, q: wp.quat, inv_inertia: wp.mat33, axis: wp.vec3) -> float:
    if inv_m == 0.0:
        return 0.0
    a = wp.quat_rotate_inv(q, axis)
    return wp.dot(a, inv_inertia * a)
