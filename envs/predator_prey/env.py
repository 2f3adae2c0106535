"""Predator-prey after the multi-agent particle environments' ``simple_tag``: predators chase prey in a
square arena with landmarks; a caught prey is despawned and a new one spawns after a delay.

Agent slots: predators ``0..num_predators-1``, then ``max_prey`` prey slots. Up to ``num_prey``
prey live at once; a prey slot is empty (``active`` 0, observations 0, reward 0) while its row is
despawned. Every system is a
``@wp.func``, so the step fuses into one kernel (``ecs.fusion``), on several CPU threads too.

| Action | shape | values |
|---|---|---|
| ``move`` | ``[num_worlds, A]`` int32, ``A = num_predators + max_prey`` | 0 none, 1 +x, 2 -x, 3 +y, 4 -y: an acceleration of ``predator_accel`` or ``prey_accel`` [m/s^2] |

| Observation | shape | meaning |
|---|---|---|
| ``self`` | ``[num_worlds, A, 6]`` float32 | velocity (2) [m/s], position (2) [m], 1 for prey, 1 when the slot is live |
| ``landmarks`` | ``[num_worlds, A, L, 2]`` float32 | each landmark's position relative to the agent [m] |
| ``others`` | ``[num_worlds, A, A - 1, 5]`` float32 | the other slots in slot order: relative position (2), relative velocity (2), 1 when that slot is live (else all 0) |
| ``active`` | ``[num_worlds, A]`` float32 | 1 for live slots |

| Reward | shape | value |
|---|---|---|
| ``sim.rewards`` | ``[num_worlds, A]`` float32 | each catch: ``+catch_reward`` to every predator, ``-catch_reward`` to the prey caught; a live prey outside the arena square loses 1 per step |

| Reset | |
|---|---|
| agents | every row despawned; ``num_predators`` predators, then ``num_prey`` prey, at uniform points of the arena; velocities 0 |
| landmarks | ``num_landmarks`` uniform points within 80 % of the arena's half width |

| Termination | |
|---|---|
| terminated | never |
| truncated | ``max_episode_steps`` (100) steps |

One step, in phase order: ACT ``move_agent`` (per agent: damping, acceleration, speed limit, position,
out of the landmarks); PHYSICS ``respawn_prey`` (when the respawn timer runs out, a prey spawns in
the lowest free row; the timer starts at a catch and restarts while fewer than ``num_prey`` live);
COLLIDE ``catch_prey`` (prey within two agent radii of a predator are despawned, rewards); RESET
``reset_hunt``; OBSERVE ``observe_hunt``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import warp as wp

import ecs

from . import kernels
from .kernels import OBS_OTHER, OBS_SELF

DEFAULT_YAML = os.path.join(os.path.dirname(__file__), "predator_prey.yaml")


@dataclass(frozen=True)
class PredatorPreyConfig:
    """Predator-prey parameters; dynamics follow MPE's ``simple_tag`` (dt 0.1 s, damping 0.25)."""

    num_predators: int = 3  # >= 1
    num_prey: int = 2  # prey at reset, and kept up to by respawning; 0..max_prey
    max_prey: int = 2  # prey rows (slots), >= 1
    num_landmarks: int = 2  # >= 0
    arena_half: float = 1.0  # m, half width of the arena square
    agent_radius: float = 0.075  # m; a catch when a predator and a prey are closer than two radii
    landmark_radius: float = 0.2  # m
    dt: float = 0.1  # s per step
    damping: float = 0.25  # share of the velocity lost per step, in [0, 1)
    predator_accel: float = 3.0  # m/s^2
    prey_accel: float = 4.0  # m/s^2
    predator_max_speed: float = 1.0  # m/s
    prey_max_speed: float = 1.3  # m/s
    catch_reward: float = 10.0
    respawn_delay: int = 10  # steps from a catch until a new prey spawns, >= 1
    max_episode_steps: int = 100  # truncation horizon in steps; 0 for none

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ecs.ConfigError(f"predator_prey: {what}")

        for name in ("num_predators", "max_prey", "respawn_delay"):
            need(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, f"{name} must be an int >= 1")
        need(0 <= self.num_prey <= self.max_prey, f"num_prey must be in [0, max_prey={self.max_prey}]")
        need(0 <= self.num_landmarks <= 16, "num_landmarks must be in [0, 16]")
        need(self.num_predators + self.max_prey <= 64, "num_predators + max_prey must be <= 64")
        need(0 <= self.max_episode_steps < 2**31, "max_episode_steps must be in [0, 2**31)")
        positive = ("arena_half", "agent_radius", "landmark_radius", "dt", "predator_max_speed", "prey_max_speed")
        for name in (*positive, "predator_accel", "prey_accel", "catch_reward"):
            v, low = getattr(self, name), 0.0 if name in positive else -1.0
            need(
                math.isfinite(v) and v > low and v >= 0, f"{name} must be a finite number >= 0 (> 0 for sizes), got {v}"
            )
        need(0.0 <= self.damping < 1.0, f"damping must be in [0, 1), got {self.damping}")


