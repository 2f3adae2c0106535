"""Hide-and-seek throughput: environment steps per second against the number of worlds.

Random actions (drawn once per window on the device, so sampling is not timed), default procedural
levels with auto-reset at the 240-step horizon, rigid-body physics, lidar, visibility and reach ray
casts every step. The rate is ``num_worlds * steps / seconds`` of ``sim.step()`` (median of
``--repeats`` windows); agent-steps/s multiplies by the mean number of active agents (about 4 of
the 6 slots). ``--profile N`` prints ``sim.profile()`` at ``N`` worlds. ``--set KEY=VALUE`` (repeatable)
overrides a field of the env's config (``physics_substeps=4``, ``solver_staged=true``, ``wide_sensors=false``);
with ``--set solver_timing=true`` it also prints the solver's clock cycles per world-step in each of its stages
(``systems.solver.SOLVER_STAGES``, counted by each world's thread over the timed windows).

Madrona's published figure for this environment is "over 1.9 million environment steps per second
on a single GPU" (Shacklett et al., SIGGRAPH 2023); it is printed beside the results for scale.
Warp's CPU backend runs each launch on one core, so CPU numbers are a floor, not a comparison.

    python examples/benchmarks/bench_hide_and_seek.py                          # CPU: 1, 16, 256, 1024 worlds
    python examples/benchmarks/bench_hide_and_seek.py --device cuda:0 --num-worlds 1024 16384 65536
    python examples/benchmarks/bench_hide_and_seek.py --num-worlds 256 --cpu-threads 1 --profile 256 --set physics_substeps=4
    python examples/benchmarks/bench_hide_and_seek.py --num-worlds 64 --cpu-threads 1 --set solver_timing=true --set sleep_substeps=0
    python examples/benchmarks/bench_hide_and_seek.py --num-worlds 64 --cpu-threads 1 --set solver_timing=true --set keep_resting_contacts=false
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
import warp as wp

import ecs
import envs
from systems.solver import SOLVER_STAGES

MADRONA_STEPS_PER_S = 1.9e6  # one GPU, Shacklett et al. 2023


def measure(
    num_worlds: int,
    *,
    steps: int,
    repeats: int,
    device: str | None,
    seed: int,
    cpu_threads: int | None = None,
    overrides: dict | None = None,
) -> dict:
    spec = envs.make("hide_and_seek", **(overrides or {}))
    sim = ecs.BatchSim(spec, num_worlds, device=device, seed=seed, cpu_threads=cpu_threads)
    gen = torch.Generator(device=sim.actions["move"].device).manual_seed(seed)
    dev = sim.actions["move"].device
    sim.actions["move"].copy_(torch.randint(0, 11, sim.actions["move"].shape, generator=gen, device=dev).int())
    sim.step()  # warm
    cycles = sim.tensor("world", "solver_cycles")  # counted only with solver_timing: the timed windows'
    cycles.zero_()
    rates, agents = [], []
    for _ in range(repeats):
        for key in ("grab", "lock"):
            sim.actions[key].copy_(torch.randint(0, 2, sim.actions[key].shape, generator=gen, device=dev).int())
        sim.actions["move"].copy_(torch.randint(0, 11, sim.actions["move"].shape, generator=gen, device=dev).int())
        wp.synchronize_device(sim.device)
        t0 = time.perf_counter()
        for _ in range(steps):
            sim.step()
        wp.synchronize_device(sim.device)
        rates.append(num_worlds * steps / (time.perf_counter() - t0))
        agents.append(float(sim.obs["active"].sum().item()) / num_worlds)
    rate = statistics.median(rates)
    total = cycles.to(torch.float64).sum(0).cpu().tolist()
    stages = dict(zip(SOLVER_STAGES, (t / (num_worlds * steps * repeats) for t in total), strict=True))
    return {
        "num_worlds": num_worlds,
        "device": sim.device,
        "env_steps_per_s": rate,
        "agent_steps_per_s": rate * statistics.mean(agents),
        "solver_cycles_per_world_step": stages if any(total) else None,
        "sim": sim,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--num-worlds", type=int, nargs="+", default=None, help="world counts (CPU default 1 16 256 1024)"
    )
    parser.add_argument("--steps", type=int, default=50, help="steps per timing window (default 50)")
    parser.add_argument("--repeats", type=int, default=3, help="timing windows; the median is reported (default 3)")
    parser.add_argument("--device", default=None, help="cpu or cuda:N (default: cuda:0 when present, else cpu)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cpu-threads",
        type=int,
        default=None,
        help="CPU: threads that share the worlds of world-local kernels (default: every core)",
    )
    parser.add_argument("--profile", type=int, default=None, metavar="N", help="print sim.profile() at N worlds")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field of the env's config (a YAML value), e.g. physics_substeps=4; repeatable",
    )
    args = parser.parse_args(argv)
    try:
        overrides = envs.parse_overrides(args.set)
        envs.make("hide_and_seek", **overrides)
    except Exception as e:  # an unknown field or a bad value: say so before any timing
        parser.error(f"--set: {e}")
    wp.config.log_level = wp.LOG_WARNING
    device = ecs.sim.resolve_device(args.device)
    counts = args.num_worlds or ([1, 16, 256, 1024] if device == "cpu" else [1, 256, 4096, 16384, 65536])
    if min(counts) < 1 or args.steps < 1 or args.repeats < 1:
        parser.error("world counts, --steps and --repeats must be >= 1")
    if args.cpu_threads is not None and args.cpu_threads < 1:
        parser.error("--cpu-threads must be >= 1")

    print(
        f"hide-and-seek on {device} ({platform.processor() or platform.machine()}), {args.steps} steps x {args.repeats}"
    )
    print(f"{'num_worlds':>10} {'env steps/s':>14} {'agent steps/s':>14} {'vs Madrona 1.9M (1 GPU)':>24}")
    rows = []
    for n in counts:
        r = measure(
            n,
            steps=args.steps,
            repeats=args.repeats,
            device=device,
            seed=args.seed,
            cpu_threads=args.cpu_threads,
            overrides=overrides,
        )
        del r["sim"]
        rows.append(r)
        share = r["env_steps_per_s"] / MADRONA_STEPS_PER_S
        print(f"{n:>10} {r['env_steps_per_s']:>14,.0f} {r['agent_steps_per_s']:>14,.0f} {share:>23.2%}")
        stages = r["solver_cycles_per_world_step"]
        if stages:
            total = sum(stages.values())
            parts = ", ".join(f"{k} {v / 1e3:,.1f}k" for k, v in stages.items())
            print(f"{'':>10} solver cycles per world-step: {total / 1e3:,.1f}k ({parts})")
    if device == "cpu":
        threads = args.cpu_threads or "every"
        print(f"(CPU: {threads} thread(s) share the worlds of world-local kernels; Madrona's figure is for a GPU.)")
    if args.profile:
        r = measure(
            args.profile,
            steps=2,
            repeats=1,
            device=device,
            seed=args.seed,
            cpu_threads=args.cpu_threads,
            overrides=overrides,
        )
        print(f"\nsim.profile() at {args.profile} worlds:")
        print(r["sim"].profile(max(5, args.steps // 5)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"device": device, "steps": args.steps, "repeats": args.repeats, "config": overrides, "rows": rows},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
