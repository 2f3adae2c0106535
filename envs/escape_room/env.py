"""Escape room after Madrona's: two agents cross a row of rooms whose doors open only while something
stands on the room's button, so one agent holds the door (or parks a cube on the button) for the other.

Rooms are ``room_width`` x ``room_length`` [m] along +y; the wall between room k and k+1 has a door
at a random x, open while an agent or a cube stands on room k's button (a floor square). Each room
holds one cube (agents push it, or grab it: a fixed joint while ``grab`` is 1). Beyond the last
room lies the exit.

| Action | shape | values |
|---|---|---|
| ``move`` | ``[num_worlds, 2, 2]`` int32 | bins 0..10 of force along world x and y; 5 = none; full scale ``move_force`` [N] |
| ``grab`` | ``[num_worlds, 2]`` int32 | 1 holds the reach target if it is a cube (fixed joint), 0 lets go |

| Observation | shape | meaning |
|---|---|---|
| ``self`` | ``[num_worlds, 2, 7]`` float32 | position x, y [m], velocity x, y [m/s], holding, the other agent's position relative to it (2) |
| ``doors`` | ``[num_worlds, 2, R - 1, 5]`` float32 | per door: its centre relative to the agent (2), open, its button relative to the agent (2) |
| ``lidar`` | ``[num_worlds, 2, lidar_rays]`` float32 | distance to the first hit per ray [m]; a miss reads ``lidar_range`` |

| Reward | shape | value |
|---|---|---|
| ``sim.rewards`` | ``[num_worlds, 2]`` float32 | the metres an agent gets beyond its best y so far this episode; ``exit_reward`` to both when one leaves the last room |

| Reset | |
|---|---|
| level | walls, closed doors at uniform x, buttons in each room's near half and cubes in its far half, both agents at the start of room 0 |

| Termination | |
|---|---|
| terminated | an agent passed the end of the last room |
| truncated | ``max_episode_steps`` (200) steps |

One step, in phase order: ACT ``act_agents`` (grabs, drive forces, doors follow their buttons); PHYSICS
``find_pairs``; COLLIDE ``step_bodies``; REWARD ``reward_progress``; RESET ``reset_rooms``; SENSE lidar,
visibility and reach (``systems.raycast``); OBSERVE ``observe_room``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import warp as wp

import ecs
from systems import physics, raycast

from . import kernels

DEFAULT_YAML = os.path.join(os.path.dirname(__file__), "escape_room.yaml")


@dataclass(frozen=True)
class EscapeRoomConfig:
    """Escape-room parameters (metres, newtons, seconds)."""

    num_rooms: int = 3  # 1..8
    room_width: float = 6.0
    room_length: float = 5.0
    wall_thickness: float = 0.2
    door_width: float = 1.2
    button_size: float = 1.0  # side of the button square
    cube_size: float = 0.8
    agent_radius: float = 0.25
    friction: float = 0.5
    move_force: float = 20.0
    move_damping: float = 8.0  # N per m/s of the agent's own velocity
    exit_reward: float = 10.0
    lidar_rays: int = 30
    lidar_range: float = 8.0
    max_episode_steps: int = 200

    def __post_init__(self) -> None:
        if not 1 <= self.num_rooms <= 8:
            raise ValueError(f"num_rooms must be in 1..8, got {self.num_rooms}")
        sizes = (
            "room_width",
            "room_length",
            "wall_thickness",
            "door_width",
            "button_size",
            "cube_size",
            "agent_radius",
        )
        for name in (*sizes, "lidar_range"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {getattr(self, name)}")
        for name in ("friction", "move_force", "move_damping", "exit_reward"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.door_width + 0.6 > self.room_width or 4 * self.agent_radius + 0.4 > self.room_width:
            raise ValueError("room_width must leave room for the door (door_width + 0.6 m) and both agents")
        if self.lidar_rays < 1 or self.max_episode_steps < 1:
            raise ValueError("lidar_rays and max_episode_steps must be >= 1")


@ecs.component
class Holding:
    """1 while the agent holds a cube (joint row = agent slot), else 0."""

    value: wp.int32


def make(config: str | os.PathLike | None = None, **overrides: Any) -> ecs.EnvSpec:
    """The escape-room spec from ``escape_room.yaml`` (or ``config``) and keyword overrides."""
    cfg = ecs.load_config(EscapeRoomConfig, config if config is not None else DEFAULT_YAML, **overrides)
    doors = max(cfg.num_rooms - 1, 1)
    bodies = 4 + 3 * (cfg.num_rooms - 1) + cfg.num_rooms + kernels.NUM_AGENTS
    phys = physics.PhysicsConfig(max_bodies=bodies, max_joints=kernels.NUM_AGENTS)
    agent = ecs.Archetype(
        "agent",
        (
            raycast.BodyRow,
            raycast.ReachTarget,
            *raycast.lidar_components(cfg.lidar_rays),
            raycast.visible_component(bodies),
            raycast.reach_gap_component(bodies),
            Holding,
        ),
        capacity=kernels.NUM_AGENTS,
    )

    def single(name: str, dtype: Any, shape: tuple[int, ...], doc: str) -> ecs.Component:
        return ecs.Component(name, dtype, shape=shape, singleton=True, doc=doc)

    move = single("move", wp.vec2i, (2,), "force bins x, y per agent")
    grab = single("grab", wp.int32, (2,), "1 holds the reach target")
    self_obs = single("self_obs", wp.float32, (2, 7), "position, velocity, holding, the other agent")
    doors_obs = single("doors_obs", wp.float32, (2, doors, 5), "doors and buttons relative to the agent")
    lidar_obs = single("lidar_obs", wp.float32, (2, cfg.lidar_rays), "lidar distances [m]")
    span = cfg.num_rooms * cfg.room_length + cfg.room_width
    return ecs.EnvSpec(
        name="escape_room",
        config=cfg,
        archetypes=[*physics.archetypes(phys), agent],
        singletons=[
            *physics.singletons(),
            move,
            grab,
            self_obs,
            doors_obs,
            lidar_obs,
            single("door_x", wp.float32, (doors,), "door centres along x [m]"),
            single("door_open", wp.int32, (doors,), "1 while the door is open"),
            single("button", wp.vec2, (doors,), "button centres [m]"),
            single("best_y", wp.float32, (2,), "each agent's best y this episode [m]"),
        ],
        systems=[
            ecs.System(kernels.act_agents, ecs.Phase.ACT),
            *physics.systems(phys),
            ecs.System(kernels.reward_progress, ecs.Phase.REWARD),
            ecs.System(kernels.reset_rooms, ecs.Phase.RESET),
            *raycast.sensor_systems(),
            ecs.System(kernels.observe_room, ecs.Phase.OBSERVE),
        ],
        actions={"move": ecs.Action(move, low=0, high=10), "grab": ecs.Action(grab, low=0, high=1)},
        observations={
            "self": ecs.Observation(self_obs, low=-span, high=span),
            "doors": ecs.Observation(doors_obs, low=-span, high=span),
            "lidar": ecs.Observation(lidar_obs, low=0.0, high=cfg.lidar_range),
        },
        num_agents=kernels.NUM_AGENTS,
        max_episode_steps=cfg.max_episode_steps,
        resources={**physics.resources(phys), **raycast.default_resources(lidar_range=cfg.lidar_range)},
    )
