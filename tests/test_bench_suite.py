"""Smoke test of examples/benchmarks/bench_suite.py at tiny sizes, as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "benchmarks" / "bench_suite.py"
TIMEOUT = 600  # seconds; a cold kernel cache compiles every module first


def test_bench_suite_tiny(tmp_path):
    pytest.importorskip("matplotlib")
    out_json = tmp_path / "suite.json"
    plots = tmp_path / "plots"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # No JAX needed: leave it out so the test costs the same with or without it installed.
    backends = ["gym-vector", "gym-sync", "torch-cpu", "engine-eager", "engine-captured", "engine-fused"]
    backends += ["engine-fused-run"]
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--device",
        "cpu",
        "--min-log2",
        "0",
        "--max-log2",
        "2",
        "--ks",
        "1",
        "10",
        "--repeats",
        "1",
        "--window",
        "0.005",
        "--warmup",
        "0.001",
        "--cell-cap",
        "2",
        "--backends",
        *backends,
        "--states",
        "0",
        "8",
        "--computes",
        "1",
        "2",
        "--factor-num-worlds",
        "8",
        "--factor-k",
        "10",
        "--overhead",
        "--overhead-num-worlds",
        "8",
        "--overhead-systems",
        "4",
        "--bandwidth",
        "--bandwidth-num-worlds",
        "64",
        "--copy-mib",
        "4",
        "--json",
        str(out_json),
        "--plots",
        str(plots),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, f"bench_suite failed:\n{proc.stdout}\n{proc.stderr}"
    result = json.loads(out_json.read_text())
    assert {"benchmark", "meta", "throughput", "factors", "overhead", "bandwidth", "plots"} <= set(result)
    assert result["meta"]["ks"] == [1, 10] and result["meta"]["num_worlds"] == [1, 2, 4]

    rates = {(r["backend"], r["num_worlds"], r["k"]): r["rate"] for r in result["throughput"]}
    for n in (1, 2, 4):
        for backend in backends:
            assert rates.get((backend, n, 1)), f"no rate for {backend} at N={n}, K=1"
        assert rates.get(("engine-fused-run", n, 10)), f"no fused run(10) rate at N={n}"

    factors = result["factors"]
    assert {(r["state_factor"], r["compute_factor"]) for r in factors["rows"]} == {(0, 1), (8, 1), (0, 2)}
    assert all(r["rate"] for r in factors["rows"])
    assert {"over_fused_step", "over_captured_step", "over_torch"} <= set(factors["gains"][0])

    overhead = result["overhead"]
    assert overhead["systems"] == 4 and overhead["eager_over_captured"] > 0

    bw = result["bandwidth"]
    assert bw["num_worlds"] == 64 and bw["bytes_per_world_step"] == bw["read_bytes"] + bw["write_bytes"] + 4
    assert bw["achieved_gb_per_s"] == pytest.approx(bw["world_steps_per_s"] * bw["bytes_per_world_step"] / 1e9)
    assert bw["fraction_of_bound"] == pytest.approx(bw["achieved_gb_per_s"] / bw["copy_gb_per_s"])
    assert bw["host_us_per_step"] > 0 and bw["host_step_runs_on_host"]

    names = {"throughput_vs_worlds.png", "fusion_speedup_vs_k.png", "fusion_vs_factors.png"}
    assert {Path(p).name for p in result["plots"]} == names
    for name in names:
        png = plots / name
        assert png.is_file() and png.stat().st_size > 1000, f"{png} missing or empty"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
