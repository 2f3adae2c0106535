"""Cartpole: Gymnasium's CartPole-v1, transition for transition, in float32.

| Action | shape | values |
|---|---|---|
| ``push`` | ``[num_worlds]`` int32 | 0 pushes the cart left, 1 pushes it right (``force_mag`` N) |

| Observation | shape | meaning |
|---|---|---|
| ``state`` | ``[num_worlds, 4]`` float32 | cart position [m], cart velocity [m/s], pole angle [rad], pole angular velocity [rad/s] |

| Reward | shape | value |
|---|---|---|
| ``sim.rewards`` | ``[num_worlds]`` float32 | 1.0 on every step, the terminating one included |

| Reset | |
|---|---|
| state | each variable uniform in ``[-reset_noise, reset_noise]`` (0.05) from the world's episode RNG |

| Termination | |
|---|---|
| terminated | cart position outside ``±x_threshold`` (2.4 m) or pole angle outside ``±theta_threshold_degrees`` (12°) |
| truncated | ``max_episode_steps`` (500) steps, unless terminated on that step |
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import warp as wp

import ecs

from . import kernels

DEFAULT_YAML = os.path.join(os.path.dirname(__file__), "cartpole.yaml")


@dataclass(frozen=True)
class CartpoleConfig:
    """Cartpole parameters; the defaults are Gymnasium's CartPole-v1."""

    gravity: float = 9.8  # m/s^2
    masscart: float = 1.0  # kg
    masspole: float = 0.1  # kg
    length: float = 0.5  # m, half the pole's length
    force_mag: float = 10.0  # N
    tau: float = 0.02  # s per step
    x_threshold: float = 2.4  # m
    theta_threshold_degrees: float = 12.0  # degrees
    reset_noise: float = 0.05  # half-width of the uniform initial state
    max_episode_steps: int = 500  # truncation horizon; 0 for none

    def __post_init__(self) -> None:
        for name in ("gravity", "masscart", "masspole", "length", "force_mag", "tau", "x_threshold"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.theta_threshold_degrees < 180:
            raise ValueError(f"theta_threshold_degrees must be in (0, 180), got {self.theta_threshold_degrees}")
        if not self.reset_noise >= 0:
            raise ValueError(f"reset_noise must be >= 0, got {self.reset_noise}")
        if self.max_episode_steps < 0:
            raise ValueError(f"max_episode_steps must be >= 0, got {self.max_episode_steps}")


@ecs.component(singleton=True)
class CartPosition:
    """Cart position along the track [m]; |x| > x_threshold terminates."""

    value: wp.float32


@ecs.component(singleton=True)
class CartVelocity:
    """Cart velocity [m/s]."""

    value: wp.float32


@ecs.component(singleton=True)
class PoleAngle:
    """Pole angle from upright [rad]; |theta| > 12 degrees terminates."""

    value: wp.float32


@ecs.component(singleton=True)
class PoleAngularVelocity:
    """Pole angular velocity [rad/s]."""

    value: wp.float32


@ecs.component(singleton=True)
class Push:
    """Action: 0 pushes the cart left, 1 pushes it right. Exported as ``push``, int32 ``[num_worlds]``."""

    value: wp.int32


@ecs.component(singleton=True)
class State:
    """Observation (x, x_dot, theta, theta_dot). Exported as ``state``, float32 ``[num_worlds, 4]``."""

    value: wp.vec4


def make(config: str | os.PathLike | None = None, **overrides: Any) -> ecs.EnvSpec:
    """The cartpole spec from ``cartpole.yaml`` (or ``config``) and keyword overrides."""
    cfg = ecs.load_config(CartpoleConfig, config if config is not None else DEFAULT_YAML, **overrides)
    theta = cfg.theta_threshold_degrees * 2.0 * math.pi / 360.0
    high = float("inf")
    return ecs.EnvSpec(
        name="cartpole",
        config=cfg,
        singletons=[CartPosition, CartVelocity, PoleAngle, PoleAngularVelocity, Push, State],
        systems=[
            ecs.System(kernels.step_cartpole, ecs.Phase.PHYSICS),
            ecs.System(kernels.judge_cartpole, ecs.Phase.REWARD),
            ecs.System(kernels.reset_cartpole, ecs.Phase.RESET),
            ecs.System(kernels.observe_cartpole, ecs.Phase.OBSERVE),
        ],
        actions={"push": ecs.Action(Push, low=0, high=1)},
        observations={"state": ecs.Observation(State, low=-high, high=high)},
        max_episode_steps=cfg.max_episode_steps,
        params=[ecs.Param("force_mag", wp.float32, cfg.force_mag)],
        resources={"theta_threshold_radians": theta},
    )
