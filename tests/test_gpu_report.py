"""``python -m ecs gpu-report`` runs on CPU at toy sizes, so it works the first time a GPU appears: every
stage lands in report.json and report.md, a failing stage is recorded without stopping the run, and
``--resume`` runs only what is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from systems.solver import SOLVER_STAGES, STAGED

ROOT = Path(__file__).resolve().parents[1]


def gpu_report(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "ecs", "gpu-report", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_stages_land_in_the_report_and_resume_runs_only_the_rest(tmp_path):
    out = tmp_path / "report"
    stages = "device,identity,soak,hide_and_seek,solver,envs,registers,policy_step,dist,tests"
    hs = ("--hide-and-seek", "solver_staged=true")  # the identity and hide_and_seek stages' config
    p = gpu_report("--out", str(out), "--device", "cpu", "--quick", "--stages", stages, *hs)
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "report.json").read_text())
    assert [s for s in report["stages"]] == stages.split(",")
    assert all(e["status"] == "ok" for e in report["stages"].values()), report["stages"]
    assert set(report["stages"]["device"]["result"]["profilers"]) == {"ncu", "nsys", "cuobjdump", "nvdisasm"}
    identity = report["stages"]["identity"]["result"]
    assert identity["cartpole"]["identical"] and identity["hide_and_seek"]["identical"]
    assert identity["hide_and_seek"]["episodes_begun"] >= 2 * identity["hide_and_seek"]["num_worlds"]  # resets ran
    rows = report["stages"]["hide_and_seek"]["result"]["throughput"]
    assert {r["wide_sensors"] for r in rows} == {True, False} and all(r["env_steps_per_s"] > 0 for r in rows)
    assert {r["solver_kernel"] for r in rows} == {"step_bodies_solve"}  # staged, a thread per world on CPU
    assert "The solver's solve kernel at each count: 4 worlds `step_bodies_solve`" in (out / "report.md").read_text()
    assert report["stages"]["hide_and_seek"]["result"]["config"] == {"solver_staged": True}
    assert "solver_collide_0" in report["stages"]["hide_and_seek"]["result"]["profile"]
    budgets = report["stages"]["hide_and_seek"]["result"]["budgets"]
    assert [(r["physics_substeps"], r["contact_passes"]) for r in budgets] == [
        (8, 2),
        (4, 2),
        (8, 2),
        (8, 2),
        (6, 3),
        (6, 2),
        (4, 4),
        (8, 1),
    ]
    assert all(r["num_worlds"] == 4 and r["env_steps_per_s"] > 0 for r in budgets)
    # OpenAI's step but for the second row, Madrona's (1/30 s, gravity -9.8); each with the simulated time it covers.
    assert [r["physics_dt"] for r in budgets] == pytest.approx(
        [0.075, 1.0 / 30.0, 0.075, 0.075, 0.075, 0.075, 0.075, 0.075]
    )
    assert [r["madrona_step"] for r in budgets] == [False, True, False, False, False, False, False, False]
    assert budgets[1]["gravity"] == -9.8
    assert [r["sleeping"] for r in budgets] == [True, True, False, True, True, True, True, True] and budgets[2][
        "sleep_substeps"
    ] == 0
    assert [r["kept_rows"] for r in budgets] == [True, True, False, False, True, True, True, True]
    assert budgets[3]["keep_resting_contacts"] is False
    assert all(r["simulated_s_per_s"] == pytest.approx(r["env_steps_per_s"] * r["physics_dt"]) for r in budgets)
    md = (out / "report.md").read_text()
    assert (
        "| 4 x 4 | 0.075 s | 4 |" in md
        and "| 4 x 2 | 0.03333 s, Madrona's | 4 |" in md
        and "| 8 x 1 | 0.075 s | 4 |" in md
    )
    assert "| 8 x 2 | 0.075 s, no sleeping | 4 |" in md and "| 8 x 2 | 0.075 s, rows not kept | 4 |" in md
    solver = report["stages"]["solver"]["result"]
    assert [r["layout"] for r in solver["rows"]] == [
        "world, no FMA",
        "block, no FMA",
        "block, staged, cached",
        "world, staged",
        "world, staged, ordered",
        "block, staged, 8 lanes",
        "block, staged, 8 lanes, ordered",
        "block, staged",
        "block",
        "block, cached",
        "world",
        "world, interleaved, staged",
    ]
    labels = [r["layout"] for r in solver["rows"] if r["layout"] not in ("world, no FMA", "world")]
    assert solver["identical"] == {"4": dict.fromkeys(labels, True)}
    sorted_twin = {label: label.replace(", ordered", "") for label in labels if ", ordered" in label}
    assert solver["references"] == {
        "4": {label: sorted_twin.get(label, "world, no FMA" if "FMA" in label else "world") for label in labels}
    }
    assert [(r["scene"], r["layout"], r["num_worlds"]) for r in solver["stages"]] == [
        ("random level", "block", 4),
        ("random level", "world", 4),
        ("agent alone", "block", 4),
        ("box and agent", "block", 4),
    ]
    # The fixed layouts hold the contact rows they are chosen for: a sphere on the floor, and a cube's four more.
    assert [r["contact_rows"] for r in solver["stages"][2:]] == [1.0, 5.0]
    for r in solver["stages"]:
        assert list(r["share"]) == list(SOLVER_STAGES) and abs(sum(r["share"].values()) - 1.0) < 1e-9, r
        assert all(v > 0 for v in r["cycles_per_world_step"].values()), r
    assert [(r["scene"], r["layout"]) for r in solver["staged_profile"]] == [
        ("random level", "block"),
        ("agent alone", "block"),
        ("box and agent", "block"),
        ("random level", "world"),  # a thread per world at the largest count, last
    ]
    for staged in solver["staged_profile"]:
        assert list(staged["share"]) == list(STAGED) and all(v > 0 for v in staged["seconds_per_step"].values())
        assert sum(staged["seconds_per_step"].values()) < staged["step_seconds"], staged
    benches = report["stages"]["envs"]["result"]
    assert set(benches) >= {"cartpole", "escape_room", "foraging", "hide_and_seek", "predator_prey"}
    assert all(r["rc"] == 0 and "world-steps/s" in r["tail"] for runs in benches.values() for r in runs)
    assert "skipped" in report["stages"]["tests"]["result"] and "skipped" in report["stages"]["registers"]["result"]
    soak = report["stages"]["soak"]["result"]
    [run] = soak["runs"]
    assert (run["num_worlds"], run["steps"], run["world_steps"], run["problem"]) == (8, 40, 320, None)
    assert run["passed"] == (run["max_contact_depth"] <= 0.05 and run["max_body_speed"] <= 50.0)
    assert run["deepest_contact_at"]["step"] % 10 == 0 and 0 <= run["deepest_contact_at"]["world"] < 8
    md = (out / "report.md").read_text()
    assert "## soak: ok" in md and "- 8 worlds, 320 world-steps: deepest contact " in md
    assert "## identity: ok" in md and "| num_worlds | wide sensors |" in md and "world-steps/s" in md
    assert "| num_worlds | solver layout |" in md and "| scene | layout | num_worlds | contact rows | reach |" in md
    assert "| scene | layout | num_worlds | collide | prepare | solve | velocity | eager step (us) |" in md
    assert (out / "hide_and_seek_throughput.png").stat().st_size > 1000
    before = report["stages"]["identity"]["seconds"]
    p = gpu_report("--out", str(out), "--device", "cpu", "--quick", "--resume", "--stages", "identity,device")
    assert p.returncode == 0 and "identity ..." not in p.stderr  # already done: not run again
    assert json.loads((out / "report.json").read_text())["stages"]["identity"]["seconds"] == before


def test_a_solver_variant_that_hangs_ends_its_stage_with_what_was_measured(tmp_path):
    """The watchdog of the solver stage: past ``--variant-timeout-s`` a variant is recorded as hanging and the
    stage ends, done (a resumed run does not try it again)."""
    out = tmp_path / "report"
    # 10 ms: less than building any simulation takes, with its kernels compiled or not.
    p = gpu_report("--out", str(out), "--device", "cpu", "--quick", "--stages", "solver", "--variant-timeout-s", "0.01")
    assert p.returncode == 0, p.stderr
    entry = json.loads((out / "report.json").read_text())["stages"]["solver"]
    assert entry["status"] == "ok"
    rows = entry["result"]["rows"]
    assert rows[-1]["error"] == "did not finish in 0.01 s (hangs?)" and rows[-1]["layout"] == "world, no FMA", rows
    assert "did not finish" in (out / "report.md").read_text()


def test_the_solver_stage_times_the_forms_it_is_given(tmp_path):
    """``--solver-forms``: the solver stage times those forms at those counts, in that order, each state checked
    against a thread per world's of its kind (without FMA, against the one without)."""
    out = tmp_path / "report"
    forms = "world:nofma@4+5,block:nofma@4,block:nofma:interleaved@5,world@4,block:l8@5,world:staged:ordered@4"
    p = gpu_report("--out", str(out), "--device", "cpu", "--quick", "--stages", "solver", "--solver-forms", forms)
    assert p.returncode == 0, p.stderr
    solver = json.loads((out / "report.json").read_text())["stages"]["solver"]["result"]
    assert [(r["layout"], r["num_worlds"]) for r in solver["rows"]] == [
        ("world, no FMA", 4),
        ("world, no FMA", 5),
        ("block, no FMA", 4),
        ("block, interleaved, no FMA", 5),
        ("world", 4),
        ("block, 8 lanes", 5),
        ("world, staged, ordered", 4),
    ]
    assert solver["identical"] == {
        "4": {"block, no FMA": True, "world, staged, ordered": True},
        "5": {"block, interleaved, no FMA": True},
    }
    assert solver["stages"] == [] and solver["staged_profile"] == []  # the stage shares run with the full list only
    for bad in ("block:staged", "warp@4", "block:fast@4", "block@0", "block:64:128@4", "block:l5@4", "block:l4:l8@4"):
        p = gpu_report("--out", str(out), "--stages", "solver", "--solver-forms", bad)
        assert p.returncode != 0 and "--solver-forms takes LAYOUT[:REGISTERS]" in p.stderr, bad


