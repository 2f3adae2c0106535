"""Bodies of very different masses pressed together: a heavy one dropped onto a light one, a light one squeezed
between two heavy ones, a heavy plate dropped onto a ball. Whatever the ratio (1 to 10,000), no body moves faster
than the energy it was given allows (its start speed, twice that of a body that struck it, and its fall), and none
ends inside the floor. Before the warm start bounded a point's friction impulse (``solver.WARM_LIMIT``), the
friction of a heavy body's load turned the light body it pressed in the next substep's warm start: these scenes
threw bodies at 109, 120 and 1,172 m/s."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from systems.geometry import ShapeType
from systems.physics import BodySpec, PhysicsConfig

from . import scene

RATIOS = (1.0, 10.0, 100.0, 1000.0, 10000.0)
GRAVITY = -50.0
CFG = PhysicsConfig(physics_dt=0.075, physics_substeps=8, gravity=GRAVITY, max_bodies=8)
CUBE = (0.25, 0.25, 0.25)


def dropped_on_light(world: int) -> list[BodySpec]:
    """A light cube on the floor; a cube ``RATIOS`` times its mass dropped on it from 0.75 m above, off centre."""
    heavy = RATIOS[world % len(RATIOS)]
    off = 0.1 * (world // len(RATIOS))
    return [
        scene.floor(0.5),
        BodySpec(ShapeType.BOX, size=CUBE, position=(0.0, 0.0, 0.25), friction=0.5),
        BodySpec(ShapeType.BOX, size=CUBE, position=(off, 0.05, 1.5), friction=0.5, mass=heavy),
    ]


def squeezed(world: int) -> list[BodySpec]:
    """A light cube at rest between two heavy ones sliding at it from both sides at 2, 6 or 12 m/s."""
    heavy = RATIOS[world % len(RATIOS)]
    v = (2.0, 6.0, 12.0)[world // len(RATIOS)]
    return [
        scene.floor(0.5),
        BodySpec(ShapeType.BOX, size=CUBE, position=(0.0, 0.0, 0.25), friction=0.5),
        BodySpec(
            ShapeType.BOX, size=CUBE, position=(-0.8, 0.0, 0.25), friction=0.5, mass=heavy, linear_velocity=(v, 0, 0)
        ),
        BodySpec(
            ShapeType.BOX, size=CUBE, position=(0.8, 0.02, 0.25), friction=0.5, mass=heavy, linear_velocity=(-v, 0, 0)
        ),
    ]


def plate_on_ball(world: int) -> list[BodySpec]:
    """A light ball on the floor; a plate 1 m wide and ``RATIOS`` times its mass dropped on it, off centre."""
    heavy = RATIOS[world % len(RATIOS)]
    return [
        scene.floor(0.5),
        BodySpec(ShapeType.SPHERE, size=(0.15, 0.0, 0.0), position=(0.0, 0.0, 0.15), friction=0.5),
        BodySpec(
            ShapeType.BOX,
            size=(0.5, 0.5, 0.1),
            position=(0.1 * (world // len(RATIOS)), 0.0, 0.6),
            friction=0.5,
            mass=heavy,
        ),
    ]


def half_height(body: BodySpec) -> float:
    return body.size[0] if body.shape == ShapeType.SPHERE else body.size[2]


@pytest.mark.parametrize("make", [dropped_on_light, squeezed, plate_on_ball], ids=lambda f: f.__name__)
def test_no_mass_ratio_throws_a_body_or_sinks_it(make):
    worlds = 3 * len(RATIOS)
    bodies = [make(w) for w in range(worlds)]
    n = len(bodies[0])
    # Energy allows a body at most twice the fastest start speed (an elastic strike), plus its fall to the floor.
    bound = np.array(
        [
            2.0 * max(math.hypot(*b.linear_velocity) for b in bs)
            + max(math.sqrt(2.0 * -GRAVITY * (b.position[2] - half_height(b))) for b in bs[1:])
            for bs in bodies
        ]
    )
    sim = scene.build(make, CFG, num_worlds=worlds)
    fastest = np.zeros(worlds)
    lowest = np.full((worlds, n - 1), np.inf)
    for _ in range(40):
        sim.step()
        speed = np.linalg.norm(scene.column(sim, "linear_velocity")[:, 1:n], axis=2)
        fastest = np.maximum(fastest, speed.max(axis=1))
        lowest = np.minimum(lowest, scene.column(sim, "position")[:, 1:n, 2])
    worst = int(np.argmax(fastest / bound))
    assert fastest[worst] <= bound[worst], (
        f"ratio {RATIOS[worst % len(RATIOS)]:g}, world {worst}: {fastest[worst]:.1f} m/s, bound {bound[worst]:.1f}"
    )
    floor = np.array([[half_height(b) for b in bs[1:]] for bs in bodies])
    sunk = floor - lowest
    worst = np.unravel_index(int(np.argmax(sunk)), sunk.shape)
    assert sunk[worst] < 0.01, f"world {worst[0]}, body {worst[1] + 1}: {sunk[worst] * 1000:.1f} mm into the floor"


def heavy_on_a_stack(world: int) -> list[BodySpec]:
    """Five light cubes stacked on the floor and one ``(1, 3, 10, 30, 100)[world]`` times their mass on top."""
    heavy = (1.0, 3.0, 10.0, 30.0, 100.0)[world]
    cubes = [BodySpec(ShapeType.BOX, size=CUBE, position=(0.0, 0.0, 0.25 + 0.5 * i), friction=0.5) for i in range(5)]
    return [
        scene.floor(0.5),
        *cubes,
        BodySpec(ShapeType.BOX, size=CUBE, position=(0.0, 0.0, 2.75), friction=0.5, mass=heavy),
    ]


@pytest.mark.parametrize(
    "passes",
    [
        pytest.param(
            2,
            marks=pytest.mark.xfail(
                strict=True,
                reason="with two contact passes (the default) a stack of light cubes under one 30 or 100 times their "
                "mass drifts: its cubes move up to 13 and 21 cm in 4.5 s, the top one sideways and the stack shearing "
                "(at 10 times 2 mm, at 1 and 3 times none); 16 substeps hold it within 1.1 mm. Not the warm start's "
                "bound (WARM_LIMIT, 150 m/s^2, a tenth of the heavy cube's support at 30 times): without it "
                "(6000 m/s^2) these stacks fly apart (80-96 m)",
            ),
        ),
        3,
        4,
    ],
)
def test_a_stack_of_light_cubes_holds_a_heavy_one_still(passes):
    """With three contact passes or more, five light cubes hold one up to 100 times their mass still: no cube moves
    5 mm in 4.5 s (0.6 mm at most with three passes, 0.1 with four)."""
    cfg = dataclasses.replace(CFG, contact_passes=passes)
    sim = scene.build(heavy_on_a_stack, cfg, num_worlds=5)
    start = scene.column(sim, "position")[:, 1:7].copy()
    drift = np.zeros(5)
    for _ in range(60):
        sim.step()
        drift = np.maximum(drift, np.linalg.norm(scene.column(sim, "position")[:, 1:7] - start, axis=2).max(axis=1))
    assert drift.max() < 0.005, f"drift by ratio (1, 3, 10, 30, 100): {np.round(drift * 1000, 1)} mm"
