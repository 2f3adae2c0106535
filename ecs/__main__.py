"""Command line: ``python -m ecs`` (or ``ecs``) lists, profiles, benchmarks and explains environments.

    python -m ecs envs
    python -m ecs profile cartpole --num-worlds 4096 --steps 100
    python -m ecs bench cartpole --num-worlds 16384 --steps 1000
    python -m ecs graph cartpole
    torchrun --standalone --nproc-per-node=gpu -m ecs dist-bench cartpole --num-worlds 65536 --steps 1000
    python -m ecs bench my_package.my_env:make --num-worlds 1024

Every command that takes an environment accepts a registered name (``python -m ecs envs``; see
``envs.register``) or ``package.module:function``, a factory returning an ``ecs.EnvSpec``, imported
with the current directory on the module path (as ``python -m`` does).

The engine never imports the environment registry (``ecs`` sits below ``envs`` in the layering,
and a test enforces it). Finding environments by name is this command line's job, so it imports
``envs`` lazily, by name, inside the commands that need it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from types import ModuleType
from typing import Any

from .errors import EcsError

_REGISTRY_MODULE = "envs"


def _registry() -> ModuleType:
    try:
        return importlib.import_module(_REGISTRY_MODULE)
    except ModuleNotFoundError as e:
        if e.name != _REGISTRY_MODULE:
            raise
        raise EcsError(
            f"the environment registry package {_REGISTRY_MODULE!r} is not importable; run from the repository "
            "root or install the project (pip install -e .)"
        ) from None


def _quiet_warp() -> None:
    import warp as wp

    wp.config.log_level = wp.LOG_WARNING


def _make_env(spec: str, config: str | None, **overrides: Any):
    """The ``EnvSpec`` of a registered name or of ``package.module:function``; ``EcsError`` when neither works."""
    registry = _registry()
    if ":" in spec:
        cwd = os.getcwd()
        # The console script `ecs` does not put the current directory on the path; `python -m ecs` does.
        if not any(os.path.abspath(p or os.curdir) == cwd for p in sys.path):
            sys.path.insert(0, cwd)
    return registry.make(spec, config=config, **overrides)


def _build(args: argparse.Namespace, num_worlds: int, **kwargs: Any):
    from .sim import BatchSim

    _quiet_warp()
    env = _make_env(args.env, args.config)
    return BatchSim(env, num_worlds, device=args.device, seed=args.seed, **kwargs)


def _randomise_actions(sim, seed: int) -> None:
    """Writes actions drawn uniformly from each action space (one draw, kept for every step)."""
    import numpy as np
    from gymnasium.vector.utils import batch_space

    for key in list(sim.actions):
        space = batch_space(sim.action_space[key], sim.num_worlds)
        space.seed(seed)
        view = sim.actions[key]
        dtype = np.dtype(str(view.dtype).removeprefix("torch."))
        sim.actions[key] = np.ascontiguousarray(np.asarray(space.sample()).reshape(tuple(view.shape)).astype(dtype))


def _cmd_envs(args: argparse.Namespace) -> None:
    for name in _registry().names():
        print(name)


def _cmd_profile(args: argparse.Namespace) -> None:
    sim = _build(args, args.num_worlds)
    _randomise_actions(sim, args.seed)
    print(sim.profile(args.steps))


def _cmd_bench(args: argparse.Namespace) -> None:
    import warp as wp

    sim = _build(args, args.num_worlds)
    _randomise_actions(sim, args.seed)
    for _ in range(max(10, args.steps // 10)):  # warm-up, not timed
        sim.step()
    times = []
    for _ in range(args.repeats):
        wp.synchronize_device(sim.device)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            sim.step()
        wp.synchronize_device(sim.device)
        times.append(time.perf_counter() - t0)
    sim.check()
    rate = sim.num_worlds * args.steps / statistics.median(times)
    spread = ", ".join(f"{sim.num_worlds * args.steps / t:,.0f}" for t in sorted(times, reverse=True))
    print(
        f"{args.env}: {sim.num_worlds} worlds on {sim.device}, captured step, "
        f"median of {args.repeats} windows of {args.steps} steps"
    )
    print(f"{rate:,.0f} world-steps/s ({statistics.median(times) / args.steps * 1e6:.1f} us per step)")
    print(f"all windows [world-steps/s]: {spread}")


def _cmd_dist_bench(args: argparse.Namespace) -> None:
    """Each rank steps its share of the worlds; rank 0 prints per-rank and aggregate rates."""
    from . import distributed

    _quiet_warp()
    env = _make_env(args.env, args.config)
    sim = distributed.make_sim(env, args.num_worlds, device=args.device, seed=args.seed, backend=args.backend)
    ctx = distributed.context()
    try:
        _randomise_actions(sim, args.seed + ctx.rank)
        for _ in range(max(10, args.steps // 10)):  # warm-up, not timed
            sim.step()
        windows = []
        for _ in range(args.repeats):
            with ctx.window() as w:
                for _ in range(args.steps):
                    sim.step()
            windows.append(ctx.throughput(sim.num_worlds * args.steps, w.elapsed_s))
        sim.check()
        median = sorted(windows, key=lambda t: t.rate)[len(windows) // 2]  # upper median for even counts
        ctx.log(
            f"{args.env}: {ctx.global_num_worlds} worlds on {ctx.world_size} rank(s) ({ctx.backend or 'no process group'}),"
            f" {ctx.num_worlds} per rank; median of {args.repeats} windows of {args.steps} steps"
        )
        ctx.log(f"{'rank':>6} {'device':>8} {'worlds':>8} {'offset':>8} {'world-steps/s':>15} {'seconds':>10}")
        rank_rates = [statistics.median(t.rank_rates[r] for t in windows) for r in range(ctx.world_size)]
        rank_times = [statistics.median(t.rank_elapsed_s[r] for t in windows) for r in range(ctx.world_size)]
        devices = ctx.gather(ctx.device)
        for r in range(ctx.world_size):
            ctx.log(
                f"{r:>6} {devices[r]:>8} {ctx.num_worlds:>8} {r * ctx.num_worlds:>8} {rank_rates[r]:>15,.0f} "
                f"{rank_times[r]:>10.5f}"
            )
        ctx.log(
            f"aggregate: {median.rate:,.0f} world-steps/s ({median.world_steps:,} world-steps / {median.elapsed_s:.5f} s of "
            "the slowest rank)"
        )
    finally:
        distributed.shutdown()


def _cmd_graph(args: argparse.Namespace) -> None:
    from .graph import TaskGraph

    sim = _build(args, 1, capture=False)  # the tables' layout
    native = "cpu" if sim.device == "cpu" else "cuda"
    build = args.build or native
    if build == native and args.num_worlds == 1:
        print(sim.graph)
        return
    # The graph that a simulation of --num-worlds built on that kind of device binds (the systems of a device or
    # of some world counts only), without one.
    graph = TaskGraph(
        sim.env.systems,
        sim.storage.layout,
        device_is_cpu=build == "cpu",
        num_worlds=args.num_worlds,
        env_name=sim.env.name,
    )
    worlds = f"{args.num_worlds:,} world" + "s" * (args.num_worlds != 1)
    print(f"{graph}\n(as a {build.upper()} build of {worlds} binds it)")


def _cmd_state(args: argparse.Namespace) -> None:
    """What a file written by ``sim.save`` holds; with ``--load``, whether this engine loads it and steps on."""
    import dataclasses

    import numpy as np

    from . import checkpoint
    from .sim import BatchSim

    state = checkpoint.load_state(args.file)
    arrays, saved = state["arrays"], state.get("config")
    size = sum(np.asarray(v).nbytes for v in arrays.values())
    print(
        f"{args.file}: env {state.get('env')!r}, {state.get('num_worlds')} worlds, seed {state.get('seed')}, "
        f"world offset {state.get('world_offset')}, format version {state.get('format_version')}; "
        f"{len(arrays)} arrays, {size / 2**20:.2f} MiB"
    )
    if not args.load:
        return
    _quiet_warp()
    name = args.env or state.get("env")
    env = _make_env(name, args.config)
    if args.config is None and dataclasses.is_dataclass(env.config) and isinstance(saved, dict):
        # The env as it was saved: its config's fields that differ from the defaults (the rest as they are).
        mine = checkpoint.config_dict(env.config)
        changed = {k: v for k, v in saved.items() if k in mine and v != mine[k]}
        if changed:
            try:
                env = _make_env(name, None, **changed)
            except (TypeError, ValueError) as e:  # a factory's own check of a field (EcsError passes through)
                raise EcsError(f"cannot build {name!r} with the saved config ({e}); give it with --config") from None
    num_worlds = state.get("num_worlds")
    if not isinstance(num_worlds, int) or num_worlds < 1:
        raise EcsError(f"{args.file}: num_worlds {num_worlds!r} is not a world count; the file is not a saved state")
    sim = BatchSim(env, num_worlds, device=args.device or "cpu")
    upgraded = sim.load_state_dict(state)
    brought = f"; brought across from an earlier form: {', '.join(upgraded)}" if upgraded else ", every array as saved"
    print(f"loads into {name!r} on {sim.device}{brought}")
    if args.steps:
        for _ in range(args.steps):
            sim.step()
        sim.check()
        print(f"stepped on {args.steps} steps")


def _at_least(low: int):
    """An argparse type: an integer >= ``low``."""

    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text}")
        return value

    parse.__name__ = "integer"  # argparse's message for a non-integer: "invalid integer value: 'x'"
    return parse


_positive = _at_least(1)
_count = _at_least(0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ecs", description="List, profile and benchmark environments; inspect saved states."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def env_command(name: str, help: str, *, worlds: int | None, steps: int | None) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument(
            "env",
            help="a registered environment name (see: python -m ecs envs) or package.module:function, a factory "
            "returning an ecs.EnvSpec (the current directory is importable)",
        )
        if worlds is not None:
            p.add_argument("--num-worlds", type=_positive, default=worlds, help=f"worlds (default {worlds})")
        if steps is not None:
            p.add_argument("--steps", type=_positive, default=steps, help=f"steps (default {steps})")
        p.add_argument("--device", default=None, help="cpu or cuda:N (default: cuda:0 when present, else cpu)")
        p.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")
        p.add_argument("--config", default=None, metavar="YAML", help="environment config file (default: its own)")
        return p

    sub.add_parser("envs", help="list registered environments").set_defaults(fn=_cmd_envs)
    sub.add_parser("gpu-report", help="the whole GPU campaign into one folder (see: python -m ecs gpu-report --help)")
    env_command("profile", "time every system of a step", worlds=4096, steps=100).set_defaults(fn=_cmd_profile)
    bench = env_command("bench", "world-steps per second of the captured step", worlds=4096, steps=1000)
    bench.add_argument("--repeats", type=_positive, default=5, help="timed windows; the median counts (default 5)")
    bench.set_defaults(fn=_cmd_bench)
    graph = env_command("graph", "print the task graph", worlds=None, steps=None)
    graph.add_argument(
        "--num-worlds",
        type=_positive,
        default=1,
        help="the graph of a simulation of this many worlds (systems may run only at some counts; default 1)",
    )
    graph.add_argument(
        "--build",
        choices=("cpu", "cuda"),
        default=None,
        help="the graph of a build on this kind of device, shown from any machine (default: --device's kind)",
    )
    graph.set_defaults(fn=_cmd_graph)
    state = sub.add_parser(
        "state",
        help="what a saved state (sim.save) holds and, with --load, whether this engine loads it",
        description="What a file written by sim.save holds; with --load, whether this engine loads it (built with "
        "the config the state was saved with, on --device), which arrays an earlier engine's file had brought "
        "across (Component.upgrade), and with --steps whether it steps on.",
    )
    state.add_argument("file", help="a file written by sim.save")
    state.add_argument("--load", action="store_true", help="build the env and load the state into it")
    state.add_argument("--env", default=None, help="the env to load it into (default: the one it names)")
    state.add_argument("--config", default=None, metavar="YAML", help="the env's config file (default: the saved one)")
    state.add_argument("--device", default=None, help="cpu or cuda:N (default cpu)")
    state.add_argument("--steps", type=_count, default=0, help="steps to run after loading (default 0)")
    state.set_defaults(fn=_cmd_state)
    dist = env_command(
        "dist-bench", "world-steps per second on every rank of a torchrun launch", worlds=4096, steps=1000
    )
    dist.set_defaults(fn=_cmd_dist_bench)
    dist.add_argument("--repeats", type=_positive, default=5, help="timed windows; the median counts (default 5)")
    dist.add_argument("--backend", choices=("nccl", "gloo"), default=None, help="default: nccl on CUDA, gloo on cpu")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the exit status (0 on success, 1 on an engine error)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["gpu-report"]:  # its own parser: python -m ecs gpu-report --help
        from . import gpu_report

        return gpu_report.main(argv[1:])
    args = _parser().parse_args(argv)
    try:
        args.fn(args)
    except EcsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