def test_a_failing_stage_is_recorded_and_the_run_goes_on(tmp_path):
    out = tmp_path / "report"
    p = gpu_report("--out", str(out), "--device", "cuda:7", "--quick", "--stages", "device,identity")
    assert p.returncode == 0, p.stderr
    stages = json.loads((out / "report.json").read_text())["stages"]
    assert set(stages) == {"device", "identity"}
    assert all(e["status"].startswith("failed") and "cuda:7" in e["error"] for e in stages.values())
    assert "## identity: failed" in (out / "report.md").read_text()
    bad = gpu_report("--out", str(out), "--stages", "device,speed")
    assert bad.returncode != 0 and "unknown stage(s) ['speed']" in bad.stderr
    bad = gpu_report("--out", str(out), "--stages", "device", "--limit", "speed=10")
    assert bad.returncode != 0 and "--limit takes STAGE=SECONDS" in bad.stderr
    bad = gpu_report("--out", str(out), "--stages", "device", "--hide-and-seek", "solver_cach=true")
    assert bad.returncode != 0 and "--hide-and-seek: unknown config key(s) ['solver_cach']" in bad.stderr


def test_stage_logs_and_junit_failures_reach_the_report(tmp_path):
    """Each stage's output lands in OUT/logs/NAME.log (kept when a stage runs out of time), and the
    tests stage lists every failing test with its message from pytest's JUnit XML."""
    from ecs.gpu_report import _junit_failures

    out = tmp_path / "report"
    p = gpu_report("--out", str(out), "--device", "cpu", "--quick", "--stages", "identity,dist")
    assert p.returncode == 0, p.stderr
    assert "identity cartpole run 1: 30 steps done" in (out / "logs" / "identity.log").read_text()
    assert "world-steps/s" in (out / "logs" / "dist.log").read_text()  # a child command's output, live
    xml = tmp_path / "t.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.a" name="test_ok[cuda:0]"/>'
        '<testcase classname="tests.a" name="test_bad[cuda:0]"><failure message="TypeError: can\'t convert cuda:0"/>'
        "</testcase>"
        '<testcase classname="tests.b" name="test_err"><error message="fixture blew up"/></testcase>'
        '<testcase classname="tests.b" name="test_skip"><skipped message="no mujoco"/></testcase>'
        "</testsuite></testsuites>"
    )
    got = _junit_failures(str(xml))
    assert got["counts"] == {"passed": 1, "failed": 2, "skipped": 1}
    assert [f["test"] for f in got["failures"]] == ["tests.a::test_bad[cuda:0]", "tests.b::test_err"]
    assert "can't convert" in got["failures"][0]["message"]
    assert "did not finish" in _junit_failures(str(tmp_path / "missing.xml"))["junit"]


