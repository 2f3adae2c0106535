"""Cartpole demo: thousands of worlds stepped together with random actions.

Every step draws random actions on the simulation's device straight into a preallocated buffer,
copies them into ``sim.actions`` in place, steps, and folds the episode flags into running totals
with torch ops on the device. Nothing is read back to the host until the end, so the loop never
waits for the device.

    python examples/cartpole_demo.py --num-worlds 4096 --steps 2000

The printed rate is of the whole loop (action sampling and statistics included); for the rate of
``sim.step()`` alone see ``examples/benchmarks/bench_cartpole.py`` or ``python -m ecs bench cartpole``.
"""

from __future__ import annotations

import argparse
import time

import torch
import warp as wp
from tqdm import tqdm

import ecs
import envs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-worlds", type=int, default=4096, help="worlds stepped together (default 4096)")
    parser.add_argument("--steps", type=int, default=2000, help="steps of every world (default 2000)")
    parser.add_argument("--device", default=None, help="cpu or cuda:N (default: cuda:0 when present, else cpu)")
    parser.add_argument("--seed", type=int, default=0, help="simulation and action seed (default 0)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be >= 1")

    wp.config.log_level = wp.LOG_WARNING  # no banner or module-load lines
    t0 = time.perf_counter()
    sim = ecs.BatchSim(envs.make("cartpole"), num_worlds=args.num_worlds, device=args.device, seed=args.seed)
    build_s = time.perf_counter() - t0
    print(f"built {sim.num_worlds} cartpole worlds on {sim.device} in {build_s:.2f} s")

    push = sim.actions["push"]
    dev = push.device
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    action_buf = torch.empty_like(push)
    # Running totals on the device; read once at the end.
    episode_len = torch.zeros(sim.num_worlds, dtype=torch.int64, device=dev)
    finished = torch.zeros((), dtype=torch.int64, device=dev)
    finished_len = torch.zeros((), dtype=torch.int64, device=dev)
    returns = torch.zeros(sim.num_worlds, dtype=torch.float32, device=dev)
    finished_return = torch.zeros((), dtype=torch.float64, device=dev)
    done = torch.empty(sim.num_worlds, dtype=torch.bool, device=dev)

    wp.synchronize_device(sim.device)
    t0 = time.perf_counter()
    for _ in tqdm(range(args.steps), unit="step", disable=args.no_progress, mininterval=0.5):
        torch.randint(0, 2, push.shape, generator=gen, dtype=push.dtype, device=dev, out=action_buf)
        push.copy_(action_buf)
        sim.step()
        # Rewards and flags describe the transition just taken, also for worlds that were reset.
        episode_len += 1
        returns += sim.rewards
        torch.logical_or(sim.terminated, sim.truncated, out=done)
        finished += done.sum()
        finished_len += torch.where(done, episode_len, 0).sum()
        finished_return += torch.where(done, returns, 0.0).sum()
        episode_len.masked_fill_(done, 0)
        returns.masked_fill_(done, 0.0)
    wp.synchronize_device(sim.device)
    elapsed = time.perf_counter() - t0

    n = int(finished.item())
    world_steps = sim.num_worlds * args.steps
    print(f"{world_steps:,} world-steps in {elapsed:.3f} s: {world_steps / elapsed:,.0f} world-steps/s")
    print("(the rate includes sampling the actions and updating the episode statistics each step)")
    if n:
        mean_len = int(finished_len.item()) / n
        mean_ret = float(finished_return.item()) / n
        print(f"finished episodes: {n:,}, mean length {mean_len:.2f} steps, mean return {mean_ret:.2f}")
    else:
        print("finished episodes: 0 (run more steps to finish one)")


if __name__ == "__main__":
    main()
