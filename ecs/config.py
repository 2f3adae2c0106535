"""Environment configs: frozen dataclasses filled from YAML files and keyword overrides."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import typing
from collections.abc import Mapping
from typing import Any

import yaml

from .errors import ConfigError

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def config_range(*, low: float | None = None, high: float | None = None) -> dict[str, Any]:
    """Field metadata declaring an inclusive range for a number field of a config dataclass.

    ``load_config`` checks it for defaults, YAML values and overrides alike::

        move_force: float = field(default=20.0, metadata=ecs.config_range(low=0.0))  # N
    """
    if low is not None and high is not None and not low <= high:
        raise ValueError(f"config_range needs low <= high, got [{low}, {high}]")
    return {"range": (low, high)}


class _StrictLoader(yaml.SafeLoader):
    """YAML with two fixes for configs: duplicate keys are an error, and ``1e3`` is a float (YAML 1.2)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key] + 1})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_config(cls: type, path: str | os.PathLike | None = None, **overrides: Any) -> Any:
    """Builds ``cls`` (a frozen dataclass) from defaults, then a YAML file, then keyword overrides.

    A field may declare an inclusive range in its metadata (``ecs.config_range``); it is checked
    after the dataclass's ``__post_init__``.

    Raises:
        ConfigError: a value outside its declared range; an unknown key (the message lists the valid keys), a value of the wrong type
            (naming the field), or a value the dataclass's ``__post_init__`` refuses.
    """
    if not dataclasses.is_dataclass(cls):
        raise ConfigError(f"{cls!r} is not a dataclass")
    values: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path) as f:
                loaded = yaml.load(f, Loader=_StrictLoader)
        except FileNotFoundError:
            raise ConfigError(f"config file {str(path)!r} does not exist") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {str(path)!r} is not valid YAML: {e}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, Mapping):
            raise ConfigError(
                f"config file {str(path)!r} must hold a mapping of field: value, got {type(loaded).__name__}"
            )
        values.update(loaded)
    values.update(overrides)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"unknown config key(s) {unknown} for {cls.__name__}; valid keys: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    checked = {name: _coerce(cls.__name__, name, hints[name], v) for name, v in values.items()}
    try:
        cfg = cls(**checked)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{cls.__name__}: {e}") from None
    _check_ranges(cfg)
    return cfg


def _check_ranges(cfg: Any) -> None:
    """Checks every field that declares ``ecs.config_range`` (entry by entry for tuples)."""
    for f in dataclasses.fields(cfg):
        low, high = f.metadata.get("range", (None, None))
        if low is None and high is None:
            continue
        value = getattr(cfg, f.name)
        for i, v in enumerate(value if isinstance(value, tuple) else (value,)):
            if (low is not None and v < low) or (high is not None and v > high):
                at = f"{type(cfg).__name__}.{f.name}" + (f"[{i}]" if isinstance(value, tuple) else "")
                lo = "-inf" if low is None else low
                hi = "inf" if high is None else high
                raise ConfigError(f"{at} must lie in [{lo}, {hi}], got {v!r}")


def _coerce(owner: str, name: str, hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    where = f"{owner}.{name}"
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number, got {value!r} ({type(value).__name__})")
        if not math.isfinite(value):
            raise ConfigError(f"{where} must be a finite number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an int, got {value!r} ({type(value).__name__})")
        if not INT32_MIN <= value <= INT32_MAX:
            raise ConfigError(
                f"{where} must fit in a 32-bit signed integer (kernels read it as int32), got {value}; "
                f"use a value in [{INT32_MIN}, {INT32_MAX}]"
            )
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r} ({type(value).__name__})")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r} ({type(value).__name__})")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r} ({type(value).__name__})")
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(owner, f"{name}[{i}]", args[0], v) for i, v in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{where} must have {len(args)} entries, got {len(value)}")
        return tuple(_coerce(owner, f"{name}[{i}]", a, v) for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(owner, name, a, value)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError("; ".join(errors))
    return value
