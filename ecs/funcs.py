"""Device functions for kernels: entity handles, spawning, despawning, per-world parameters, RNG.

``spawn``, ``despawn`` and ``is_live`` take a table's ``(num_worlds, capacity)`` arrays and a world
(raw kernels); ``spawn_view``, ``despawn_view`` and ``is_live_view`` take the one-world views that a
``@wp.func`` system receives for ``<archetype>__<column>`` parameters.

An entity handle packs (archetype id, row, generation) into an int64:
``archetype << 48 | row << 32 | generation``. Generations start at 1 on the first spawn of a
row and grow at every spawn, so a handle kept after its entity was despawned (and its row
reused) no longer matches and ``is_live`` reports it. The handle 0 is the null handle.
"""

from typing import Any

import warp as wp

NULL_HANDLE = 0


@wp.func
def make_handle(archetype: wp.int32, row: wp.int32, generation: wp.int32) -> wp.int64:
    return (wp.int64(archetype) << wp.int64(48)) | (wp.int64(row) << wp.int64(32)) | wp.int64(generation)


@wp.func
def handle_archetype(handle: wp.int64) -> wp.int32:
    return wp.int32((handle >> wp.int64(48)) & wp.int64(0xFFFF))


@wp.func
def handle_row(handle: wp.int64) -> wp.int32:
    return wp.int32((handle >> wp.int64(32)) & wp.int64(0xFFFF))


@wp.func
def handle_generation(handle: wp.int64) -> wp.int32:
    return wp.int32(handle & wp.int64(0xFFFFFFFF))


@wp.func
def is_live(
    handle: wp.int64, alive: wp.array2d(dtype=wp.int32), generation: wp.array2d(dtype=wp.int32), world: wp.int32
) -> bool:
    """True when ``handle`` names an entity that is alive now in ``world``."""
    if handle == wp.int64(0):
        return False
    row = handle_row(handle)
    if row >= alive.shape[1]:
        return False
    return alive[world, row] != 0 and generation[world, row] == handle_generation(handle)


@wp.func
def spawn(
    alive: wp.array2d(dtype=wp.int32),
    generation: wp.array2d(dtype=wp.int32),
    overflow: wp.array(dtype=wp.int32),
    world: wp.int32,
) -> wp.int32:
    """Claims the lowest free row of ``world``; returns it, or -1 when the world is full.

    A full world is counted in ``overflow`` (count, lowest world) and reported by the host at its
    next synchronisation as a ``CapacityError``. Claiming uses compare-and-swap, so concurrent
    spawns in one world never share a row; which thread gets which row is then up to the
    scheduler, so spawn from one thread per world where trajectories must be reproducible.
    """
    for row in range(alive.shape[1]):
        # Nested, not `and`: Warp evaluates both operands, and the CAS must only run on free rows.
        if alive[world, row] == 0:  # noqa: SIM102
            if wp.atomic_cas(alive, world, row, 0, 1) == 0:
                generation[world, row] = generation[world, row] + 1
                return row
    wp.atomic_add(overflow, 0, 1)
    wp.atomic_min(overflow, 1, world)
    return -1


@wp.func
def despawn(alive: wp.array2d(dtype=wp.int32), world: wp.int32, row: wp.int32):
    """Frees a row. Handles to it become stale at once (alive is 0, and the next spawn bumps its generation)."""
    alive[world, row] = 0


@wp.func
def spawn_view(
    alive: wp.array(dtype=wp.int32),
    generation: wp.array(dtype=wp.int32),
    overflow: wp.array(dtype=wp.int32),
    world: wp.int32,
) -> wp.int32:
    """``spawn`` for a ``@wp.func`` system, which gets one world's rows as views.

    Pass ``<archetype>__alive_out``, ``<archetype>__generation_out``, ``<archetype>__overflow_out``
    and the system's ``world`` parameter (it names the world in a ``CapacityError``).
    """
    for row in range(alive.shape[0]):
        if alive[row] == 0:  # noqa: SIM102 - see spawn
            if wp.atomic_cas(alive, row, 0, 1) == 0:
                generation[row] = generation[row] + 1
                return row
    wp.atomic_add(overflow, 0, 1)
    wp.atomic_min(overflow, 1, world)
    return -1


@wp.func
def despawn_view(alive: wp.array(dtype=wp.int32), row: wp.int32):
    """``despawn`` for a ``@wp.func`` system: frees ``row`` of one world's ``<archetype>__alive_out`` view."""
    alive[row] = 0


@wp.func
def is_live_view(handle: wp.int64, alive: wp.array(dtype=wp.int32), generation: wp.array(dtype=wp.int32)) -> bool:
    """``is_live`` for a ``@wp.func`` system, on one world's ``alive`` and ``generation`` views."""
    if handle == wp.int64(0):
        return False
    row = handle_row(handle)
    if row >= alive.shape[0]:
        return False
    return alive[row] != 0 and generation[row] == handle_generation(handle)


@wp.func
def per_world(param: wp.array(dtype=Any), world: wp.int32):
    """Value of a per-world parameter for ``world`` (shared when the parameter has one value).

    Entry ``world % n`` of its ``n`` values, without the integer division in the common cases of
    one shared value and one value per world.
    """
    n = param.shape[0]
    i = world
    if n == 1:
        i = 0
    elif world >= n:
        i = world % n
    return param[i]


@wp.func
def episode_rng(seed: wp.int32, global_world: wp.int32, episode: wp.int32) -> wp.uint32:
    """RNG state for one episode of one world, keyed by (seed, global world index, episode)."""
    key = wp.rand_init(seed, global_world)
    return wp.rand_init(wp.int32(key & wp.uint32(0x7FFFFFFF)), episode)
