"""Error flags: how invalid actions and full archetypes reach the host without a synchronisation.

The step counts invalid actions in ``errors`` (count, first world * actions + action index) and
failed spawns in each archetype's ``overflow`` (count, first world). On CPU those arrays are host
memory and are read right after the call; on CUDA the captured step copies them into pinned host
mirrors at its end, and the next call (or ``check()``) reads what the previous one left there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import warp as wp

from .errors import ActionError, CapacityError
from .schema import EnvSpec
from .storage import INT32_MAX


class ErrorFlags:
    """The device flags of one simulation, their host mirrors, and the errors they raise."""

    def __init__(
        self,
        overflow: Mapping[str, wp.array],
        capacities: Mapping[str, int],
        device: str,
        grow: Mapping[str, str] | None = None,
    ) -> None:
        self.device = device
        self.grow = dict(grow or {})  # per archetype: how a user raises its capacity (``Archetype.grow``)
        self.errors = wp.array([0, INT32_MAX], dtype=wp.int32, device=device)
        self.overflow = dict(overflow)
        self.capacities = dict(capacities)
        self.arrays = [self.errors, *self.overflow.values()]
        if device == "cpu":
            self.mirrors = self.arrays
        else:
            self.mirrors = [wp.zeros_like(f, device="cpu", pinned=True) for f in self.arrays]
        self.host = [m.numpy() for m in self.mirrors]

    def record_copies(self) -> None:
        """Inside a captured step on CUDA: copy the flags into the host mirrors (nothing to do on CPU)."""
        if self.device != "cpu":
            for src, dst in zip(self.arrays, self.mirrors, strict=True):
                wp.copy(dst, src)

    def invalid_actions(self) -> bool:
        """Whether the host mirror counts invalid actions (CPU: right after a validation)."""
        return bool(self.host[0][0] != 0)

    def sync(self) -> None:
        """Waits for the device and brings the flags' current values to the host."""
        wp.synchronize_device(self.device)
        if self.device != "cpu":
            for src, dst in zip(self.arrays, self.mirrors, strict=True):
                wp.copy(dst, src)
            wp.synchronize_device(self.device)

    def clear(self) -> None:
        for arr, mirror in zip(self.arrays, self.mirrors, strict=True):
            arr.assign(np.array([0, INT32_MAX], dtype=np.int32))
            if mirror is not arr:
                mirror.numpy()[:] = (0, INT32_MAX)

    def raise_pending(self, action_error: Callable[[int], ActionError]) -> None:
        """Raises (and clears) what the host mirrors hold: ``action_error(count)`` first, then a full archetype."""
        errors, *overflows = self.host
        if errors[0] == 0 and all(o[0] == 0 for o in overflows):
            return
        count = int(errors[0])
        over = [(a, int(o[0]), int(o[1])) for a, o in zip(self.overflow, overflows, strict=True) if o[0] > 0]
        self.clear()
        if count:
            raise action_error(count)
        arch, n, world = over[0]
        fix = self.grow.get(arch) or f"raise capacity in Archetype({arch!r}, ..., capacity=...) or despawn sooner"
        raise CapacityError(
            f"archetype {arch!r} is full: {n} spawn(s) failed (first in world {world}) because its capacity is "
            f"{self.capacities[arch]} entities per world. To fix it, {fix}."
        )


def action_error(env: EnvSpec, call: str, count: int, values: Mapping[str, np.ndarray], staged: bool) -> ActionError:
    """The error for the first invalid action of ``call``, found on the host (an error path only).

    Args:
        values: per action key, ``[steps, num_worlds, ...]``: the staged actions of a run, or
            ``sim.actions`` with a leading axis of one.
        staged: the values are a run's per-step actions.
    """
    for key in sorted(env.actions):
        action, v = env.actions[key], values[key]
        if action.discrete:
            bad = (v < action.low) | (v > action.high)
            expected = f"integers in [{int(action.low)}, {int(action.high)}]"
        else:
            bad = ~np.isfinite(v)
            expected = "finite floats (no NaN or infinity)"
        if bad.any():
            step, world = (int(i) for i in np.argwhere(bad)[0][:2])
            where = f"actions[{key!r}][{step}] (step {step} of the run)" if staged else f"sim.actions[{key!r}]"
            return ActionError(
                f"invalid action in {call}: {where} of world {world} is {v[step, world].tolist()}, but it "
                f"must hold {expected} ({count} invalid value(s) in all). No world was advanced; fix the actions "
                f"and call {call.split('(')[0]}() again."
            )
    return ActionError(
        f"invalid action in {call} ({count} invalid value(s)), no longer present in the actions; no world was advanced"
    )
