"""Worker of ``tests/test_distributed.py``: one rank's cartpole rollout, written to ``--out``.

Run alone (one rank of ``--num-worlds`` worlds) or under ``torchrun`` (each rank its share). Every
rank draws the same global action table and takes its own columns of it, so a world's actions
depend only on its global index; a masked reset half way through is keyed by global index too.
Writes ``rank{r}.npz`` (the trajectory) and ``rank{r}.json`` (context, local and reduced statistics).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
import warp as wp

import ecs
import envs
from ecs import distributed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-worlds", type=int, required=True, help="global worlds")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    wp.config.log_level = wp.LOG_WARNING

    sim = distributed.make_sim(envs.make("cartpole"), args.num_worlds, device="cpu", seed=args.seed)
    ctx = distributed.context()
    lo, hi = ctx.world_offset, ctx.world_offset + ctx.num_worlds
    table = np.random.default_rng(args.seed).integers(0, 2, size=(args.steps, args.num_worlds), dtype=np.int32)
    pushes = torch.from_numpy(table[:, lo:hi].copy())
    reset_mask = torch.arange(lo, hi) % 3 == 0

    n = ctx.num_worlds
    obs, final_obs = [sim.obs["state"].clone()], []
    rewards, terminated, truncated = [], [], []
    ep_return, ep_length = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.int64)
    episodes, return_sum, length_sum = 0, 0.0, 0
    with ctx.window() as window:
        for t in range(args.steps):
            if t == args.steps // 2:
                sim.reset(reset_mask)
                ep_return.masked_fill_(reset_mask, 0.0)
                ep_length.masked_fill_(reset_mask, 0)
                obs.append(sim.obs["state"].clone())
            sim.step({"push": pushes[t]})
            done = sim.terminated | sim.truncated
            ep_return += sim.rewards
            ep_length += 1
            episodes += int(done.sum())
            return_sum += float(ep_return[done].sum())
            length_sum += int(ep_length[done].sum())
            ep_return.masked_fill_(done, 0.0)
            ep_length.masked_fill_(done, 0)
            obs.append(sim.obs["state"].clone())
            final_obs.append(
                torch.where(done[:, None], sim.final_obs["state"], torch.zeros_like(sim.final_obs["state"]))
            )
            rewards.append(sim.rewards.clone())
            terminated.append(sim.terminated.clone())
            truncated.append(sim.truncated.clone())

    world_steps = n * args.steps
    throughput = ctx.throughput(world_steps, window.elapsed_s)
    stats = ctx.reduce_episode_stats(episodes, return_sum, length_sum)
    total_steps = ctx.reduce_steps(world_steps)
    args.out.mkdir(parents=True, exist_ok=True)
    np.savez(
        args.out / f"rank{ctx.rank}.npz",
        obs=torch.stack(obs).numpy(),
        final_obs=torch.stack(final_obs).numpy(),
        rewards=torch.stack(rewards).numpy(),
        terminated=torch.stack(terminated).numpy(),
        truncated=torch.stack(truncated).numpy(),
    )
    result = {
        "rank": ctx.rank,
        "world_size": ctx.world_size,
        "local_rank": ctx.local_rank,
        "backend": ctx.backend,
        "num_worlds": ctx.num_worlds,
        "world_offset": ctx.world_offset,
        "sim_world_offset": sim.world_offset,
        "local": {"episodes": episodes, "return_sum": return_sum, "length_sum": length_sum},
        "reduced": {"episodes": stats.episodes, "return_sum": stats.return_sum, "length_sum": stats.length_sum},
        "world_steps": world_steps,
        "total_world_steps": total_steps,
        "elapsed_s": window.elapsed_s,
        "throughput": {
            "world_steps": throughput.world_steps,
            "elapsed_s": throughput.elapsed_s,
            "rate": throughput.rate,
            "rank_world_steps": list(throughput.rank_world_steps),
            "rank_elapsed_s": list(throughput.rank_elapsed_s),
        },
    }
    (args.out / f"rank{ctx.rank}.json").write_text(json.dumps(result))
    assert isinstance(ecs.distributed.context(), distributed.DistContext)
    distributed.shutdown()


if __name__ == "__main__":
    main()
