"""Diagnostics: ``sim.find_nan`` and ``sim.profile``, run by instrumented recorders.

Both step the simulation eagerly and unfused, system by system, through a recorder of their own
(``Recorder.variant``) whose ``launch`` is instrumented: ``NanCheck`` inspects every array a
launch touched, ``Timed`` synchronises around each launch and adds up its time. The simulation's
own executor, its captured graphs and its fused kernels are never touched.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import warp as wp

from .errors import EcsError
from .executors import Launch, Recorder
from .schema import Phase, scalar_type
from .systems import bundle_spec

if TYPE_CHECKING:
    from .profiling import Profile
    from .sim import BatchSim


class NanCheck(Recorder):
    """Checks, after every launch, each state array it took: floats finite, ``bounds`` held."""

    def __init__(self, *args: Any, bounds: Mapping[str, tuple[float, float]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arrays = {k: v for k, v in self.storage.state_arrays().items() if not k.startswith("param/")}
        self.labels = {id(v): k for k, v in self.arrays.items()}
        self.bounds = dict(bounds)

    def launch(self, launch: Launch) -> None:
        super().launch(launch)
        self.check(launch)

    def check(self, launch: Launch) -> None:
        wp.synchronize_device(self.device)
        for arr in _arrays(launch.inputs):
            label = self.labels.get(id(arr)) if isinstance(arr, wp.array) else None
            if label is None:
                continue
            is_float = scalar_type(arr.dtype) in (wp.float16, wp.float32, wp.float64)
            bound = self.bounds.get(label)
            if not is_float and bound is None:
                continue
            values = arr.numpy()
            bad = ~np.isfinite(values) if is_float else np.zeros(values.shape, dtype=bool)
            what = "non-finite value"
            if not bad.any() and bound is not None:
                bad = (values < bound[0]) | (values > bound[1])
                if label.startswith("table/"):  # dead rows hold stale values
                    alive = self.arrays[label.rsplit("/", 1)[0] + "/alive"].numpy() != 0
                    bad &= alive.reshape(alive.shape + (1,) * (bad.ndim - alive.ndim))
                what = f"value outside [{bound[0]}, {bound[1]}]"
            if bad.any():
                index = tuple(int(i) for i in np.argwhere(bad)[0])
                worlds = int(bad.reshape(self.num_worlds, -1).any(axis=1).sum())
                if launch.kernel is None:
                    where, why = "before the step", "it was set by the caller or by an earlier step()"
                else:
                    where = f"after system {launch.name!r} ({launch.phase.name})"
                    why = "every value was in range before it ran"
                raise EcsError(
                    f"{what} {where}: {label}{list(index)} is {values[index]} in world {index[0]} "
                    f"({worlds} world(s) affected); {why}."
                )


def _arrays(inputs: Any) -> Any:
    """The launch's inputs, with each bundle (``ecs.bundle``) replaced by the arrays it holds."""
    for value in inputs:
        spec = bundle_spec(getattr(value, "_cls", None))
        if spec is None:
            yield value
        else:
            yield from (getattr(value, name) for name, *_ in spec.fields)


class Timed(Recorder):
    """Adds up the wall time of every launch, synchronised before and after, by (phase, name)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timer: dict[tuple[Phase, str], float] = {}

    def launch(self, launch: Launch) -> None:
        wp.synchronize_device(self.device)
        t0 = time.perf_counter()
        super().launch(launch)
        wp.synchronize_device(self.device)
        key = (launch.phase, launch.name)
        self.timer[key] = self.timer.get(key, 0.0) + time.perf_counter() - t0


def find_nan(sim: BatchSim, steps: int, bounds: Mapping[str, tuple[float, float]] | None) -> None:
    """``sim.find_nan``: see there."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise EcsError(f"find_nan steps must be an int >= 1, got {steps!r}")
    arrays = {k for k in sim.storage.state_arrays() if not k.startswith("param/")}
    bounds = dict(bounds or {})
    unknown = sorted(set(bounds) - arrays)
    if unknown:
        raise EcsError(f"find_nan bounds name unknown arrays {unknown}; known: {sorted(arrays)}")
    for key, bound in bounds.items():
        if len(bound) != 2 or not bound[0] <= bound[1]:
            raise EcsError(f"find_nan bounds[{key!r}] must be (low, high) with low <= high, got {bound!r}")
    recorder = sim.executor.recorder.variant(NanCheck, bounds=bounds)
    recorder.check(Launch("(state before the step)", Phase.NONE, None, 0, list(recorder.arrays.values())))
    for _ in range(steps):
        recorder.record_step()
        sim.check()


def profile(sim: BatchSim, steps: int) -> Profile:
    """``sim.profile``: see there."""
    from .profiling import Profile

    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise EcsError(f"profile steps must be an int >= 1, got {steps!r}")
    saved = sim.state_dict()
    try:
        recorder = sim.executor.recorder.variant(Timed)
        for _ in range(steps):
            recorder.record_step()
        sim.load_state_dict(saved)
        wp.synchronize_device(sim.device)
        t0 = time.perf_counter()
        for _ in range(steps):
            sim.step()
        wp.synchronize_device(sim.device)
        captured = (time.perf_counter() - t0) / steps
    finally:
        sim.load_state_dict(saved)
    return Profile.from_timer(recorder.timer, steps, captured, sim)
