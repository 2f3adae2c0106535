"""Hide-and-seek at its defaults moves like OpenAI's full environment (multi-agent-emergence-environments).

OpenAI's agent is a 1 kg sphere of radius 0.15 m on x and y slide joints (damping 10 N s/m) and a z hinge
(damping 10 N m s), driven by motors of gear 100 at actions up to 0.9 (90 N, 90 N m), on a floor of friction
0.2 under gravity -50, stepped 15 x 5 ms per action. Its velocity follows ``m dv/dt = F - c v - mu m g``: a top
speed of (90 - 10) / 10 = 8 m/s, 0.6 m per 0.075 s step. The tests hold the env to that closed form, to
MuJoCo running the same model, and check what OpenAI's joints guarantee: boxes and ramps turn about z only,
and nothing leaves an arena walled by its 4 m outside walls.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ecs
import envs
from envs.hide_and_seek import Kind
from envs.hide_and_seek.kernels import MAX_TEAM

HIDER, SEEKER = 0, MAX_TEAM
STEPS = 10
OPENAI_TOP_SPEED = 8.0  # m/s: (90 N - 0.2 x 1 kg x 50 m/s^2) / 10 N s/m


def drive_alone(
    steps: int, move: tuple[int, int, int], *, drive: int = STEPS, **overrides
) -> tuple[np.ndarray, np.ndarray]:
    """A hider alone on the floor (the seeker far away) driven by ``move`` for ``drive`` steps, then released: its
    position and yaw at the start and after each step."""
    sim = ecs.BatchSim(
        envs.make(
            "hide_and_seek",
            prep_fraction=0.0,
            max_episode_steps=1000,
            fixed_agents=((0, -2.5, 0.0, 0.0), (1, -2.5, 2.5, 0.0)),
            **overrides,
        ),
        1,
        device="cpu",
    )
    sim.actions["move"].fill_(5)
    sim.actions["grab"].zero_()
    sim.actions["lock"].zero_()
    row = int(sim.tensor("agent", "body_row")[0, HIDER])
    positions, yaws = [sim.tensor("body", "position").numpy()[0, row].copy()], [0.0]
    for k in range(steps):
        sim.actions["move"][0, HIDER] = torch.tensor(move if k < drive else (5, 5, 5), dtype=torch.int32)
        sim.step()
        positions.append(sim.tensor("body", "position").numpy()[0, row].copy())
        yaws.append(float(sim.obs["self"][0, HIDER, 7].atan2(sim.obs["self"][0, HIDER, 6])))
    return np.array(positions), np.unwrap(np.array(yaws))


def test_agents_reach_openais_top_speed_within_a_few_steps_and_move_0_6_m_per_step():
    cfg = envs.make("hide_and_seek").config
    friction = max(cfg.agent_friction, cfg.floor_friction) * cfg.agent_mass * abs(cfg.gravity)
    top = (cfg.move_force - friction) / cfg.move_damping
    assert top == pytest.approx(OPENAI_TOP_SPEED)
    x, yaw = drive_alone(STEPS + 4, (10, 5, 10))
    dx = np.diff(x[:, 0])
    # The damped motion, exactly: v(t) = top (1 - exp(-k t)), x(t) = top (t - (1 - exp(-k t)) / k), k = c / m.
    k, dt = cfg.move_damping / cfg.agent_mass, cfg.physics_dt
    t = dt * np.arange(STEPS + 1)
    exact = top * (t - (1 - np.exp(-k * t)) / k)
    # Each step's travel: the substeps' implicit drag lags the exact decay by about a substep (at most 1.2 cm of a
    # step's travel here, 1.3 % short of the top speed after ten steps).
    np.testing.assert_allclose(dx[:STEPS], np.diff(exact), atol=0.015)
    assert dx[5] > 0.95 * top * dt  # within 5 % of the top speed from the sixth step on (MuJoCo: the fifth)
    np.testing.assert_allclose(dx[STEPS - 3 : STEPS], top * dt, rtol=0.02)  # 0.6 m per step
    assert abs(x[-1, 1] - x[0, 1]) < 1e-4 and abs(x[-1, 2] - cfg.agent_radius) < 1e-3  # straight, on the floor
    # Released, it stops within three steps, having coasted about 0.55 m (MuJoCo: 0.57 m).
    assert np.all(dx[STEPS + 2 :] == pytest.approx(0.0, abs=0.03)) and 0.45 < dx[STEPS:].sum() < 0.65
    # The hinge: 9 rad/s (0.675 rad per step) from the first step on, and none once released.
    turn = np.diff(yaw)
    np.testing.assert_allclose(turn[:STEPS], cfg.turn_torque / cfg.turn_damping * dt, rtol=1e-3)
    assert np.abs(turn[STEPS:]).max() < 1e-3


MUJOCO_AGENT = """
<mujoco>
  <option timestep="0.005" gravity="0 0 -50"/>
  <worldbody>
    <geom type="plane" size="20 20 1" friction="0.2 0.005 0.0001"/>
    <body pos="0 0 0.15">
      <joint name="x" type="slide" axis="1 0 0" damping="10"/>
      <joint name="y" type="slide" axis="0 1 0" damping="10"/>
      <joint name="z" type="slide" axis="0 0 1" damping="1"/>
      <joint name="yaw" type="hinge" axis="0 0 1" damping="10"/>
      <geom type="sphere" size="0.15" mass="1" friction="0.01 0.005 0.0001"/>
    </body>
  </worldbody>
  <actuator>
    <motor joint="x" gear="100"/>
    <motor joint="y" gear="100"/>
    <motor joint="yaw" gear="100"/>
  </actuator>
