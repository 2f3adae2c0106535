"""Predator-prey: predators chase prey that are despawned when caught and respawn after a delay."""

from .env import PredatorPreyConfig, make

__all__ = ["PredatorPreyConfig", "make"]
