"""The CUDA code of every env compiles for an H100 (sm_90) with NVRTC, on this GPU-less machine.

CPU tests run the CPU variants of the generated kernels; these compile the CUDA variants (one
thread per world or entity, the fused kernel with its K-step loop in registers) and every
system's kernels, so CUDA-only code generation errors show up without a GPU. Each env runs in
its own process (``python -m tests.cuda_codegen``), as adding CUDA wrappers to a module that
this process has loaded for the CPU would recompile it for every later CPU test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import envs

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 600  # seconds: a cold NVRTC compile of hide-and-seek's modules takes about a minute


def codegen(*args: str) -> dict:
    """``python -m tests.cuda_codegen ARGS --arch 90``: its JSON line (the test skips where NVRTC cannot)."""
    env = dict(os.environ, WARP_QUIET="1")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.cuda_codegen", *args, "--arch", "90"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skipped" in result:
        pytest.skip(result["skipped"])
    return result


@pytest.mark.parametrize("name", envs.names())
def test_cuda_kernels_compile_for_sm90(name):
    modules = codegen(name)["modules"]
    assert modules["ecs.engine_kernels"] > 0
    assert modules[f"ecs_gen_{name}"] > 0  # generated wrappers and action checks
    if name == "cartpole":
        assert modules["ecs_fused_cartpole"] == 2  # held and per-step actions
    if name == "hide_and_seek":
        assert {"systems.solver", "systems.collision", "systems.raycast", "envs.hide_and_seek.kernels"} <= set(modules)


def test_the_solver_variants_compile_for_sm90():
    """The solver a block of lanes per world (tiles, barriers) with its registers capped (``__maxnreg__``)."""
    modules = codegen("cartpole", "--solver-variants", "block:128")["modules"]
    assert any(name.startswith("step_bodies_block_r128") for name in modules), modules
