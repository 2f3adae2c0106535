"""The step program: what one step and one reset do, in order, written once.

The recorder (``ecs.executors``), which launches a kernel per system and engine rule, and the
fused generator (``ecs.fusion``), which writes the whole step of a world as one kernel, both walk
these programs, so the order of the engine's rules and the env's phases has a single home. The
rules themselves are device functions in ``ecs.engine_kernels``, called by both.

A step:

1. ``BEGIN_STEP``: the episode step count grows, the reward is zeroed, terminated is cleared and
   truncated set when the time limit is reached (``next_step``).
2. The ACT, PHYSICS, COLLIDE and REWARD phases.
3. ``FINISH_STEP``: terminated wins over truncated; ended worlds are flagged (``end_step``).
4. Only in ended worlds: SENSE and OBSERVE (the last observation of the episode), its copy into
   ``final_obs``, a new episode (``next_episode``; the transition's reward and flags stay for the
   trainer), the RESET phase.
5. SENSE and OBSERVE.

A reset (``sim.reset(mask)``): the requested worlds are flagged, begin a new episode with cleared
reward and flags, then run RESET, SENSE and OBSERVE.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass

from .schema import Phase


class Rule(enum.Enum):
    """An engine step of the program (not a system)."""

    NONE = 0
    BEGIN_STEP = 1
    FINISH_STEP = 2
    COPY_FINAL_OBS = 3
    NEW_EPISODE = 4  # keeps the ended transition's reward and flags (same-step reset)
    NEW_EPISODE_CLEARED = 5  # clears them (sim.reset)
    REQUEST_RESET = 6  # flags the worlds of sim.reset(mask)


@dataclass(frozen=True)
class Phases:
    """The env's systems of these phases, each phase in graph order."""

    phases: tuple[Phase, ...]


@dataclass(frozen=True)
class IfEnded:
    """A sub-program that only worlds whose episode ended this step run."""

    body: tuple[Rule | Phases | IfEnded, ...]


Item = Rule | Phases | IfEnded

BEFORE_RESET = (Phase.ACT, Phase.PHYSICS, Phase.COLLIDE, Phase.REWARD)
OBSERVE = (Phase.SENSE, Phase.OBSERVE)

STEP: tuple[Item, ...] = (
    Rule.BEGIN_STEP,
    Phases(BEFORE_RESET),
    Rule.FINISH_STEP,
    IfEnded((Phases(OBSERVE), Rule.COPY_FINAL_OBS, Rule.NEW_EPISODE, Phases((Phase.RESET,)))),
    Phases(OBSERVE),
)

RESET: tuple[Item, ...] = (Rule.REQUEST_RESET, Rule.NEW_EPISODE_CLEARED, Phases((Phase.RESET, *OBSERVE)))


def phases_of(program: tuple[Item, ...]) -> Iterator[Phase]:
    """Every phase a program runs, in order, sub-programs included (a phase may appear twice)."""
    for item in program:
        if isinstance(item, Phases):
            yield from item.phases
        elif isinstance(item, IfEnded):
            yield from phases_of(item.body)
