"""Reusable systems with their components (physics, collision, ray casting, sensing, episode bookkeeping)."""