</mujoco>
"""


def test_agents_move_like_mujocos_model_of_openais_agent():
    """The same drive (full force forward and full turn, then nothing) in MuJoCo, 15 steps of 5 ms per action."""
    mujoco = pytest.importorskip("mujoco")
    model = mujoco.MjModel.from_xml_string(MUJOCO_AGENT)
    data = mujoco.MjData(model)
    for _ in range(100):  # settle on the floor
        mujoco.mj_step(model, data)
    start = data.qpos.copy()
    reference = [np.zeros(2)]
    for k in range(STEPS + 4):
        data.ctrl[:] = (0.9, 0.0, 0.9) if k < STEPS else (0.0, 0.0, 0.0)
        for _ in range(15):
            mujoco.mj_step(model, data)
        reference.append(np.array([data.qpos[0] - start[0], data.qpos[3] - start[3]]))
    reference = np.array(reference)
    x, yaw = drive_alone(STEPS + 4, (10, 5, 10))
    # Per step within 2.5 cm and 0.01 rad, driven and released.
    np.testing.assert_allclose(np.diff(x[:, 0]), np.diff(reference[:, 0]), atol=0.025)
    np.testing.assert_allclose(np.diff(yaw), np.diff(reference[:, 1]), atol=0.01)


@pytest.mark.parametrize("box", [(0.45, 0.0, 0.0), (0.45, 0.0, 0.0, 0.15, 1.65, 0.5)], ids=["cube", "plank"])
def test_an_agent_turns_the_box_it_holds(box):
    """Holding a cube or a 1.65 m plank, full turn: the pair turns as one at over 5 rad/s within 3 steps
    (MuJoCo's model of OpenAI's agent welded to the plank: about 7.5 rad/s)."""
    sim = ecs.BatchSim(
        envs.make(
            "hide_and_seek",
            prep_fraction=0.0,
            max_episode_steps=1000,
            fixed_boxes=(box,),
            fixed_agents=((0, 0.0, 0.0, 0.0), (1, -2.5, 2.5, 0.0)),
        ),
        1,
        device="cpu",
    )
    sim.actions["move"].fill_(5)
    sim.actions["lock"].zero_()
    sim.actions["grab"].zero_()
    sim.actions["grab"][0, HIDER] = 1
    sim.step()
    assert int(sim.tensor("agent", "holding")[0, HIDER]) == 1
    agent, held = int(sim.tensor("agent", "body_row")[0, HIDER]), int(sim.tensor("agent", "reach_target")[0, HIDER])
    assert sim.tensor("body", "kind")[0, held] == int(Kind.BOX)

    def yaw(row: int) -> float:
        q = sim.tensor("body", "rotation").numpy()[0, row]
        return math.atan2(2 * (q[3] * q[2] + q[0] * q[1]), 1 - 2 * (q[1] ** 2 + q[2] ** 2))

    def gap() -> float:
        p = sim.tensor("body", "position").numpy()[0]
        return float(np.linalg.norm(p[held, :2] - p[agent, :2]))

    offset, distance = yaw(held) - yaw(agent), gap()
    sim.actions["move"][0, HIDER, 2] = 10
    for step in range(8):
        sim.step()
        w = sim.tensor("body", "angular_velocity").numpy()[0]
        assert abs(math.remainder(yaw(held) - yaw(agent) - offset, 2 * math.pi)) < 0.01
        assert abs(gap() - distance) < 0.01
        if step >= 2:
            assert w[agent, 2] > 5.0 and abs(w[held, 2] - w[agent, 2]) < 0.2, (step, w[agent, 2], w[held, 2])


def tilt_degrees(rotation: np.ndarray) -> np.ndarray:
    """Angle between each body's z axis and world z [degrees]; ``rotation`` is ``[..., 4]`` (x, y, z, w)."""
    x, y = rotation[..., 0], rotation[..., 1]
    cos = 1 - 2 * (x * x + y * y)  # the zz entry of the rotation matrix of a unit quaternion
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))


