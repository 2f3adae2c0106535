"""Replay one world of a soak: where its deepest contact came from, step by step, and what changes it.

``examples/soak.py`` names the step, world and bodies of a soak's deepest contact. This script plays the same soak
again (the same ``--seed``, ``--num-worlds``, ``--policy``, ``--hold`` and ``--set``: the same actions) up to
``--at``, then prints world ``--world`` for ``--steps`` more steps: its deepest contacts and, with ``--watch``, the
pose, speed and spin of the bodies named. With ``--resume`` it also lifts that world, state and all, into a
simulation of its own at ``--at`` and plays the world's actions there: with nothing else changed, a resumed world
steps as it did among the others (the worlds do not interact), so ``--then KEY=VALUE`` (another config from then
on, e.g. ``physics_substeps=16``) shows what a setting does to that very moment, and ``--split`` steps it one substep
at a time (``physics_dt`` divided by the substeps, one substep a step), so the printout shows the substep where a
contact went deep. The env's own systems then run at every substep too (agents act, grab and lock, and the step
count advances a substep at a time), so a split world parts from the original where an agent grabs or locks within
the step: a hider that ran into a sleeping ramp in the step of a grab held it from the second substep on where the
original never grabbed it (``ramp_mass=0.2``, seed 1, world 108, step 68). Compare the ``held`` lines of the two.

    python examples/soak_replay.py --seed 2 --set box_mass=0.3 --world 107 --at 52 --steps 2
    python examples/soak_replay.py --seed 2 --set box_mass=0.3 --world 107 --at 52 --steps 1 --resume --split \\
        --watch 13,15 --then physics_substeps=16

The soak runs on the CPU (as ``examples/soak.py`` does by default there); ``--json`` writes what it printed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

import torch
import warp as wp

import ecs
import envs
from ecs import checkpoint
from envs.hide_and_seek import Kind

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from soak import random_actions  # this folder's soak.py: the same actions


def deepest(sim: ecs.BatchSim, world: int, top: int) -> list[dict[str, Any]]:
    """World ``world``'s ``top`` deepest live contacts, deepest first, one per pair of bodies."""
    alive = sim.tensor("contact", "alive")[world].bool()
    depth = torch.where(alive, sim.tensor("contact", "contact_depth")[world], -math.inf)
    kinds = sim.tensor("body", "kind")[world]
    a, b = (sim.tensor("contact", f"contact_body_{s}")[world] for s in "ab")
    normal = sim.tensor("contact", "contact_normal")[world]
    found, seen = [], set()
    for row in torch.argsort(depth, descending=True).tolist():
        if not alive[row] or len(found) == top:
            break
        pair = (int(a[row]), int(b[row]))
        if pair in seen:
            continue
        seen.add(pair)
        found.append(
            {
                "depth_mm": round(float(depth[row]) * 1000.0, 2),
                "bodies": list(pair),
                "kinds": [Kind(int(kinds[i])).name.lower() for i in pair],
                "normal": [round(float(x), 3) for x in normal[row]],
            }
        )
    return found


def bodies(sim: ecs.BatchSim, world: int, rows: list[int]) -> list[dict[str, Any]]:
    """Pose, velocity and spin of the bodies ``rows`` of world ``world``."""
    out = []
    for i in rows:
        columns = ("position", "rotation", "linear_velocity", "angular_velocity")
        column = {k: sim.tensor("body", k)[world, i].tolist() for k in columns}
        column["locked_by"] = int(sim.tensor("body", "locked_by")[world, i])
        column["sleep_count"] = int(sim.tensor("body", "sleep_count")[world, i])
        out.append({"body": i, "kind": Kind(int(sim.tensor("body", "kind")[world, i])).name.lower(), **column})
    return out


def holds(sim: ecs.BatchSim, world: int) -> list[list[int]]:
    """World ``world``'s live grab joints as ``[holder, held]`` body rows."""
    alive = sim.tensor("joint", "alive")[world].bool()
    a, b = (sim.tensor("joint", f"joint_body_{s}")[world] for s in "ab")
    return [[int(a[j]), int(b[j])] for j in torch.nonzero(alive).flatten().tolist()]


def resumed(sim: ecs.BatchSim, world: int, config: dict[str, Any]) -> ecs.BatchSim:
    """A one-world simulation of hide-and-seek with ``config`` holding world ``world`` of ``sim`` as it is now."""
    state = checkpoint.worlds_of(sim.state_dict(), world, world + 1)
    state["config"] = {**state["config"], **config}
    one = ecs.BatchSim(
        envs.make("hide_and_seek", **config), 1, device=sim.device, seed=sim.seed, world_offset=state["world_offset"]
    )
    one.load_state_dict(state)
    return one


