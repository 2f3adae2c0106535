"""Locking: a locked body acts as static until it is unlocked, and remembers which team locked it.

``LockedBy`` is 0 for an unlocked body and ``team + 1`` for a body locked by ``team`` (teams are
numbered from 0). Only the locking team may unlock. The solver and the broadphase read the
column (``rigid_body.movable``): a locked body is neither integrated nor pushed, and its velocity
reads zero.

``lock_bodies`` is a ready-made system for agent archetypes holding ``body_row`` (their own
body), ``team``, ``lock_request`` (1 lock, -1 unlock, 0 nothing) and ``reach_target`` (the body
the agent can reach, from ``systems.raycast.find_reach_targets``).

``LockType`` names the rules of OpenAI's hide-and-seek (``lock_type`` of its ``LockObjWrapper``),
which every step decide each object's lock from the agents that may act on it (in range and
allowed, for instance because they saw it): those that want it locked (their lock action is 1)
and those that do not (0). ``may_unlock`` and ``decide_lock`` are those rules for one object;
the env gathers the agents.

| ``LockType`` | an object is locked when | it is unlocked when |
|---|---|---|
| ``ANY_LOCK`` | some agent wants it locked | some agent does not, and none wants it locked |
| ``ALL_LOCK`` | some agent wants it locked, and every agent acting on it does | some agent does not |
| ``ANY_LOCK_SPECIFIC`` | some agent wants it locked | its locker (the agent that locked it) does not, and no agent wants it locked; if another does, it stays locked and a new locker is drawn among those |
| ``ALL_LOCK_TEAM_SPECIFIC`` | some agent wants it locked, and no agent of its locker's team does not | an agent of its locker's team does not want it locked |

The locker of an object that no agent has locked yet is the env's choice (OpenAI: agent 0).
"""

from __future__ import annotations

import enum

import warp as wp

import ecs

wp.set_module_options({"enable_backward": False})


class LockType(enum.IntEnum):
    """How agents' lock actions lock and unlock objects (OpenAI's ``lock_type`` names, lower case, and ``TOGGLE``)."""

    NONE = 0
    TOGGLE = 1  # a 0 -> 1 press locks the agent's reach target for its team, or unlocks it if its team locked it
    ANY_LOCK = 2
    ALL_LOCK = 3
    ANY_LOCK_SPECIFIC = 4
    ALL_LOCK_TEAM_SPECIFIC = 5


ANY_LOCK = wp.constant(int(LockType.ANY_LOCK))
ALL_LOCK = wp.constant(int(LockType.ALL_LOCK))
ANY_LOCK_SPECIFIC = wp.constant(int(LockType.ANY_LOCK_SPECIFIC))
ALL_LOCK_TEAM_SPECIFIC = wp.constant(int(LockType.ALL_LOCK_TEAM_SPECIFIC))

KEEP_UNLOCKED = wp.constant(0)
"""``decide_lock``: the object is unlocked after the step."""
KEEP_LOCKER = wp.constant(1)
"""``decide_lock``: the object is locked after the step, by the locker it had."""
NEW_LOCKER = wp.constant(2)
"""``decide_lock``: the object is locked after the step, by a locker drawn among the agents that want it locked."""


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


@wp.func
def may_unlock(lock_type: int, locked: bool, agent: int, team: int, locker: int, locker_team: int) -> bool:
    """Whether ``agent`` (of ``team``) not wanting an object locked can unlock it: under ``ANY_LOCK_SPECIFIC`` only
    its ``locker`` and only while it is locked, under ``ALL_LOCK_TEAM_SPECIFIC`` the locker's team (whether or not
    it is locked: then a teammate of the locker blocks a lock), under the other types anyone."""
    if lock_type == ANY_LOCK_SPECIFIC:
        return locked and agent == locker
    if lock_type == ALL_LOCK_TEAM_SPECIFIC:
        return team == locker_team
    return True


@wp.func
def lock_outcome(locked: bool, to_lock: bool, to_unlock: bool, relock: bool) -> int:
    if to_lock and (relock or not locked):
        return NEW_LOCKER
    if (locked and not to_unlock) or to_lock:
        return KEEP_LOCKER
    return KEEP_UNLOCKED


@wp.func
def decide_lock(lock_type: int, locked: bool, desired: bool, not_desired: bool, unlock_wanted: bool) -> int:
    """One object's lock after a step (``KEEP_UNLOCKED``, ``KEEP_LOCKER`` or ``NEW_LOCKER``) under ``lock_type``
    (not ``TOGGLE``), from whether it is ``locked`` now and what the agents acting on it want: ``desired`` some of
    them want it locked, ``not_desired`` some do not, ``unlock_wanted`` some that do not ``may_unlock`` it."""
    if lock_type == ANY_LOCK:
        return lock_outcome(locked, desired, not_desired and not desired, False)
    if lock_type == ALL_LOCK:
        return lock_outcome(locked, desired and not not_desired, not_desired, False)
    if lock_type == ANY_LOCK_SPECIFIC:
        # The locker letting go while another agent wants it locked: locked still, by one of those.
        return lock_outcome(locked, desired, unlock_wanted and not desired, unlock_wanted and desired)
    return lock_outcome(locked, desired and not unlock_wanted, unlock_wanted, False)
