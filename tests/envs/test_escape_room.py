"""Escape room: buttons open their doors and only while pressed, a door held open lets an agent through
and a closed one does not, progress rewards match a numpy re-computation, grabbed cubes follow, and
leaving the last room ends the episode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ecs
import envs
from envs.escape_room import kernels

NUM_ROOMS = 3
FIRST_CUBE = 4 + 3 * (NUM_ROOMS - 1)
AGENTS = (FIRST_CUBE + NUM_ROOMS, FIRST_CUBE + NUM_ROOMS + 1)


def build(num_worlds: int = 1, seed: int = 2, **overrides) -> ecs.BatchSim:
    sim = ecs.BatchSim(envs.make("escape_room", **overrides), num_worlds, device="cpu", seed=seed)
    sim.actions["move"].fill_(5)
    sim.actions["grab"].zero_()
    return sim


def door_row(k: int) -> int:
    return 6 + 3 * k


def positions(sim: ecs.BatchSim, world: int = 0) -> np.ndarray:
    return sim.tensor("body", "position")[world].numpy().copy()


def teleport(sim: ecs.BatchSim, row: int, x: float, y: float, world: int = 0) -> None:
    z = float(sim.tensor("body", "position")[world, row, 2])
    for column in ("position", "prev_position"):
        sim.tensor("body", column)[world, row] = torch.tensor([x, y, z])
    sim.tensor("body", "linear_velocity")[world, row] = 0.0


def test_reset_builds_closed_doors_and_puts_everything_in_its_room():
    sim = build(4)
    cfg = sim.env.config
    assert {k: tuple(v.shape) for k, v in sim.obs.items()} == {
        "self": (4, 2, 7),
        "doors": (4, 2, NUM_ROOMS - 1, 5),
        "lidar": (4, 2, cfg.lidar_rays),
    }
    assert (sim.tensor("body", "alive").numpy() == 1).all()
    for w in range(4):
        p = positions(sim, w)
        for k in range(NUM_ROOMS - 1):
            assert p[door_row(k), 2] == pytest.approx(0.5) and p[door_row(k), 1] == pytest.approx(
                (k + 1) * cfg.room_length
            )
        for k in range(NUM_ROOMS):
            assert k * cfg.room_length < p[FIRST_CUBE + k, 1] < (k + 1) * cfg.room_length
        assert (p[list(AGENTS), 1] < 0.2 * cfg.room_length).all()
    door_x = sim.tensor("world", "door_x").numpy()
    assert len(np.unique(door_x[:, 0])) == 4  # doors drawn per world
    again = build(4)
    np.testing.assert_array_equal(again.tensor("world", "door_x").numpy(), door_x)


@pytest.mark.parametrize("k", [0, 1])
def test_a_button_opens_its_door_only_while_pressed(k):
    sim = build()
    button = sim.tensor("world", "button")[0, k].numpy()
    teleport(sim, AGENTS[0], float(button[0]), float(button[1]))
    sim.step()
    assert sim.tensor("world", "door_open")[0].tolist() == [int(i == k) for i in range(NUM_ROOMS - 1)]
    assert positions(sim)[door_row(k), 2] == pytest.approx(kernels.DOOR_DOWN)
    assert positions(sim)[door_row(1 - k), 2] == pytest.approx(0.5)
    assert sim.obs["doors"][0, 0, k, 2] == 1.0
    teleport(sim, AGENTS[0], float(button[0]) + 1.5, float(button[1]))
    sim.step()
    assert sim.tensor("world", "door_open")[0, k] == 0 and positions(sim)[door_row(k), 2] == pytest.approx(0.5)


def test_a_cube_on_the_button_holds_the_door_for_the_other_agent():
    length = envs.make("escape_room").config.room_length
    reached = {}
    for cube_on_button in (False, True):
        sim = build()
        button = sim.tensor("world", "button")[0, 0].numpy()
        door_x = float(sim.tensor("world", "door_x")[0, 0])
        # Agent 0 waits in a corner of room 0, across from the button, out of the way.
        teleport(sim, AGENTS[0], -2.6 * float(np.sign(button[0]) or 1.0), 0.4)
        if cube_on_button:
            teleport(sim, FIRST_CUBE, float(button[0]), float(button[1]))
        teleport(sim, AGENTS[1], door_x, length - 1.0)
        sim.actions["move"][0, 1, 1] = 10  # full force towards +y, through the door
        for _ in range(45):
            sim.step()
        reached[cube_on_button] = positions(sim)[AGENTS[1], 1]
    assert reached[False] < length  # the closed door stops it
    assert reached[True] > length + 0.5  # through the door, into room 1


def test_progress_rewards_match_a_numpy_recomputation():
    sim = build(3, seed=5, max_episode_steps=1000)
    gen = torch.Generator().manual_seed(4)
    best = sim.tensor("world", "best_y").numpy().astype(np.float64).copy()
    for _ in range(60):
        sim.actions["move"].copy_(
            torch.randint(0, 11, tuple(sim.actions["move"].shape), generator=gen, dtype=torch.int32)
        )
        sim.step()
        y = sim.tensor("body", "position").numpy()[:, list(AGENTS), 1].astype(np.float64)
        np.testing.assert_allclose(sim.rewards.numpy(), np.maximum(y - best, 0.0), atol=1e-5)
        best = np.maximum(best, y)
    assert sim.rewards.numpy().sum() >= 0 and best.max() > 0.5


def test_a_grabbed_cube_follows_its_agent():
    moved = {}
    for grab in (0, 1):
        sim = build()
        cube = positions(sim)[FIRST_CUBE]
        side = 1.0 if cube[0] < 0 else -1.0  # the agent goes on the side away from the nearer wall
        teleport(sim, AGENTS[0], float(cube[0]) + side * 0.7, float(cube[1]))
        facing = torch.tensor([0.0, 0.0, 1.0, 0.0]) if side > 0 else torch.tensor([0.0, 0.0, 0.0, 1.0])
        for column in ("rotation", "prev_rotation"):  # facing the cube
            sim.tensor("body", column)[0, AGENTS[0]] = facing
        sim.step()
        assert int(sim.tensor("agent", "reach_target")[0, 0]) == FIRST_CUBE
        sim.actions["grab"][0, 0] = grab
        sim.actions["move"][0, 0, 0] = 10 if side > 0 else 0  # pull away from the cube
        for _ in range(20):
            sim.step()
        assert int(sim.tensor("agent", "holding")[0, 0]) == grab
        moved[grab] = side * (positions(sim)[FIRST_CUBE, 0] - cube[0])
    assert abs(moved[0]) < 0.05 and moved[1] > 0.5


def test_leaving_the_last_room_ends_the_episode_with_the_exit_reward():
    sim = build()
    cfg = sim.env.config
    teleport(sim, AGENTS[0], 0.0, NUM_ROOMS * cfg.room_length + 0.5)
    sim.step()
    assert bool(sim.terminated[0]) and not bool(sim.truncated[0])
    assert sim.rewards[0, 1] == pytest.approx(cfg.exit_reward)  # the other agent did not move
    assert sim.rewards[0, 0] > cfg.exit_reward
    assert positions(sim)[AGENTS[0], 1] < cfg.room_length  # same-step reset: back in room 0
