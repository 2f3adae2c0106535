"""Worker of ``tests/test_distributed.py``: a distributed checkpoint of cartpole, saved, resumed and refused.

Each rank steps its share of the worlds with actions keyed by global world index, saves with
``ctx.save``, steps on, then loads the checkpoint into a fresh simulation of its worlds
(``ctx.load``) and steps on the same. Then the ranks' files are swapped, and (swapped back) rank 1's
file is removed: each load must be refused on every rank, naming the ranks, with no simulation changed.
Writes ``rank{r}.json``, and the checkpoints ``resplit`` (after 20 steps) and ``after`` (after 60) that the test
resumes in a single process of all the worlds.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import torch
import warp as wp

import ecs
import envs
from ecs import distributed
from tests.ecs.test_reliability import _digest as digest


def drive(sim: ecs.BatchSim, table: np.ndarray, first: int, steps: int, lo: int) -> None:
    for t in range(first, first + steps):
        sim.step({"push": torch.from_numpy(table[t, lo : lo + sim.num_worlds].copy())})


def refusal(ctx: distributed.DistContext, sim: ecs.BatchSim, path: Path) -> dict:
    before = digest(sim)
    try:
        ctx.load(sim, path)
        error = None
    except ecs.StateDictError as e:
        error = str(e)
    return {"error": error, "unchanged": digest(sim) == before}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-worlds", type=int, required=True, help="global worlds")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    wp.config.log_level = wp.LOG_WARNING

    env = envs.make("cartpole")
    sim = distributed.make_sim(env, args.num_worlds, device="cpu", seed=3)
    ctx = distributed.context()
    lo = ctx.world_offset
    table = np.random.default_rng(5).integers(0, 2, size=(80, args.num_worlds), dtype=np.int32)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "ckpt.npz"

    drive(sim, table, 0, 20, lo)
    file = ctx.save(sim, path)
    ctx.save(sim, args.out / "resplit.npz")  # for a single process to go on from (the test)
    drive(sim, table, 20, 40, lo)
    ctx.save(sim, args.out / "after.npz")  # where it must end
    fresh = ecs.BatchSim(env, ctx.num_worlds, device="cpu", seed=99, world_offset=lo)
    upgraded = ctx.load(fresh, path)
    drive(fresh, table, 20, 40, lo)
    result = {
        "rank": ctx.rank,
        "file": os.path.basename(file),
        "upgraded": upgraded,
        "resumed": digest(fresh) == digest(sim),
    }
    try:  # rank 1 passes a simulation of other worlds, rank 0 its own: neither saves, neither waits forever
        ctx.save(sim if ctx.rank == 0 else ecs.BatchSim(env, ctx.num_worlds, device="cpu", world_offset=lo + 1), path)
        result["other_sim"] = None
    except ecs.EcsError as e:
        result["other_sim"] = str(e)

    first, second = (str(args.out / f"ckpt.rank{r}-of-{ctx.world_size}.npz") for r in (0, 1))

    def swap() -> None:
        ctx.barrier()
        if ctx.rank == 0:
            os.replace(first, first + ".tmp")
            os.replace(second, first)
            os.replace(first + ".tmp", second)
        ctx.barrier()

    swap()  # each rank's file holds the other rank's worlds
    result["swapped"] = refusal(ctx, fresh, path)
    swap()  # back, and then rank 1's file gone
    if ctx.rank == 1:
        os.remove(second)
    ctx.barrier()
    result["missing"] = refusal(ctx, fresh, path)
    (args.out / f"rank{ctx.rank}.json").write_text(json.dumps(result))
    distributed.shutdown()


if __name__ == "__main__":
    main()
