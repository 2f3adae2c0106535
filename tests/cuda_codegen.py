"""Compiles every Warp module a CUDA ``BatchSim`` of one env would load, for ``--arch`` (default
90, the H100), with NVRTC: no GPU or driver needed. Prints one JSON line: the modules compiled,
or ``{"skipped": reason}`` when this Warp build cannot compile for that architecture.

    python -m tests.cuda_codegen cartpole --arch 90
    python -m tests.cuda_codegen cartpole hide_and_seek --arch 90 --cache .wpcache   # a kernel cache to carry
    python -m tests.cuda_codegen hide_and_seek --solver-variants block,world:128   # other builds of the solver
    python -m tests.cuda_codegen cartpole hide_and_seek --arch 90 --cache .wpcache --jobs 2   # on two cores
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import warp as wp

import ecs
import envs
from ecs.engine_kernels import generate
from ecs.fusion import build_fused, why_not_fusable
from ecs.graph import TaskGraph
from systems import physics, solver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout: where -m tests.cuda_codegen runs


def cuda_modules(env: ecs.EnvSpec) -> dict[str, wp.Module]:
    """The modules of the env's CUDA step by name, each with every kernel it ends up with (for register reports:
    ``../shared/gpu/registers.py``)."""
    return {module.name: module for module in cuda_module_loads(env)}


def cuda_module_loads(env: ecs.EnvSpec, device_is_cpu: bool = False) -> Iterator[wp.Module]:
    """The modules of the env's CUDA step, each as often and with the kernels that a CUDA ``BatchSim`` loads it
    with (a module's hash covers its kernels): the systems and their generated wrappers, the engine's kernels
    and, for a fusable env, the fused kernel of held actions, then the module again once ``run(k, actions)``
    has added the per-step one, at every world count where the systems differ (``ecs.System.min_worlds``,
    ``max_worlds``). ``device_is_cpu``: the same for a CPU build (the tests check it against one)."""
    cpu = ecs.BatchSim(env, 1, device="cpu", fuse=False)  # the layout (its kernels are the CPU forms)
    layout = cpu.storage.layout
    edges = {1} | {s.min_worlds for s in env.systems if s.min_worlds}
    edges |= {s.max_worlds + 1 for s in env.systems if s.max_worlds}
    graphs = [
        TaskGraph(env.systems, layout, device_is_cpu=device_is_cpu, num_worlds=n, env_name=env.name)
        for n in sorted(edges)
    ]
    graph = graphs[0]
    kernels = [t.kernel for g in graphs for t in g.tasks]
    generated = generate(cpu.storage, device_is_cpu=device_is_cpu)  # the device's form of the action check
    kernels += [generated.validate, generated.copy_final_obs, generated.load_actions]
    fused = []
    if why_not_fusable(graph, env) is None:
        fused.append(
            build_fused(graph, layout, env, per_step_actions=False, schedule_seed=None, device_is_cpu=device_is_cpu)
        )
    modules = {k.module.name: k.module for k in kernels + [f.kernel for f in fused]}
    modules["ecs.engine_kernels"] = wp.get_module("ecs.engine_kernels")
    yield from (modules[name] for name in sorted(modules))
    if fused:
        per_step = build_fused(
            graph, layout, env, per_step_actions=True, schedule_seed=None, device_is_cpu=device_is_cpu
        )
        yield per_step.kernel.module


def compile_module(module: wp.Module, args: argparse.Namespace, tmp: str, index: int = 0) -> bool:
    """Compiles ``module`` for ``args.arch``. Into a cache, its code is generated first even where the cache holds it
    (``cached_binary``), as ``--check`` generates it: a cache hit compiles nothing and would generate nothing, and the
    modules after it could then hash apart from what a process that generated it gives them (a build whose
    each-env-alone processes had filled the cache first lacked four of the solver's modules as ``--check``, and a GPU
    machine's first simulation after a miss, generate them). With ``--part i/N`` only every Nth module from the ``i``th
    (``index`` counts them in the build's order) is compiled, the others' code generated alone, so that the N parts,
    run side by side, give each module the name one process building them all gives it. Returns whether it compiled
    ``module``."""
    if args.cache:  # the cache's own layout; cubin, which a driver older than the toolkit needs
        cached_binary(module, args.arch)
        part, parts = args.part
        if index % parts != part:
            return False
        wp.compile_aot_module(module, arch=args.arch, use_ptx=False)
    else:
        wp.compile_aot_module(module, arch=args.arch, module_dir=tmp, use_ptx=True)
    return True


def part_of(text: str) -> tuple[int, int]:
    """``--part``'s ``i/N`` as (i, N), 0 <= i < N."""
    try:
        part, parts = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--part takes i/N (this process's share of N), got {text!r}") from None
    if not 0 <= part < parts:
        raise argparse.ArgumentTypeError(f"--part i/N needs 0 <= i < N, got {text!r}")
    return part, parts


def build_in_parts(args: argparse.Namespace) -> dict[str, int]:
    """``--jobs N``: the build's modules compiled by N processes side by side (``--part i/N``, each generating every
    module's code in the build's order and compiling its share); the modules compiled, merged."""
    base = [sys.executable, "-m", "tests.cuda_codegen", *args.env, "--arch", str(args.arch)]
    base += ["--cache", os.path.abspath(args.cache), "--solver-variants", args.solver_variants]
    procs = [
        subprocess.Popen(
            [*base, "--part", f"{i}/{args.jobs}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for i in range(args.jobs)
    ]
    compiled: dict[str, int] = {}
    failed = []
    for i, proc in enumerate(procs):
        out, err = proc.communicate()
        lines = out.strip().splitlines()
        if proc.returncode != 0 or not lines:
            failed.append(f"part {i}/{args.jobs} (exit {proc.returncode}): {err.strip()[-2000:]}")
            continue
        compiled.update(json.loads(lines[-1])["modules"])
    if failed:
        raise SystemExit("tests.cuda_codegen: " + "\n".join(failed))
    return compiled


def cached_binary(module: wp.Module, arch: int) -> str:
    """Where a cache built by ``--cache`` holds the module's cubin for ``arch``: under the identifier that
    ``wp.compile_aot_module`` gives it, then the module's CUDA code generated (not compiled) as that compile generates
    it. A module's hash can depend on the code generated before it (generating a module builds the functions it
    shares with later ones), so modules are checked in the order the build compiles them."""
    options = module.resolve_options(wp.config)
    cached = module.resolved_options.get(options["block_dim"])
    if cached is not None and cached != options:  # as the compile does: options changed since the hash, hash again
        module.mark_modified()
    ident = module.get_module_identifier(block_dim=options["block_dim"])
    module._run_codegen(options | {"output_arch": arch}, is_cpu=False)  # the compile's side effects, not its binary
    return os.path.join(wp.config.kernel_cache_dir, ident, f"{ident}.sm{arch}.cubin")


def check_cache(args: argparse.Namespace, variants: list[wp.Module], alone_missing: list[str]) -> None:
    """Prints which of the modules that ``--cache`` would build the cache lacks (a module's name carries a hash
    of its source, so any edit to a kernel or a function it calls, docstrings included, makes a new one), and
    exits 1 if any: a GPU machine would spend its time compiling those. Generates each module's code as the build
    does, in its order, without compiling (about a minute for every env and solver form)."""
    paths = set()
    for env_name in args.env:
        for module in cuda_module_loads(envs.make(env_name)):  # lazily, as the build compiles them
            paths.add(cached_binary(module, args.arch))
    for module in variants:
        paths.add(cached_binary(module, args.arch))
    missing = sorted({os.path.basename(p) for p in paths if not os.path.exists(p)} | set(alone_missing))
    print(json.dumps({"arch": args.arch, "modules": len(paths), "missing": missing}))
    if missing:
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env", nargs="+", choices=envs.names())
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument(
        "--cache",
        metavar="DIR",
        help="build cubins into a Warp kernel cache at DIR instead of a scratch folder: carry DIR to the GPU "
        "machine and set WARP_CACHE_PATH=DIR there, and the first BatchSim loads them instead of compiling "
        "(hide-and-seek: about 80 s on an H100 machine)",
    )
    parser.add_argument(
        "--solver-variants",
        default="",
        help="also build the physics solver as LAYOUT[:REGISTERS][:timed][:staged][:cached][:nofma][:lLANES][:ordered],"
        "... (PhysicsConfig.solver_layout, solver_registers, solver_timing, solver_staged, solver_cache, solver_fma, "
        "solver_lanes: l8 is 8 lanes a world, solver_order), e.g. block,world:128,"
        "block:timed,block:staged,block:cached, for gpu-report's solver stage",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="with --cache: compile nothing, only list the modules the cache lacks for this source (exit 1 if any)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="with --cache: compile in this many processes side by side, each generating every module's code in the "
        "build's order (so the modules' names agree) and compiling every Nth module (each repeats the code generation: "
        "the whole GPU campaign's cache took 7.1 min with 2 on a 2-core machine, 9.6 min with 1)",
    )
    parser.add_argument("--part", type=part_of, default=(0, 1), help=argparse.SUPPRESS)  # i/N: one of --jobs' processes
    args = parser.parse_args()
    if args.check and not args.cache:
        parser.error("--check needs --cache DIR (the cache to check)")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.jobs > 1 and (not args.cache or args.check):
        parser.error("--jobs builds a cache: it needs --cache DIR and no --check")
    alone_missing: list[str] = []  # what --check finds missing for each env alone in its own process
    variants = []
    for item in filter(None, args.solver_variants.split(",")):
        layout, *rest = item.split(":")
        registers = next((int(r) for r in rest if r.isdigit()), None)
        lanes = next((int(r[1:]) for r in rest if r.startswith("l") and r[1:].isdigit()), solver.SOLVER_LANES)
        systems = physics.solver_systems(
            layout,
            registers,
            timed="timed" in rest,
            staged="staged" in rest,
            cached="cached" in rest,
            fma="nofma" not in rest,
            lanes=lanes,
            max_bodies=solver.CACHE_BODIES,
            max_contacts=solver.CACHE_CONTACTS,
            ordered="ordered" in rest,
        )
        for system in systems:  # what a CUDA build runs (not a CPU build's own systems)
            if system.runs_on(False) and system.on(False).fn.module not in variants:
                variants.append(system.on(False).fn.module)
    if args.cache:
        os.environ["WARP_CACHE_PATH"] = os.path.abspath(args.cache)  # read by wp.init()
    wp.init()
    archs = getattr(wp._src.context.runtime, "nvrtc_supported_archs", None) or ()
    if args.arch not in archs:
        print(json.dumps({"skipped": f"this Warp build cannot compile for sm_{args.arch} (NVRTC archs: {archs})"}))
        return
    if args.cache and (len(args.env) > 1 or variants) and args.part[1] == 1:  # a part's parent ran them
        # A module's name hashes its kernels as generated, and generating one module can change what another
        # generates after it (Warp 1.19 builds the functions they share), so the same kernel can be named apart in
        # a process that built others first: hide-and-seek's default solver stages were, in one process building
        # every env and solver form. Each env alone in a fresh process, as a GPU machine's first simulation of it
        # loads it; then all of them and the forms together, as gpu-report's solver stage loads the forms after the
        # default. The cache holds both names where they differ.
        for env_name in args.env:  # one at a time, each in --jobs parts
            alone = [sys.executable, "-m", "tests.cuda_codegen", env_name, "--arch", str(args.arch)]
            alone += ["--cache", os.path.abspath(args.cache), "--jobs", str(args.jobs)] + ["--check"] * args.check
            proc = subprocess.run(alone, cwd=ROOT, capture_output=True, text=True)
            result = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
            expected = {"missing"} if args.check else {"modules", "skipped"}
            if proc.returncode not in ((0, 1) if args.check else (0,)) or not expected & set(result):
                raise SystemExit(f"tests.cuda_codegen {env_name}: {proc.stderr.strip()[-2000:]}")
            alone_missing.extend(result.get("missing", []))
    if args.check:
        check_cache(args, variants, alone_missing)
        return
    if args.jobs > 1:
        print(json.dumps({"arch": args.arch, "modules": build_in_parts(args)}))
        return
    compiled = {}
    # compiled as each is loaded (lazily: an env's modules are made as the build reaches them), a fused one twice;
    # ``index`` counts them in the build's order, for --part
    loads = itertools.chain.from_iterable(cuda_module_loads(envs.make(name)) for name in args.env)
    with tempfile.TemporaryDirectory() as tmp:
        for index, module in enumerate(itertools.chain(loads, variants)):
            if compile_module(module, args, tmp, index):
                compiled[module.name] = len(module.kernels)
    print(json.dumps({"arch": args.arch, "modules": compiled}))


if __name__ == "__main__":
    main()
