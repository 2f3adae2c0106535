"""Escape room: two agents cross rooms whose doors open only while something stands on a button."""

from .env import EscapeRoomConfig, make

__all__ = ["EscapeRoomConfig", "make"]
