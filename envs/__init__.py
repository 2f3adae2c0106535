"""The environment registry: ``envs.make(name, **overrides)``, ``envs.names()`` and ``envs.register``.

An environment is found by name. The built-in ones live in this package; an environment written
anywhere else is registered with a factory, a function ``make(config=None, **overrides)`` that
returns an ``ecs.EnvSpec`` (the built-in envs' ``make`` has that signature):

```python
import envs

envs.register("my_env", my_package.env.make)  # or the string "my_package.env:make", imported at make time
sim = ecs.BatchSim(envs.make("my_env", some_field=2), num_worlds=1024)
```

``envs.make("my_package.env:make")`` also works without registering (and so does
``python -m ecs bench my_package.env:make``). An installed package registers its environments
itself through an entry point in the ``warp_ecs.envs`` group (its name is the env's name, its
value the factory), read once, by the first ``names()`` or ``register`` call or ``make`` of a
name the registry does not hold; a registered or built-in name wins over an entry point:

```toml
[project.entry-points."warp_ecs.envs"]
my_env = "my_package.env:make"
```
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import ecs

Factory = Callable[..., ecs.EnvSpec]

ENTRY_POINT_GROUP = "warp_ecs.envs"

_BUILTIN: dict[str, str] = {
    "cartpole": "envs.cartpole:make",
    "escape_room": "envs.escape_room:make",
    "foraging": "envs.foraging:make",
    "predator_prey": "envs.predator_prey:make",
    "hide_and_seek": "envs.hide_and_seek:make",
}
_REGISTRY: dict[str, Factory | str] = dict(_BUILTIN)
_entry_points_read = False

_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_SPEC = re.compile(rf"^({_DOTTED}):({_DOTTED})$")


def names() -> list[str]:
    """Registered environment names: the built-in ones, ``register``-ed ones and installed entry points."""
    _read_entry_points()
    return sorted(_REGISTRY)


def register(name: str, factory: Factory | str, *, overwrite: bool = False) -> None:
    """Registers an environment so that ``envs.make(name)`` (and ``python -m ecs ... name``) builds it.

    Args:
        name: the registry name: a non-empty string without ``:`` or whitespace.
        factory: a callable ``factory(config=None, **overrides) -> ecs.EnvSpec``, or the string
            ``"package.module:function"`` naming one, imported when the env is first made.
        overwrite: replace an environment already registered under ``name`` (a built-in one too;
            ``unregister`` then restores the built-in).

    Raises:
        ecs.ConfigError: a bad name, a name already taken (without ``overwrite``), a factory that
            is neither callable nor a ``"module:function"`` string. Nothing is registered then.
    """
    _check_name(name)
    _check_factory(name, factory)
    _read_entry_points()
    current = _REGISTRY.get(name)
    if current is not None and current is not factory and current != factory and not overwrite:
        kind = "a built-in environment" if _REGISTRY[name] == _BUILTIN.get(name) else "already registered"
        raise ecs.ConfigError(
            f"environment {name!r} is {kind} ({_describe(current)}); choose another name or pass overwrite=True"
        )
    _REGISTRY[name] = factory


def unregister(name: str) -> None:
    """Removes a registered environment; a built-in one that was overwritten gets its own factory back.

    Raises:
        ecs.ConfigError: ``name`` is not registered, or is a built-in environment that was not overwritten.
    """
    _read_entry_points()
    if name not in _REGISTRY:
        raise ecs.ConfigError(f"environment {name!r} is not registered; registered: {sorted(_REGISTRY)}")
    if name in _BUILTIN:
        if _REGISTRY[name] == _BUILTIN[name]:
            raise ecs.ConfigError(f"environment {name!r} is built in and cannot be unregistered")
        _REGISTRY[name] = _BUILTIN[name]
    else:
        del _REGISTRY[name]


def make(name: str, *, config: str | os.PathLike | None = None, **overrides: Any) -> ecs.EnvSpec:
    """The spec of environment ``name``, from its YAML defaults (or ``config``) and keyword overrides.

    Args:
        name: a registered name (``names()``), or ``"package.module:function"`` naming a factory
            directly (the module must be importable: installed, or on ``sys.path``).
        config: a YAML file for the env's config (default: the env's own defaults).
        **overrides: config fields; the built-in envs check them against their config dataclass.

    Raises:
        ecs.ConfigError: unknown environment, a factory that cannot be imported or does not return
            an ``ecs.EnvSpec``, unknown config key or a value of the wrong type.
    """
    if not isinstance(name, str):
        raise ecs.ConfigError(f"environment name must be a str, got {type(name).__name__} {name!r}")
    if ":" in name:  # registered names have no ':'
        label, factory = f"environment {name!r}", name
    else:
        if name not in _REGISTRY:
            _read_entry_points()
        if name not in _REGISTRY:
            raise ecs.ConfigError(
                f"unknown environment {name!r}; registered: {sorted(_REGISTRY)}; or give a factory as "
                "'package.module:make', or register one with envs.register(name, factory)"
            )
        factory = _REGISTRY[name]
        label = f"environment {name!r}" + (f" (registered as {factory!r})" if isinstance(factory, str) else "")
    fn = _resolve(label, factory)
    if config is not None and not _accepts(fn, "config"):
        raise ecs.ConfigError(
            f"{label}: its factory {_describe(fn)} takes no config argument; drop config= or give the factory a "
            "config=None parameter"
        )
    spec = fn(**overrides) if config is None else fn(config=config, **overrides)
    if not isinstance(spec, ecs.EnvSpec):
        raise ecs.ConfigError(
            f"{label}: its factory {_describe(fn)} returned {type(spec).__name__}, not an ecs.EnvSpec; "
            "return ecs.EnvSpec(name=..., config=..., archetypes=..., systems=...) from it"
        )
    return spec


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """Config overrides from ``KEY=VALUE`` strings (a command line's repeated ``--set``), each value read as YAML
    (``true``, ``16``, ``0.5``, ``block``), for ``make(name, **overrides)``.

    Raises:
        ecs.ConfigError: an item without ``=`` or with an empty key, naming it.
    """
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise ecs.ConfigError(f"a config override is KEY=VALUE (for example physics_substeps=4), got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


# -- helpers --------------------------------------------------------------------------------------


def _check_name(name: Any) -> None:
    if not isinstance(name, str):
        raise ecs.ConfigError(f"environment name must be a str, got {type(name).__name__} {name!r}")
    if not name or ":" in name or any(c.isspace() for c in name):
        raise ecs.ConfigError(
            f"environment name {name!r} is invalid: give a non-empty name without ':' or whitespace "
            "(':' marks a 'package.module:make' factory)"
        )


def _check_factory(name: str, factory: Any) -> None:
    if isinstance(factory, str):
        if not _SPEC.match(factory):
            raise ecs.ConfigError(
                f"environment {name!r}: factory string {factory!r} is not 'package.module:function' "
                "(a dotted module path, one ':', the function's name)"
            )
    elif not callable(factory):
        raise ecs.ConfigError(
            f"environment {name!r}: factory must be callable (config=None, **overrides) -> ecs.EnvSpec, or a "
            f"'package.module:function' string; got {type(factory).__name__} {factory!r}"
        )


def _resolve(label: str, factory: Factory | str) -> Factory:
    """The callable behind a factory, importing a ``"module:attr"`` string."""
    if not isinstance(factory, str):
        return factory
    m = _SPEC.match(factory)
    if m is None:
        raise ecs.ConfigError(
            f"{label}: not 'package.module:function' (a dotted module path, one ':', the function's name), e.g. "
            "'my_package.env:make'"
        )
    module_name, attr = m.groups()
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        missing = getattr(e, "name", None)
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            fix = (
                f"module {module_name!r} was not found; install its package, or add the folder that holds "
                f"{module_name.split('.')[0]!r} to PYTHONPATH (or sys.path)"
            )
        else:
            fix = f"importing {module_name!r} failed ({e}); install what it needs"
        raise ecs.ConfigError(f"{label}: {fix}") from e
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ecs.ConfigError(
                f"{label}: module {module_name!r} has no attribute {attr!r}; name the function that returns an "
                f"ecs.EnvSpec, e.g. '{module_name}:make'"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise ecs.ConfigError(
            f"{label}: {factory!r} is a {type(obj).__name__}, not a callable; name the function that returns an "
            "ecs.EnvSpec"
        )
    return obj


def _accepts(fn: Callable[..., Any], param: str) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): let the call decide
        return True
    return any(p.name == param or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _describe(factory: Any) -> str:
    if isinstance(factory, str):
        return repr(factory)
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", None) or getattr(factory, "__name__", None)
    if module and qualname:
        return f"{module}.{qualname}"
    return repr(factory)


def _read_entry_points() -> None:
    """Adds the ``warp_ecs.envs`` entry points of installed packages (once; registered names win)."""
    global _entry_points_read
    if _entry_points_read:
        return
    _entry_points_read = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _REGISTRY:
            if _REGISTRY[ep.name] != ep.value:
                warnings.warn(
                    f"entry point {ep.name} = {ep.value!r} ({ENTRY_POINT_GROUP}) is ignored: the name is taken by "
                    f"{_describe(_REGISTRY[ep.name])}",
                    stacklevel=3,
                )
            continue
        try:
            _check_name(ep.name)
            _check_factory(ep.name, ep.value)
        except ecs.ConfigError as e:
            warnings.warn(f"entry point {ep.name} = {ep.value!r} ({ENTRY_POINT_GROUP}) is ignored: {e}", stacklevel=3)
            continue
        _REGISTRY[ep.name] = ep.value