def replay(
    *,
    seed: int = 0,
    num_worlds: int = 256,
    hold: float = 20.0,
    overrides: dict[str, Any] | None = None,
    world: int,
    at: int,
    steps: int = 3,
    top: int = 3,
    watch: list[int] | None = None,
    resume: bool = False,
    then: dict[str, Any] | None = None,
    split: bool = False,
    device: str | None = "cpu",
) -> dict[str, Any]:
    """Plays the soak of ``seed`` (``examples/soak.py``'s actions) to step ``at`` and on for ``steps`` steps, and
    returns world ``world``'s deepest contacts (and ``watch``'s bodies) after each of those steps, and with
    ``resume`` the same of the world resumed alone with ``then`` (``split``: a substep a step)."""
    overrides = dict(overrides or {})
    watch = list(watch or [])
    if hold < 1.0 or top < 1:
        raise ValueError(f"--hold is a mean number of steps, at least 1, and --top at least 1; got {hold} and {top}")
    if not 0 <= world < num_worlds:
        raise ValueError(f"--world {world} is not a world of the soak's {num_worlds}; pick one in 0..{num_worlds - 1}")
    if at < 0 or steps < 1:
        raise ValueError(f"--at must be at least 0 and --steps at least 1, got {at} and {steps}")
    if (then or split) and not resume:
        raise ValueError("--then and --split change the resumed world: add --resume")
    env = envs.make("hide_and_seek", **overrides)
    sim = ecs.BatchSim(env, num_worlds, device=device, seed=seed)
    rows = sim.tensor("body", "alive").shape[1]
    if any(not 0 <= i < rows for i in watch):
        raise ValueError(f"--watch names body rows of a world, 0..{rows - 1}; got {watch}")
    g = torch.Generator().manual_seed(seed)
    report: dict[str, Any] = {"world": world, "at": at, "original": [], "resumed": []}
    one, played, per_step = None, [], 1
    for i in range(at + steps):
        if i == at and resume:
            config = {**overrides, **(then or {})}
            if split:
                per_step = config.get("physics_substeps", env.config.physics_substeps)
                config.update(physics_dt=config.get("physics_dt", env.config.physics_dt) / per_step, physics_substeps=1)
            one = resumed(sim, world, config)
        random_actions(sim, g, hold if i > 0 else 1.0)
        if i >= at:
            played.append({k: v[world].clone() for k, v in sim.actions.items()})
        sim.step()
        if i >= at:
            report["original"].append(
                {
                    "step": i + 1,
                    "substep": None,
                    "contacts": deepest(sim, world, top),
                    "bodies": bodies(sim, world, watch),
                    "holds": holds(sim, world),
                }
            )
    if one is not None:
        for s, actions in enumerate(played):
            for k, v in actions.items():
                one.actions[k][0] = v
            for sub in range(per_step):
                one.step()
                report["resumed"].append(
                    {
                        "step": at + s + 1,
                        "substep": sub if split else None,
                        "contacts": deepest(one, 0, top),
                        "bodies": bodies(one, 0, watch),
                        "holds": holds(one, 0),
                    }
                )
    return report


def describe(entry: dict[str, Any]) -> str:
    at = f"step {entry['step']}" + ("" if entry.get("substep") is None else f".{entry['substep']}")
    contacts = "  ".join(
        f"{c['depth_mm']:6.1f} mm {c['kinds'][0]} {c['bodies'][0]} / {c['kinds'][1]} {c['bodies'][1]}"
        for c in entry["contacts"]
    )
    lines = [f"{at}: {contacts or 'no contacts'}"]
    if entry.get("holds"):
        lines.append("    held: " + ", ".join(f"{a} holds {b}" for a, b in entry["holds"]))
    for b in entry["bodies"]:
        vec = lambda v: "(" + ", ".join(f"{x:.3f}" for x in v) + ")"  # noqa: E731
        lines.append(
            f"    {b['kind']} {b['body']}: x {vec(b['position'])} v {vec(b['linear_velocity'])} "
            f"w {vec(b['angular_velocity'])}"
            + (f" locked by team {b['locked_by'] - 1}" if b.get("locked_by") else "")
            + (f" still {b['sleep_count']}" if b.get("sleep_count") else "")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=0, help="the soak's seed")
    p.add_argument("--num-worlds", type=int, default=256, help="the soak's worlds (its actions depend on them)")
    p.add_argument("--policy", choices=("uniform", "sticky"), default="sticky", help="the soak's policy")
    p.add_argument("--hold", type=float, default=20.0, help="sticky: the soak's mean steps an agent holds its actions")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="the soak's config; repeatable")
    p.add_argument("--world", type=int, required=True, help="the world to watch")
    p.add_argument("--at", type=int, required=True, help="steps played before the printout starts")
    p.add_argument("--steps", type=int, default=3, help="steps printed")
    p.add_argument("--top", type=int, default=3, help="deepest contacts printed per step, one per pair")
    p.add_argument("--watch", default="", help="body rows to print, comma-separated")
    p.add_argument("--resume", action="store_true", help="also play the world alone from --at")
    p.add_argument("--then", action="append", default=[], metavar="KEY=VALUE", help="the resumed world's config")
    p.add_argument("--split", action="store_true", help="step the resumed world a substep at a time")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", default=None, help="write the printout's figures here")
    args = p.parse_args(argv)
    wp.config.log_level = wp.LOG_WARNING
    try:
        watch = [int(x) for x in args.watch.split(",") if x.strip()]
    except ValueError:
        p.error(f"--watch takes body rows separated by commas, e.g. 13,15; got {args.watch!r}")
    try:
        report = replay(
            seed=args.seed,
            num_worlds=args.num_worlds,
            hold=args.hold if args.policy == "sticky" else 1.0,
            overrides=envs.parse_overrides(args.set),
            world=args.world,
            at=args.at,
            steps=args.steps,
            top=args.top,
            watch=watch,
            resume=args.resume,
            then=envs.parse_overrides(args.then),
            split=args.split,
            device=args.device,
        )
    except (ValueError, ecs.ConfigError) as e:
        p.error(str(e))
    print(f"world {args.world} of the soak (seed {args.seed}):")
    for entry in report["original"]:
        print(describe(entry))
    if report["resumed"]:
        changed = (f" with {', '.join(args.then)}" if args.then else "") + (", a substep a step" if args.split else "")
        print(f"world {args.world} resumed alone at step {args.at}{changed}:")
        for entry in report["resumed"]:
            print(describe(entry))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
