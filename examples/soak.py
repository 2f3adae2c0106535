"""Soak test: a long hide-and-seek run with random actions, checked as it goes.

Checks every ``--check-every`` steps: every observation, reward and body column is finite; no
spawn overflowed a table (``sim.step()`` raises ``ecs.CapacityError`` otherwise); contact depth
stays under ``--max-depth`` and body speed under ``--max-speed``; resident memory does not grow
by more than ``--max-growth-mib`` after the first check. Exits 1 on the first violation, naming
it; prints a summary line either way.

    python examples/soak.py --world-steps 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import warp as wp
from tqdm import tqdm

import ecs
import envs


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def random_actions(sim: ecs.BatchSim, g: torch.Generator) -> None:
    for key, space in sim.action_space.items():
        buf = sim.actions[key]
        high = int(np.max(space.nvec)) if hasattr(space, "nvec") else int(space.n)
        buf.copy_(torch.randint(0, high, tuple(buf.shape), generator=g, device="cpu").to(buf.dtype))


def check(sim: ecs.BatchSim, max_depth: float, max_speed: float, worst: dict[str, float]) -> str | None:
    for key, obs in sim.obs.items():
        if not torch.isfinite(obs.float()).all():
            return f"observation {key!r} is not finite"
    if not torch.isfinite(sim.rewards).all():
        return "rewards are not finite"
    body = {k: sim.tensor("body", k) for k in ("alive", "position", "linear_velocity", "angular_velocity")}
    alive = body["alive"].bool()
    for k in ("position", "linear_velocity", "angular_velocity"):
        if not torch.isfinite(body[k][alive]).all():
            return f"body {k} is not finite"
    speed = body["linear_velocity"][alive].norm(dim=-1).max().item() if alive.any() else 0.0
    worst["speed"] = max(worst["speed"], speed)
    if speed > max_speed:
        return f"a body moves at {speed:.2f} m/s (limit {max_speed})"
    contact_alive = sim.tensor("contact", "alive").bool()
    depth = sim.tensor("contact", "contact_depth")[contact_alive]
    deepest = float(depth.max().item()) if depth.numel() else 0.0
    worst["depth"] = max(worst["depth"], deepest)
    if deepest > max_depth:
        return f"contact depth {deepest:.4f} m exceeds {max_depth} m"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world-steps", type=int, default=1_000_000, help="total world-steps (num_worlds x steps)")
    p.add_argument("--num-worlds", type=int, default=256)
    p.add_argument("--device", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check-every", type=int, default=50, help="steps between checks")
    p.add_argument("--max-depth", type=float, default=0.05, help="largest contact depth allowed [m]")
    p.add_argument("--max-speed", type=float, default=50.0, help="largest body speed allowed [m/s]")
    p.add_argument("--max-growth-mib", type=float, default=64.0, help="resident memory growth allowed [MiB]")
    p.add_argument("--json", default=None, help="write the summary here")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    wp.config.log_level = wp.LOG_WARNING

    sim = ecs.BatchSim(envs.make("hide_and_seek"), args.num_worlds, device=args.device, seed=args.seed)
    g = torch.Generator().manual_seed(args.seed)
    steps = -(-args.world_steps // args.num_worlds)
    base_rss, worst_rss, problem = None, 0.0, None
    episodes = 0
    worst = {"speed": 0.0, "depth": 0.0}
    t0 = time.perf_counter()
    for i in tqdm(range(steps), disable=args.no_progress, unit="step", desc="soak"):
        random_actions(sim, g)
        sim.step()
        episodes += int(sim.truncated.sum()) + int(sim.terminated.sum())
        if (i + 1) % args.check_every == 0 or i + 1 == steps:
            problem = check(sim, args.max_depth, args.max_speed, worst)
            rss = rss_mib()
            base_rss = rss if base_rss is None else base_rss
            worst_rss = max(worst_rss, rss - base_rss)
            if problem is None and worst_rss > args.max_growth_mib:
                problem = f"resident memory grew by {worst_rss:.1f} MiB (limit {args.max_growth_mib})"
            if problem is not None:
                problem = f"step {i + 1}: {problem}"
                break
    elapsed = time.perf_counter() - t0
    summary = {
        "world_steps": args.num_worlds * (i + 1),
        "num_worlds": args.num_worlds,
        "device": sim.device,
        "seconds": elapsed,
        "episodes_finished": episodes,
        "rss_growth_mib": worst_rss,
        "max_body_speed": worst["speed"],
        "max_contact_depth": worst["depth"],
        "problem": problem,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    verdict = "FAILED: " + problem if problem else "ok"
    print(
        f"soak {verdict}: {summary['world_steps']:,} world-steps on {sim.device} in {elapsed:.0f} s, "
        f"{episodes} episodes, memory growth {worst_rss:.1f} MiB, fastest body {worst['speed']:.2f} m/s, "
        f"deepest contact {worst['depth'] * 1000:.1f} mm"
    )
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
