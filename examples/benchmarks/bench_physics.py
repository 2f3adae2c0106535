"""Rigid-body physics throughput: body-steps per second of ``systems.physics`` with about 30 bodies per world.

Each world is a walled room like hide-and-seek's: a floor, 4 static walls, 2 ramps (wedges),
12 boxes, 6 agent spheres and 5 capsules (30 bodies), placed on a jittered grid so nothing
overlaps at the start; the spheres are pushed by constant random forces so that bodies keep
colliding. The rate is ``num_worlds * 30 * steps / seconds`` of the captured step (median of
``--repeats`` windows); ``--profile`` prints ``sim.profile()`` for the largest world count, and
``--broadphase`` compares the two broadphase methods at one world count.

    python examples/benchmarks/bench_physics.py                               # 1024 .. 65536 worlds
    python examples/benchmarks/bench_physics.py --num-worlds 1024 --steps 20 --profile
    python examples/benchmarks/bench_physics.py --broadphase --num-worlds 1024
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from typing import Any

import numpy as np

BODIES = 30


def room(rng: np.random.Generator):
    """One world's 30 bodies."""
    from systems.geometry import ShapeType as S
    from systems.physics import BodySpec
    from systems.rigid_body import Response

    static = int(Response.STATIC)
    bodies = [
        BodySpec(S.PLANE, response=static, friction=0.2),
        BodySpec(S.BOX, size=(3.1, 0.1, 0.5), position=(0, 3.1, 0.5), response=static),
        BodySpec(S.BOX, size=(3.1, 0.1, 0.5), position=(0, -3.1, 0.5), response=static),
        BodySpec(S.BOX, size=(0.1, 3.1, 0.5), position=(3.1, 0, 0.5), response=static),
        BodySpec(S.BOX, size=(0.1, 3.1, 0.5), position=(-3.1, 0, 0.5), response=static),
    ]
    cells = [(x, y) for x in np.linspace(-2.4, 2.4, 5) for y in np.linspace(-2.4, 2.4, 5)]
    order = rng.permutation(len(cells))
    kinds = ["wedge"] * 2 + ["box"] * 12 + ["sphere"] * 6 + ["capsule"] * 5
    for kind, cell in zip(kinds, order, strict=True):
        x, y = cells[cell] + rng.uniform(-0.15, 0.15, size=2)
        yaw = rng.uniform(0, 2 * np.pi)
        rot = (0.0, 0.0, float(np.sin(yaw / 2)), float(np.cos(yaw / 2)))
        if kind == "wedge":
            bodies.append(
                BodySpec(S.WEDGE, size=(0.4, 0.4, 0.4), position=(x, y, 0.4 / 3 + 0.01), rotation=rot, mass=2.0)
            )
        elif kind == "box":
            bodies.append(BodySpec(S.BOX, size=(0.25, 0.25, 0.25), position=(x, y, 0.26), rotation=rot, friction=0.2))
        elif kind == "sphere":
            bodies.append(BodySpec(S.SPHERE, size=(0.15, 0, 0), position=(x, y, 0.16), friction=0.01))
        else:
            bodies.append(BodySpec(S.CAPSULE, size=(0.1, 0.2, 0), position=(x, y, 0.41), rotation=rot))
    return bodies


def make_sim(num_worlds: int, *, device: str | None, broadphase: int | None = None, seed: int = 0):
    import ecs
    from systems import physics

    kw = {"max_bodies": 32, "max_pairs": 192, "max_contacts": 192}
    if broadphase is not None:
        kw["broadphase"] = broadphase
    cfg = physics.PhysicsConfig(**kw)
    sim = ecs.BatchSim(physics.scene_env(cfg, name="bench_physics"), num_worlds, device=device, seed=seed)
    rng = np.random.default_rng(seed)
    template = room(rng)  # one layout, jittered per world below, keeps loading fast at 65536 worlds
    physics.load_scene(sim, template)
    table = sim.tables["body"]
    pos = table["position"].numpy()
    movable = np.arange(5, BODIES)
    pos[:, movable, :2] += rng.uniform(-0.1, 0.1, size=(num_worlds, movable.size, 2)).astype(np.float32)
    table["position"].assign(pos)
    table["prev_position"].assign(pos)
    force = np.zeros((num_worlds, table["force"].shape[1], 3), np.float32)
    spheres = np.arange(19, 25)
    force[:, spheres, :2] = rng.uniform(-8, 8, size=(num_worlds, spheres.size, 2))
    table["force"].assign(force)
    return sim


def bench(
    num_worlds: int, *, steps: int, repeats: int, device: str | None, broadphase: int | None = None
) -> dict[str, Any]:
    import warp as wp

    sim = make_sim(num_worlds, device=device, broadphase=broadphase)
    for _ in range(3):
        sim.step()
    times = []
    for _ in range(repeats):
        wp.synchronize_device(sim.device)
        t0 = time.perf_counter()
        for _ in range(steps):
            sim.step()
        wp.synchronize_device(sim.device)
        times.append(time.perf_counter() - t0)
    sim.check()
    seconds = statistics.median(times)
    contacts = sim.singletons["contact_count"].numpy()
    pairs = sim.singletons["pair_count"].numpy()
    return {
        "num_worlds": num_worlds,
        "device": sim.device,
        "body_steps_per_s": num_worlds * BODIES * steps / seconds,
        "world_steps_per_s": num_worlds * steps / seconds,
        "seconds": times,
        "mean_pairs": float(pairs.mean()),
        "mean_contacts": float(contacts.mean()),
        "sim": sim,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-worlds", type=int, nargs="+", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=None)
    parser.add_argument("--profile", action="store_true", help="print sim.profile() for the largest world count")
    parser.add_argument("--broadphase", action="store_true", help="compare all-pairs and sort-and-sweep")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)

    import warp as wp

    wp.config.log_level = wp.LOG_WARNING
    from systems.collision import Broadphase

    rows = []
    print(f"{'worlds':>8} {'body-steps/s':>14} {'world-steps/s':>14} {'pairs':>7} {'contacts':>9}")
    last = None
    methods = [Broadphase.SORT_SWEEP, Broadphase.ALL_PAIRS] if args.broadphase else [None]
    for method in methods:
        if method is not None:
            print(f"broadphase {method.name}")
        for n in args.num_worlds:
            row = bench(n, steps=args.steps, repeats=args.repeats, device=args.device, broadphase=method)
            last = row.pop("sim")
            if method is not None:
                row["broadphase"] = method.name
                prof = last.profile(args.steps).as_dict()
                row["find_pairs_s"] = _find(prof["tree"], "find_pairs")
                row["step_bodies_s"] = _find(prof["tree"], "step_bodies")
            rows.append(row)
            extra = ""
            if "find_pairs_s" in row:
                extra = f"  find_pairs {row['find_pairs_s'] * 1e3:.2f} ms/step, step_bodies {row['step_bodies_s'] * 1e3:.2f} ms/step"
            print(
                f"{n:>8} {row['body_steps_per_s']:>14,.0f} {row['world_steps_per_s']:>14,.0f} "
                f"{row['mean_pairs']:>7.1f} {row['mean_contacts']:>9.1f}{extra}"
            )
    if args.profile and last is not None:
        print(last.profile(args.steps))
    if args.json:
        meta = {"platform": platform.platform(), "processor": platform.processor(), "warp": wp.__version__}
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "steps": args.steps, "repeats": args.repeats, **meta}, f, indent=2)


def _find(node: dict, name: str) -> float:
    if node["name"] == name:
        return node["seconds"]
    return sum(_find(c, name) for c in node["children"])


if __name__ == "__main__":
    main()
