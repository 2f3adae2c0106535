"""How much of the solver's contact solve a world's lanes can share: its work and its critical path.

The contact passes of a substep solve a world's levels one after another (``solver.find_levels``). In a block of
``solver.SOLVER_LANES`` lanes, the manifolds of a level go to the lanes in turn (``order[first + lane::lanes]``)
and a level ends when its busiest lane does; a level whose manifolds move one body takes Jacobi steps instead,
each solving every manifold again. Each manifold's sweeps go over its points one after another. So, counted in
point-sweeps (one point of one manifold, once) per substep, at most (a manifold stops sweeping once its points
settle, ``solver.SETTLED``):

- ``work``: every manifold's points times its sweeps, over the passes (``contact_passes``: ``FIRST_SWEEPS`` in the
  passes before the last, ``NORMAL_SWEEPS`` in the last; a Jacobi level once in the first, ``LEVEL_STEPS`` times
  in the last);
- ``path``: the same with each level counted for its busiest lane only: what one world's block waits for.

``work / path`` bounds what the lanes can gain in the solve; ``path`` is the part no number of lanes shortens.
Read from the tables as the last substep left them (its contact rows, manifold order and levels).
``examples/benchmarks/solver_depth.py`` counts hide-and-seek's under random play.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import solver


def world_depth(
    body_a: np.ndarray,
    body_b: np.ndarray,
    order: np.ndarray,
    levels: np.ndarray,
    count: int,
    lanes: int = solver.SOLVER_LANES,
    passes: int = solver.CONTACT_PASSES,
) -> dict[str, float]:
    """One world's solve (its contact table's first ``count`` rows, ``order`` and ``levels`` as the solver leaves
    them): contact rows, manifolds, levels, Jacobi levels, and ``work`` and ``path`` in point-sweeps per substep of
    ``passes`` contact passes (the ``contact_passes`` resource)."""
    starts = [k for k in range(count) if k == 0 or (body_a[k], body_b[k]) != (body_a[k - 1], body_b[k - 1])]
    points = {s: e - s for s, e in zip(starts, [*starts[1:], count], strict=True)}
    sweeps = [int(solver.FIRST_SWEEPS)] * (passes - 1) + [int(solver.NORMAL_SWEEPS)]
    steps = [1] * (passes - 1) + [int(solver.LEVEL_STEPS)]
    first = n_levels = jacobi = work = path = 0
    while first < len(starts):
        end, shared = divmod(int(levels[first]), 2)
        sizes = [points[int(order[m])] for m in range(first, end)]
        busiest = max(sum(sizes[lane::lanes]) for lane in range(min(lanes, len(sizes))))
        for s, j in zip(sweeps, steps, strict=True):
            repeat = j if shared else 1
            work += repeat * s * sum(sizes)
            path += repeat * s * busiest
        n_levels += 1
        jacobi += shared
        first = end
    return {
        "rows": count,
        "manifolds": len(starts),
        "levels": n_levels,
        "jacobi_levels": jacobi,
        "work": work,
        "path": path,
    }


def depth(sim: Any, lanes: int = solver.SOLVER_LANES) -> list[dict[str, float]]:
    """``world_depth`` of every world of a simulation with the solver's tables (``systems.physics``), at its
    ``contact_passes``."""
    passes = int(
        sim.env.resources.get("contact_passes", getattr(sim.env.config, "contact_passes", solver.CONTACT_PASSES))
    )
    columns = {c: sim.tensor("contact", c).cpu().numpy() for c in ("contact_body_a", "contact_body_b")}
    order = sim.tensor("contact", "contact_order").cpu().numpy()
    levels = sim.tensor("contact", "contact_level").cpu().numpy()
    counts = sim.tensor("world", "contact_count").cpu().numpy()
    return [
        world_depth(
            columns["contact_body_a"][w], columns["contact_body_b"][w], order[w], levels[w], int(n), lanes, passes
        )
        for w, n in enumerate(counts)
    ]


def summary(rows: list[dict[str, float]]) -> dict[str, float]:
    """Means over worlds (and ``path_p90``, ``parallelism``: the mean of each world's ``work / path``)."""
    keys = ("rows", "manifolds", "levels", "jacobi_levels", "work", "path")
    out = {k: float(np.mean([r[k] for r in rows])) for k in keys}
    out["path_p90"] = float(np.percentile([r["path"] for r in rows], 90))
    out["parallelism"] = float(np.mean([r["work"] / r["path"] for r in rows if r["path"] > 0] or [0.0]))
    return out
