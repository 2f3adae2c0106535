"""Soak many configs of hide-and-seek side by side: which settings keep contacts shallow and bodies slow.

Runs ``examples/soak.py`` once per config, each in a process of its own (``--jobs`` at a time), with sticky play
(agents hold their move, grab and lock for about 20 steps, as trained agents do), to the full ``--world-steps``
rather than stopping at the first deep contact, checking every ``--check-every`` steps. A config is ``"default"`` or
space-separated ``KEY=VALUE`` fields of hide-and-seek's config (``--config``, repeatable; by default ``CONFIGS``, the
ways users change the env). Writes ``sweep.json``, ``sweep.md`` (a table: the deepest contact and where, how
many world-steps went deeper than 10 and 20 mm, the fastest body, the verdict against ``--max-depth`` and
``--max-speed``) and ``sweep.png`` into ``--out``, and exits 1
if any config failed a check or did not run.

    python examples/soak_sweep.py --out sweep --jobs 2
    python examples/soak_sweep.py --config "box_mass=0.3" --config "gravity=-9.81" --world-steps 100000
    python examples/soak_sweep.py --against ../main-before --jobs 2   # a change side by side with the tree before

``--against DIR`` soaks each config in another checkout of the project too (its ``examples/soak.py``, ``ecs``,
``envs`` and ``systems``), with the same seed and actions, and puts its figures beside this tree's: how a solver
change moves the deepest contacts, config by config.

A run that stops early (a value that is not finite, a body through the outside walls, a full table, memory growth)
is a failure whatever its depth; its problem is in the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from tqdm import tqdm

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The ways users change hide-and-seek: its defaults, the quadrant game, and one setting at a time.
CONFIGS = (
    "default",
    "scenario=quadrant",
    "objects_turn_only_about_z=false",
    "box_mass=0.3",
    "box_mass=5.0",
    "agent_mass=5.0",
    "ramp_mass=0.2",
    "box_mass=3.0 ramp_mass=3.0",
    "box_size=0.3",
    "elongated_box_scale=[2.0,0.5,1.0]",
    "ramp_size=[1.0,1.0,1.0]",
    "agent_radius=0.3",
    "min_boxes=15 max_boxes=20",
    "min_hiders=3 max_hiders=3 min_seekers=3 max_seekers=3",
    "floor_size=3.0",
    "outside_walls_prob=1.0 max_rooms=1",
    "move_force=200.0",
    "gravity=-9.81",
    "box_friction=1.0 floor_friction=1.0",
    "lock_type=toggle",
    "physics_substeps=4",
    "contact_passes=3",
    "physics_dt=0.05",
    "sleep_substeps=0",
)


def soak_command(config: str, args: argparse.Namespace, json_path: str, root: str = ROOT, seed: int = 0) -> list[str]:
    """The ``soak.py`` command line of one config in the checkout at ``root``: checks that stop the run early stay on
    (non-finite values, bodies through the outside walls, memory), depth and speed are judged afterwards."""
    cmd = [sys.executable, os.path.join(root, "examples", "soak.py"), "--policy", "sticky", "--no-progress"]
    cmd += ["--num-worlds", str(args.num_worlds), "--world-steps", str(args.world_steps), "--seed", str(seed)]
    cmd += ["--check-every", str(args.check_every), "--max-depth", "1e9", "--max-speed", "1e9", "--json", json_path]
    if args.device:
        cmd += ["--device", args.device]
    for pair in config.split():
        if pair != "default":
            cmd += ["--set", pair]
    return cmd


def run_one(config: str, args: argparse.Namespace, root: str = ROOT, seed: int = 0) -> dict[str, Any]:
    """Soaks one config with one seed in a process of its own, with the checkout at ``root`` first on the import path;
    its summary, or the error that stopped it."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "soak.json")
        cmd = soak_command(config, args, path, root, seed)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
        except subprocess.TimeoutExpired:
            return {"config": config, "seed": seed, "error": f"timed out after {args.timeout:g} s", "verdict": "error"}
        if not os.path.exists(path):
            lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
            error = lines[-1] if lines else f"exit {done.returncode}"
            return {"config": config, "error": error if len(error) <= 200 else error[:200] + "...", "verdict": "error"}
        with open(path) as f:
            row = json.load(f)
    row["config"] = config
    row["seed"] = seed
    return row


