"""How long a GPU warp of worlds waits for its slowest world: the spread of the solver's work across worlds.

A thread-per-world kernel steps 32 worlds in a warp, whose threads run together: the warp takes about as long as its
slowest world. Hide-and-seek's worlds differ widely in their work (a heap of boxes pushed about against an empty
room, bodies asleep or not), so this script counts each world's solver cycles on one CPU thread (``solver_timing``)
under sticky play (``examples/soak.py --policy sticky``) and prices warps of ``G`` worlds formed four ways:

- in their own order (world ``t`` on thread ``t``);
- sorted by their contact rows with a body that moves, counted before the step (what ``PhysicsConfig.solver_order``
  sorts by, ``solver.ORDER_BUCKETS``);
- sorted by their own cycles in the step before;
- sorted by their own cycles in the step itself (the best any order could do).

The overhead of an order is the sum over its warps of the slowest world's cycles over the sum of the mean world's,
averaged over the steps: 1 where every warp's worlds cost the same. A CPU thread's cycles stand in for a GPU
thread's; the GPU's own figure is for ``python -m ecs gpu-report`` (stage ``solver``: a thread per world staged,
with and without ``solver_order``)::

    python examples/benchmarks/world_spread.py --num-worlds 1024 --steps 40
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
import warp as wp
from tqdm import tqdm

import ecs
import envs
from systems import solver
from systems.rigid_body import Response

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: the soak's sticky play
from soak import random_actions

ORDERS = ("own order", "moving contact rows", "cycles of the step before", "own cycles (best)")


def moving_rows(sim: ecs.BatchSim) -> np.ndarray:
    """Each world's contact rows in use with a body that moves (dynamic, not locked, not asleep), by torch."""
    moves = (sim.tensor("body", "response") == int(Response.DYNAMIC)) & (sim.tensor("body", "motion_lock") == 0)
    rows = torch.arange(sim.tensor("contact", "alive").shape[1])
    in_use = rows[None, :] < sim.tensor("world", "contact_count")[:, None].long()
    a = torch.gather(moves, 1, sim.tensor("contact", "contact_body_a").long())
    b = torch.gather(moves, 1, sim.tensor("contact", "contact_body_b").long())
    return (in_use & (a | b)).sum(dim=1).numpy()


def overhead(order: np.ndarray, cost: np.ndarray, group: int) -> float:
    """Sum over warps of ``group`` worlds (in ``order``) of the slowest world's cost over the sum of the mean's."""
    n = len(cost) - len(cost) % group
    warps = cost[order[:n]].reshape(-1, group)
    return float(warps.max(axis=1).sum() / warps.mean(axis=1).sum())


def measure(num_worlds: int, steps: int, warmup: int, hold: float, seed: int, groups: list[int]) -> dict:
    wp.config.log_level = wp.LOG_WARNING
    sim = ecs.BatchSim(
        envs.make("hide_and_seek", solver_timing=True), num_worlds, device="cpu", seed=seed, cpu_threads=1
    )
    gen = torch.Generator().manual_seed(seed)
    for i in tqdm(range(warmup), desc="warm-up", unit="step"):
        random_actions(sim, gen, hold if i > 0 else 1.0)
        sim.step()
    keys, costs = [], []
    before = sim.tensor("world", "solver_cycles").clone()
    for _ in tqdm(range(steps + 1), desc="measure", unit="step"):
        keys.append(np.minimum(moving_rows(sim), solver.ORDER_BUCKETS - 1))
        random_actions(sim, gen, hold)
        sim.step()
        now = sim.tensor("world", "solver_cycles").clone()
        costs.append((now - before).sum(dim=1).double().numpy())
        before = now
    table = {}
    for g in groups:
        rows = {name: [] for name in ORDERS}
        for i in range(1, steps + 1):
            cost = costs[i]
            rows[ORDERS[0]].append(overhead(np.arange(num_worlds), cost, g))
            rows[ORDERS[1]].append(overhead(np.argsort(keys[i], kind="stable"), cost, g))
            rows[ORDERS[2]].append(overhead(np.argsort(costs[i - 1], kind="stable"), cost, g))
            rows[ORDERS[3]].append(overhead(np.argsort(cost, kind="stable"), cost, g))
        table[str(g)] = {name: float(np.mean(v)) for name, v in rows.items()}
    every = np.concatenate(costs[1:])
    return {
        "num_worlds": num_worlds,
        "steps": steps,
        "hold": hold,
        "cycles_per_world_step": {
            "mean": float(every.mean()),
            "median": float(np.median(every)),
            "p90": float(np.percentile(every, 90)),
            "max": float(every.max()),
        },
        "correlation_with_cycles": {
            "moving contact rows": float(np.mean([np.corrcoef(keys[i], costs[i])[0, 1] for i in range(1, steps + 1)])),
            "cycles of the step before": float(
                np.mean([np.corrcoef(costs[i - 1], costs[i])[0, 1] for i in range(1, steps + 1)])
            ),
        },
        "overhead": table,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-worlds", type=int, default=1024)
    p.add_argument("--steps", type=int, default=40, help="steps measured")
    p.add_argument("--warmup", type=int, default=40, help="steps played first (the level fills with motion)")
    p.add_argument("--hold", type=float, default=20.0, help="mean steps an agent holds its actions (sticky play)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--groups", type=int, nargs="+", default=[32, 8, 4], help="worlds per warp")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.hold < 1.0:
        p.error("--steps must be >= 1, --warmup >= 0 and --hold >= 1")
    bad = [g for g in args.groups if g < 1 or g > args.num_worlds]
    if bad:
        p.error(f"--groups must lie in 1..num_worlds ({args.num_worlds}), got {bad}")
    result = measure(args.num_worlds, args.steps, args.warmup, args.hold, args.seed, args.groups)
    c = result["cycles_per_world_step"]
    print(
        f"hide-and-seek, {args.num_worlds} worlds, {args.steps} steps of sticky play: solver cycles per world-step "
        f"mean {c['mean']:,.0f}, median {c['median']:,.0f}, p90 {c['p90']:,.0f}, max {c['max']:,.0f}"
    )
    print("a warp's wait for its slowest world (sum of warp maxima / sum of warp means):")
    print(f"{'order':28s}" + "".join(f"{g:>10d} a warp" for g in args.groups))
    for name in ORDERS:
        print(f"{name:28s}" + "".join(f"{result['overhead'][str(g)][name]:>17.2f}" for g in args.groups))
    corr = result["correlation_with_cycles"]
    print(
        f"correlation with a world's cycles: moving contact rows {corr['moving contact rows']:.2f}, "
        f"the step before's cycles {corr['cycles of the step before']:.2f}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
