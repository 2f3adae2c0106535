"""Schema: components, archetypes, per-world parameters, exported actions and observations.

A component is one typed column with one meaning. An entity component is stored per
(world, row) of every archetype that holds it; a singleton component is stored once per world.
Shapes: an entity column is a Warp array ``(num_worlds, capacity, *shape)``; a singleton is
``(num_worlds, *shape)``; ``shape`` is the component's trailing shape (often ``()``).
"""

from __future__ import annotations

import enum
import keyword
import math
import re
import sys
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import warp as wp

from .errors import SchemaError

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

# Names the engine gives to columns and singletons of its own.
ENGINE_COLUMNS = ("alive", "generation")
ENGINE_SINGLETONS = ("rng", "episode", "episode_step", "reset", "reward", "terminated", "truncated")

_SCALARS = (
    wp.bool,
    wp.int8,
    wp.uint8,
    wp.int16,
    wp.uint16,
    wp.int32,
    wp.uint32,
    wp.int64,
    wp.uint64,
    wp.float16,
    wp.float32,
    wp.float64,
)


def snake_case(name: str) -> str:
    """``LinearVelocity`` -> ``linear_velocity``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _canonical_dtype(dtype: Any) -> Any:
    if dtype is float:
        return wp.float32
    if dtype is int:
        return wp.int32
    if dtype is bool:
        return wp.bool
    return dtype


def check_dtype(dtype: Any, where: str) -> Any:
    """Returns the Warp dtype for ``dtype`` or raises naming ``where``."""
    dtype = _canonical_dtype(dtype)
    if dtype in _SCALARS or wp.types.type_is_vector(dtype) or wp.types.type_is_matrix(dtype):
        return dtype
    if wp.types.type_is_quaternion(dtype) or wp.types.type_is_transformation(dtype):
        return dtype
    raise SchemaError(
        f"{where}: dtype {dtype!r} is not a Warp scalar, vector, matrix, quaternion or transform; "
        "use for example wp.float32, wp.vec3 or wp.types.vector(30, wp.float32)"
    )


def scalar_type(dtype: Any) -> Any:
    """The scalar type underlying a Warp dtype (``wp.vec3`` -> ``wp.float32``)."""
    return getattr(dtype, "_wp_scalar_type_", dtype)


def dtype_shape(dtype: Any) -> tuple[int, ...]:
    """Trailing shape that a vector or matrix dtype adds when exported to numpy or torch."""
    return tuple(getattr(dtype, "_shape_", ()))


def _check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name) or keyword.iskeyword(name) or "__" in name:
        raise SchemaError(
            f"{what} name {name!r} is not valid: use lower snake_case letters, digits and single "
            "underscores, starting with a letter"
        )


@dataclass(frozen=True)
class Component:
    """A typed column.

    Attributes:
        name: snake_case name used in kernel parameters (``<name>_in`` / ``<name>_out``).
        dtype: Warp dtype of one element (scalar, vector, matrix).
        shape: trailing shape beyond the dtype; ``()`` for one element per entity or world.
        singleton: True for one value per world, False for one value per entity.
        doc: meaning, units and range.
        index_of: for an integer column holding rows of another archetype (``"body"`` for a body
            row): that archetype's name. ``load_state_dict`` then refuses values outside
            ``[0, capacity)`` (a kernel indexing with them would read or write out of bounds).
        nullable: with ``index_of``, -1 also is a valid value (no row).
        count_of: for an integer singleton counting live rows of an archetype: its name; values
            must lie in ``[0, capacity]``.
        upgrade: how a state saved before the column took its present form loads
            (``load_state_dict``): called as ``upgrade(saved, like)`` where the state lacks the
            column (``saved`` is None) or holds it at another shape or dtype, with ``like`` a zeroed
            array of the shape and dtype this simulation holds; returns the array to load in its
            place, or None to refuse the state. ``ecs.zeros_if_missing`` (a record the kernels
            rebuild) and ``ecs.zero_padded`` (a shaped column that grew) are the usual ones. None:
            such a state is refused.
    """

    name: str
    dtype: Any
    shape: tuple[int, ...] = ()
    singleton: bool = False
    doc: str = ""
    index_of: str | None = None
    nullable: bool = False
    count_of: str | None = None
    upgrade: Callable[[np.ndarray | None, np.ndarray], np.ndarray | None] | None = field(
        default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        _check_name(self.name, "component")
        object.__setattr__(self, "dtype", check_dtype(self.dtype, f"component {self.name!r}"))
        shape = tuple(int(s) for s in self.shape)
        if any(s < 1 for s in shape):
            raise SchemaError(f"component {self.name!r}: every entry of shape {shape} must be >= 1")
        if len(shape) + (1 if self.singleton else 2) > 4:
            raise SchemaError(
                f"component {self.name!r}: shape {shape} gives more than Warp's 4 array dimensions; "
                "fold trailing axes into a vector dtype"
            )
        object.__setattr__(self, "shape", shape)
        for label, value in (("index_of", self.index_of), ("count_of", self.count_of)):
            if value is not None and scalar_type(self.dtype) not in (wp.int32, wp.int64, wp.int16, wp.int8):
                raise SchemaError(
                    f"component {self.name!r}: {label}={value!r} needs an integer dtype, not {self.dtype}"
                )
        if self.nullable and self.index_of is None:
            raise SchemaError(f"component {self.name!r}: nullable=True only goes with index_of=<archetype>")
        if self.upgrade is not None and not callable(self.upgrade):
            raise SchemaError(
                f"component {self.name!r}: upgrade must be a function upgrade(saved, like) -> array or None, "
                f"got {self.upgrade!r} (for example ecs.zeros_if_missing)"
            )

    @property
    def export_shape(self) -> tuple[int, ...]:
        """Shape of one entity's (or one world's) value as seen from numpy or torch."""
        return self.shape + dtype_shape(self.dtype)

    @property
    def itemsize(self) -> int:
        return wp.types.type_size_in_bytes(self.dtype) * int(np.prod(self.shape, dtype=np.int64))


def component(
    cls: type | None = None,
    *,
    singleton: bool = False,
    shape: Sequence[int] = (),
    name: str | None = None,
    index_of: str | None = None,
    nullable: bool = False,
    count_of: str | None = None,
    upgrade: Callable[[np.ndarray | None, np.ndarray], np.ndarray | None] | None = None,
):
    """Declares a component from a class with one annotated field ``value``.

    ```python
    @ecs.component
    class Position:
        \"\"\"Centre of mass in the world frame [m].\"\"\"
        value: wp.vec3
    ```

    Args:
        cls: the class (when used without arguments).
        singleton: one value per world instead of one per entity.
        shape: trailing shape of each value beyond its dtype.
        name: column name; defaults to the class name in snake_case.
        index_of, nullable, count_of: as in ``Component`` (rows of another archetype, checked on load).
        upgrade: as in ``Component`` (how a state saved before the column took this form loads).

    Returns:
        A ``Component`` (the decorated class is replaced by it).
    """

    def wrap(c: type) -> Component:
        ann = getattr(c, "__annotations__", {})
        if set(ann) != {"value"}:
            raise SchemaError(
                f"component class {c.__name__} must annotate exactly one field named 'value' "
                f"(found {sorted(ann) or 'none'}); one component, one meaning"
            )
        dtype = ann["value"]
        if isinstance(dtype, str):  # postponed annotations
            dtype = typing.get_type_hints(c, globalns=vars(sys.modules[c.__module__]))["value"]
        return Component(
            name=name or snake_case(c.__name__),
            dtype=dtype,
            shape=tuple(shape),
            singleton=singleton,
            doc=(c.__doc__ or "").strip(),
            index_of=index_of,
            nullable=nullable,
            count_of=count_of,
            upgrade=upgrade,
        )

    if cls is not None:
        return wrap(cls)
    return wrap


@dataclass(frozen=True)
class Archetype:
    """A set of entity components with a fixed per-world capacity.

    Every archetype also gets the engine's ``alive`` (int32, 0 or 1) and ``generation`` (int32,
    bumped at each spawn) columns. ``grow`` tells a user how to raise the capacity where an env sets it from its
    own config (for example ``"raise max_pairs in hide-and-seek's config"``); the ``ecs.CapacityError`` of a full
    archetype says it in place of naming ``capacity=``.
    """

    name: str
    components: tuple[Component, ...]
    capacity: int
    doc: str = ""
    grow: str = ""

    def __post_init__(self) -> None:
        _check_name(self.name, "archetype")
        comps = tuple(self.components)
        object.__setattr__(self, "components", comps)
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, (int, np.integer)) or self.capacity < 1:
            raise SchemaError(f"archetype {self.name!r}: capacity must be an int >= 1, got {self.capacity!r}")
        if not isinstance(self.grow, str):
            raise SchemaError(
                f"archetype {self.name!r}: grow must be a str (how to raise the capacity), got {self.grow!r}"
            )
        seen = set()
        for c in comps:
            if not isinstance(c, Component):
                raise SchemaError(
                    f"archetype {self.name!r}: {c!r} is not a Component (decorate it with @ecs.component)"
                )
            if c.singleton:
                raise SchemaError(
                    f"archetype {self.name!r}: {c.name!r} is a singleton; list it in the env's singletons"
                )
            if c.name in ENGINE_COLUMNS:
                raise SchemaError(f"archetype {self.name!r}: {c.name!r} is an engine column; rename the component")
            if c.name in seen:
                raise SchemaError(f"archetype {self.name!r}: component {c.name!r} listed twice")
            seen.add(c.name)

    def has(self, name: str) -> bool:
        return name in ENGINE_COLUMNS or any(c.name == name for c in self.components)


@dataclass(frozen=True)
class Param:
    """A per-world parameter: one value shared by all worlds, or one per world.

    Stored as a Warp array of shape ``(len(values),)``; world ``w`` reads ``values[w % len]``
    (``ecs.per_world(param, world)`` in a kernel), which gives domain randomisation without a
    code change. Written at run time through ``sim.params[name]``.

    Values must be finite; ``low`` and ``high`` (inclusive) bound them further, e.g. ``low=0.0``
    for a mass. Both are checked here, for ``BatchSim(params=...)`` and for ``sim.params[name] = v``.
    """

    name: str
    dtype: Any
    value: Any
    low: float = -math.inf
    high: float = math.inf

    def __post_init__(self) -> None:
        _check_name(self.name, "parameter")
        dtype = check_dtype(self.dtype, f"parameter {self.name!r}")
        object.__setattr__(self, "dtype", dtype)
        arr = np.asarray(self.value)
        if arr.ndim == len(dtype_shape(dtype)):  # one scalar, vector or matrix: shared by all worlds
            arr = arr[np.newaxis]
        if arr.ndim != 1 + len(dtype_shape(dtype)) or arr.shape[0] < 1 or arr.shape[1:] != dtype_shape(dtype):
            raise SchemaError(
                f"parameter {self.name!r}: value must be one {dtype.__name__} or a sequence of them, got shape {arr.shape}"
            )
        if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
            bad = np.argwhere(~np.isfinite(arr))[0]
            raise SchemaError(
                f"parameter {self.name!r}: values must be finite, got {arr[tuple(bad)]!r} at {bad.tolist()}; "
                "pass finite numbers"
            )
        self.check_range(arr)
        object.__setattr__(self, "value", arr)

    def check_range(self, values: np.ndarray) -> None:
        """Raises SchemaError when a value lies outside ``[low, high]``."""
        if not (self.low <= self.high):
            raise SchemaError(f"parameter {self.name!r}: needs low <= high, got [{self.low}, {self.high}]")
        outside = (values < self.low) | (values > self.high)
        if np.any(outside):
            bad = np.argwhere(outside)[0]
            raise SchemaError(
                f"parameter {self.name!r}: values must lie in [{self.low}, {self.high}], got "
                f"{values[tuple(bad)].item()!r} at {bad.tolist()}"
            )


class Phase(enum.IntEnum):
    """Phases of a step, in the order they run. Registration order decides inside a phase."""

    NONE = 0
    ACT = 1
    PHYSICS = 2
    COLLIDE = 3
    REWARD = 4
    RESET = 5
    SENSE = 6
    OBSERVE = 7


@dataclass(frozen=True)
class Action:
    """An action exported as ``sim.actions[key]``: a singleton component written by the trainer.

    For integer dtypes the action is discrete in ``[low, high]``; values outside are rejected.
    For float dtypes NaN and infinity are rejected; ``low`` and ``high`` give the Box bounds.
    """

    component: Component
    low: float = -math.inf
    high: float = math.inf

    def __post_init__(self) -> None:
        if not isinstance(self.component, Component) or not self.component.singleton:
            raise SchemaError(f"action {self.component!r}: actions are singleton components (singleton=True)")
        if self.discrete and not (math.isfinite(self.low) and math.isfinite(self.high) and self.low <= self.high):
            raise SchemaError(
                f"discrete action {self.component.name!r} needs finite low <= high, got [{self.low}, {self.high}]"
            )

    @property
    def discrete(self) -> bool:
        return scalar_type(self.component.dtype) not in (wp.float16, wp.float32, wp.float64)


@dataclass(frozen=True)
class Observation:
    """An observation exported as ``sim.obs[key]``: a singleton component written by OBSERVE systems."""

    component: Component
    low: float = -math.inf
    high: float = math.inf

    def __post_init__(self) -> None:
        if not isinstance(self.component, Component) or not self.component.singleton:
            raise SchemaError(f"observation {self.component!r}: observations are singleton components (singleton=True)")


@dataclass
class EnvSpec:
    """Everything the engine needs to build a batch of worlds of one environment.

    Attributes:
        name: registry name.
        config: the env's frozen config dataclass instance.
        archetypes: entity tables.
        singletons: per-world components (actions and observations included).
        systems: ``ecs.System`` objects; phases first, registration order second.
        actions: exported actions by key.
        observations: exported observations by key.
        num_agents: None for single-agent envs (rewards ``[num_worlds]``), else rewards
            ``[num_worlds, num_agents]``.
        max_episode_steps: truncation horizon; 0 for none.
        params: per-world parameters.
        resources: scalar kernel arguments by name (config fields are found automatically).
    """

    name: str
    config: Any
    archetypes: Sequence[Archetype] = ()
    singletons: Sequence[Component] = ()
    systems: Sequence[Any] = ()
    actions: dict[str, Action] = field(default_factory=dict)
    observations: dict[str, Observation] = field(default_factory=dict)
    num_agents: int | None = None
    max_episode_steps: int = 0
    params: Sequence[Param] = ()
    resources: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """Raises ``SchemaError`` naming the first inconsistency."""
        names: dict[str, str] = {}
        for a in self.archetypes:
            if not isinstance(a, Archetype):
                raise SchemaError(f"env {self.name!r}: archetypes must be ecs.Archetype, got {a!r}")
            if a.name in names:
                raise SchemaError(f"env {self.name!r}: archetype {a.name!r} declared twice")
            names[a.name] = "archetype"
        singles = {}
        for s in self.singletons:
            if not isinstance(s, Component) or not s.singleton:
                raise SchemaError(f"env {self.name!r}: {s!r} in singletons is not a singleton component")
            if s.name in ENGINE_SINGLETONS:
                raise SchemaError(f"env {self.name!r}: singleton {s.name!r} is an engine singleton; rename it")
            if s.name in singles and singles[s.name] != s:
                raise SchemaError(f"env {self.name!r}: two different singletons named {s.name!r}")
            singles[s.name] = s
        for comp in [*(c for a in self.archetypes for c in a.components), *singles.values()]:
            for label, target in (("index_of", comp.index_of), ("count_of", comp.count_of)):
                if target is not None and target not in names:
                    raise SchemaError(
                        f"env {self.name!r}: component {comp.name!r} has {label}={target!r}, which is not an "
                        f"archetype of this env; archetypes: {sorted(names)}"
                    )
        for kind, exported in (("action", self.actions), ("observation", self.observations)):
            for key, ex in exported.items():
                if ex.component.name not in singles:
                    raise SchemaError(
                        f"env {self.name!r}: {kind} {key!r} uses singleton {ex.component.name!r}, "
                        "which is missing from the env's singletons"
                    )
        if self.num_agents is not None and (not isinstance(self.num_agents, int) or self.num_agents < 1):
            raise SchemaError(f"env {self.name!r}: num_agents must be None or an int >= 1, got {self.num_agents!r}")
        if (
            isinstance(self.max_episode_steps, bool)
            or not isinstance(self.max_episode_steps, int)
            or not 0 <= self.max_episode_steps < 2**31
        ):
            # The horizon reaches the kernels as an int32: a larger value would wrap.
            raise SchemaError(
                f"env {self.name!r}: max_episode_steps must be an int >= 0 and < 2**31, got "
                f"{self.max_episode_steps!r}; pass 0 for no time limit"
            )
        pnames = set()
        for p in self.params:
            if not isinstance(p, Param):
                raise SchemaError(f"env {self.name!r}: params must be ecs.Param, got {p!r}")
            if p.name in pnames:
                raise SchemaError(f"env {self.name!r}: parameter {p.name!r} declared twice")
            pnames.add(p.name)
