"""``systems.solver_depth``: the contact solve's work and critical path, against hand counts of the model its
docstring states and against scenes whose levels are known (a stack: one manifold a level; a row of cubes apart on
the floor: one level of them all; the 10-cube pyramid: levels that share cubes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from systems import solver
from systems.geometry import ShapeType
from systems.physics import BodySpec, PhysicsConfig
from systems.solver_depth import depth, summary, world_depth

from . import scene

ROOT = Path(__file__).resolve().parents[2]
HALF = 0.25
FIRST, LAST, STEPS = int(solver.FIRST_SWEEPS), int(solver.NORMAL_SWEEPS), int(solver.LEVEL_STEPS)


def tables(jacobi: bool):
    """Three manifolds of 4, 4 and 2 points (pairs (0,1), (0,2), (1,3)), the first two one level."""
    pairs = [(0, 1)] * 4 + [(0, 2)] * 4 + [(1, 3)] * 2
    a, b = (np.array(x, dtype=np.int32) for x in zip(*pairs, strict=True))
    order = np.array([0, 4, 8], dtype=np.int32)
    levels = np.zeros(3, dtype=np.int32)
    levels[0] = 2 * 2 + int(jacobi)  # ends at order position 2
    levels[2] = 3 * 2
    return a, b, order, levels


def test_work_and_path_follow_the_documented_count():
    assert solver.CONTACT_PASSES == 2  # the hand counts below take a first pass and a last one
    both = FIRST + LAST
    r = world_depth(*tables(False), count=10)
    assert (r["rows"], r["manifolds"], r["levels"], r["jacobi_levels"]) == (10, 3, 2, 0)
    assert r["work"] == 10 * both
    assert r["path"] == 4 * both + 2 * both  # the level of two 4-point manifolds waits for one of them
    assert world_depth(*tables(False), count=10, lanes=1)["path"] == r["work"]  # one lane does it all
    j = world_depth(*tables(True), count=10)
    assert j["jacobi_levels"] == 1
    assert j["work"] == 8 * (FIRST + STEPS * LAST) + 2 * both
    assert j["path"] == 4 * (FIRST + STEPS * LAST) + 2 * both


@pytest.mark.parametrize("passes", [1, 3, 4])
def test_each_pass_before_the_last_adds_a_linearised_pass(passes):
    """``contact_passes``: ``passes - 1`` passes of FIRST sweeps (a Jacobi level once each), then the last."""
    both = (passes - 1) * FIRST + LAST
    r = world_depth(*tables(False), count=10, passes=passes)
    assert r["work"] == 10 * both and r["path"] == 6 * both
    j = world_depth(*tables(True), count=10, passes=passes)
    assert j["work"] == 8 * ((passes - 1) * FIRST + STEPS * LAST) + 2 * both


def cube(x: float, z: float) -> BodySpec:
    return BodySpec(ShapeType.BOX, size=(HALF,) * 3, position=(x, 0.0, z))


def settled(bodies: list[BodySpec], steps: int = 10, passes: int = solver.CONTACT_PASSES):
    sim = scene.build(bodies, PhysicsConfig(max_bodies=16, contact_passes=passes), num_worlds=2)
    for _ in range(steps):
        sim.step()
    return depth(sim)


@pytest.mark.parametrize("top_first,passes", [(False, 2), (True, 2), (False, 3)])
def test_a_stack_is_a_level_per_cube_and_no_lane_shortens_it(top_first, passes):
    cubes = [cube(0.01 * i, HALF + 2 * HALF * i) for i in range(3)]
    rows = settled([scene.floor(), *(cubes[::-1] if top_first else cubes)], passes=passes)
    for r in rows:
        assert (r["manifolds"], r["levels"], r["jacobi_levels"]) == (3, 3, 0)
        assert r["path"] == r["work"] == r["rows"] * ((passes - 1) * FIRST + LAST)


def test_cubes_apart_on_the_floor_are_one_level_the_lanes_share():
    rows = settled([scene.floor(), *(cube(x, HALF) for x in (-1.5, -0.5, 0.5, 1.5))])
    for r in rows:
        assert (r["manifolds"], r["levels"], r["jacobi_levels"]) == (4, 1, 0)
        assert r["work"] == r["rows"] * (FIRST + LAST)
        assert r["path"] * 4 == r["work"]  # four manifolds of as many points, side by side
    assert summary(rows)["parallelism"] == pytest.approx(4.0)


def test_the_pyramid_has_levels_solved_by_jacobi_steps():
    cubes = []
    for level, n in enumerate((4, 3, 2, 1)):
        cubes += [cube((k - (n - 1) / 2) * 2 * HALF, HALF + 2 * HALF * level) for k in range(n)]
    for r in settled([scene.floor(), *cubes]):
        assert r["jacobi_levels"] >= 1 and r["levels"] >= 4
        assert r["path"] < r["work"]


def test_the_command_summarises_hide_and_seek(tmp_path):
    out = tmp_path / "depth.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    script = str(ROOT / "examples" / "benchmarks" / "solver_depth.py")
    cmd = [sys.executable, script, "--num-worlds", "4", "--steps", "25", "--json", str(out)]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    assert r["samples"] == 8 and r["manifolds"] > 0 and 0 < r["path"] <= r["work"] and r["parallelism"] >= 1.0
    bad = subprocess.run([*cmd[:2], "--steps", "5"], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "--steps >= 21" in bad.stderr
