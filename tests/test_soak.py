"""Soak: 10^6 world-steps of hide-and-seek with random actions (examples/soak.py), checked as it runs."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_a_million_hide_and_seek_world_steps(tmp_path):
    out = tmp_path / "soak.json"
    cmd = [sys.executable, "examples/soak.py", "--world-steps", "1000000", "--num-worlds", "256"]
    r = subprocess.run(
        [*cmd, "--device", "cpu", "--no-progress", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads(out.read_text())
    assert summary["problem"] is None
    assert summary["world_steps"] >= 1_000_000
    assert summary["episodes_finished"] >= 256 * 10  # many same-step resets and new levels


def test_soak_reports_a_violation(tmp_path):
    """The checks can fail: an impossible speed limit is reported with the step and exit code 1."""
    out = tmp_path / "soak.json"
    cmd = [sys.executable, "examples/soak.py", "--world-steps", "640", "--num-worlds", "8", "--check-every", "20"]
    r = subprocess.run(
        [*cmd, "--max-speed", "0", "--device", "cpu", "--no-progress", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1
    assert "FAILED: step 20: a body moves at" in r.stdout
    assert json.loads(out.read_text())["problem"].startswith("step 20")
