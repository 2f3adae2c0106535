"""Memory accounting: what a simulation allocates, estimated before anything is allocated."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import warp as wp

from .errors import OutOfMemoryError
from .schema import ENGINE_COLUMNS

if TYPE_CHECKING:
    from .graph import Layout
    from .schema import EnvSpec


def estimate(layout: Layout, env: EnvSpec, num_worlds: int) -> dict[str, int]:
    """Bytes per archetype column (``"<archetype>.<component>"``), singleton (``"world.<name>"``) and final_obs."""
    out: dict[str, int] = {}
    for a in layout.archetypes.values():
        for name in ENGINE_COLUMNS:
            out[f"{a.name}.{name}"] = 4 * num_worlds * a.capacity
        for c in a.components:
            out[f"{a.name}.{c.name}"] = c.itemsize * num_worlds * a.capacity
    for name, c in layout.singletons.items():
        out[f"world.{name}"] = c.itemsize * num_worlds
    for key, o in env.observations.items():
        out[f"final_obs.{key}"] = o.component.itemsize * num_worlds
    out["engine.reset_request"] = 4 * num_worlds
    return out


def available_bytes(device: str) -> int | None:
    """Free memory of ``device`` in bytes, or None when it cannot be told."""
    if device == "cpu":
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None
    return int(wp.get_device(device).free_memory)


def check_fits(per_item: dict[str, int], device: str, num_worlds: int) -> None:
    """Raises ``OutOfMemoryError`` naming the bytes needed when the simulation would not fit."""
    need = sum(per_item.values())
    free = available_bytes(device)
    limit = os.environ.get("ECS_MEMORY_LIMIT")
    if limit is not None:
        free = min(free or int(limit), int(limit))
    if free is not None and need > 0.9 * free:
        biggest = sorted(per_item.items(), key=lambda kv: -kv[1])[:3]
        raise OutOfMemoryError(
            f"{num_worlds} worlds need {need / 2**30:.2f} GiB ({need} bytes) on {device}, but only "
            f"{free / 2**30:.2f} GiB is free; largest columns: "
            + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in biggest)
            + f". Use fewer worlds (at most about {int(num_worlds * 0.9 * free / need)}) or smaller capacities."
        )
