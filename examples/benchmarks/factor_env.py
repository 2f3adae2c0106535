"""Benchmark environments built with the public ``ecs`` API (used by ``bench_suite.py``).

``make_factor_env(state_factor=S, compute_factor=C)``: cartpole with two knobs, after the state
and compute factors of Gleeson et al. 2022 ("Optimizing Data Collection in Deep Reinforcement
Learning"):

- **S**, the memory-bound knob: every world carries ``S`` extra float32 values (one singleton of
  dtype ``wp.types.vector(S, wp.float32)``). Each step loads, scales (by ``pad_decay``) and
  stores all of them; a reset sets them to 1. ``S = 0`` has no such singleton.
- **C**, the compute-bound knob: the cart-pole equations are integrated in ``C`` explicit Euler
  substeps of ``tau / C`` each, so a step does ``C`` times the arithmetic. With ``S = 0, C = 1``
  the env is cartpole transition for transition (same float32 operations, same random numbers).

``make_chain_env(num_systems=20)``: the launch-overhead env: ``num_systems`` tiny per-world
systems in a chain over one singleton (each reads the action and rewrites the value), so a step
is almost nothing but launches. It measures what capturing the step saves over eager launches.

Warp reads kernel source from files, so these systems live in this module rather than in the
benchmark script.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import warp as wp

import ecs
from envs.cartpole import kernels as cartpole_kernels
from envs.cartpole.env import CartPosition, CartVelocity, PoleAngle, PoleAngularVelocity, Push, State

wp.set_module_options({"enable_backward": False})


@dataclass(frozen=True)
class FactorConfig:
    """Cartpole (Gymnasium CartPole-v1 defaults) plus the state and compute factors."""

    gravity: float = 9.8  # m/s^2
    masscart: float = 1.0  # kg
    masspole: float = 0.1  # kg
    length: float = 0.5  # m, half the pole's length
    force_mag: float = 10.0  # N
    tau: float = 0.02  # s per step
    x_threshold: float = 2.4  # m
    theta_threshold_degrees: float = 12.0  # degrees
    reset_noise: float = 0.05  # half-width of the uniform initial state
    max_episode_steps: int = 500  # truncation horizon
    state_factor: int = 0  # S: extra float32 values carried per world
    compute_factor: int = 1  # C: Euler substeps per step
    pad_decay: float = 0.999  # per-step scale of the carried values

    def __post_init__(self) -> None:
        if self.state_factor < 0:
            raise ValueError(f"state_factor must be >= 0, got {self.state_factor}")
        if self.compute_factor < 1:
            raise ValueError(f"compute_factor must be >= 1, got {self.compute_factor}")


@wp.func
def step_factor(
    # Resources:
    gravity: float,
    masscart: float,
    masspole: float,
    length: float,
    tau: float,
    compute_factor: int,
    force_mag: float,
    # Components in:
    world_push_in: wp.int32,
    # Components out:
    world_cart_position_out: float,
    world_cart_velocity_out: float,
    world_pole_angle_out: float,
    world_pole_angular_velocity_out: float,
):
    """``compute_factor`` substeps of cartpole's own Euler step, ``tau / compute_factor`` each."""
    x = world_cart_position_out
    x_dot = world_cart_velocity_out
    theta = world_pole_angle_out
    theta_dot = world_pole_angular_velocity_out
    dt = tau
    if compute_factor > 1:
        dt = tau / float(compute_factor)
    for _ in range(compute_factor):
        x, x_dot, theta, theta_dot = cartpole_kernels.step_cartpole(
            gravity, masscart, masspole, length, dt, force_mag, world_push_in, x, x_dot, theta, theta_dot
        )
    return x, x_dot, theta, theta_dot


@wp.func
def carry_pad(
    # Resources:
    pad_decay: float,
    # Components out:
    world_pad_out: Any,
):
    """Loads, scales and stores the S carried values (a vector of any length)."""
    return world_pad_out * pad_decay


