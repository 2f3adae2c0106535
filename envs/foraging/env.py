"""Foraging: one agent in a square arena eats food and avoids poison that appear and vanish at random.

The environment exercises what cartpole does not: three archetypes (``forager``, ``food``,
``poison``), entities spawned and despawned inside kernels during an episode, per-world
singletons that accumulate (``score``, ``items_eaten``), and systems whose query spans two
archetypes (``age_items`` and ``expire_items`` run once over ``food`` and once over ``poison``).

| Action | shape | values |
|---|---|---|
| ``move`` | ``[num_worlds]`` int32 | ``Direction``: 0 stay, 1 up (+y), 2 down (-y), 3 left (-x), 4 right (+x); a move is ``agent_speed`` (0.5 m), clamped to the arena |

| Observation | shape | meaning |
|---|---|---|
| ``agent`` | ``[num_worlds, 3]`` float32 | forager x, y in ``[0, arena_size]`` [m], energy in ``[0, max_energy]`` |
| ``items`` | ``[num_worlds, food_capacity + poison_capacity, 3]`` float32 (12 by default) | per slot: item position minus forager position (dx, dy) [m] and a flag, +1 food, -1 poison; live food rows first, then live poison rows, in row order; empty slots are 0 |

| Reward | shape | value |
|---|---|---|
| ``sim.rewards`` | ``[num_worlds]`` float32 | ``food_reward`` (+1) per food item and ``poison_reward`` (-1) per poison item eaten this step; 0 otherwise |

| Reset | |
|---|---|
| items | both item tables emptied (every row despawned; generations are kept, so old handles stay stale) |
| forager | spawned at the first reset, then kept; position uniform in the arena from the world's episode RNG; energy ``max_energy`` |
| singletons | ``score`` 0, ``items_eaten`` 0 |

| Termination | |
|---|---|
| terminated | the forager's energy reached 0 (it burns ``energy_per_step``, gains ``food_energy`` per food up to ``max_energy``, loses ``poison_energy`` per poison) |
| truncated | ``max_episode_steps`` (200) steps, unless terminated on that step |

One step, in phase order:

1. ACT: ``move_forager`` moves the agent.
2. PHYSICS: ``spawn_items`` draws, from the world's RNG, whether one food item and one poison
   item appear and where (uniform in the arena); each goes to the lowest free row of its table
   with age 0 and its kind's lifetime. A full table skips the spawn (``strict_capacity`` makes
   it an ``ecs.CapacityError`` instead). ``age_items`` adds 1 to the age of every live item (the
   spawn step counts); ``burn_energy`` takes ``energy_per_step`` from the forager (floor 0).
3. COLLIDE: ``expire_items`` despawns items whose age reached their lifetime (an item lives
   ``lifetime`` steps, its spawn step included); ``eat_items`` despawns every live item within
   ``reach`` of the agent, food first, then poison, each in row order, and updates energy,
   reward, ``score`` and ``items_eaten`` item by item.
4. REWARD: ``judge_forager`` sets ``terminated`` when the energy is 0.
5. RESET (worlds whose episode ended): ``reset_foraging``.
6. OBSERVE: ``observe_forager``, ``observe_items``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import warp as wp

import ecs

from . import kernels
from .kernels import Direction

DEFAULT_YAML = os.path.join(os.path.dirname(__file__), "foraging.yaml")

# Row indices are packed into 16 bits of an entity handle.
_MAX_CAPACITY = 65535


@dataclass(frozen=True)
class ForagingConfig:
    """Foraging parameters. Item rates and lifetimes are chosen so that the tables fill up now and then."""

    arena_size: float = 10.0  # m, side of the square arena [0, arena_size]^2
    agent_speed: float = 0.5  # m per step
    reach: float = 1.0  # m, the agent eats items closer than this (inclusive)
    food_capacity: int = 8  # food items per world at most
    poison_capacity: int = 4  # poison items per world at most
    food_spawn_prob: float = 0.3  # probability per step that one food item appears, in [0, 1]
    poison_spawn_prob: float = 0.1  # probability per step that one poison item appears, in [0, 1]
    food_lifetime: int = 25  # steps a food item lives, its spawn step included, >= 1
    poison_lifetime: int = 40  # steps a poison item lives, its spawn step included, >= 1
    food_reward: float = 1.0  # reward per food item eaten
    poison_reward: float = -1.0  # reward per poison item eaten
    max_energy: float = 1.0  # energy at reset and its cap, > 0
    energy_per_step: float = 0.01  # energy burnt per step, >= 0
    food_energy: float = 0.2  # energy per food item eaten, >= 0
    poison_energy: float = 0.3  # energy lost per poison item eaten, >= 0
    strict_capacity: bool = False  # True: a spawn into a full table raises ecs.CapacityError instead of being skipped
    max_episode_steps: int = 200  # truncation horizon in steps; 0 for none

    def __post_init__(self) -> None:
        for name in ("arena_size", "reach", "max_energy"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {getattr(self, name)}")
        for name in ("agent_speed", "energy_per_step", "food_energy", "poison_energy"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {getattr(self, name)}")
        for name in ("food_reward", "poison_reward"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite, got {getattr(self, name)}")
        for name in ("food_spawn_prob", "poison_spawn_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("food_capacity", "poison_capacity"):
            if not 1 <= getattr(self, name) <= _MAX_CAPACITY:
                raise ValueError(f"{name} must be in [1, {_MAX_CAPACITY}], got {getattr(self, name)}")
        for name in ("food_lifetime", "poison_lifetime"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_episode_steps < 0:
            raise ValueError(f"max_episode_steps must be >= 0, got {self.max_episode_steps}")


@ecs.component
class Position:
    """Position in the arena [m], each coordinate in [0, arena_size]. Forager, food and poison."""

    value: wp.vec2


@ecs.component
class Energy:
    """The forager's energy, in [0, max_energy]; 0 ends the episode. Forager only."""

    value: wp.float32


