"""Hide-and-seek's physics budget: substeps per step and contact passes per substep, against how deep bodies end up
inside each other and what a step costs.

For each budget ``SxP`` (``physics_substeps`` S, ``contact_passes`` P; ``SxPsN``: with ``sleep_substeps`` N, bodies at
rest for N substeps sleep, ``s0`` none; without, the env's default; a ``k0`` after it: pairs of sleeping and static
bodies collided every substep, ``keep_resting_contacts`` off, with the same results), side by side in one process:

- **depth**: the held-grab stress of ``tests/envs/test_hide_and_seek_strategies.py`` (every agent holding grab,
  random moves every step, no preparation phase) for ``--steps`` steps of ``--num-worlds`` procedural worlds per
  seed, reading every live contact's depth after each step: the worst, the 99.9th percentile, and how many
  contacts deeper than 2 cm per 1,000 world-steps; and the fastest body (the agents' top speed is 8 m/s);
- **rate**: env steps/s of random play (``bench_hide_and_seek.py``'s measure) at ``--rate-worlds`` worlds,
  the budgets timed in turn in each of ``--repeats`` rounds, median, and its ratio to the first budget.

    python examples/benchmarks/physics_budgets.py                                  # CPU, one thread for the rate
    python examples/benchmarks/physics_budgets.py --budgets 8x2,4x4 --seeds 1,2 --plot budgets.png
    python examples/benchmarks/physics_budgets.py --budgets 8x2,8x2s0           # with and without sleeping
    python examples/benchmarks/physics_budgets.py --budgets 8x2,8x2k0           # with and without kept contact rows
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
import warp as wp
from tqdm import tqdm

import ecs
import envs
from envs.hide_and_seek import HideAndSeekConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hide_and_seek import measure

DEFAULT_BUDGETS = "8x2,8x2s0,8x2k0,8x1,6x2,6x3,5x3,4x4,4x3"
DEFAULT_SLEEP = HideAndSeekConfig().sleep_substeps  # substeps at rest before a body sleeps
BUDGET_FIELDS = ("physics_substeps", "contact_passes", "sleep_substeps", "keep_resting_contacts")


def parse_budgets(text: str) -> list[tuple[int, int, int | None, bool]]:
    """``SxP[sN][k0],...`` as (substeps, passes, sleep substeps, keep resting contacts): substeps and passes >= 1,
    sleep >= 0 (0: nothing sleeps; None where left out: the env's default), keep False with ``k0``."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        m = re.fullmatch(r"(\d+)x(\d+)(?:s(\d+))?(k0)?", item)
        if m is None or int(m[1]) < 1 or int(m[2]) < 1:
            raise ValueError(
                f"a budget is SUBSTEPSxPASSES with both >= 1 (e.g. 8x2), or with sleeping after N substeps at rest "
                f"SUBSTEPSxPASSESsN (e.g. 8x2s8), either followed by k0 to collide every pair every substep "
                f"(8x2k0), got {item!r}"
            )
        out.append((int(m[1]), int(m[2]), None if m[3] is None else int(m[3]), m[4] is None))
    if not out:
        raise ValueError("--budgets names no budget")
    return out


def stress(budget: dict, seed: int, num_worlds: int, steps: int, device: str) -> dict:
    """The held-grab stress at one budget (``BUDGET_FIELDS``) and seed: every live contact's depth after each step,
    the fastest body."""
    spec = envs.make("hide_and_seek", prep_fraction=0.0, **budget)
    sim = ecs.BatchSim(spec, num_worlds, device=device, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    sim.actions["grab"].fill_(1)
    sim.actions["lock"].zero_()
    depths, speed = [], 0.0
    for _ in range(steps):
        move = torch.randint(0, 11, tuple(sim.actions["move"].shape), generator=gen, dtype=torch.int32)
        sim.actions["move"].copy_(move)
        sim.step()
        alive = sim.tensor("body", "alive").cpu().numpy() != 0
        velocity = np.linalg.norm(sim.tensor("body", "linear_velocity").cpu().numpy(), axis=-1)[alive]
        speed = max(speed, float(velocity.max(initial=0.0)))
        d = sim.tensor("contact", "contact_depth").cpu().numpy()[sim.tensor("contact", "alive").cpu().numpy() != 0]
        depths.append(d[d > 0])
    return {"depths": np.concatenate(depths), "speed": speed, "world_steps": num_worlds * steps}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default=DEFAULT_BUDGETS, help=f"SUBSTEPSxPASSES,... (default {DEFAULT_BUDGETS})")
    parser.add_argument("--seeds", default="1,2,11,23,5,7", help="held-grab stress seeds (default 1,2,11,23,5,7)")
    parser.add_argument("--num-worlds", type=int, default=64, help="worlds per stress run (default 64)")
    parser.add_argument("--steps", type=int, default=200, help="steps per stress run (default 200)")
    parser.add_argument("--rate-worlds", type=int, default=256, help="worlds for the rate (default 256)")
    parser.add_argument("--rate-steps", type=int, default=40, help="steps per timing window (default 40)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of timing; the median is reported (default 5)")
    parser.add_argument("--device", default=None, help="cpu or cuda:N (default: cuda:0 when present, else cpu)")
    parser.add_argument("--cpu-threads", type=int, default=1, help="CPU threads for the rate (default 1)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--plot", default=None, help="also draw depth against cost to this PNG (matplotlib)")
    args = parser.parse_args(argv)
    try:
        budgets = parse_budgets(args.budgets)
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError as e:
        parser.error(str(e))
    if not seeds or min(args.num_worlds, args.steps, args.rate_worlds, args.rate_steps, args.repeats) < 1:
        parser.error("--seeds must name a seed; world counts, steps and --repeats must be >= 1")
    wp.config.log_level = wp.LOG_WARNING
    device = ecs.sim.resolve_device(args.device)

    rows = []
    with tqdm(total=len(budgets) * (len(seeds) + args.repeats), desc="budgets", unit="run") as bar:
        for substeps, passes, sleep, keep in budgets:
            sleep = DEFAULT_SLEEP if sleep is None else sleep
            budget = dict(zip(BUDGET_FIELDS, (substeps, passes, sleep, keep), strict=True))
            runs = []
            for seed in seeds:
                runs.append(stress(budget, seed, args.num_worlds, args.steps, device))
                bar.update()
            depths = np.concatenate([r["depths"] for r in runs])
            world_steps = sum(r["world_steps"] for r in runs)
            rows.append(
                {
                    **budget,
                    "worst_depth_m": float(depths.max(initial=0.0)),
                    "p999_depth_m": float(np.percentile(depths, 99.9)) if depths.size else 0.0,
                    "over_2cm_per_1k_world_steps": 1000.0 * float((depths > 0.02).sum()) / world_steps,
                    "fastest_m_per_s": max(r["speed"] for r in runs),
                    "rates": [],
                }
            )
        for _ in range(args.repeats):  # each round times every budget once, so drifts hit them alike
            for row in rows:
                overrides = {k: row[k] for k in BUDGET_FIELDS}
                r = measure(
                    args.rate_worlds,
                    steps=args.rate_steps,
                    repeats=1,
                    device=device,
                    seed=0,
                    cpu_threads=args.cpu_threads if device == "cpu" else None,
                    overrides=overrides,
                )
                row["rates"].append(r["env_steps_per_s"])
                bar.update()
    for row in rows:
        row["env_steps_per_s"] = statistics.median(row["rates"])
        row["rate_ratio"] = row["env_steps_per_s"] / rows[0]["env_steps_per_s"]

    print(
        f"hide-and-seek held-grab stress on {device}: {len(seeds)} seeds x {args.num_worlds} worlds x {args.steps} "
        f"steps; rate at {args.rate_worlds} worlds (median of {args.repeats})"
    )
    print(
        f"{'budget':>12} {'worst cm':>9} {'p99.9 cm':>9} {'>2 cm /1k':>10} {'fastest':>8} {'env steps/s':>12} {'ratio':>6}"
    )
    for r in rows:
        print(
            f"{label(r):>12} {100 * r['worst_depth_m']:>9.2f} "
            f"{100 * r['p999_depth_m']:>9.2f} {r['over_2cm_per_1k_world_steps']:>10.2f} {r['fastest_m_per_s']:>8.1f} "
            f"{r['env_steps_per_s']:>12,.0f} {r['rate_ratio']:>6.2f}"
        )
    if args.json:
        meta = {"device": device, "seeds": seeds, "num_worlds": args.num_worlds, "steps": args.steps}
        meta |= {"rate_worlds": args.rate_worlds, "repeats": args.repeats, "cpu_threads": args.cpu_threads}
        Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=1))
    if args.plot:
        plot(rows, args.plot, device)


def label(row: dict) -> str:
    """A budget as its table names it: ``8 x 2`` with the env's default sleeping, ``8 x 2 s0`` without, ``8 x 2 s8``
    with sleeping after 8 substeps at rest; ``k0`` after it without kept contact rows."""
    sleep = row.get("sleep_substeps", DEFAULT_SLEEP)
    name = f"{row['physics_substeps']} x {row['contact_passes']}" + ("" if sleep == DEFAULT_SLEEP else f" s{sleep}")
    return name + ("" if row.get("keep_resting_contacts", True) else " k0")


def plot(rows: list[dict], path: str, device: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        x, y = r["rate_ratio"], 100 * r["p999_depth_m"]
        ax.scatter(x, y, color="tab:red" if r is rows[0] else "tab:blue")
        ax.annotate(label(r).replace(" ", ""), (x, y), textcoords="offset points", xytext=(5, 3))
    ax.set_xlabel(f"env steps/s relative to {label(rows[0]).replace(' ', '')} ({device})")
    ax.set_ylabel("99.9th percentile contact depth [cm]")
    ax.set_title("Held-grab stress, substeps x passes (s0: no sleeping; k0: rows not kept)", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
