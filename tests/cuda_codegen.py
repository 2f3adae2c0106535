"""Compiles every Warp module a CUDA ``BatchSim`` of one env would load, for ``--arch`` (default
90, the H100), with NVRTC: no GPU or driver needed. Prints one JSON line: the modules compiled,
or ``{"skipped": reason}`` when this Warp build cannot compile for that architecture.

    python -m tests.cuda_codegen cartpole --arch 90
    python -m tests.cuda_codegen cartpole hide_and_seek --arch 90 --cache .wpcache   # a kernel cache to carry
    python -m tests.cuda_codegen hide_and_seek --solver-variants block,world:128   # other builds of the solver
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import warp as wp

import ecs
import envs
from ecs.fusion import build_fused, why_not_fusable
from ecs.graph import TaskGraph
from systems import physics


def cuda_modules(env: ecs.EnvSpec) -> dict[str, wp.Module]:
    """The modules of the env's CUDA step: the systems and their generated wrappers, the engine's
    kernels and, for a fusable env, both fused kernels (held and per-step actions)."""
    cpu = ecs.BatchSim(env, 1, device="cpu", fuse=False)  # the layout and the engine's kernels
    layout = cpu.storage.layout
    graph = TaskGraph(env.systems, layout, device_is_cpu=False, env_name=env.name)
    kernels = [t.kernel for t in graph.tasks]
    generated = cpu.executor.recorder.generated
    kernels += [generated.validate, generated.copy_final_obs, generated.load_actions]
    if why_not_fusable(graph, env) is None:
        for per_step in (False, True):
            fused = build_fused(graph, layout, env, per_step_actions=per_step, schedule_seed=None, device_is_cpu=False)
            kernels.append(fused.kernel)
    modules = {k.module.name: k.module for k in kernels}
    modules["ecs.engine_kernels"] = wp.get_module("ecs.engine_kernels")
    return modules


def compile_module(module: wp.Module, args: argparse.Namespace, tmp: str) -> None:
    if args.cache:  # the cache's own layout; cubin, which a driver older than the toolkit needs
        wp.compile_aot_module(module, arch=args.arch, use_ptx=False)
    else:
        wp.compile_aot_module(module, arch=args.arch, module_dir=tmp, use_ptx=True)


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
        help="also build the physics solver as LAYOUT[:REGISTERS],... (PhysicsConfig.solver_layout and "
        "solver_registers), e.g. block,world:128,block:128, for gpu-report's solver stage",
    )
    args = parser.parse_args()
    variants = []
    for item in filter(None, args.solver_variants.split(",")):
        layout, _, registers = item.partition(":")
        variants.append(physics.solver_system(layout, int(registers) if registers else None).fn.module)
    if args.cache:
        os.environ["WARP_CACHE_PATH"] = os.path.abspath(args.cache)  # read by wp.init()
    wp.init()
    archs = getattr(wp._src.context.runtime, "nvrtc_supported_archs", None) or ()
    if args.arch not in archs:
        print(json.dumps({"skipped": f"this Warp build cannot compile for sm_{args.arch} (NVRTC archs: {archs})"}))
        return
    compiled = {}
    with tempfile.TemporaryDirectory() as tmp:
        for env_name in args.env:
            for name, module in sorted(cuda_modules(envs.make(env_name)).items()):
                compile_module(module, args, tmp)
                compiled[name] = len(module.kernels)
        for module in variants:
            compile_module(module, args, tmp)
            compiled[module.name] = len(module.kernels)
    print(json.dumps({"arch": args.arch, "modules": compiled}))


if __name__ == "__main__":
    main()
