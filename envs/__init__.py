"""The environment registry: ``envs.make(name, **overrides)`` and ``envs.names()``."""

from __future__ import annotations

import importlib
import os
from typing import Any

import ecs

_REGISTRY = {
    "cartpole": "envs.cartpole",
    "foraging": "envs.foraging",
    "hide_and_seek": "envs.hide_and_seek",
}


def names() -> list[str]:
    """Registered environment names."""
    return sorted(_REGISTRY)


def make(name: str, *, config: str | os.PathLike | None = None, **overrides: Any) -> ecs.EnvSpec:
    """The spec of environment ``name``, from its YAML defaults (or ``config``) and keyword overrides.

    Raises:
        ecs.ConfigError: unknown environment, unknown config key or a value of the wrong type.
    """
    if name not in _REGISTRY:
        raise ecs.ConfigError(f"unknown environment {name!r}; registered: {names()}")
    module = importlib.import_module(_REGISTRY[name])
    return module.make(config, **overrides)
