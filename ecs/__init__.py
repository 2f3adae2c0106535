"""A GPU entity-component-system batch simulator on NVIDIA Warp.

Environments are components (typed columns), archetypes (sets of components with a per-world
capacity) and systems (Warp kernels whose signatures declare what they read and write). A
``BatchSim`` steps thousands of worlds at once with one captured graph replay per step and
hands the trainer persistent zero-copy torch tensors.
"""

from . import distributed, funcs
from .adapters.stats import EpisodeStats
from .checkpoint import zero_padded, zeros_if_missing
from .config import config_range, load_config
from .errors import (
    ActionError,
    CapacityError,
    ConfigError,
    EcsError,
    GraphError,
    OutOfMemoryError,
    SchemaError,
    StateDictError,
)
from .funcs import (
    NULL_HANDLE,
    despawn,
    despawn_view,
    handle_archetype,
    handle_generation,
    handle_row,
    is_live,
    is_live_view,
    make_handle,
    per_world,
    spawn,
    spawn_view,
)
from .graph import TaskGraph
from .schema import Action, Archetype, Component, EnvSpec, Observation, Param, Phase, component
from .sim import BatchSim
from .systems import System, bundle, resource_bundle, system

__version__ = "0.1.0"

__all__ = [
    "NULL_HANDLE",
    "Action",
    "ActionError",
    "Archetype",
    "BatchSim",
    "CapacityError",
    "Component",
    "ConfigError",
    "EcsError",
    "EnvSpec",
    "EpisodeStats",
    "GraphError",
    "Observation",
    "OutOfMemoryError",
    "Param",
    "Phase",
    "SchemaError",
    "StateDictError",
    "System",
    "TaskGraph",
    "bundle",
    "component",
    "config_range",
    "despawn",
    "despawn_view",
    "distributed",
    "funcs",
    "handle_archetype",
    "handle_generation",
    "handle_row",
    "is_live",
    "is_live_view",
    "load_config",
    "make_handle",
    "per_world",
    "resource_bundle",
    "spawn",
    "spawn_view",
    "system",
    "zero_padded",
    "zeros_if_missing",
]
