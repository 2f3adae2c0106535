"""examples/benchmarks/spill_sites.py: spills attributed to the Python functions they come from, from the
line information of ``nvdisasm -gi`` output (written out here: a CPU-only machine may lack ptxas and nvdisasm)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("spill_sites", ROOT / "examples" / "benchmarks" / "spill_sites.py")
spill_sites = sys.modules.setdefault("spill_sites", importlib.util.module_from_spec(spec))
spec.loader.exec_module(spill_sites)

WARP_H = "/site-packages/warp/native/builtin.h"


def line_in(path: Path, function: str, offset: int = 1) -> int:
    """A line ``offset`` below ``def function`` in ``path``."""
    tree = ast.parse(path.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    return node.lineno + offset


def header(*frames: tuple[str, int]) -> list[str]:
    """An ``nvdisasm -gi`` line-information header: the innermost frame first, each inlined at the next."""
    lines = []
    for (path, n), outer in zip(frames, [*frames[1:], None], strict=True):
        text = f'\t//## File "{path}", line {n}'
        if outer:
            text += f' inlined at "{outer[0]}", line {outer[1]}'
        lines.append(text)
    return lines


def test_spills_go_to_the_innermost_function_of_the_repository():
    solver = ROOT / "systems" / "solver.py"
    body = ROOT / "systems" / "rigid_body.py"
    level_at = (str(solver), line_in(solver, "level_at"))
    moves = (str(solver), line_in(solver, "manifold_moves", 3))
    inverse = (str(body), line_in(body, "inverse_mass"))
    sass = [
        '\t.section\t.text.solve_kernel,"ax",@progbits',
        *header((WARP_H, 10), level_at, (str(solver), 9999)),
        '        /*0010*/                   STL [R1+0x8], R2      (*"SpillRefill"*);',
        '        /*0020*/                   LDL R2, [R1+0x8]      (*"SpillRefill"*);',
        "        /*0030*/                   FADD R2, R2, R3 ;",  # not local memory
        *header((WARP_H, 20), inverse, moves),
        '        /*0040*/                   LDL.64 R4, [R1+0x10]  (*"SpillRefill"*);',
        "        /*0050*/                   STL.64 [R1], R4 ;",  # a local array (sinf's range reduction): not a spill
        *header((WARP_H, 30)),
        '        /*0060*/                   STL [R1+0x4], R9      (*"SpillRefill"*);',  # no frame of ours
        '\t.section\t.text.other_kernel,"ax",@progbits',
        *header(moves),
        '        /*0010*/                   LDL R7, [R1+0x4]      (*"SpillRefill"*);',
    ]
    kernels = spill_sites.spill_sites("\n".join(sass), root=str(ROOT))
    assert set(kernels) == {"solve_kernel", "other_kernel"}
    solve = kernels["solve_kernel"]
    assert solve.spills == {
        ("systems/solver.py", "level_at", "store"): 1,
        ("systems/solver.py", "level_at", "load"): 1,
        ("systems/rigid_body.py", "inverse_mass", "load"): 1,
        ("?", "?", "store"): 1,
    }
    assert solve.other == 1
    assert solve.lines[("systems/solver.py", level_at[1], "load")] == 1
    assert kernels["other_kernel"].spills == {("systems/solver.py", "manifold_moves", "load"): 1}
    table = spill_sites.report("solve_kernel", {}, solve, show_lines=True)
    assert "| systems/solver.py | `level_at` | 1 | 1 |" in table
    assert f"| systems/solver.py:{level_at[1]} | 1 | 1 |" in table
    # the same source under another checkout's path is not ours
    elsewhere = spill_sites.spill_sites("\n".join(sass).replace(str(ROOT), "/elsewhere"), root=str(ROOT))
    assert set(elsewhere["solve_kernel"].spills) == {("?", "?", "store"), ("?", "?", "load")}


def test_ptxas_stats_are_read_per_entry_function():
    log = "\n".join(
        [
            "ptxas info    : Compiling entry function 'a_kernel' for 'sm_90'",
            "ptxas info    : Function properties for a_kernel",
            "    240 bytes stack frame, 236 bytes spill stores, 264 bytes spill loads",
            "ptxas info    : Used 255 registers, used 1 barriers, 240 bytes cumulative stack size",
            "ptxas info    : Compiling entry function 'b_kernel' for 'sm_90'",
            "    32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
            "ptxas info    : Used 128 registers",
        ]
    )
    assert spill_sites.ptxas_stats(log) == {
        "a_kernel": {"registers": 255, "stack": 240, "spill_stores": 236, "spill_loads": 264},
        "b_kernel": {"registers": 128, "stack": 32, "spill_stores": 0, "spill_loads": 0},
    }


def test_missing_tools_say_how_to_get_them(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    with pytest.raises(SystemExit, match="pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm"):
        spill_sites.find_tools(str(tmp_path / "nowhere"))


def test_the_tools_come_from_one_folder(monkeypatch, tmp_path):
    """A folder with both tools wins over an earlier one with ptxas alone (a system toolkit older than NVRTC)."""

    def tool(folder: Path, name: str) -> Path:
        folder.mkdir(exist_ok=True)
        path = folder / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return path

    old, new = tmp_path / "old", tmp_path / "new"
    tool(old, "ptxas")
    pair = (str(tool(new, "ptxas")), str(tool(new, "nvdisasm")))
    monkeypatch.setenv("PATH", f"{old}:{new}")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert spill_sites.find_tools(None) == pair
    assert spill_sites.find_tools(str(old)) == pair  # --bin with one tool only: the pair still wins


def test_an_unknown_env_is_refused():
    proc = subprocess.run(
        [sys.executable, "examples/benchmarks/spill_sites.py", "hide_and_sneak"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2 and "unknown env 'hide_and_sneak'; one of" in proc.stderr, proc.stderr[-2000:]


def test_an_unknown_module_pattern_is_refused_before_compiling():
    try:
        spill_sites.find_tools(None)
    except SystemExit:
        pytest.skip("ptxas and nvdisasm are not installed (pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm)")
    proc = subprocess.run(
        [sys.executable, "examples/benchmarks/spill_sites.py", "cartpole", "--module", "^no_such_module$"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2 and "finds none of cartpole's CUDA modules" in proc.stderr, proc.stderr[-2000:]
