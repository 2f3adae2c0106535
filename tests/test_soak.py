"""Soak: 10^6 world-steps of hide-and-seek with random actions (examples/soak.py), checked as it runs."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def soak(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``examples/soak.py`` on the CPU without its progress bar, with ``args``."""
    cmd = [sys.executable, "examples/soak.py", *args, "--device", "cpu", "--no-progress"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_a_million_hide_and_seek_world_steps(tmp_path):
    out = tmp_path / "soak.json"
    r = soak("--world-steps", "1000000", "--num-worlds", "256", "--json", str(out), timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads(out.read_text())
    assert summary["problem"] is None
    assert summary["world_steps"] >= 1_000_000
    assert summary["episodes_finished"] >= 256 * 10  # many same-step resets and new levels


def test_soak_reports_a_violation(tmp_path):
    """The checks can fail: an impossible speed limit is reported with the step and exit code 1."""
    out = tmp_path / "soak.json"
    r = soak("--world-steps", "640", "--num-worlds", "8", "--check-every", "20", "--max-speed", "0", "--json", str(out))
    assert r.returncode == 1
    assert "FAILED: step 20: a body moves at" in r.stdout
    assert json.loads(out.read_text())["problem"].startswith("step 20")


def _soak_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("soak_example", os.path.join(ROOT, "examples", "soak.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sticky_actions_hold_for_their_mean_steps():
    """``--policy sticky``: an agent draws its move, grab and lock again about once per ``hold`` steps, all three
    together, and keeps them in between; ``uniform`` draws every step."""
    import torch

    import ecs
    import envs

    soak = _soak_module()
    sim = ecs.BatchSim(envs.make("hide_and_seek"), 16, device="cpu", capture=False)
    g = torch.Generator().manual_seed(5)
    soak.random_actions(sim, g)
    for hold, low, high in ((1.0, 0.99, 1.0), (10.0, 0.07, 0.13), (40.0, 0.015, 0.035)):
        before = {k: v.clone() for k, v in sim.actions.items()}
        changed = torch.zeros(16, 6, dtype=torch.int64)
        keys_moved = torch.zeros(16, 6, dtype=torch.int64)
        for _ in range(300):
            soak.random_actions(sim, g, hold)
            moved = [(sim.actions[k] != before[k]).reshape(16, 6, -1).any(-1) for k in ("move", "grab", "lock")]
            changed += moved[0] | moved[1] | moved[2]
            keys_moved += moved[1].long() + moved[2].long()
            before = {k: v.clone() for k, v in sim.actions.items()}
        rate = changed.sum().item() / (300 * 16 * 6)
        assert low <= rate <= high, (hold, rate)
        if hold > 1.0:
            # grab and lock change (half the time each) only with the move, which nearly always changes on a draw
            assert keys_moved.sum().item() <= 1.2 * changed.sum().item()
    with pytest.raises(SystemExit):
        soak.main(["--policy", "sticky", "--hold", "0.5", "--no-progress"])


def test_soak_takes_a_config_and_a_sticky_policy(tmp_path):
    out = tmp_path / "soak.json"
    args = ["--world-steps", "400", "--num-worlds", "4", "--check-every", "20", "--policy", "sticky", "--hold", "8"]
    r = soak(*args, "--set", "physics_substeps=4", "--set", "contact_passes=3", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(sticky, physics_substeps=4, contact_passes=3)" in r.stdout
    summary = json.loads(out.read_text())
    assert summary["policy"] == "sticky" and summary["hold"] == 8.0 and summary["problem"] is None
    assert summary["config"] == {"physics_substeps": 4, "contact_passes": 3}
    # where the deepest contact was seen: a check's step, a world of the run, two bodies of named kinds
    at = summary["deepest_contact_at"]
    assert at["step"] % 20 == 0 and 0 <= at["world"] < 4 and at["bodies"][0] != at["bodies"][1], at
    assert set(at["kinds"]) <= {"floor", "wall", "box", "ramp", "hider", "seeker"}, at
    assert f"world {at['world']}, {' on '.join(at['kinds'])})" in r.stdout
    # 100 steps of 4 worlds, checked every 20th: 20 world-steps checked, and how many of them went deep
    assert summary["checked_world_steps"] == 20
    deeper = summary["world_steps_deeper"]
    assert set(deeper) == {"10mm", "20mm"} and 20 >= deeper["10mm"] >= deeper["20mm"] >= 0, deeper
    assert f"of 20 world-steps checked, {deeper['10mm']} deeper than 10 mm, {deeper['20mm']} deeper than 20" in r.stdout
    r = soak("--set", "physics_substep=4")
    assert r.returncode == 2 and "--set: unknown config key(s) ['physics_substep']" in r.stderr, r.stderr


def test_soak_counts_the_world_steps_that_go_deep():
    """Each check counts the worlds whose deepest live contact is past 10 and 20 mm (dead rows never count)."""

    import ecs
    import envs

    soak = _soak_module()
    sim = ecs.BatchSim(envs.make("hide_and_seek"), 4, device="cpu", seed=2, capture=False)
    sim.step()
    alive, depth = sim.tensor("contact", "alive"), sim.tensor("contact", "contact_depth")
    depth.clamp_(max=0.005)
    for world, deepest in enumerate((0.015, 0.025, 0.004, 0.2)):
        depth[world, 0] = deepest
        alive[world, 0] = 1
    alive[3, 0] = 0  # a dead row, however deep, does not count
    worst = {"speed": 0.0, "depth": 0.0}
    for _ in range(2):
        assert soak.check(sim, 1, 1.0, 100.0, worst) is None
    assert worst["checked"] == 8 and worst["deeper"] == {10: 4, 20: 2}


@pytest.mark.parametrize("corner", [(2.95, 0.0), (0.4, -3.2), (-2.91, 2.8)])
def test_soak_reports_a_body_through_the_outside_walls(corner):
    """In a level with outside walls, a dynamic body whose centre is past their inner faces (2.9 m from the centre)
    fails the check, named with its world and row and how far out; the levels as they were, a body put back, and a
    body run off a floor without outside walls (as OpenAI's agents may) pass."""
    import torch

    import ecs
    import envs
    from envs.hide_and_seek import Kind

    soak = _soak_module()
    worst = {"speed": 0.0, "depth": 0.0}
    for walls in (1.0, 0.0):
        sim = ecs.BatchSim(envs.make("hide_and_seek", outside_walls_prob=walls), 3, device="cpu", seed=2, capture=False)
        sim.step()
        assert soak.check(sim, 1, 1.0, 100.0, worst) is None
        row = int(torch.nonzero(sim.tensor("body", "kind")[1] == int(Kind.BOX))[0, 0])
        position = sim.tensor("body", "position")
        inside = position[1, row].clone()
        position[1, row, 0], position[1, row, 1] = corner
        problem = soak.check(sim, 1, 1.0, 100.0, worst)
        if walls:
            past = max(abs(c) for c in corner) - 2.9
            assert (
                problem
                == f"a box's centre (world 1, body {row}) is {past:.3f} m past the inner face of the outside walls"
            )
        else:
            assert problem is None
        position[1, row] = inside
        assert soak.check(sim, 1, 1.0, 100.0, worst) is None


def sweep(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``examples/soak_sweep.py`` on the CPU without its progress bar, with ``args``."""
    cmd = [sys.executable, "examples/soak_sweep.py", *args, "--device", "cpu", "--no-progress"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_soak_sweep_tables_each_config_and_names_what_failed(tmp_path):
    """Every config soaks in a process of its own to its end: each row holds its figures and the verdict against the
    limits (an impossible depth limit fails every config that ran), a config the env refuses is a row naming why,
    and the table, JSON and plot are written; exit 1 when any config failed, 0 when all passed."""
    small = ["--world-steps", "320", "--num-worlds", "16", "--jobs", "2"]
    configs = ["--config", "default", "--config", "box_mass=0.5 gravity=-20.0", "--config", "not_a_field=1"]
    r = sweep(*small, *configs, "--max-depth", "-1", "--out", str(tmp_path / "a"))
    assert r.returncode == 1, r.stdout + r.stderr
    rows = json.loads((tmp_path / "a" / "sweep.json").read_text())["rows"]
    assert [row["config"] for row in rows] == ["default", "box_mass=0.5 gravity=-20.0", "not_a_field=1"]
    for row in rows[:2]:
        assert row["world_steps"] == 320 and row["device"] == "cpu" and row["problem"] is None
        assert row["verdict"].startswith("contact ") and "(limit -1000)" in row["verdict"]
    assert rows[1]["config"] != rows[0]["config"] and rows[1]["max_body_speed"] > 0.0
    assert json.loads((tmp_path / "a" / "sweep.json").read_text())["settings"]["max_depth"] == -1.0
    assert rows[2]["verdict"] == "error" and "unknown config key(s) ['not_a_field']" in rows[2]["error"]
    table = (tmp_path / "a" / "sweep.md").read_text()
    assert "| `box_mass=0.5 gravity=-20.0` | 320 |" in table and "did not run: " in table
    assert (tmp_path / "a" / "sweep.png").stat().st_size > 10_000
    # Two seeds: a soak each, merged into the config's row (the deepest of them, both listed), and seed 0 alone is
    # the first run above.
    r = sweep(*small, "--config", "default", "--seeds", "2", "--max-depth", "1.0", "--out", str(tmp_path / "b"))
    assert r.returncode == 0, r.stdout + r.stderr
    [row] = json.loads((tmp_path / "b" / "sweep.json").read_text())["rows"]
    assert row["verdict"] == "ok" and row["world_steps"] == 640 and [s["seed"] for s in row["seeds"]] == [0, 1]
    assert row["max_contact_depth"] == max(s["max_contact_depth"] for s in row["seeds"])
    assert row["max_body_speed"] == max(s["max_body_speed"] for s in row["seeds"])
    assert row["seeds"][0]["max_contact_depth"] == rows[0]["max_contact_depth"]
    assert row["seeds"][0]["max_contact_depth"] != row["seeds"][1]["max_contact_depth"]  # other levels, other play
    table = (tmp_path / "b" / "sweep.md").read_text()
    assert "seeds 0..1" in table and f"seed {row['seed']}: " in table
    # A config that runs past --timeout is a row saying so, and the sweep goes on (importing torch takes longer).
    r = sweep(*small, "--config", "default", "--timeout", "0.5", "--out", str(tmp_path / "d"))
    assert r.returncode == 1, r.stdout + r.stderr
    [row] = json.loads((tmp_path / "d" / "sweep.json").read_text())["rows"]
    assert row["verdict"] == "error" and row["error"] == "timed out after 0.5 s"
    r = sweep("--config", "box_mass", "--out", str(tmp_path / "c"))
    assert r.returncode == 2 and "space-separated KEY=VALUE pairs, got 'box_mass'" in r.stderr, r.stderr


def test_soak_sweep_against_another_checkout_puts_its_figures_beside(tmp_path):
    """``--against DIR``: each config soaks in that checkout too, beside this one's; against this same tree (CPU runs
    are deterministic) every figure is the same on both sides. A folder that is no checkout is refused."""
    small = ["--world-steps", "160", "--num-worlds", "8", "--jobs", "2", "--config", "box_mass=0.5"]
    r = sweep(*small, "--against", ROOT, "--out", str(tmp_path / "a"))
    assert r.returncode == 0, r.stdout + r.stderr
    [row] = json.loads((tmp_path / "a" / "sweep.json").read_text())["rows"]
    there = row["against"]
    for key in ("world_steps", "max_contact_depth", "max_body_speed", "deepest_contact_at", "verdict"):
        assert row[key] == there[key], key
    depth = f"{1000 * row['max_contact_depth']:.1f}"
    assert f"| `box_mass=0.5` | 160 | {depth} / {depth} |" in (tmp_path / "a" / "sweep.md").read_text()
    r = sweep("--against", str(tmp_path), "--out", str(tmp_path / "b"))
    assert r.returncode == 2 and "--against takes a checkout of this project" in r.stderr, r.stderr


def _replay_module():
    import importlib.util

    sys.path.insert(0, os.path.join(ROOT, "examples"))
    spec = importlib.util.spec_from_file_location(
        "soak_replay_example", os.path.join(ROOT, "examples", "soak_replay.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_soak_replay_resumes_a_world_alone_as_it_stepped_among_the_others():
    """``examples/soak_replay.py --resume``: world 5 of an 8-world sticky soak, lifted into a simulation of its own
    at step 30, steps on bit for bit as it did among the others; with 4 substeps from then on it does not, and
    ``--split`` steps it a substep at a time."""
    replay = _replay_module()
    common = dict(seed=1, num_worlds=8, world=5, at=30, steps=4, top=4, watch=list(range(30)))
    same = replay.replay(**common, resume=True)
    assert [e["step"] for e in same["original"]] == [31, 32, 33, 34]
    assert any(e["contacts"] for e in same["original"])
    assert same["resumed"] == same["original"]
    other = replay.replay(**common, resume=True, then={"physics_substeps": 4})
    assert other["original"] == same["original"]
    moved = [b["position"] for e in other["resumed"] for b in e["bodies"]]
    assert moved != [b["position"] for e in same["original"] for b in e["bodies"]]
    split = replay.replay(**{**common, "steps": 2}, resume=True, split=True)
    assert [(e["step"], e["substep"]) for e in split["resumed"]] == [(s, i) for s in (31, 32) for i in range(8)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"world": 8}, "is not a world of the soak's 8"),
        ({"then": {"physics_substeps": 4}}, "add --resume"),
        ({"watch": [99]}, "--watch names body rows"),
        ({"steps": 0}, "--steps at least 1"),
        ({"hold": 0.5}, "--hold is a mean number of steps"),
    ],
)
def test_soak_replay_refuses_bad_requests(change, message):
    replay = _replay_module()
    with pytest.raises(ValueError, match=message):
        replay.replay(**{"seed": 0, "num_worlds": 8, "world": 0, "at": 1, **change})
