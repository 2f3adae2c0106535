"""A hide-and-seek world's contact solve under random play: its work and critical path in point-sweeps per
substep (``systems.solver_depth``), means over worlds and samples, on CPU.

    python examples/benchmarks/solver_depth.py --num-worlds 64 --steps 60 --json depth.json
"""

from __future__ import annotations

import argparse
import json

import torch

import ecs
import envs
from systems import solver
from systems.solver_depth import depth, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-worlds", type=int, default=64)
    parser.add_argument("--steps", type=int, default=60, help="steps of random play; sampled every 4th from 20 on")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the summary here")
    args = parser.parse_args()
    if args.num_worlds < 1 or args.steps < 21:
        parser.error("--num-worlds must be >= 1 and --steps >= 21 (samples start at step 20)")
    sim = ecs.BatchSim(envs.make("hide_and_seek"), args.num_worlds, device="cpu", seed=args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    rows = []
    for step in range(args.steps):
        for key, a in sim.actions.items():
            high = 11 if key == "move" else 2
            a.copy_(torch.randint(0, high, tuple(a.shape), generator=gen, dtype=torch.int32))
        sim.step()
        if step >= 20 and step % 4 == 0:
            rows += depth(sim)
    result = summary(rows) | {"num_worlds": args.num_worlds, "samples": len(rows), "lanes": solver.SOLVER_LANES}
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