def merged(runs: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """One config's row from its runs, a seed each: the deepest contact and fastest body over them (with the seed
    of the deepest), the world-steps summed, the first problem, each seed's figures in ``seeds``, and the verdict
    against the limits; the first error where any run did not start."""
    failed = next((r for r in runs if "error" in r), None)
    if failed is not None:
        return failed
    row = dict(max(runs, key=lambda r: r["max_contact_depth"]))
    row["max_body_speed"] = max(r["max_body_speed"] for r in runs)
    row["world_steps"] = sum(r["world_steps"] for r in runs)
    if all("world_steps_deeper" in r for r in runs):  # a soak.py that counts them (an older tree's may not)
        row["world_steps_deeper"] = {
            k: sum(r["world_steps_deeper"][k] for r in runs) for k in runs[0]["world_steps_deeper"]
        }
    row["problem"] = next((r["problem"] for r in runs if r["problem"]), None)
    if row["problem"] and len(runs) > 1:
        row["problem"] = f"seed {next(r['seed'] for r in runs if r['problem'])}: {row['problem']}"
    if len(runs) > 1:
        row["seeds"] = [{k: r[k] for k in ("seed", "max_contact_depth", "max_body_speed", "problem")} for r in runs]
    problems = []
    if row["problem"]:
        problems.append(row["problem"])
    if row["max_contact_depth"] > args.max_depth:
        problems.append(f"contact {1000 * row['max_contact_depth']:.1f} mm deep (limit {1000 * args.max_depth:g})")
    if row["max_body_speed"] > args.max_speed:
        problems.append(f"a body at {row['max_body_speed']:.1f} m/s (limit {args.max_speed:g})")
    row["verdict"] = "; ".join(problems) if problems else "ok"
    return row


def _cells(row: dict[str, Any]) -> list[str]:
    """A row's world-steps, deepest contact, where, fastest body and verdict, as table cells."""
    if row["verdict"] == "error":
        return ["", "", "", "", "", f"did not run: {row['error']}"]
    at = row.get("deepest_contact_at") or {}
    where = f"{at['step']}, {at['world']}, {' on '.join(at['kinds'])}" if at else ""
    if at and "seeds" in row:
        where = f"seed {row['seed']}: {where}"
    depth = f"{1000 * row['max_contact_depth']:.1f}"
    if "seeds" in row:
        depth += " (" + ", ".join(f"{1000 * r['max_contact_depth']:.1f}" for r in row["seeds"]) + ")"
    deeper = row.get("world_steps_deeper")
    often = ", ".join(f"{n:,}" for n in deeper.values()) if deeper else ""
    return [f"{row['world_steps']:,}", depth, often, where, f"{row['max_body_speed']:.1f}", row["verdict"]]


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    device = next((r["device"] for r in rows if "device" in r), args.device or "the default device")
    lines = [
        f"Hide-and-seek soaked config by config: sticky play, {args.num_worlds} worlds, "
        + (
            f"seed {args.seed}"
            if args.seeds == 1
            else f"seeds {args.seed}..{args.seed + args.seeds - 1} (in brackets each seed's deepest contact)"
        )
        + (", checks every step" if args.check_every == 1 else f", checks every {args.check_every} steps")
        + f", on {device}.",
        "",
    ]
    often = "world-steps deeper than 10, 20 mm"
    head = ["config", "world-steps", "deepest contact (mm)", often, "where (step, world, bodies)", "fastest body (m/s)"]
    if args.against:
        lines[0] += f" Beside each figure, the same soak of `{args.against}`."
        head = [head[0], "world-steps", "deepest contact (mm), here / there", f"{often}, here / there", "where, here"]
        head += ["fastest body (m/s)", "verdict here", "verdict there"]
    else:
        head.append("verdict")
    lines += ["| " + " | ".join(head) + " |", "|---|---:|---:|---:|---|---:|" + "---|" * (len(head) - 6)]
    for row in rows:
        cells = _cells(row)
        if args.against:
            there = _cells(row["against"])
            for i in (1, 2, 4):
                cells[i] = f"{cells[i] or '-'} / {there[i] or '-'}"
            cells.append(there[5])
        lines.append(f"| `{row['config']}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], args: argparse.Namespace, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [r for r in rows if r["verdict"] != "error"]
    if not ran:
        return
    fig, (ax_depth, ax_speed) = plt.subplots(1, 2, figsize=(12, 0.32 * len(ran) + 1.5), sharey=True)
    y = np.arange(len(ran))
    height = 0.4 if args.against else 0.8
    colours = ["tab:blue" if r["verdict"] == "ok" else "tab:red" for r in ran]
    ax_depth.barh(y, [1000 * r["max_contact_depth"] for r in ran], height, color=colours, label="this tree")
    ax_speed.barh(y, [r["max_body_speed"] for r in ran], height, color=colours)
    if args.against:
        other = [r["against"] for r in ran]
        depths = [1000 * r["max_contact_depth"] if r["verdict"] != "error" else 0.0 for r in other]
        speeds = [r["max_body_speed"] if r["verdict"] != "error" else 0.0 for r in other]
        ax_depth.barh(y + height, depths, height, color="tab:gray", label=os.path.basename(args.against.rstrip("/")))
        ax_speed.barh(y + height, speeds, height, color="tab:gray")
    ax_depth.axvline(1000 * args.max_depth, color="k", ls="--", lw=1, label=f"limit {1000 * args.max_depth:g} mm")
    ax_depth.set_yticks(y + (height / 2 if args.against else 0.0), [r["config"] for r in ran])
    ax_depth.set_xlabel("deepest contact [mm]")
    ax_depth.legend(loc="lower right")
    ax_speed.set_xlabel("fastest body [m/s]")
    ax_depth.invert_yaxis()
    fig.suptitle(
        f"hide-and-seek soak per config ({args.num_worlds} worlds, {ran[0]['world_steps']:,} world-steps each)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", default=None, help='"KEY=VALUE ..." or "default"; repeatable')
    p.add_argument("--world-steps", type=int, default=200_000, help="world-steps per config and seed")
    p.add_argument("--num-worlds", type=int, default=256)
    p.add_argument("--seed", type=int, default=0, help="the first seed")
    p.add_argument("--seeds", type=int, default=1, help="seeds per config, from --seed on (each its own soak)")
    p.add_argument(
        "--check-every",
        type=int,
        default=1,
        help="steps between checks (every step by default: checks every 10 steps missed contacts deep for a few)",
    )
    p.add_argument("--max-depth", type=float, default=0.05, help="deepest contact allowed [m]")
    p.add_argument("--max-speed", type=float, default=50.0, help="fastest body allowed [m/s]")
    p.add_argument("--device", default=None)
    p.add_argument("--jobs", type=int, default=1, help="configs soaked at once, each in its own process")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds one config may take")
    p.add_argument("--out", default="soak_sweep", help="folder for sweep.json, sweep.md and sweep.png")
    p.add_argument("--against", default=None, metavar="DIR", help="another checkout soaked beside this one")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    configs = args.config or list(CONFIGS)
    for name in ("world_steps", "num_worlds", "check_every", "jobs", "seeds"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    for config in configs:
        if config != "default" and any("=" not in pair for pair in config.split()):
            p.error(f'--config takes "default" or space-separated KEY=VALUE pairs, got {config!r}')
    if args.against is not None:
        if not os.path.isfile(os.path.join(args.against, "examples", "soak.py")):
            p.error(f"--against takes a checkout of this project (with examples/soak.py), got {args.against!r}")
        args.against = os.path.abspath(args.against)
    os.makedirs(args.out, exist_ok=True)
    roots = [ROOT] + ([args.against] if args.against else [])
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        seeds = range(args.seed, args.seed + args.seeds)
        futures = [[[pool.submit(run_one, c, args, root, seed) for seed in seeds] for root in roots] for c in configs]
        rows = []
        for sides in tqdm(futures, desc="soak sweep", unit="config", disable=args.no_progress):
            row, *other = (merged([f.result() for f in side], args) for side in sides)
            if args.against:
                row["against"] = other[0]
            rows.append(row)
    with open(os.path.join(args.out, "sweep.json"), "w") as f:
        json.dump({"settings": {k: v for k, v in vars(args).items() if k != "no_progress"}, "rows": rows}, f, indent=2)
    table = markdown(rows, args)
    with open(os.path.join(args.out, "sweep.md"), "w") as f:
        f.write(table)
    plot(rows, args, os.path.join(args.out, "sweep.png"))
    print(table, end="")
    return 0 if all(r["verdict"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
