"""Reusable systems with their components (physics, collision, ray casting, sensing, episode bookkeeping).

``systems.place_body`` (``systems.placement``) puts a rigid body at a pose from a kernel, writing
every column the solver and broadphase read.
"""

from .placement import BodyColumns, place_body

__all__ = ["BodyColumns", "place_body"]
