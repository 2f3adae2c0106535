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


def codegen(*args: str, returncode: int = 0) -> dict:
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
    assert proc.returncode == returncode, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skipped" in result:
        pytest.skip(result["skipped"])
    return result


@pytest.mark.parametrize("name", envs.names())
def test_cuda_kernels_compile_for_sm90(name):
    modules = codegen(name)["modules"]
    assert modules["ecs.engine_kernels"] > 0
    assert modules[f"ecs_gen_{name}_cuda"] > 0  # generated wrappers and action checks
    assert not any(m.endswith("_cpu") for m in modules), modules  # the CPU forms stay out of the CUDA modules
    if name == "cartpole":
        assert modules["ecs_fused_cartpole_cuda"] == 2  # held and per-step actions
    if name == "hide_and_seek":
        assert {"systems.collision", "systems.raycast", "envs.hide_and_seek.kernels"} <= set(modules)
        # the solver's CUDA form by default (``solver_layout``, ``solver_staged`` and ``solver_cache`` "auto"): a block
        # of lanes per world, in four kernels a substep, with its cache
        for stage in ("collide", "prepare", "solve", "velocity"):
            assert any(m.startswith(f"step_bodies_{stage}_block_cached_") for m in modules), modules
        assert "systems.solver" not in modules and not any(m.startswith("step_bodies_block_") for m in modules)


def test_the_solver_variants_compile_for_sm90():
    """The solver a block of lanes per world (tiles, barriers) with its registers capped (``__maxnreg__``) and its
    stages timed (``clock64``), and the kernels of a staged block solver with its cache in shared memory."""
    modules = codegen("cartpole", "--solver-variants", "block:128:timed,block:staged:cached")["modules"]
    assert any(name.startswith("step_bodies_block_r128_timed") for name in modules), modules
    for stage in ("collide", "prepare", "solve", "velocity"):
        assert any(name.startswith(f"step_bodies_{stage}_block_cached_") for name in modules), modules
    assert any(name.startswith("end_substeps_") for name in modules), modules


def test_check_lists_the_modules_a_cache_lacks(tmp_path):
    """``--check`` compiles nothing and names what a GPU machine would compile: every module of an empty cache,
    none once ``--cache`` has built them, and the edited one after its module changes."""
    cache = str(tmp_path / "cache")
    empty = codegen("cartpole", "--cache", cache, "--check", returncode=1)
    assert not any(name.endswith(".cubin") for _, _, files in os.walk(cache) for name in files)  # none compiled
    assert empty["modules"] == len(empty["missing"]) > 0
    assert any(name.startswith("wp_ecs_fused_cartpole_cuda_") for name in empty["missing"]), empty
    built = codegen("cartpole", "--cache", cache)["modules"]
    assert codegen("cartpole", "--cache", cache, "--check") == {"arch": 90, "modules": empty["modules"], "missing": []}
    # a variant of the solver that the build above left out is missing, the rest still there
    variant = codegen("cartpole", "--cache", cache, "--check", "--solver-variants", "world:timed", returncode=1)
    assert [name.split("_")[:4] for name in variant["missing"]] == [["wp", "step", "bodies", "timed"]], variant
    assert variant["modules"] == empty["modules"] + 1 and "ecs.engine_kernels" in built


def test_a_cache_built_in_parts_is_the_whole_cache(tmp_path):
    """``--jobs 2``: two processes side by side, each generating every module's code in the build's order and
    compiling every other module, leave what one process builds: ``--check`` finds none missing."""
    cache = str(tmp_path / "cache")
    built = codegen("cartpole", "--cache", cache, "--jobs", "2")["modules"]
    assert {"ecs.engine_kernels", "ecs_gen_cartpole_cuda", "ecs_fused_cartpole_cuda"} <= set(built), built
    check = codegen("cartpole", "--cache", cache, "--check")
    assert check["missing"] == [] and check["modules"] >= len(built), check


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--jobs", "0", "--cache", "c"], "--jobs must be at least 1"),
        (["--jobs", "2"], "--jobs builds a cache"),
        (["--jobs", "2", "--cache", "c", "--check"], "--jobs builds a cache"),
        (["--part", "2/2", "--cache", "c"], "--part i/N needs 0 <= i < N"),
    ],
)
def test_bad_jobs_are_refused(args, says):
    proc = subprocess.run(
        [sys.executable, "-m", "tests.cuda_codegen", "cartpole", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr[-2000:]
    assert not (ROOT / "c").exists()


_SIM_HASHES = """
import json, sys, torch, envs, ecs
sim = ecs.BatchSim(envs.make(sys.argv[1]), 4, device="cpu")
loaded = {}
def note():
    for m in {t.kernel.module for t in sim.graph.tasks} | {k.module for k in sim.executor.recorder.kernels()}:
        if m.name.startswith("ecs_"):
            loaded.setdefault(m.name, set()).add(m.get_module_hash().hex())
note()
if sim.fused:  # run(k, actions) adds the per-step fused kernel
    sim.run(2, {k: torch.zeros((2, *v.shape), dtype=v.dtype) for k, v in sim.actions.items()})
    note()
print(json.dumps({k: sorted(v) for k, v in loaded.items()}))
"""

_LISTED_HASHES = """
import json, sys, envs
from tests.cuda_codegen import cuda_module_loads
listed = {}
for m in cuda_module_loads(envs.make(sys.argv[1]), device_is_cpu=True):
    if m.name.startswith("ecs_"):
        listed.setdefault(m.name, set()).add(m.get_module_hash().hex())
print(json.dumps({k: sorted(v) for k, v in listed.items()}))
"""


@pytest.mark.parametrize("name", ["cartpole", "hide_and_seek"])
def test_the_modules_listed_for_a_kernel_cache_are_those_a_sim_loads(name):
    """What ``cuda_module_loads`` lists is what a cache must hold: a module whose kernels differ from those a sim loads
    it with has another hash, and the GPU machine compiles it again (24 s for hide-and-seek's generated module
    on an H100, when the CPU and CUDA forms shared one). Checked on the CPU forms, each in a fresh process."""

    def run(code: str) -> dict:
        proc = subprocess.run(
            [sys.executable, "-c", code, name],
            cwd=ROOT,
            env=dict(os.environ, WARP_QUIET="1"),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    loaded, listed = run(_SIM_HASHES), run(_LISTED_HASHES)
    assert f"ecs_gen_{name}_cpu" in loaded
    for module, hashes in loaded.items():
        assert set(hashes) <= set(listed.get(module, ())), (module, hashes, listed)