@ecs.component
class Age:
    """Steps an item has lived, its spawn step included. Food and poison only (not the forager)."""

    value: wp.int32


@ecs.component
class Lifetime:
    """Age at which an item despawns [steps], >= 1; set at spawn from the config. Food and poison."""

    value: wp.int32


@ecs.component(singleton=True)
class Move:
    """Action: a ``Direction`` in [0, 4]. Exported as ``move``, int32 ``[num_worlds]``."""

    value: wp.int32


@ecs.component(singleton=True)
class Agent:
    """Observation (x, y, energy) of the forager. Exported as ``agent``, float32 ``[num_worlds, 3]``."""

    value: wp.vec3


@ecs.component(singleton=True)
class Score:
    """Sum of the rewards of the current episode."""

    value: wp.float32


@ecs.component(singleton=True)
class ItemsEaten:
    """Items (food and poison) eaten in the current episode."""

    value: wp.int32


def items_component(slots: int) -> ecs.Component:
    """The ``items`` observation: ``slots`` entries of (dx [m], dy [m], flag), float32 ``[num_worlds, slots, 3]``."""
    return ecs.Component(
        "items",
        wp.vec3,
        shape=(slots,),
        singleton=True,
        doc=(
            "Observation: live items relative to the forager, (dx, dy) [m] and a flag (+1 food, -1 poison); "
            "food rows first, then poison rows, in row order; empty slots 0. "
            f"Exported as ``items``, float32 ``[num_worlds, {slots}, 3]``."
        ),
    )


def make(config: str | os.PathLike | None = None, **overrides: Any) -> ecs.EnvSpec:
    """The foraging spec from ``foraging.yaml`` (or ``config``) and keyword overrides."""
    cfg = ecs.load_config(ForagingConfig, config if config is not None else DEFAULT_YAML, **overrides)
    items = items_component(cfg.food_capacity + cfg.poison_capacity)
    span = max(cfg.arena_size, 1.0)
    return ecs.EnvSpec(
        name="foraging",
        config=cfg,
        archetypes=[
            ecs.Archetype("forager", (Position, Energy), capacity=1, doc="the agent"),
            ecs.Archetype("food", (Position, Age, Lifetime), capacity=cfg.food_capacity, doc="eat for reward"),
            ecs.Archetype("poison", (Position, Age, Lifetime), capacity=cfg.poison_capacity, doc="avoid"),
        ],
        singletons=[Move, Agent, items, Score, ItemsEaten],
        systems=[
            ecs.System(kernels.move_forager, ecs.Phase.ACT),
            ecs.System(kernels.spawn_items, ecs.Phase.PHYSICS),
            ecs.System(kernels.age_items, ecs.Phase.PHYSICS),
            ecs.System(kernels.burn_energy, ecs.Phase.PHYSICS),
            ecs.System(kernels.expire_items, ecs.Phase.COLLIDE),
            ecs.System(kernels.eat_items, ecs.Phase.COLLIDE),
            ecs.System(kernels.judge_forager, ecs.Phase.REWARD),
            ecs.System(kernels.reset_foraging, ecs.Phase.RESET),
            ecs.System(kernels.observe_forager, ecs.Phase.OBSERVE),
            ecs.System(kernels.observe_items, ecs.Phase.OBSERVE),
        ],
        actions={"move": ecs.Action(Move, low=int(Direction.NONE), high=int(Direction.RIGHT))},
        observations={
            "agent": ecs.Observation(Agent, low=0.0, high=max(cfg.arena_size, cfg.max_energy)),
            "items": ecs.Observation(items, low=-span, high=span),
        },
        max_episode_steps=cfg.max_episode_steps,
    )
