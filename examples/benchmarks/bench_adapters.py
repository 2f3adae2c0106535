"""Adapter overhead: a bare ``BatchSim.step()`` against the same step through each RL-library adapter.

Every stepper drives its own cartpole ``BatchSim`` (same world count and seed) and does the work
a trainer's loop does per step, with actions taken from a pool of random actions drawn before
timing:

| stepper | per step |
|---|---|
| ``bare`` | ``sim.actions["push"].copy_(a); sim.step()`` |
| ``gym`` | ``GymVectorEnv(sim).step(a)`` (default: the sim's buffers, no copies) |
| ``gym_copy`` | ``GymVectorEnv(sim, copy=True).step(a)`` (fresh copies of every output) |
| ``torchrl_step`` | ``td.set("action", a); td = env.step(td)["next"]`` with ``TorchRLEnv(sim)`` |
| ``torchrl_step_and_maybe_reset`` | ``td.set("action", a); _, td = env.step_and_maybe_reset(td)`` (what collectors call) |

The timed windows are interleaved (every stepper once, then again, ``--repeats`` times) so that a
noisy machine hurts them alike; each stepper gets an untimed warm-up first. Reported: the median
time per step over the windows, and its ratio to ``bare``. Targets: ``gym`` at most 1.3x,
``torchrl_step`` and ``torchrl_step_and_maybe_reset`` at most 2x (``--check`` exits 1 if missed).

    python examples/benchmarks/bench_adapters.py                     # 1024 worlds
    python examples/benchmarks/bench_adapters.py --num-worlds 8 --steps 20 --repeats 2 --json out.json
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from typing import Any

TARGETS = {"gym": 1.3, "torchrl_step": 2.0, "torchrl_step_and_maybe_reset": 2.0}


def _timed(fn, steps: int, sync) -> float:
    """Seconds for ``steps`` calls of ``fn(i)``, garbage collection paused, device synchronised."""
    gc.collect()
    gc.disable()
    try:
        sync()
        t0 = time.perf_counter()
        for i in range(steps):
            fn(i)
        sync()
        return time.perf_counter() - t0
    finally:
        gc.enable()


def make_steppers(num_worlds: int, device: str | None, seed: int = 0) -> tuple[dict[str, Any], Any, str]:
    """The steppers (``fn(i)`` doing one step with pool action ``i``), a sync function and the device."""
    import torch
    import warp as wp

    import ecs
    import envs
    from ecs.adapters.gymnasium import GymVectorEnv
    from ecs.adapters.torchrl import TorchRLEnv

    wp.config.log_level = wp.LOG_WARNING

    def sim():
        return ecs.BatchSim(envs.make("cartpole"), num_worlds=num_worlds, device=device, seed=seed)

    bare = sim()
    dev = bare.device
    gen = torch.Generator().manual_seed(seed)
    pool = [t.to(bare.actions["push"].device) for t in torch.randint(0, 2, (64, num_worlds), generator=gen).int()]
    n = len(pool)
    push = bare.actions["push"]

    def step_bare(i: int) -> None:
        push.copy_(pool[i % n])
        bare.step()

    gym, gym_copy = GymVectorEnv(sim()), GymVectorEnv(sim(), copy=True)
    trl_step, trl_samr = TorchRLEnv(sim()), TorchRLEnv(sim())
    state = {"step": trl_step.reset(), "samr": trl_samr.reset()}

    def step_torchrl(i: int) -> None:
        td = state["step"]
        td.set("action", pool[i % n])
        state["step"] = trl_step.step(td)["next"]

    def step_torchrl_samr(i: int) -> None:
        td = state["samr"]
        td.set("action", pool[i % n])
        _, state["samr"] = trl_samr.step_and_maybe_reset(td)

    steppers = {
        "bare": step_bare,
        "gym": lambda i: gym.step(pool[i % n]),
        "gym_copy": lambda i: gym_copy.step(pool[i % n]),
        "torchrl_step": step_torchrl,
        "torchrl_step_and_maybe_reset": step_torchrl_samr,
    }
    return steppers, (lambda: wp.synchronize_device(dev)), dev


def measure(num_worlds: int, steps: int, repeats: int, device: str | None) -> dict[str, Any]:
    """Median seconds per step of every stepper and the ratios to ``bare``."""
    steppers, sync, dev = make_steppers(num_worlds, device)
    warmup = max(10, steps // 10)
    for fn in steppers.values():
        _timed(fn, warmup, sync)
    windows: dict[str, list[float]] = {name: [] for name in steppers}
    for _ in range(repeats):
        for name, fn in steppers.items():
            windows[name].append(_timed(fn, steps, sync) / steps)
    median = {name: statistics.median(w) for name, w in windows.items()}
    rows = [
        {
            "stepper": name,
            "us_per_step": median[name] * 1e6,
            "ratio": median[name] / median["bare"],
            "target": TARGETS.get(name),
            "windows_us": [w * 1e6 for w in windows[name]],
        }
        for name in steppers
    ]
    return {"device": dev, "num_worlds": num_worlds, "steps": steps, "repeats": repeats, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-worlds", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=500, help="steps per timed window")
    parser.add_argument("--repeats", type=int, default=7, help="timed windows per stepper (median reported)")
    parser.add_argument("--device", default=None, help="cpu, cuda:N, or None for cuda:0 when present")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 if a ratio misses its target")
    args = parser.parse_args(argv)
    if args.num_worlds < 1 or args.steps < 1 or args.repeats < 1:
        parser.error("--num-worlds, --steps and --repeats must be >= 1")

    result = measure(args.num_worlds, args.steps, args.repeats, args.device)
    print(
        f"adapter overhead: cartpole, {result['num_worlds']} worlds on {result['device']}, "
        f"median of {args.repeats} windows of {args.steps} steps"
    )
    print(f"{'stepper':<30} {'us/step':>9} {'x bare':>7} {'target':>7}")
    missed = []
    for row in result["rows"]:
        target = row["target"]
        mark = "" if target is None else f"<={target:.1f}x"
        if target is not None and row["ratio"] > target:
            missed.append(row["stepper"])
            mark += " MISSED"
        print(f"{row['stepper']:<30} {row['us_per_step']:>9.1f} {row['ratio']:>6.2f}x {mark:>7}")
    if args.json:
        import torch
        import warp as wp

        result["versions"] = {"python": platform.python_version(), "torch": torch.__version__, "warp": wp.__version__}
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
