"""Bodies that turn about z only (an inverse inertia with only the zz entry, as hide-and-seek's agents, boxes
and ramps): they stay upright, and a face resting on the floor shares its load among its points.

Such a body cannot tilt, so the split of its weight among the corners of a face is not fixed by the
contact constraints; solved point by point, all of it would land on the corner solved first, whose friction
alone would then turn a box that is pushed straight. The solver shares it equally (``solver.manifold_corrections``).
"""

from __future__ import annotations

import numpy as np
import pytest

from systems.geometry import ShapeType
from systems.physics import BodySpec, PhysicsConfig

from . import scene
from .scene import upright

MU = 0.2


def yaw_of(q: np.ndarray) -> float:
    return float(np.arctan2(2 * (q[3] * q[2] + q[0] * q[1]), 1 - 2 * (q[1] ** 2 + q[2] ** 2)))


@pytest.mark.parametrize(
    ("half", "cfg"),
    [
        ((0.25, 0.25, 0.25), PhysicsConfig()),
        ((0.825, 0.075, 0.25), PhysicsConfig()),
        ((0.25, 0.25, 0.25), PhysicsConfig(physics_dt=0.075, gravity=-50.0)),  # hide-and-seek's step
        ((0.075, 0.825, 0.25), PhysicsConfig(physics_dt=0.075, gravity=-50.0)),
    ],
    ids=["cube", "plank", "cube-hns", "plank-hns"],
)
def test_an_upright_box_pushed_through_its_centre_slides_straight(half, cfg):
    mass, force = 1.0, 3.0 * MU * abs(cfg.gravity)  # three times what friction holds back
    sim = scene.build(
        [scene.floor(MU), BodySpec(ShapeType.BOX, size=half, position=(0.0, 0.0, half[2]), friction=MU)], cfg
    )
    upright(sim, 1, half, mass)
    forces = scene.column(sim, "force")
    forces[0, 1] = (force, 0.0, 0.0)
    sim.tables["body"]["force"].assign(forces)
    steps = round(1.0 / cfg.physics_dt)
    for _ in range(steps):
        sim.step()
        # The floor's points share the load: equal normal impulses (the same friction at every corner).
        live = scene.column(sim, "alive", "contact")[0] != 0
        impulse = scene.column(sim, "contact_impulse", "contact")[0, live]
        assert len(impulse) == 4 and impulse.max() - impulse.min() <= 1e-6 * impulse.max(), impulse
    t = steps * cfg.physics_dt
    p, q = scene.column(sim, "position")[0, 1], scene.column(sim, "rotation")[0, 1]
    assert abs(yaw_of(q)) < 1e-5 and np.abs(q[:2]).max() == 0.0  # no turn, not even about z; never tilted
    assert abs(p[1]) < 1e-5 and abs(p[2] - half[2]) < 2e-3
    # Sliding: x = (F / m - mu g) t^2 / 2 (the substeps' explicit integration lags that a little).
    np.testing.assert_allclose(p[0], 0.5 * (force / mass - MU * abs(cfg.gravity)) * t * t, rtol=0.05)


def test_an_upright_box_turned_by_an_off_centre_push_stays_upright():
    """A push at a corner's height and side turns the box about z and nothing else; a free box tilts."""
    half, mass = (0.825, 0.075, 0.25), 1.0
    tilt = {}
    for locked in (True, False):
        sim = scene.build(
            [scene.floor(MU), BodySpec(ShapeType.BOX, size=half, position=(0.0, 0.0, half[2]), friction=MU)]
        )
        if locked:
            upright(sim, 1, half, mass)
        forces, torques = scene.column(sim, "force"), scene.column(sim, "torque")
        forces[0, 1] = (0.0, 6.0, 0.0)
        torques[0, 1] = np.cross((0.8, 0.0, 0.2), (0.0, 6.0, 0.0))  # the same force at (0.8, 0, 0.2) from the centre
        sim.tables["body"]["force"].assign(forces)
        sim.tables["body"]["torque"].assign(torques)
        for _ in range(30):
            sim.step()
        q = scene.column(sim, "rotation")[0, 1]
        z_axis = scene.quat_matrix(q / np.linalg.norm(q))[:, 2]
        tilt[locked] = np.degrees(np.arccos(np.clip(z_axis[2], -1.0, 1.0)))
        if locked:
            assert abs(yaw_of(q)) > 0.1  # it turned
    assert tilt[True] == 0.0 and tilt[False] > 1.0, tilt
