"""Foraging: one agent eats food and avoids poison that spawn and expire at random."""

from .env import Direction, ForagingConfig, make

__all__ = ["Direction", "ForagingConfig", "make"]
