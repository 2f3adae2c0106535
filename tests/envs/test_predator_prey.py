"""Predator-prey: the fused step equals the unfused one, the motion matches a numpy re-implementation of
MPE's point-mass step, and catches despawn, reward, mask and respawn as the env's tables say."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ecs
import envs


def build(num_worlds: int = 1, *, fuse=None, seed: int = 0, **overrides) -> ecs.BatchSim:
    return ecs.BatchSim(envs.make("predator_prey", **overrides), num_worlds, device="cpu", seed=seed, fuse=fuse)


def random_moves(sim: ecs.BatchSim, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 5, tuple(sim.actions["move"].shape), generator=gen, dtype=torch.int32)


def test_shapes_and_the_step_fuses():
    sim = build(3)
    n = 5  # 3 predators + 2 prey slots
    assert {k: tuple(v.shape) for k, v in sim.obs.items()} == {
        "self": (3, n, 6),
        "landmarks": (3, n, 2, 2),
        "others": (3, n, n - 1, 5),
        "active": (3, n),
    }
    assert tuple(sim.rewards.shape) == (3, n) and tuple(sim.actions["move"].shape) == (3, n)
    assert sim.step_bytes is not None  # one generated kernel per step
    assert sim.obs["active"].tolist() == [[1.0] * n] * 3  # 3 predators and 2 prey live at reset
    with pytest.raises(ecs.ConfigError, match="num_prey"):
        envs.make("predator_prey", num_prey=3, max_prey=2)


@pytest.mark.parametrize("per_step", [False, True], ids=["step", "run-k-actions"])
def test_fused_equals_unfused_bit_for_bit(per_step):
    """24 worlds through 130 steps (a truncation reset at 100, catches and respawns), fused and unfused."""
    sims = [build(24, fuse=fuse, seed=5, max_episode_steps=100) for fuse in (True, False)]
    gen = torch.Generator().manual_seed(3)
    caught = 0
    for _ in range(13):
        moves = torch.stack([random_moves(sims[0], gen) for _ in range(10)])
        for sim in sims:
            if per_step:
                sim.run(10, {"move": moves})
            else:
                for k in range(10):
                    sim.actions["move"].copy_(moves[k])
                    sim.step()
        a, b = (s.state_dict()["arrays"] for s in sims)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        caught += int(sims[0].tensor("world", "catches").sum())
    assert caught > 0  # the comparison covered despawns and respawns


def reference_motion(pos, vel, prey, moves, cfg):
    """MPE's step, one agent at a time (no landmarks): damp, accelerate, clamp the speed, move."""
    dirs = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]], dtype=np.float64)
    accel = np.where(prey[..., None] != 0, cfg.prey_accel, cfg.predator_accel)
    top = np.where(prey != 0, cfg.prey_max_speed, cfg.predator_max_speed)
    v = vel * (1.0 - cfg.damping) + dirs[moves] * accel * cfg.dt
    speed = np.linalg.norm(v, axis=-1)
    v = np.where((speed > top)[..., None], v * (top / np.maximum(speed, 1e-12))[..., None], v)
    return pos + v * cfg.dt, v


def test_motion_matches_mpe_point_masses_in_numpy():
    sim = build(6, num_landmarks=0, agent_radius=1e-4, seed=2)  # no landmarks, catches practically impossible
    cfg = sim.env.config
    gen = torch.Generator().manual_seed(9)
    pos = sim.tensor("agent", "position").numpy().astype(np.float64)
    vel = sim.tensor("agent", "velocity").numpy().astype(np.float64)
    prey = sim.tensor("agent", "prey").numpy()
    for _ in range(30):
        moves = random_moves(sim, gen)
        sim.actions["move"].copy_(moves)
        sim.step()
        pos, vel = reference_motion(pos, vel, prey, moves.numpy(), cfg)
        np.testing.assert_allclose(sim.tensor("agent", "position").numpy(), pos, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(sim.tensor("agent", "velocity").numpy(), vel, rtol=1e-5, atol=1e-5)
    assert np.abs(vel).max() > 0.5  # the speed limit was reached and tested


def place(sim: ecs.BatchSim, positions) -> None:
    sim.tensor("agent", "position")[0] = torch.tensor(positions, dtype=torch.float32)
    sim.tensor("agent", "velocity").zero_()


@pytest.mark.parametrize("predator", [0, 2])
def test_a_catch_despawns_rewards_masks_and_respawns(predator):
    sim = build(respawn_delay=4, num_landmarks=0)
    sim.actions["move"].zero_()
    prey_row = 4
    spots = [[-0.9, -0.9], [0.9, -0.9], [-0.9, 0.9], [0.5, 0.5], [0.0, 0.0]]
    spots[predator] = [0.05, 0.0]  # within two radii (0.15 m) of the prey at the origin
    place(sim, spots)
    generation = int(sim.tensor("agent", "generation")[0, prey_row])
    sim.step()
    assert int(sim.tensor("agent", "alive")[0, prey_row]) == 0
    assert sim.rewards[0].tolist() == [10.0, 10.0, 10.0, 0.0, -10.0]
    assert sim.obs["active"][0].tolist() == [1.0, 1.0, 1.0, 1.0, 0.0]
    assert (sim.obs["self"][0, prey_row] == 0).all() and (sim.obs["others"][0, prey_row] == 0).all()
    # In every other slot's view the caught prey (their last "others" entry) is absent.
    assert (sim.obs["others"][0, :prey_row, -1] == 0).all()
    assert (sim.obs["others"][0, :prey_row, :-1, 4] == 1).all()
    for _ in range(3):  # the timer started at 4 and counts down in the following steps
        sim.step()
        assert int(sim.tensor("agent", "alive")[0, prey_row]) == 0 and (sim.rewards[0] == 0).all()
    sim.step()
    assert int(sim.tensor("agent", "alive")[0, prey_row]) == 1
    assert int(sim.tensor("agent", "generation")[0, prey_row]) == generation + 1  # old handles are stale
    assert sim.obs["active"][0].tolist() == [1.0] * 5
    assert int(sim.tensor("world", "catches")[0]) == 1


def test_landmarks_push_agents_out():
    sim = build(num_landmarks=2)
    sim.actions["move"].zero_()
    centre = sim.tensor("world", "landmarks")[0, 0].clone()
    spots = [[-0.9, -0.9], [0.9, -0.9], [-0.9, 0.9], [0.9, 0.9], [-0.9, 0.0]]
    spots[1] = (centre + torch.tensor([0.05, 0.0])).tolist()  # deep inside landmark 0
    place(sim, spots)
    sim.step()
    gap = float(torch.linalg.norm(sim.tensor("agent", "position")[0, 1] - centre))
    cfg = sim.env.config
    assert gap == pytest.approx(cfg.landmark_radius + cfg.agent_radius, abs=1e-5)
