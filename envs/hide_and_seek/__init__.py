"""Hide-and-seek: hiders and seekers, boxes, ramps and walls in a physics world, on procedural or fixed levels."""

from .env import (
    FINAL_STATS,
    QUADRANT_YAML,
    REWARD_TYPES,
    SCENARIOS,
    STATS,
    HideAndSeekConfig,
    check_layout,
    episode_stats,
    make,
    make_quadrant,
)
from .kernels import Kind, RewardType, Scenario

__all__ = [
    "FINAL_STATS",
    "QUADRANT_YAML",
    "REWARD_TYPES",
    "SCENARIOS",
    "STATS",
    "HideAndSeekConfig",
    "Kind",
    "RewardType",
    "Scenario",
    "check_layout",
    "episode_stats",
    "make",
    "make_quadrant",
]