def random_play(sim: ecs.BatchSim, steps: int, seed: int, *, grab: bool, each_step=None) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        for key, high in (("move", 11), ("grab", 2), ("lock", 2)):
            sim.actions[key].copy_(
                torch.randint(0, high, tuple(sim.actions[key].shape), generator=gen, dtype=torch.int32)
            )
        if grab:
            sim.actions["grab"].fill_(1)
        sim.step()
        if each_step is not None:
            each_step(sim)


@pytest.mark.parametrize("seed", [3, 4])
def test_boxes_and_ramps_stay_upright_under_random_play(seed):
    """64 procedural worlds, 200 steps of random moves, grabs and locks (and the resets they bring): no box
    or ramp ever leans more than 1 degree. With free rotation some do tip over, so the check can fail."""
    worst = {}
    for upright in (True, False):
        sim = ecs.BatchSim(
            envs.make("hide_and_seek", objects_turn_only_about_z=upright, prep_fraction=0.0),
            64,
            device="cpu",
            seed=seed,
        )
        lean = [0.0]

        def check(sim: ecs.BatchSim, lean=lean) -> None:
            kind = sim.tensor("body", "kind").numpy()
            objects = (sim.tensor("body", "alive").numpy() != 0) & ((kind == Kind.BOX) | (kind == Kind.RAMP))
            lean[0] = max(lean[0], float(tilt_degrees(sim.tensor("body", "rotation").numpy())[objects].max()))

        random_play(sim, 200, seed, grab=False, each_step=check)
        worst[upright] = lean[0]
    assert worst[True] < 1.0 and worst[False] > 10.0, worst


@pytest.mark.parametrize("seed", [5, 6])
def test_nothing_leaves_the_walled_arena_under_random_play_with_held_grabs(seed):
    """64 worlds, all walled, every agent holding grab with random moves for a whole episode (240 steps): every
    agent, box and ramp stays inside the outside walls and on the floor, nothing higher than 1.5 m."""
    cfg = envs.make("hide_and_seek").config
    sim = ecs.BatchSim(
        envs.make("hide_and_seek", outside_walls_prob=1.0, prep_fraction=0.0), 64, device="cpu", seed=seed
    )
    inside = cfg.floor_size / 2 - cfg.wall_thickness  # the walls' inner faces
    worst = [0.0, 0.0]

    def check(sim: ecs.BatchSim) -> None:
        movable = (sim.tensor("body", "alive").numpy() != 0) & (sim.tensor("body", "kind").numpy() >= int(Kind.BOX))
        p = sim.tensor("body", "position").numpy()[movable]
        worst[0] = max(worst[0], float(np.abs(p[:, :2]).max()))
        worst[1] = max(worst[1], float(p[:, 2].max()))

    random_play(sim, cfg.max_episode_steps - 1, seed, grab=True, each_step=check)
    assert worst[0] < inside and worst[1] < 1.5, (worst, inside)


EARLIER = {  # the defaults before OpenAI's, as envs/hide_and_seek/README.md lists them
    "physics_dt": 1 / 30,
    "physics_substeps": 4,
    "gravity": -9.8,
    "move_force": 20.0,
    "move_damping": 8.0,
    "turn_torque": 0.3,
    "turn_damping": 0.036,
    "wall_thickness": 0.2,
    "wall_height": 1.0,
    "outside_wall_height": 1.0,
    "door_width": 0.4,
    "play_area": (),
    "objects_turn_only_about_z": False,
    "lock_type": "toggle",
}


def test_the_earlier_defaults_are_a_config_away():
    """Madrona's step and the slower agents: a top speed of (20 - 0.2 x 9.8) / 8 = 2.25 m/s, 8.3 rad/s of turn."""
    x, yaw = drive_alone(40, (10, 5, 10), drive=40, **EARLIER)
    speed, turn = np.diff(x[:, 0]) / EARLIER["physics_dt"], np.diff(yaw) / EARLIER["physics_dt"]
    np.testing.assert_allclose(speed[30:], (20.0 - 0.2 * 9.8) / 8.0, rtol=0.02)
    np.testing.assert_allclose(turn[30:], 0.3 / 0.036, rtol=0.02)
    cfg = envs.make("hide_and_seek", **EARLIER).config
    assert cfg.play_area_bounds == ((-3.0, -3.0), (3.0, 3.0))
