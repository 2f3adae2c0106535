"""Hide-and-seek's quadrant game (OpenAI's ``scenario="quadrant"``, ``quadrant.yaml``), scripted.

The level is checked against the config over many worlds: the room's two walls where the config puts
them, a door in each or, at the configured rate, in only one; cubes in the room, seekers outside it.
Then the 80-step horizon and the preparation phase, the penalty for objects outside the play area,
and ramps that cannot be locked.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

import ecs
import envs
from envs.hide_and_seek import QUADRANT_YAML, Kind, make_quadrant
from envs.hide_and_seek.env import DEFAULT_YAML
from envs.hide_and_seek.kernels import MAX_TEAM

HIDER, SEEKER = 0, MAX_TEAM  # first slot of each team
WORLDS = 160


def quadrant(num_worlds: int = 1, **overrides) -> ecs.BatchSim:
    sim = ecs.BatchSim(envs.make("hide_and_seek", config=QUADRANT_YAML, **overrides), num_worlds, device="cpu", seed=2)
    sim.actions["move"].fill_(5)
    sim.actions["grab"].zero_()
    sim.actions["lock"].zero_()
    return sim


def yaw_of(q: np.ndarray) -> float:
    return math.atan2(2 * (q[3] * q[2] + q[0] * q[1]), 1 - 2 * (q[1] ** 2 + q[2] ** 2))


def gaps(intervals: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """The parts of [lo, hi] that no interval covers."""
    out, at = [], lo
    for a, b in sorted(intervals):
        if a > at + 1e-5:
            out.append((at, min(a, hi)))
        at = max(at, b)
    if at < hi - 1e-5:
        out.append((at, hi))
    return out


def test_the_quadrant_config_is_openais_quadrant_game():
    cfg = make_quadrant().config
    assert cfg == envs.make("hide_and_seek", config=QUADRANT_YAML).config
    assert (cfg.scenario, cfg.max_episode_steps, cfg.prep_steps, cfg.door_dropout_prob) == ("quadrant", 80, 32, 0.5)
    assert (cfg.min_hiders, cfg.max_hiders, cfg.min_seekers, cfg.max_seekers) == (2, 2, 2, 2)
    assert (cfg.min_boxes, cfg.max_boxes, cfg.max_elongated_boxes, cfg.num_ramps, cfg.lock_ramps) == (2, 2, 0, 1, False)
    assert cfg.play_area == (-2.9, -2.9, 2.9, 2.9) and cfg.penalize_objects_outside
    assert cfg.reward_type == "joint_zero_sum" and cfg.quadrant_hider_uniform_placement
    # quadrant.yaml is hide_and_seek.yaml with the quadrant game's values: the same keys, these ones changed.
    with open(DEFAULT_YAML) as f, open(QUADRANT_YAML) as g:
        default, quad = yaml.safe_load(f), yaml.safe_load(g)
    assert default.keys() == quad.keys()
    assert {k for k in default if default[k] != quad[k]} == {
        "outside_walls_prob",
        "scenario",
        "door_dropout_prob",
        "quadrant_hider_uniform_placement",
        "min_hiders",
        "max_hiders",
        "min_seekers",
        "max_seekers",
        "min_boxes",
        "max_boxes",
        "min_elongated_boxes",
        "max_elongated_boxes",
        "num_ramps",
        "lock_ramps",
        "team_spawn_radius",
        "play_area",
        "penalize_objects_outside",
        "max_episode_steps",
    }


@pytest.mark.parametrize(
    ("dropout", "quadrant_size", "uniform_hiders"), [(0.0, 0.5, True), (0.5, 0.5, True), (1.0, 0.4, False)]
)
def test_quadrant_levels_follow_the_config(dropout, quadrant_size, uniform_hiders):
    sim = quadrant(
        WORLDS,
        door_dropout_prob=dropout,
        quadrant_size=quadrant_size,
        quadrant_hider_uniform_placement=uniform_hiders,
    )
    cfg = sim.env.config
    half, t, dw = cfg.floor_size / 2, cfg.wall_thickness, cfg.door_width
    xq, yq = half - quadrant_size * cfg.floor_size, -half + quadrant_size * cfg.floor_size  # the room's walls
    kind, alive = sim.tensor("body", "kind").numpy(), sim.tensor("body", "alive").numpy() != 0
    pos, size, rot = (sim.tensor("body", c).numpy() for c in ("position", "size", "rotation"))
    one_door, dropped, hiders_in, seeker_quadrants = 0, set(), 0, set()
    for w in range(WORLDS):
        walls = np.nonzero(alive[w] & (kind[w] == Kind.WALL))[0]
        along_x, along_y, outside = [], [], 0  # wall pieces on the line x = xq, on y = yq; outside walls
        for r in walls:
            p, h, yaw = pos[w, r], size[w, r], yaw_of(rot[w, r])
            vertical = abs(abs(math.sin(yaw)) - 1) < 1e-6
            if np.isclose(abs(p[0 if vertical else 1]), half - t / 2, atol=1e-5) and h[0] > half:
                outside += 1
            elif vertical and abs(p[0] - xq) < 1e-5:
                along_x.append((p[1] - h[0], p[1] + h[0]))
            else:
                assert not vertical and abs(p[1] - yq) < 1e-5, (w, r, p, h, yaw)
                along_y.append((p[0] - h[0], p[0] + h[0]))
        assert outside == 4, w
        doors = 0
        for name, pieces, lo, hi in (("x", along_x, -half, yq), ("y", along_y, xq, half)):
            assert pieces and min(a for a, _ in pieces) == pytest.approx(lo - t / 2, abs=1e-5)
            assert max(b for _, b in pieces) == pytest.approx(hi + t / 2, abs=1e-5)
            holes = gaps(pieces, lo - t / 2, hi + t / 2)
            assert len(holes) <= 1, (w, name, holes)
            for a, b in holes:  # a door: door_width wide, a wall thickness clear of both ends of the wall
                assert b - a == pytest.approx(dw, abs=1e-5) and a >= lo + t - 1e-5 and b <= hi - t + 1e-5
            doors += len(holes)
            if not holes:
                dropped.add(name)
        assert doors in (1, 2), w
        one_door += doors == 1
        # Cubes inside the room, the ramp anywhere; seekers outside the room; hiders anywhere or in the room.
        boxes = np.nonzero(alive[w] & (kind[w] == Kind.BOX))[0]
        assert len(boxes) == 2 and np.allclose(size[w, boxes], cfg.box_size / 2)
        assert (pos[w, boxes, 0] - cfg.box_size / 2 >= xq + t / 2).all()
        assert (pos[w, boxes, 1] + cfg.box_size / 2 <= yq - t / 2).all()
        assert (alive[w] & (kind[w] == Kind.RAMP)).sum() == 1
        in_room = (pos[w, :, 0] > xq) & (pos[w, :, 1] < yq)
        seekers = np.nonzero(alive[w] & (kind[w] == Kind.SEEKER))[0]
        hiders = np.nonzero(alive[w] & (kind[w] == Kind.HIDER))[0]
        assert len(seekers) == len(hiders) == 2 and not in_room[seekers].any()
        seeker_quadrants |= {(bool(pos[w, s, 0] > xq), bool(pos[w, s, 1] > yq)) for s in seekers}
        hiders_in += int(in_room[hiders].sum())
        assert uniform_hiders or in_room[hiders].all()
    # Doors dropped at the configured rate (binomial: within 4 standard deviations), from either wall.
    sd = math.sqrt(dropout * (1 - dropout) / WORLDS)
    assert abs(one_door / WORLDS - dropout) <= 4 * sd + 1e-9, one_door
    assert dropped == ({"x", "y"} if dropout > 0 else set())
    assert seeker_quadrants == {(False, False), (False, True), (True, True)}  # all three other quadrants
    if uniform_hiders:  # anywhere: the room holds about quadrant_size^2 of them
        assert 0.1 < hiders_in / (2 * WORLDS) < 0.45


def test_quadrant_levels_do_not_depend_on_num_worlds():
    few, many = quadrant(3), quadrant(9)
    for column in ("kind", "alive", "position", "rotation", "size"):
        np.testing.assert_array_equal(few.tensor("body", column).numpy(), many.tensor("body", column).numpy()[:3])
    assert not np.array_equal(many.tensor("body", "position")[0].numpy(), many.tensor("body", "position")[1].numpy())


def test_quadrant_horizon_is_80_steps_with_32_of_preparation():
    sim = quadrant(2)
    start = sim.tensor("body", "position").numpy().copy()
    seekers = np.nonzero(sim.tensor("body", "kind").numpy()[0] == Kind.SEEKER)[0]
    sim.actions["move"][:] = 10
    for step in range(1, 81):
        sim.step()
        assert bool(sim.truncated.any()) == (step == 80) and not sim.terminated.any(), step
        rewards = sim.rewards.numpy()
        if step <= 32:
            assert (rewards == 0).all(), step
            np.testing.assert_array_equal(sim.tensor("body", "position").numpy()[0, seekers], start[0, seekers])
        else:
            active = sim.obs["active"].numpy() != 0
            assert (rewards[active] != 0).all() and (rewards[~active] == 0).all(), step
    assert sim.truncated.all()


@pytest.mark.parametrize("penalize", [True, False])
def test_objects_outside_the_play_area_cost_every_agent(penalize):
    sim = quadrant(1, prep_fraction=0.0, penalize_objects_outside=penalize)
    kind = sim.tensor("body", "kind").numpy()[0]
    sim.step()
    assert set(sim.rewards[0, [0, 1, 3, 4]].tolist()) <= {-1.0, 1.0}
    for k in (Kind.BOX, Kind.RAMP):
        row = int(np.nonzero(kind == k)[0][0])
        moved = sim.tensor("body", "position")[0, row].clone()
        sim.tensor("body", "position")[0, row, 0] = 4.5  # beyond the outside walls, off the 6 m floor
        sim.step()
        rewards = sim.rewards[0].tolist()
        if penalize:
            assert rewards == [-10.0, -10.0, 0.0, -10.0, -10.0, 0.0], (k, rewards)
        else:
            assert set(rewards[:2] + rewards[3:5]) <= {-1.0, 1.0}, (k, rewards)
        sim.tensor("body", "position")[0, row] = moved
        sim.step()
        assert set(sim.rewards[0, [0, 1, 3, 4]].tolist()) <= {-1.0, 1.0}


@pytest.mark.parametrize("play_area", [(), (-2.0, -2.0, 2.0, 2.0)])
def test_play_area_bounds_the_agents(play_area):
    layout = {"fixed_agents": ((0, 2.5, 0.0, 0.0), (1, -1.0, 0.0, math.pi)), "play_area": play_area}
    sim = ecs.BatchSim(envs.make("hide_and_seek", prep_fraction=0.0, **layout), 1, device="cpu", seed=0)
    sim.actions["move"].fill_(5)
    sim.step()
    assert sim.rewards[0, HIDER] == (-10.0 if play_area else 1.0)
    assert sim.rewards[0, SEEKER] == -1.0


@pytest.mark.parametrize("lock_ramps", [True, False])
def test_lock_ramps_decides_whether_ramps_lock(lock_ramps):
    sim = ecs.BatchSim(
        envs.make(
            "hide_and_seek",
            prep_fraction=0.0,
            lock_ramps=lock_ramps,
            fixed_boxes=((0.6, 1.5, 0.0),),
            fixed_ramps=((1.5, -1.5, math.pi),),  # its 0.5 m high end (x = 1.5 - 0.5 / 3) faces the seeker
            # Each agent's centre 0.2 m from the object it faces, within lock_radius (0.25 m).
            fixed_agents=((0, 0.15, 1.5, 0.0), (1, 1.5 - 0.5 / 3 - 0.2, -1.5, 0.0)),
        ),
        1,
        device="cpu",
        seed=0,
    )
    kind = sim.tensor("body", "kind").numpy()[0]
    box, ramp = int(np.nonzero(kind == Kind.BOX)[0][0]), int(np.nonzero(kind == Kind.RAMP)[0][0])
    assert sim.tensor("agent", "reach_target")[0].tolist()[: SEEKER + 1] == [box, -1, -1, ramp]
    sim.actions["move"].fill_(5)
    sim.actions["lock"][0, HIDER] = 1
    sim.actions["lock"][0, SEEKER] = 1
    sim.step()
    assert int(sim.tensor("body", "locked_by")[0, box]) == 1  # boxes lock either way
    assert int(sim.tensor("body", "locked_by")[0, ramp]) == (2 if lock_ramps else 0)
