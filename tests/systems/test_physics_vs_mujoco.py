"""The physics scene suite (examples/benchmarks/physics_vs_mujoco.py) as tests: MuJoCo must meet each
scene's target (else the scene, not the solver, is wrong), and this engine must too; the targets it
misses today are strict xfails with the measured figures.

The stacks, free spin, walls and pressed bodies are tested on their own (without MuJoCo) in
test_physics_scenes.py; here are the scenes that need MuJoCo's figure or only it builds.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mujoco")

_PATH = Path(__file__).resolve().parents[2] / "examples" / "benchmarks" / "physics_vs_mujoco.py"
_spec = importlib.util.spec_from_file_location("physics_vs_mujoco", _PATH)
suite = importlib.util.module_from_spec(_spec)
sys.modules["physics_vs_mujoco"] = suite
_spec.loader.exec_module(suite)


def both(scene):
    return scene.metric(suite.run_ours(scene)), scene.metric(suite.run_mujoco(scene))


def test_the_suite_runs_and_writes_its_table(tmp_path):
    rows = suite.main(["--quick", "--out", str(tmp_path), "--no-plot"])
    groups = {r["group"] for r in rows}
    assert groups == {"stack", "pyramid", "free spin", "wall", "pressed", "ramp push", "push and release", "symmetry"}
    table = (tmp_path / "physics_vs_mujoco.md").read_text()
    assert table.count("\n") == len(rows) + 2 and "| ramp push | 10 N from the high end |" in table


def test_mujoco_meets_the_absolute_targets():
    """The reference itself: a 3-cube stack stands, spin keeps its energy, the symmetric scene stays symmetric."""
    assert both(suite.stack(3, 0.0, "top first", 2.0))[1] < 1.0
    assert both(suite.spin((0.0, 20.0, 0.0), 2.0))[1] < 1.0
    assert both(suite.symmetric(1.0))[1] < 1.0


@pytest.mark.parametrize("force", [10.0, 20.0, 40.0])
def test_ramp_pushed_at_its_high_end_travels_like_mujocos(force):
    """At 40 N the push is unstable in yaw, so the figure is a sensitive one: MuJoCo's own travel falls from
    20.4 m to 19.9 / 17.6 / 14.0 m when the cube starts 0.1 / 1 / 10 um off centre. This engine's is 20.7 m
    (+1 %); it was 15.9 m (-22 %) with two first-pass sweeps of a manifold's points in one order."""
    ours, ref = both(suite.ramp_push(force, "high end", 2.0))
    assert abs(ours - ref) <= 0.1 * abs(ref), (ours, ref)


@pytest.mark.parametrize(
    "force",
    [
        10.0,
        pytest.param(
            20.0,
            marks=pytest.mark.xfail(
                strict=True,
                reason="37 % past MuJoCo's travel (7.4 m against 5.4 m): the cube slides up the slope, stops "
                "halfway, held by static friction, and pushes the ramp on, as rigid bodies with Coulomb friction do "
                "(test_a_cube_pushed_up_a_free_ramp_slides_then_sticks_as_coulomb_friction_says); MuJoCo's soft "
                "contacts let it creep on up the slope until the ramp tips over. MuJoCo's own travel spans 4.7-6.5 m "
                "over its contact settings (6.3 and 6.5 m with stiffer contacts: solref 4 ms at 0.5 ms steps, 2 ms at "
                "0.25 ms), where the other ramp rows move by 5 % at most",
            ),
        ),
        40.0,
    ],
)
def test_ramp_pushed_at_its_low_end_travels_like_mujocos(force):
    ours, ref = both(suite.ramp_push(force, "low end", 2.0))
    assert abs(ours - ref) <= 0.1 * abs(ref), (ours, ref)


def slope_phases(run: dict) -> tuple[dict, np.ndarray, np.ndarray]:
    """A low-end ramp push's steps where the cube lies flat on the slope and slides up it (below the top), and
    those where it is held there (moving along the slope at under 2 mm/s)."""
    motion = suite.slope_motion(run)
    flat = motion["tilt"] < 1.0
    sliding = np.nonzero(flat & (motion["slide"] > 0.05) & (motion["height"] < 0.45))[0]
    held = np.nonzero(flat & (np.abs(motion["slide"]) < 2e-3))[0]
    return motion, sliding, held


