"""Smoke tests of the examples and the command line, run as subprocesses with tiny world counts."""

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


def run(*args: str, returncode: int = 0) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert proc.returncode == returncode, (
        f"{args} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return proc


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def test_cartpole_demo() -> None:
    out = run("examples/cartpole_demo.py", "--num-worlds", "8", "--steps", "50", "--device", "cpu").stdout
    assert "built 8 cartpole worlds on cpu" in out
    rate = re.search(r"400 world-steps in [\d.]+ s: ([\d,]+) world-steps/s", out)
    assert rate is not None, out
    assert _number(rate.group(1)) > 0
    # 8 worlds of random pushes for 50 steps: episodes (about 22 steps on average) must have ended.
    episodes = re.search(r"finished episodes: ([\d,]+), mean length ([\d.]+) steps", out)
    assert episodes is not None, out
    assert _number(episodes.group(1)) >= 8
    assert 8.0 <= float(episodes.group(2)) <= 50.0


def test_bench_cartpole_json(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    args = ["--num-worlds", "1", "8", "--steps", "20", "--repeats", "1", "--device", "cpu", "--json", str(path)]
    out = run("examples/benchmarks/bench_cartpole.py", *args).stdout
    assert re.search(r"^\s+8\s+[\d,]+\s+[\d,]+\s+[\d,]+\s+[\d.]+x\s+[\d.]+x\s+[\d.]+$", out, re.MULTILINE), out
    result = json.loads(path.read_text())
    assert result["device"] == "cpu"
    assert result["steps"] == 20 and result["repeats"] == 1
    assert {"warp", "torch", "numpy", "gymnasium"} <= set(result["versions"])
    assert [row["num_worlds"] for row in result["rows"]] == [1, 8]
    for row in result["rows"]:
        for key in ("engine_steps_per_s", "engine_eager_steps_per_s", "gymnasium_steps_per_s", "ratio"):
            assert row[key] > 0, (key, row)
        assert row["ratio"] == pytest.approx(row["engine_steps_per_s"] / row["gymnasium_steps_per_s"])
        assert row["ratio_with_draws"] > 0 and row["draw_s"] > 0
        assert all(len(row["seconds"][k]) == 1 for k in ("engine", "eager", "gymnasium"))
    assert result["build"] is None


def test_cli_envs() -> None:
    names = run("-m", "ecs", "envs").stdout.split()
    assert "cartpole" in names
    assert names == sorted(names)


def test_cli_profile() -> None:
    out = run("-m", "ecs", "profile", "cartpole", "--num-worlds", "4", "--steps", "5", "--device", "cpu").stdout
    assert out.startswith("profile: 4 worlds on cpu, 5 steps; captured step")
    for system in ("step_cartpole", "judge_cartpole", "observe_cartpole", "validate_actions"):
        assert re.search(rf"^\s+{system}\s+[\d.]+ us\s+[\d.]+%$", out, re.MULTILINE), (system, out)


def test_bench_hide_and_seek_json(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    args = ["--num-worlds", "2", "--steps", "2", "--repeats", "1", "--device", "cpu", "--cpu-threads", "1"]
    out = run("examples/benchmarks/bench_hide_and_seek.py", *args, "--json", str(path)).stdout
    assert "1 thread(s) share the worlds" in out, out
    result = json.loads(path.read_text())
    assert [row["num_worlds"] for row in result["rows"]] == [2]
    assert result["rows"][0]["env_steps_per_s"] > 0
    assert result["rows"][0]["agent_steps_per_s"] >= result["rows"][0]["env_steps_per_s"]
    bad = run("examples/benchmarks/bench_hide_and_seek.py", "--cpu-threads", "0", returncode=2)
    assert "--cpu-threads must be >= 1" in bad.stderr


def test_bench_hide_and_seek_takes_config_overrides(tmp_path: Path) -> None:
    """``--set KEY=VALUE``: the benchmark's env with those config fields, recorded in the JSON; a bad one stops it."""
    path = tmp_path / "bench.json"
    args = ["--num-worlds", "2", "--steps", "2", "--repeats", "1", "--device", "cpu", "--cpu-threads", "1"]
    args += ["--set", "physics_substeps=2", "--set", "solver_staged=true", "--profile", "2", "--json", str(path)]
    out = run("examples/benchmarks/bench_hide_and_seek.py", *args).stdout
    assert json.loads(path.read_text())["config"] == {"physics_substeps": 2, "solver_staged": True}
    assert "solver_velocity_1" in out and "solver_collide_2" not in out, out  # two substeps of staged launches
    bad = run("examples/benchmarks/bench_hide_and_seek.py", "--set", "physics_substeps", returncode=2)
    assert (
        "--set: a config override is KEY=VALUE (for example physics_substeps=4), got 'physics_substeps'" in bad.stderr
    )
    bad = run("examples/benchmarks/bench_hide_and_seek.py", "--set", "solver_layout=tiles", returncode=2)
    assert "--set: HideAndSeekConfig: solver_layout must be one of" in bad.stderr


def test_physics_budgets_reports_depth_and_rate_per_budget(tmp_path: Path) -> None:
    """Each budget's held-grab depths and its rate relative to the first; a bad budget stops it with its reason."""
    path = tmp_path / "budgets.json"
    args = ["--budgets", "8x2,2x1s4k0", "--seeds", "3", "--num-worlds", "4", "--steps", "8", "--rate-worlds", "4"]
    args += ["--rate-steps", "2", "--repeats", "1", "--device", "cpu", "--json", str(path)]
    out = run("examples/benchmarks/physics_budgets.py", *args).stdout
    rows = json.loads(path.read_text())["rows"]
    # Without "s", the env's default sleeping (16 substeps at rest); "k0": pairs at rest collided every substep.
    assert [(r["physics_substeps"], r["contact_passes"], r["sleep_substeps"]) for r in rows] == [(8, 2, 16), (2, 1, 4)]
    assert [r["keep_resting_contacts"] for r in rows] == [True, False]
    assert rows[0]["rate_ratio"] == 1.0 and rows[1]["env_steps_per_s"] > 0
    assert all(r["worst_depth_m"] >= r["p999_depth_m"] >= 0.0 and r["fastest_m_per_s"] > 0 for r in rows)
    assert re.search(r"^\s+8 x 2 ", out, re.MULTILINE) and re.search(r"^\s+2 x 1 s4 k0 ", out, re.MULTILINE), out
    for bad_budget in ("8x0", "8x2s", "8x2s-1", "8x2k1"):
        bad = run("examples/benchmarks/physics_budgets.py", "--budgets", bad_budget, returncode=2)
        assert "a budget is SUBSTEPSxPASSES with both >= 1 (e.g. 8x2), or with sleeping" in bad.stderr
        assert f"got '{bad_budget}'" in bad.stderr


def test_cli_bench() -> None:
    args = ["bench", "cartpole", "--num-worlds", "4", "--steps", "10", "--repeats", "2", "--device", "cpu"]
    out = run("-m", "ecs", *args).stdout
    rate = re.search(r"^([\d,]+) world-steps/s \(([\d.]+) us per step\)$", out, re.MULTILINE)
    assert rate is not None, out
    assert _number(rate.group(1)) > 0


def test_cli_graph() -> None:
    out = run("-m", "ecs", "graph", "cartpole", "--device", "cpu").stdout
    assert out.startswith("TaskGraph of 'cartpole': 4 tasks")
    phases = [line.strip() for line in out.splitlines() if line.startswith("  ") and not line.startswith("   ")]
    assert phases == ["PHYSICS", "REWARD", "RESET", "OBSERVE"]
    assert "step_cartpole" in out and "writes: world.reward, world.terminated" in out


def test_cli_graph_of_a_cuda_build_at_a_world_count() -> None:
    """``graph --build cuda --num-worlds N`` shows from a CPU machine what a CUDA build of N worlds binds: hide-and-
    seek's solver a block of 32 lanes per world, staged and cached, below ``solver_world_from``, a thread per world
    staged from there; the CPU build the whole kernel, named where its kernel has another name."""
    from systems.physics import AUTO_WORLD_FROM

    def solver_lines(*args: str) -> list[str]:
        out = run("-m", "ecs", "graph", "hide_and_seek", "--device", "cpu", *args).stdout
        return [line.strip() for line in out.splitlines() if "solver_collide_0 " in line or "step_bodies " in line]

    block = solver_lines("--build", "cuda", "--num-worlds", str(AUTO_WORLD_FROM - 1))
    assert block == ["[2] solver_collide_0 (world, kernel step_bodies_collide_block_cached, blocks of 32)"], block
    thread = solver_lines("--build", "cuda", "--num-worlds", str(AUTO_WORLD_FROM))
    assert thread == ["[2] solver_collide_0 (world, kernel step_bodies_collide)"], thread
    assert solver_lines() == solver_lines("--build", "cpu", "--num-worlds", "5") == ["[2] step_bodies (world)"]
    out = run("-m", "ecs", "graph", "hide_and_seek", "--device", "cpu", "--build", "cuda").stdout
    assert out.rstrip().endswith("(as a CUDA build of 1 world binds it)")
    proc = run("-m", "ecs", "graph", "cartpole", "--build", "tpu", returncode=2)
    assert "invalid choice: 'tpu'" in proc.stderr


def test_cli_unknown_env_is_a_clean_error() -> None:
    proc = run("-m", "ecs", "graph", "no_such_env", returncode=1)
    assert "error: unknown environment 'no_such_env'" in proc.stderr
    assert "cartpole" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_state_describes_a_saved_state_and_whether_this_engine_loads_it(tmp_path: Path) -> None:
    """``state FILE`` names what a file written by ``sim.save`` holds; ``--load`` builds its env with the config it
    was saved with (force_mag 5 here; hide-and-seek's old file unstaged), loads it, names the arrays an earlier
    engine's file had brought across and steps on. A config this env cannot take, a damaged file or an unknown env
    is an error that says so, exit status 1."""
    import ecs
    import envs

    sim = ecs.BatchSim(envs.make("cartpole", force_mag=5.0), 3, device="cpu", seed=2)
    sim.step()
    path = tmp_path / "cartpole.npz"
    sim.save(path)
    out = run("-m", "ecs", "state", str(path)).stdout
    assert f"{path}: env 'cartpole', 3 worlds, seed 2, world offset 0, format version 1;" in out
    assert "loads" not in out  # only described without --load
    out = run("-m", "ecs", "state", str(path), "--load", "--steps", "4").stdout
    assert "loads into 'cartpole' on cpu, every array as saved" in out and "stepped on 4 steps" in out

    old = ROOT / "tests" / "ecs" / "data" / "hide_and_seek_856f1fd.npz"
    out = run("-m", "ecs", "state", str(old), "--load", "--steps", "2").stdout
    assert "env 'hide_and_seek', 2 worlds, seed 4" in out
    assert "brought across from an earlier form: table/body/broadphase_reach, table/body/sleep_count" in out
    assert "stepped on 2 steps" in out

    state = ecs.checkpoint.load_state(path)
    for label, edited, message in (
        (
            "gust",
            dict(state, config={**state["config"], "gust": 1.0}),
            "gust (saved, not a field of this env's config)",
        ),
        ("nowhere", dict(state, env="no_such_env"), "error: unknown environment 'no_such_env'"),
    ):
        bad = tmp_path / f"{label}.npz"
        ecs.checkpoint.save_state(edited, bad)
        proc = run("-m", "ecs", "state", str(bad), "--load", returncode=1)
        assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a state")
    proc = run("-m", "ecs", "state", str(junk), returncode=1)
    assert "is not a saved BatchSim state" in proc.stderr and "Traceback" not in proc.stderr
