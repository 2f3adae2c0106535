"""Cartpole throughput: the engine's ``BatchSim.step()`` against Gymnasium's numpy ``CartPoleVectorEnv``.

For each world count the three steppers run side by side in one process, their timed windows
interleaved (engine captured, engine eager, Gymnasium; repeat) so that a noisy machine hurts them
alike. Each gets an untimed warm-up first. Every stepper gets the same work per step: a fresh
batch of random actions, drawn by the same numpy generator into a preallocated array, is handed
over as a user would (``sim.actions["push"] = a``, a checked copy; ``env.step(a)``) and every
world advances once with auto-reset. The hand-over and the step are timed, the drawing is not
(it costs both sides the same and is no part of either simulator); its time is reported too,
with the ratio it would give if a user's loop counted it. The rate is world-steps per second
(``num_worlds * steps / seconds``), the median of ``--repeats`` windows of ``--steps`` steps.

    python examples/benchmarks/bench_cartpole.py                  # 1, 64, 1024, 16384 worlds
    python examples/benchmarks/bench_cartpole.py --num-worlds 4096 --steps 2000 --json out.json
    python examples/benchmarks/bench_cartpole.py --build-time     # also cold and warm build times

``--build-time`` builds a ``BatchSim`` (construction including the first reset) in a fresh
subprocess, first with an empty temporary kernel cache (cold: every kernel compiles), then again
with the cache the first one filled (warm: kernels load from disk).

Numpy's element-wise ops are single-threaded, so Gymnasium steps on one core. On the CPU the
engine's ``step()`` may run its fused kernel on every usable core from 4,096 worlds, while that
is faster than one core (``cpu_threads``, see ``ecs.BatchSim``): from there the comparison is
not core for core.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

_CHILD_MARK = "BUILD_RESULT "


def _quiet_warp() -> None:
    import warp as wp

    wp.config.log_level = wp.LOG_WARNING


def _timed(draw, step, steps: int, sync) -> tuple[float, float]:
    """Seconds of ``step(i)`` over ``steps`` calls, each after an untimed ``draw(i)`` of its actions
    (garbage collection paused, device synchronised after each step), and the seconds of the draws."""
    gc.collect()
    gc.disable()
    clock = time.perf_counter
    stepping = drawing = 0.0
    try:
        sync()
        for i in range(steps):
            t0 = clock()
            draw(i)
            t1 = clock()
            step(i)
            sync()
            t2 = clock()
            drawing += t1 - t0
            stepping += t2 - t1
        return stepping, drawing
    finally:
        gc.enable()


def bench_worlds(num_worlds: int, *, steps: int, repeats: int, device: str | None, seed: int, eager: bool) -> dict:
    """Median world-steps/s of the captured step, the eager step and Gymnasium at one world count."""
    import warp as wp
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

    import ecs
    import envs

    warmup = max(10, steps // 10)
    rng = np.random.default_rng(seed)
    uniform = np.empty(num_worlds, dtype=np.float32)
    actions = np.empty(num_worlds, dtype=np.int32)

    def draw(i: int) -> None:
        """Fresh random pushes (0 or 1) into the preallocated ``actions``, the same way for every stepper."""
        np.less(rng.random(out=uniform, dtype=np.float32), 0.5, out=actions)

    sims = {"engine": ecs.BatchSim(envs.make("cartpole"), num_worlds, device=device, seed=seed)}
    if eager:
        sims["eager"] = ecs.BatchSim(envs.make("cartpole"), num_worlds, device=device, seed=seed, capture=False)
    dev = sims["engine"].device

    def sync() -> None:
        wp.synchronize_device(dev)

    def engine_step(sim):
        def step(i: int) -> None:
            sim.actions["push"] = actions  # checked copy of a numpy array, as a user writes it
            sim.step()

        return step

    gym = CartPoleVectorEnv(num_envs=num_worlds)
    gym.reset(seed=seed)

    def gym_step(i: int) -> None:
        gym.step(actions)

    on_cpu = dev == "cpu"
    steppers = {name: (engine_step(sim), (lambda: None) if on_cpu else sync) for name, sim in sims.items()}
    steppers["gymnasium"] = (gym_step, lambda: None)

    for fn, s in steppers.values():
        _timed(draw, fn, warmup, s)
    times: dict[str, list[float]] = {name: [] for name in steppers}
    drawing: dict[str, list[float]] = {name: [] for name in steppers}
    for _ in range(repeats):
        for name, (fn, s) in steppers.items():
            stepping, drew = _timed(draw, fn, steps, s)
            times[name].append(stepping)
            drawing[name].append(drew)
    sims["engine"].check()  # a bad action would have raised; this makes sure nothing is pending
    gym.close()

    def rate(name: str) -> float:
        return num_worlds * steps / statistics.median(times[name])

    draw_s = statistics.median(d for ds in drawing.values() for d in ds)
    row: dict[str, Any] = {
        "num_worlds": num_worlds,
        "engine_steps_per_s": rate("engine"),
        "gymnasium_steps_per_s": rate("gymnasium"),
    }
    if eager:
        row["engine_eager_steps_per_s"] = rate("eager")
    row["ratio"] = row["engine_steps_per_s"] / row["gymnasium_steps_per_s"]
    # The ratio a loop that also draws its actions would see: both sides pay the same draws.
    row["ratio_with_draws"] = (statistics.median(times["gymnasium"]) + draw_s) / (
        statistics.median(times["engine"]) + draw_s
    )
    row["draw_s"] = draw_s
    row["seconds"] = times
    return row


# -- build time ------------------------------------------------------------------------------


def _build_child(num_worlds: int, device: str | None) -> None:
    """Runs in a fresh subprocess: imports, builds one BatchSim, prints the timings as JSON."""
    t0 = time.perf_counter()
    import torch  # noqa: F401  (the sim's tensors need it; imported here so that build_s excludes it)
    import warp as wp

    _quiet_warp()
    import ecs
    import envs

    t1 = time.perf_counter()
    wp.init()
    t2 = time.perf_counter()
    sim = ecs.BatchSim(envs.make("cartpole"), num_worlds, device=device)
    wp.synchronize_device(sim.device)
    t3 = time.perf_counter()
    result = {"import_s": t1 - t0, "init_s": t2 - t1, "build_s": t3 - t2, "device": sim.device}
    print(_CHILD_MARK + json.dumps(result), flush=True)


def _run_child(cache_dir: str, num_worlds: int, device: str | None) -> dict:
    env = dict(os.environ, WARP_CACHE_PATH=cache_dir)
    cmd = [sys.executable, os.path.abspath(__file__), "--build-child", "--num-worlds", str(num_worlds)]
    if device is not None:
        cmd += ["--device", device]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"build subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith(_CHILD_MARK))
    result = json.loads(line[len(_CHILD_MARK) :])
    result["process_s"] = wall
    return result


def bench_build(num_worlds: int, *, repeats: int, device: str | None) -> dict:
    """Median build times with a cold (empty) and a warm (filled by the cold run) kernel cache."""
    runs: dict[str, list[dict]] = {"cold": [], "warm": []}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="ecs-bench-cache-") as cache_dir:
            runs["cold"].append(_run_child(cache_dir, num_worlds, device))
            runs["warm"].append(_run_child(cache_dir, num_worlds, device))
    out: dict[str, Any] = {"num_worlds": num_worlds, "repeats": repeats, "device": runs["cold"][0]["device"]}
    for kind, rs in runs.items():
        for key in ("build_s", "import_s", "init_s", "process_s"):
            out[f"{kind}_{key}"] = statistics.median(r[key] for r in rs)
    out["runs"] = runs
    return out


# -- main ------------------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    import gymnasium
    import torch
    import warp

    return {
        "python": platform.python_version(),
        "warp": warp.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "gymnasium": gymnasium.__version__,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--num-worlds", type=int, nargs="+", default=[1, 64, 1024, 16384], help="world counts (default 1 64 1024 16384)"
    )
    parser.add_argument("--steps", type=int, default=500, help="steps per timed window (default 500)")
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed windows per stepper; the median counts (default 5)"
    )
    parser.add_argument("--device", default=None, help="engine device: cpu or cuda:N (default: cuda:0 when present)")
    parser.add_argument("--seed", type=int, default=0, help="simulation and action seed (default 0)")
    parser.add_argument("--no-eager", action="store_true", help="skip the eager (capture=False) engine column")
    parser.add_argument("--build-time", action="store_true", help="also time building a BatchSim, cold and warm cache")
    parser.add_argument("--build-repeats", type=int, default=3, help="cold/warm build pairs (default 3)")
    parser.add_argument("--build-num-worlds", type=int, default=1024, help="worlds of the timed build (default 1024)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--build-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.build_child:
        _build_child(args.num_worlds[0], args.device)
        return
    if args.steps < 1 or args.repeats < 1 or args.build_repeats < 1 or min(args.num_worlds) < 1:
        parser.error("--steps, --repeats, --build-repeats and every --num-worlds must be >= 1")

    _quiet_warp()
    import warp as wp

    device = args.device or ("cuda:0" if wp.is_cuda_available() else "cpu")
    eager = not args.no_eager
    print(
        f"cartpole on {device} (engine) vs Gymnasium {_versions()['gymnasium']} CartPoleVectorEnv (numpy, CPU); "
        f"median of {args.repeats} windows of {args.steps} steps; rates in world-steps/s"
    )
    header = f"{'worlds':>8} {'engine':>14}"
    header += f" {'engine eager':>14}" if eager else ""
    header += f" {'gymnasium':>14} {'engine/gym':>11} {'with draws':>11} {'draw us':>9}"
    print(header)
    rows = []
    for n in args.num_worlds:
        row = bench_worlds(n, steps=args.steps, repeats=args.repeats, device=device, seed=args.seed, eager=eager)
        rows.append(row)
        line = f"{n:>8} {row['engine_steps_per_s']:>14,.0f}"
        line += f" {row['engine_eager_steps_per_s']:>14,.0f}" if eager else ""
        line += f" {row['gymnasium_steps_per_s']:>14,.0f} {row['ratio']:>10.2f}x {row['ratio_with_draws']:>10.2f}x"
        line += f" {row['draw_s'] / args.steps * 1e6:>9.1f}"
        print(line, flush=True)
    print("(engine/gym: hand-over of the actions and step; with draws: also drawing them, the same for both)")

    build = None
    if args.build_time:
        build = bench_build(args.build_num_worlds, repeats=args.build_repeats, device=args.device)
        print(
            f"build of a {build['num_worlds']}-world cartpole BatchSim on {build['device']} (construct + first reset), "
            f"median of {build['repeats']} fresh processes:"
        )
        print(f"{'cache':>8} {'build s':>9} {'import s':>9} {'wp.init s':>10} {'process s':>10}")
        for kind in ("cold", "warm"):
            print(
                f"{kind:>8} {build[f'{kind}_build_s']:>9.3f} {build[f'{kind}_import_s']:>9.3f} "
                f"{build[f'{kind}_init_s']:>10.3f} {build[f'{kind}_process_s']:>10.3f}"
            )
        print("(build: envs.make + BatchSim(); import: torch, warp, ecs, envs; process: the whole subprocess)")

    if args.json:
        result = {
            "benchmark": "cartpole",
            "device": device,
            "steps": args.steps,
            "repeats": args.repeats,
            "seed": args.seed,
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "versions": _versions(),
            "rows": rows,
            "build": build,
        }
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
