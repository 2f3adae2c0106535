"""Locking: a locked body acts as static until it is unlocked, and remembers which team locked it.

``LockedBy`` is 0 for an unlocked body and ``team + 1`` for a body locked by ``team`` (teams are
numbered from 0). Only the locking team may unlock. The solver and the broadphase read the
column (``rigid_body.movable``): a locked body is neither integrated nor pushed, and its velocity
reads zero.

``lock_bodies`` is a ready-made system for agent archetypes holding ``body_row`` (their own
body), ``team``, ``lock_request`` (1 lock, -1 unlock, 0 nothing) and ``reach_target`` (the body
the agent can reach, from ``systems.raycast.find_reach_targets``).
"""

from __future__ import annotations

import warp as wp

import ecs

wp.set_module_options({"enable_backward": False})


@ecs.component
class LockedBy:
    """0 when unlocked, else the locking team + 1 (a locked body acts as static)."""

    value: wp.int32


@ecs.component
class Team:
    """Team of an agent, >= 0 (hide-and-seek: 0 hiders, 1 seekers)."""

    value: wp.int32


@ecs.component
class LockRequest:
    """What an agent asks of its reach target this step: 1 lock, -1 unlock, 0 nothing."""

    value: wp.int32


@wp.func
def try_lock(locked_by: wp.array2d[wp.int32], world: int, row: int, team: int) -> bool:
    """Locks body ``row`` for ``team`` if it is unlocked; returns whether it is now locked by ``team``."""
    current = locked_by[world, row]
    if current == 0:
        locked_by[world, row] = team + 1
        return True
    return current == team + 1


@wp.func
def try_unlock(locked_by: wp.array2d[wp.int32], world: int, row: int, team: int) -> bool:
    """Unlocks body ``row`` if ``team`` locked it; returns whether it is now unlocked."""
    current = locked_by[world, row]
    if current == team + 1:
        locked_by[world, row] = 0
        return True
    return current == 0


@wp.kernel
def lock_bodies(
    # Components in:
    alive_in: wp.array2d[wp.int32],
    team_in: wp.array2d[wp.int32],
    lock_request_in: wp.array2d[wp.int32],
    reach_target_in: wp.array2d[wp.int32],
    body__response_in: wp.array2d[wp.int32],
    # Components out:
    body__locked_by_out: wp.array2d[wp.int32],
    body__linear_velocity_out: wp.array2d[wp.vec3],
    body__angular_velocity_out: wp.array2d[wp.vec3],
):
    """Applies every agent's lock request to its reach target, agents in row order (one thread per world)."""
    world = wp.tid()
    for row in range(alive_in.shape[1]):
        target = reach_target_in[world, row]
        request = lock_request_in[world, row]
        if alive_in[world, row] != 0 and target >= 0 and request != 0:  # noqa: SIM102 (Warp does not short-circuit: target may be -1)
            if body__response_in[world, target] == 1:  # only dynamic bodies can be locked
                if request > 0:
                    if try_lock(body__locked_by_out, world, target, team_in[world, row]):
                        body__linear_velocity_out[world, target] = wp.vec3(0.0, 0.0, 0.0)
                        body__angular_velocity_out[world, target] = wp.vec3(0.0, 0.0, 0.0)
                else:
                    try_unlock(body__locked_by_out, world, target, team_in[world, row])
