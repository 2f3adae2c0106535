"""Smoke test of examples/benchmarks/bench_adapters.py with a tiny world count (no timing asserted)."""

from __future__ import annotations

import json
import re

import pytest

from tests.test_examples import run

pytest.importorskip("torchrl")


def test_bench_adapters_runs_and_writes_json(tmp_path):
    path = tmp_path / "adapters.json"
    args = ["--num-worlds", "8", "--steps", "20", "--repeats", "2", "--device", "cpu", "--json", str(path)]
    out = run("examples/benchmarks/bench_adapters.py", *args).stdout
    assert "adapter overhead: cartpole, 8 worlds on cpu, median of 2 windows of 20 steps" in out
    names = ["bare", "gym", "gym_copy", "torchrl_step", "torchrl_step_and_maybe_reset"]
    for name in names:
        assert re.search(rf"^{name}\s+[\d.]+\s+[\d.]+x", out, re.MULTILINE), out
    result = json.loads(path.read_text())
    assert [row["stepper"] for row in result["rows"]] == names
    bare = result["rows"][0]["us_per_step"]
    for row in result["rows"]:
        assert len(row["windows_us"]) == 2 and row["us_per_step"] > 0
        assert row["ratio"] == pytest.approx(row["us_per_step"] / bare)
    assert {"torch", "warp"} <= set(result["versions"])
