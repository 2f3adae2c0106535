"""Hide-and-seek: hiders and seekers, boxes, ramps and walls in a physics world, on procedural or fixed levels."""

from .env import HideAndSeekConfig, Kind, check_layout, make

__all__ = ["HideAndSeekConfig", "Kind", "check_layout", "make"]