@wp.func
def reset_pad(
    # Components out:
    world_pad_out: Any,
):
    """Every carried value back to 1."""
    pad = world_pad_out
    for i in range(len(pad)):
        pad[i] = 1.0
    return pad


def make_factor_env(state_factor: int = 0, compute_factor: int = 1, **overrides: Any) -> ecs.EnvSpec:
    """Cartpole carrying ``state_factor`` extra floats per world and integrating in ``compute_factor`` substeps.

    Each (S, C) gets its own env name (``factor_s{S}_c{C}``), hence its own generated kernel modules.
    """
    cfg = FactorConfig(state_factor=int(state_factor), compute_factor=int(compute_factor), **overrides)
    singletons = [CartPosition, CartVelocity, PoleAngle, PoleAngularVelocity, Push, State]
    physics = [ecs.System(step_factor, ecs.Phase.PHYSICS)]
    reset = [ecs.System(cartpole_kernels.reset_cartpole, ecs.Phase.RESET)]
    if cfg.state_factor > 0:
        pad = ecs.Component(
            "pad",
            wp.types.vector(cfg.state_factor, wp.float32),
            singleton=True,
            doc=f"{cfg.state_factor} carried float32 values (the state factor)",
        )
        singletons.append(pad)
        physics.append(ecs.System(carry_pad, ecs.Phase.PHYSICS))
        reset.append(ecs.System(reset_pad, ecs.Phase.RESET))
    theta = cfg.theta_threshold_degrees * 2.0 * math.pi / 360.0
    return ecs.EnvSpec(
        name=f"factor_s{cfg.state_factor}_c{cfg.compute_factor}",
        config=cfg,
        singletons=singletons,
        systems=[
            *physics,
            ecs.System(cartpole_kernels.judge_cartpole, ecs.Phase.REWARD),
            *reset,
            ecs.System(cartpole_kernels.observe_cartpole, ecs.Phase.OBSERVE),
        ],
        actions={"push": ecs.Action(Push, low=0, high=1)},
        observations={"state": ecs.Observation(State)},
        max_episode_steps=cfg.max_episode_steps,
        params=[ecs.Param("force_mag", wp.float32, cfg.force_mag)],
        resources={"theta_threshold_radians": theta},
    )


# -- the launch-overhead env ---------------------------------------------------------------------


@dataclass(frozen=True)
class ChainConfig:
    num_systems: int = 20
    max_episode_steps: int = 100


@ecs.component(singleton=True)
class ChainValue:
    """The value every system of the chain rewrites."""

    value: wp.float32


@ecs.component(singleton=True)
class Nudge:
    """Action: 0 or 1, added by every link."""

    value: wp.int32


@wp.func
def chain_link(
    # Components in:
    world_nudge_in: wp.int32,
    # Components out:
    world_chain_value_out: float,
):
    """One link: halve the value and add the action."""
    return world_chain_value_out * 0.5 + float(world_nudge_in)


@wp.func
def chain_reset(
    # Components out:
    world_chain_value_out: float,
):
    return 0.0


def make_chain_env(num_systems: int = 20) -> ecs.EnvSpec:
    """``num_systems`` per-world systems in a chain over one singleton (observed as ``value``)."""
    if num_systems < 1:
        raise ValueError(f"num_systems must be >= 1, got {num_systems}")
    cfg = ChainConfig(num_systems=int(num_systems))
    links = [ecs.System(chain_link, ecs.Phase.PHYSICS, name=f"link_{i:02d}") for i in range(cfg.num_systems)]
    return ecs.EnvSpec(
        name=f"chain{cfg.num_systems}",
        config=cfg,
        singletons=[ChainValue, Nudge],
        systems=[*links, ecs.System(chain_reset, ecs.Phase.RESET)],
        actions={"nudge": ecs.Action(Nudge, low=0, high=1)},
        observations={"value": ecs.Observation(ChainValue)},
        max_episode_steps=cfg.max_episode_steps,
    )