def test_the_cartpole_stage_measures_its_two_targets_first(tmp_path):
    """The fused step against the bandwidth bound and the host time of a step, from a run of their own before the
    sweeps, so a stage cut short still has them; report.md states them beside the targets."""
    out = tmp_path / "report"
    p = gpu_report("--out", str(out), "--device", "cpu", "--quick", "--stages", "cartpole")
    assert p.returncode == 0, p.stderr
    result = json.loads((out / "report.json").read_text())["stages"]["cartpole"]["result"]
    assert list(result)[:2] == ["targets", "targets_results"] and result["targets"]["rc"] == 0
    bandwidth, overhead = result["targets_results"]["bandwidth"], result["targets_results"]["overhead"]
    assert 0 < bandwidth["fraction_of_bound"] < 1 and bandwidth["host_us_per_step"] > 0
    assert overhead["engine_captured_us_per_step"] > 0
    assert result["suite_results"]["bandwidth"] is None  # measured once, in the targets' run
    md = (out / "report.md").read_text()
    assert f"{bandwidth['fraction_of_bound']:.0%} of the bandwidth bound (target: 50 %)" in md


def test_a_kernel_cache_in_the_checkout_serves_the_stages(tmp_path):
    """With no WARP_CACHE_PATH set, the stages load kernels from the checkout's .wpcache where it exists (built
    beforehand with tests.cuda_codegen), and from Warp's own cache where it does not."""
    out = tmp_path / "report"
    cache = ROOT / ".wpcache"
    env = {k: v for k, v in os.environ.items() if k != "WARP_CACHE_PATH"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "ecs", "gpu-report", "--out", str(out), "--device", "cpu", "--stages", "device"]
    made = not cache.exists()
    if made:
        cache.mkdir()
    try:
        subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True)
    finally:
        if made:
            shutil.rmtree(cache)  # with the version folder Warp made in it
    result = json.loads((out / "report.json").read_text())["stages"]["device"]["result"]
    assert Path(result["kernel_cache"]).resolve().parent == cache.resolve()  # Warp keeps a folder per version in it
    env["WARP_CACHE_PATH"] = str(tmp_path / "elsewhere")
    subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True)
    result = json.loads((out / "report.json").read_text())["stages"]["device"]["result"]
    assert Path(result["kernel_cache"]).resolve().parent == (tmp_path / "elsewhere").resolve()