@ecs.component
class Position:
    """Agent position [m]."""

    value: wp.vec2


@ecs.component
class Velocity:
    """Agent velocity [m/s]."""

    value: wp.vec2


@ecs.component
class Prey:
    """1 for prey, 0 for predators."""

    value: wp.int32


@ecs.component(singleton=True)
class RespawnTimer:
    """Steps until the next prey spawns; 0 when none is due."""

    value: wp.int32


@ecs.component(singleton=True)
class Catches:
    """Prey caught in the current episode."""

    value: wp.int32


def make(config: str | os.PathLike | None = None, **overrides: Any) -> ecs.EnvSpec:
    """The predator-prey spec from ``predator_prey.yaml`` (or ``config``) and keyword overrides."""
    cfg = ecs.load_config(PredatorPreyConfig, config if config is not None else DEFAULT_YAML, **overrides)
    n, lm = cfg.num_predators + cfg.max_prey, max(cfg.num_landmarks, 1)

    def single(name: str, dtype: Any, shape: tuple[int, ...], doc: str) -> ecs.Component:
        return ecs.Component(name, dtype, shape=shape, singleton=True, doc=doc)

    move = single("move", wp.int32, (n,), "action per slot: 0 none, 1 +x, 2 -x, 3 +y, 4 -y")
    landmarks = single("landmarks", wp.vec2, (lm,), "landmark centres [m]")
    self_obs = single("self_obs", wp.float32, (n, OBS_SELF), "velocity, position, is prey, live")
    landmark_obs = single("landmark_obs", wp.float32, (n, lm, 2), "landmarks relative to the agent [m]")
    others_obs = single("others_obs", wp.float32, (n, n - 1, OBS_OTHER), "other slots relative to the agent")
    active = single("active", wp.float32, (n,), "1 for live slots")
    span = 4.0 * cfg.arena_half + 2.0 * max(cfg.predator_max_speed, cfg.prey_max_speed)
    return ecs.EnvSpec(
        name="predator_prey",
        config=cfg,
        archetypes=[ecs.Archetype("agent", (Position, Velocity, Prey), capacity=n, doc="predators, then prey")],
        singletons=[move, landmarks, self_obs, landmark_obs, others_obs, active, RespawnTimer, Catches],
        systems=[
            ecs.System(kernels.move_agent, ecs.Phase.ACT),
            ecs.System(kernels.respawn_prey, ecs.Phase.PHYSICS),
            ecs.System(kernels.catch_prey, ecs.Phase.COLLIDE),
            ecs.System(kernels.reset_hunt, ecs.Phase.RESET),
            ecs.System(kernels.observe_hunt, ecs.Phase.OBSERVE),
        ],
        actions={"move": ecs.Action(move, low=0, high=4)},
        observations={
            "self": ecs.Observation(self_obs, low=-span, high=span),
            "landmarks": ecs.Observation(landmark_obs, low=-span, high=span),
            "others": ecs.Observation(others_obs, low=-span, high=span),
            "active": ecs.Observation(active, low=0.0, high=1.0),
        },
        num_agents=n,
        max_episode_steps=cfg.max_episode_steps,
    )