@pytest.mark.parametrize("force", [18.0, 20.0])
def test_a_cube_pushed_up_a_free_ramp_slides_then_sticks_as_coulomb_friction_says(force):
    """The analytic reference for the 20 N low-end push, where this engine and MuJoCo part: once the cube lies flat
    on the slope, rigid bodies with Coulomb friction (``coulomb_ramp``) slow its slide up the slope at 1.9 m/s^2
    (18 N) and 1.1 m/s^2 (20 N), then static friction holds it and cube and ramp move as one. This engine follows
    that (slide within 10 %, the ramp's acceleration in either phase within 3 %); MuJoCo's cube is never held, its
    slide slowing at under 0.6 of that rate: its soft contacts let it creep up the slope."""
    scene = suite.ramp_push(force, "low end", 1.2)
    floor, ramp, cube = scene.bodies
    assert floor.friction == ramp.friction == cube.friction
    ref = suite.coulomb_ramp(force, cube.mass, ramp.mass, cube.friction, -scene.gravity)
    assert ref["slide"] < 0.0 and ref["sticks"]
    motion, sliding, held = slope_phases(suite.run_ours(scene))
    assert len(sliding) >= 8, motion
    slide = np.polyfit(sliding * suite.DT, motion["slide"][sliding], 1)[0]
    assert slide == pytest.approx(ref["slide"], rel=0.1)
    assert np.median(motion["ramp_ax"][sliding[:-1]]) == pytest.approx(ref["ramp_sliding"], rel=0.03)
    assert len(held) >= 5 and held[0] > sliding[-1], (sliding, held)
    assert np.median(motion["ramp_ax"][held[:-1]]) == pytest.approx(ref["together"], rel=0.03)
    motion, sliding, held = slope_phases(suite.run_mujoco(scene))
    slide = np.polyfit(sliding * suite.DT, motion["slide"][sliding], 1)[0]
    assert len(held) == 0 and 0.6 * ref["slide"] < slide < 0.0, (held, slide)


def test_box_pushed_and_released_stops_where_mujocos_does():
    ours, ref = both(suite.push_release(2.0))
    assert abs(ours - ref) <= 0.1 * ref, (ours, ref)


@pytest.mark.xfail(
    strict=True,
    reason="the scene is unstable in yaw: in MuJoCo itself the cube moved 0.1 um sideways at the start ends 69 mm "
    "sideways after 2 s; this engine's float32 sweeps seed such a turn (5-700 mm depending on solver settings), "
    "so the target needs mirror-exact arithmetic; the stable symmetric scenes are the pressed rows below",
)
def test_symmetric_scene_stays_symmetric():
    assert both(suite.symmetric(2.0))[0] < 1.0


ORDERS = ("left first", "right first")


@pytest.mark.parametrize("n", [2, 3])
def test_pressed_rows_are_a_stable_symmetric_scene_in_mujoco(n):
    """The reference: pressed together from both ends, the row's centre stays within 0.1 mm in MuJoCo."""
    scenes = [suite.pressed_row(n, order, 2.0) for order in ORDERS]
    assert max(scene.metric(suite.run_mujoco(scene)) for scene in scenes) < 0.1


@pytest.mark.parametrize("n", [2, 3])
def test_pressed_rows_stay_centred_in_any_listing_order(n):
    """The row's centre drifts at most 0.04 mm (2 cubes) and 0.07 mm (3 cubes) in 2 s, either listing order
    (MuJoCo 0.09 and 0.02 mm). Before the side contacts of a row were one level solved by Jacobi steps, and the
    floor contacts' sweeps alternated their order, it crept 2.2 and 17 mm towards the side solved first."""
    assert max(both(suite.pressed_row(n, o, 2.0))[0] for o in ORDERS) < 1.0


def test_pyramid_stands():
    assert both(suite.pyramid(10.0))[0] < 1.0