def test_the_soak_stage_fails_a_run_past_its_limits(tmp_path, monkeypatch):
    """The soak stage's verdict can fail: with a depth limit below any contact, the run is marked failed, while the
    figures it measured stay in the result."""
    import argparse

    from ecs import gpu_report as report

    monkeypatch.setattr(report, "SOAK_MAX_DEPTH", -1.0)
    args = argparse.Namespace(out=str(tmp_path), stage="soak", device="cpu", quick=True, hide_and_seek="")
    result = report.stage_soak(args)
    [run] = result["runs"]
    assert run["passed"] is False and run["problem"] is None and run["world_steps"] == 320
    assert result["max_depth"] == -1.0 and run["max_body_speed"] > 0.0


def test_a_stage_past_its_limit_leaves_its_stacks_in_its_log(tmp_path):
    """At a stage's time limit the parent asks it for its threads' stacks (SIGUSR1, answered by ``faulthandler``)
    before it kills it, so a stage stuck in native code still shows where; the report marks it timed out."""
    out = tmp_path / "report"
    p = gpu_report("--out", str(out), "--device", "cpu", "--quick", "--stages", "solver", "--limit", "solver=6")
    assert p.returncode == 0, p.stderr
    entry = json.loads((out / "report.json").read_text())["stages"]["solver"]
    assert entry["status"] == "timed out", entry
    assert "most recent call first" in (out / "logs" / "solver.log").read_text()
    # The report keeps the log's tail: the end of the dump, the stack's outermost frame (a stage stuck compiling kernels
    # dumps a deep stack, whose header lies further back).
    assert "_run_module_as_main" in entry["error"], entry["error"]


def test_a_running_stage_reports_its_stack_with_the_gil_held(capsys):
    """The reports of where a long stage is (``_report_stack``) come from a thread that reads the main thread's
    frames under the GIL: ``faulthandler``'s timer read them without it, and a stage died of SIGSEGV mid-dump."""
    import time

    from ecs.gpu_report import _report_stack

    def busy_here() -> None:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.5:  # Python frames coming and going, as while compiling kernels
            sum(range(100))

    stop = _report_stack(0.1)
    try:
        busy_here()
    finally:
        stop.set()
    err = capsys.readouterr().err
    assert err.count("] main thread:") >= 2 and "in busy_here" in err
