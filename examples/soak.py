"""Soak test: a long hide-and-seek run with random actions, checked as it goes.

Checks every ``--check-every`` steps: every observation, reward and body column is finite; no
spawn overflowed a table (``sim.step()`` raises ``ecs.CapacityError`` otherwise); contact depth
stays under ``--max-depth`` and body speed under ``--max-speed`` (and how many world-steps checked went deeper
than 10 and 20 mm is counted); in a level with outside walls,
every dynamic body's centre stays within them (none went through them; without them agents may run
off the floor, as in OpenAI's); resident memory does not grow
by more than ``--max-growth-mib`` after the first check. Exits 1 on the first violation, naming
it; prints a summary line either way.

    python examples/soak.py --world-steps 1000000
    python examples/soak.py --policy sticky --set physics_substeps=4 --set contact_passes=4

``--policy uniform`` draws every action afresh each step, so an agent jitters in place and lets go of what
it grabbed half the time. Trained agents do the opposite: they run in one direction for seconds, push boxes
into walls and each other, and hold what they grab while they drag it. ``--policy sticky`` plays like that:
each agent keeps its move, grab and lock for a random number of steps (geometric, mean ``--hold`` steps)
before it draws them again. ``--set KEY=VALUE`` (repeatable) soaks another config of the env.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

import numpy as np
import torch
import warp as wp
from tqdm import tqdm

import ecs
import envs
from envs.hide_and_seek import Kind
from systems.rigid_body import Response


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def random_actions(sim: ecs.BatchSim, g: torch.Generator, hold: float = 1.0) -> None:
    """Draws the actions afresh (``hold`` 1), or each agent's again with probability ``1 / hold`` (its move, grab
    and lock held meanwhile): actions held for a geometric number of steps of mean ``hold``."""
    again = None  # [num_worlds, num_agents]: the agents that draw again, all their actions together
    for key, space in sim.action_space.items():
        buf = sim.actions[key]
        high = int(np.max(space.nvec)) if hasattr(space, "nvec") else int(space.n)
        fresh = torch.randint(0, high, tuple(buf.shape), generator=g, device="cpu").to(buf.dtype)
        if hold > 1.0:
            if again is None:
                again = torch.rand(tuple(buf.shape[:2]), generator=g, device="cpu") < 1.0 / hold
            mask = again.reshape(tuple(buf.shape[:2]) + (1,) * (buf.dim() - 2)).to(buf.device)
            fresh = torch.where(mask, fresh.to(buf.device), buf)
        buf.copy_(fresh)


# Depths [mm] past which a checked world-step counts in the summary's ``world_steps_deeper``: the deepest contact
# of a run is one moment, these counts say how often a config goes that deep.
DEEP_MM = (10, 20)


def check(sim: ecs.BatchSim, step: int, max_depth: float, max_speed: float, worst: dict[str, Any]) -> str | None:
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
    cfg = sim.env.config
    response = sim.tensor("body", "response")
    static = alive & (response == int(Response.STATIC))
    # The outside walls are the static bodies taller than the inner walls; their inner faces lie a wall's
    # thickness inside the floor's edge.
    walled = (static & (sim.tensor("body", "size")[..., 2] > 0.5 * cfg.wall_height + 1e-3)).any(dim=1, keepdim=True)
    inside = alive & walled & (response == int(Response.DYNAMIC))
    if inside.any():
        face = 0.5 * cfg.floor_size - cfg.wall_thickness
        out = body["position"][..., :2].abs().amax(dim=-1) - face  # how far past the walls' inner faces
        out = torch.where(inside, out, -math.inf)
        at = int(out.argmax().item())
        world, row = divmod(at, out.shape[1])
        if out[world, row].item() > 0.0:
            kind = Kind(int(sim.tensor("body", "kind")[world, row].item())).name.lower()
            return (
                f"a {kind}'s centre (world {world}, body {row}) is {out[world, row].item():.3f} m past the inner "
                "face of the outside walls"
            )
    speed = body["linear_velocity"][alive].norm(dim=-1).max().item() if alive.any() else 0.0
    worst["speed"] = max(worst["speed"], speed)
    if speed > max_speed:
        return f"a body moves at {speed:.2f} m/s (limit {max_speed})"
    depth = torch.where(sim.tensor("contact", "alive").bool(), sim.tensor("contact", "contact_depth"), -math.inf)
    per_world = depth.amax(dim=1)
    deeper = worst.setdefault("deeper", dict.fromkeys(DEEP_MM, 0))
    for mm in DEEP_MM:
        deeper[mm] += int((per_world > mm / 1000.0).sum().item())
    worst["checked"] = worst.get("checked", 0) + per_world.shape[0]
    at = int(depth.argmax().item())
    world, row = divmod(at, depth.shape[1])
    deepest = max(float(depth[world, row].item()), 0.0)
    if deepest > worst["depth"]:
        worst["depth"] = deepest
        kind = sim.tensor("body", "kind")[world]
        pair = [sim.tensor("contact", c)[world, row].item() for c in ("contact_body_a", "contact_body_b")]
        worst["deepest_at"] = {
            "step": step,
            "world": world,
            "bodies": pair,
            "kinds": [Kind(int(kind[b].item())).name.lower() for b in pair],
        }
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
    p.add_argument("--policy", choices=("uniform", "sticky"), default="uniform", help="how actions are drawn (above)")
    p.add_argument("--hold", type=float, default=20.0, help="sticky: mean steps an agent holds its actions")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field of hide-and-seek's config (a YAML value), e.g. contact_passes=3; repeatable",
    )
    p.add_argument("--json", default=None, help="write the summary here")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if args.hold < 1.0:
        p.error(f"--hold is a mean number of steps, at least 1, got {args.hold}")
    try:
        overrides = envs.parse_overrides(args.set)
        env = envs.make("hide_and_seek", **overrides)
    except ecs.ConfigError as e:  # an unknown field or a bad value: say so before any step
        p.error(f"--set: {e}")
    hold = args.hold if args.policy == "sticky" else 1.0
    wp.config.log_level = wp.LOG_WARNING

    sim = ecs.BatchSim(env, args.num_worlds, device=args.device, seed=args.seed)
    g = torch.Generator().manual_seed(args.seed)
    steps = -(-args.world_steps // args.num_worlds)
    base_rss, worst_rss, problem = None, 0.0, None
    episodes = 0
    worst = {"speed": 0.0, "depth": 0.0, "deeper": dict.fromkeys(DEEP_MM, 0), "checked": 0}
    t0 = time.perf_counter()
    for i in tqdm(range(steps), disable=args.no_progress, unit="step", desc="soak"):
        random_actions(sim, g, hold if i > 0 else 1.0)  # every agent draws at the start
        sim.step()
        episodes += int(sim.truncated.sum()) + int(sim.terminated.sum())
        if (i + 1) % args.check_every == 0 or i + 1 == steps:
            problem = check(sim, i + 1, args.max_depth, args.max_speed, worst)
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
        "policy": args.policy,
        "hold": hold,
        "config": overrides,
        "seconds": elapsed,
        "episodes_finished": episodes,
        "rss_growth_mib": worst_rss,
        "max_body_speed": worst["speed"],
        "max_contact_depth": worst["depth"],
        "deepest_contact_at": worst.get("deepest_at"),
        "checked_world_steps": worst["checked"],
        "world_steps_deeper": {f"{mm}mm": n for mm, n in worst["deeper"].items()},
        "problem": problem,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    verdict = "FAILED: " + problem if problem else "ok"
    at = worst.get("deepest_at")
    where = "" if at is None else f" (step {at['step']}, world {at['world']}, {' on '.join(at['kinds'])})"
    print(
        f"soak {verdict}: {summary['world_steps']:,} world-steps on {sim.device} in {elapsed:.0f} s ({args.policy}"
        f"{''.join(f', {k}={v}' for k, v in overrides.items())}), "
        f"{episodes} episodes, memory growth {worst_rss:.1f} MiB, fastest body {worst['speed']:.2f} m/s, "
        f"deepest contact {worst['depth'] * 1000:.1f} mm{where}; of {worst['checked']:,} world-steps checked, "
        + ", ".join(f"{n:,} deeper than {mm} mm" for mm, n in worst["deeper"].items())
    )
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
