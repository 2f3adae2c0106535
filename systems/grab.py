"""Grabbing: an agent holds a body with a fixed joint in the ``joint`` table, one joint row per agent slot.

``hold`` makes, keeps or releases agent slot ``a``'s joint from a per-world system; the solver then
keeps the held body in the pose relative to the agent that it had when grabbed. Envs give their
grab system a ``joint_out: GrabJoints`` parameter (the engine binds the joint columns) and call
``hold`` once per agent per step; hide-and-seek and the escape room do.
"""

from __future__ import annotations

import warp as wp

import ecs

wp.set_module_options({"enable_backward": False})

GrabJoints = ecs.bundle(
    "GrabJoints",
    [
        "alive",
        ("joint_body_a", wp.int32),
        ("joint_body_b", wp.int32),
        ("joint_anchor_a", wp.vec3),
        ("joint_anchor_b", wp.vec3),
        ("joint_rotation", wp.quat),
    ],
)


@wp.func
def hold(
    joints: GrabJoints,
    world: int,
    slot: int,
    holding: bool,
    want: bool,
    me: int,
    target: int,
    position: wp.array2d[wp.vec3],
    rotation: wp.array2d[wp.quat],
) -> bool:
    """Joint row ``slot`` after this step: kept while ``want``; made to ``target`` (a body row, -1 for none)
    when ``want`` and not ``holding``, fixing the pose of ``target`` relative to body ``me`` as it is now;
    released otherwise. Returns whether the agent holds a body afterwards.

    The joint's anchor is the holder's centre (and the same point in the held body's frame): a holder that
    turns easily (a hide-and-seek agent turns about z with 0.009 kg m^2) then closes a gap by moving, not by
    spinning about a lever as long as the held body. Anchored at the held body's centre, agents that held one
    body together in hide-and-seek's held-grab stress test were flung at up to 20 m/s (their top speed: 8)."""
    held = holding and want
    if want and not holding and target >= 0:
        qa = rotation[world, me]
        xa = position[world, me]
        joints.joint_body_a[world, slot] = me
        joints.joint_body_b[world, slot] = target
        joints.joint_anchor_a[world, slot] = wp.vec3(0.0, 0.0, 0.0)
        joints.joint_anchor_b[world, slot] = wp.quat_rotate_inv(rotation[world, target], xa - position[world, target])
        joints.joint_rotation[world, slot] = wp.quat_inverse(qa) * rotation[world, target]
        held = True
    joints.alive[world, slot] = wp.where(held, 1, 0)
    return held
