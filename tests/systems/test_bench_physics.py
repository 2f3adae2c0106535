"""Smoke test of the physics benchmark, run as a subprocess with a tiny world count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_physics_runs_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    args = [
        "--num-worlds",
        "4",
        "--steps",
        "2",
        "--repeats",
        "1",
        "--device",
        "cpu",
        "--broadphase",
        "--json",
        str(out),
    ]
    proc = subprocess.run(
        [sys.executable, "examples/benchmarks/bench_physics.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["broadphase"] for r in rows] == ["SORT_SWEEP", "ALL_PAIRS"]
    for r in rows:
        assert r["body_steps_per_s"] > 0 and r["find_pairs_s"] > 0 and r["step_bodies_s"] > 0
        # The room keeps bodies touching the floor and each other: pairs and contacts exist.
        assert r["mean_pairs"] >= 20 and r["mean_contacts"] >= 20
