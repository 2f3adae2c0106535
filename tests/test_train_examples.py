"""Smoke tests of the training examples, run as subprocesses with tiny budgets."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 600  # seconds; a cold kernel cache compiles every module first


def run(*args: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert proc.returncode == 0, f"{args} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def test_train_ppo_tiny_budget_then_watch(tmp_path: Path) -> None:
    out_dir = tmp_path / "ppo"
    args = ["--num-worlds", "8", "--rollout-steps", "16", "--max-iterations", "3", "--device", "cpu"]
    out = run("examples/train_ppo.py", *args, "--out-dir", str(out_dir), "--no-progress")
    assert "built 8 cartpole worlds on cpu" in out
    line = re.search(r"(reached|stopped at) mean return ([\d.]+|nan) after (\d+) env steps, (\d+) iterations", out)
    assert line is not None, out
    assert int(line.group(3)) == 3 * 8 * 16 and int(line.group(4)) == 3
    result = json.loads((out_dir / "result.json").read_text())
    assert result["env_steps"] == 384 and result["iterations"] == 3
    checkpoint = out_dir / "policy.pt"
    assert checkpoint.is_file()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pytest.skip("matplotlib not installed: no learning curve to check")
    assert (out_dir / "learning_curve.png").stat().st_size > 1000

    watched = run("examples/train_ppo.py", "--watch", str(checkpoint), "--num-worlds", "4", "--device", "cpu")
    mean = re.search(r"greedy policy over (\d+) of 4 worlds: mean return ([\d.]+)", watched)
    assert mean is not None, watched
    # Three tiny iterations do not learn much, but every world's episode ends within 500 steps.
    assert int(mean.group(1)) == 4 and 8.0 <= float(mean.group(2)) <= 500.0
