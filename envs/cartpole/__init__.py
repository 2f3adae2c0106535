"""Gymnasium's CartPole-v1 as an ECS environment."""

from .env import CartpoleConfig, make

__all__ = ["CartpoleConfig", "make"]
