"""Exceptions raised by the engine. Every message names the problem and the fix."""


class EcsError(Exception):
    """Base class of every engine error."""


class SchemaError(EcsError, ValueError):
    """A component, archetype, parameter or environment declaration is malformed."""


class GraphError(EcsError, ValueError):
    """The systems of an environment cannot be bound or ordered into a valid task graph."""


class ConfigError(EcsError, ValueError):
    """A configuration file or override does not match the environment's config dataclass."""


class ActionError(EcsError, ValueError):
    """An action written into ``sim.actions`` is invalid; no world was advanced."""


class CapacityError(EcsError, RuntimeError):
    """A spawn exceeded an archetype's per-world capacity."""


class StateDictError(EcsError, ValueError):
    """A state dict does not match this simulation."""


class OutOfMemoryError(EcsError, MemoryError):
    """The requested simulation would not fit in the device's memory."""
