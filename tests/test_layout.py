"""The layout rules of DESIGN.md and STYLE.md, checked on the source tree.

- ``ecs`` never imports ``systems`` or ``envs``; ``systems`` never imports ``envs``; environments
  never import each other.
- torch is imported only by ``ecs/torch_bridge.py``, ``ecs/distributed.py`` (and ``ecs/adapters*``), and only inside
  functions: never at module level in library code (``ecs/``, ``systems/``, ``envs/``). Imports
  under ``if TYPE_CHECKING:`` never run and are exempt.
- Every system of a registered environment names its kernel parameters by the convention the
  engine binds by (``<x>_in`` / ``<x>_out``, ``world_<x>_in`` / ``_out``, a declared parameter,
  resource or config field, or ``world`` / ``row`` in a ``@wp.func``), as mujoco_warp's tool does.
- No system of a registered environment lists more than 16 parameters (bundles group the rest).
- Every environment folder holds ``env.py``, ``kernels.py``, ``<name>.yaml`` and ``README.md``, and
  ``env.py`` opens with Action, Observation, Reward, Reset and Termination tables.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

import ecs
import envs
from ecs.systems import AccessKind, parse_param

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("ecs", "systems", "envs")
# Files, and a prefix for adapters; gpu_report.py is the GPU campaign tool (torch baselines, PolicyStep).
TORCH_ALLOWED = ("ecs/torch_bridge.py", "ecs/distributed.py", "ecs/adapters", "ecs/gpu_report.py")


def python_files(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def package_of(path: Path) -> list[str]:
    """The package a module's relative imports start from (``ecs/__init__.py`` and ``ecs/sim.py``: ecs)."""
    return list(path.relative_to(ROOT).with_suffix("").parts)[:-1]


@dataclasses.dataclass
class ImportSite:
    module: str  # fully qualified
    line: int
    in_function: bool
    type_checking: bool


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path) -> list[ImportSite]:
    """Every import of ``path`` with relative imports resolved; ``from a import b`` yields ``a`` and ``a.b``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = package_of(path)
    sites: list[ImportSite] = []

    def visit(node: ast.AST, in_function: bool, type_checking: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                sites.append(ImportSite(alias.name, node.lineno, in_function, type_checking))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else list(package)
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            sites.append(ImportSite(module, node.lineno, in_function, type_checking))
            for alias in node.names:
                if alias.name != "*":
                    sites.append(ImportSite(f"{module}.{alias.name}", node.lineno, in_function, type_checking))
        for child in ast.iter_child_nodes(node):
            if isinstance(node, ast.If) and _is_type_checking(node.test) and child in node.body:
                visit(child, in_function, True)
            else:
                nested = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                visit(child, nested, type_checking)

    visit(tree, False, False)
    return sites


def top(module: str) -> str:
    return module.split(".")[0]


def test_import_resolution_understands_relative_imports(tmp_path):
    # The checks below are only as good as this resolution; pin it on the real tree.
    sim = {s.module for s in imports(ROOT / "ecs" / "sim.py")}
    assert "ecs.torch_bridge" in sim and "ecs.graph.TaskGraph" in sim and "warp" in sim
    cartpole = {s.module for s in imports(ROOT / "envs" / "cartpole" / "env.py")}
    assert "envs.cartpole.kernels" in cartpole and "ecs" in cartpole
    bridge = [s for s in imports(ROOT / "ecs" / "torch_bridge.py") if top(s.module) == "torch"]
    assert bridge and all(s.in_function for s in bridge)


def test_ecs_never_imports_systems_or_envs():
    bad = [
        f"{rel(p)}:{s.line} imports {s.module}"
        for p in python_files("ecs")
        for s in imports(p)
        if top(s.module) in ("systems", "envs") and not s.type_checking
    ]
    assert not bad, "the engine sits below systems and envs:\n" + "\n".join(bad)


def test_systems_never_import_envs():
    bad = [
        f"{rel(p)}:{s.line} imports {s.module}"
        for p in python_files("systems")
        for s in imports(p)
        if top(s.module) == "envs" and not s.type_checking
    ]
    assert not bad, "reusable systems must not depend on an environment:\n" + "\n".join(bad)


def env_folders() -> list[Path]:
    return sorted(
        p for p in (ROOT / "envs").iterdir() if p.is_dir() and not p.name.startswith(("_", ".")) and p.name != "tests"
    )


def test_environments_never_import_each_other():
    folders = env_folders()
    assert folders, "no environment folders found under envs/"
    names = {p.name for p in folders}
    bad = []
    for folder in folders:
        for path in python_files(f"envs/{folder.name}"):
            for s in imports(path):
                parts = s.module.split(".")
                if parts[0] == "envs" and len(parts) > 1 and parts[1] in names and parts[1] != folder.name:
                    bad.append(f"{rel(path)}:{s.line} imports {s.module}")
    assert not bad, "environments must not import each other; move shared code to systems/:\n" + "\n".join(bad)


def test_torch_only_in_the_bridge_and_only_inside_functions():
    module_level, elsewhere = [], []
    for folder in LIBRARY:
        for path in python_files(folder):
            for s in imports(path):
                if top(s.module) != "torch" or s.type_checking:
                    continue
                where = f"{rel(path)}:{s.line}"
                if not s.in_function:
                    module_level.append(where)
                if not rel(path).startswith(TORCH_ALLOWED):
                    elsewhere.append(where)
    assert not module_level, "torch imported at module level in library code:\n" + "\n".join(module_level)
    assert not elsewhere, (
        "torch imported outside ecs/torch_bridge.py, ecs/distributed.py, ecs/gpu_report.py and ecs/adapters*; "
        "route it through the bridge:\n" + "\n".join(elsewhere)
    )


def _private_names_of_ecs() -> set[str]:
    """Private attributes and methods the engine's own classes define (``self._x = ...``, ``def _x``)."""
    names = set()
    for path in python_files(ROOT / "ecs"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for item in ast.walk(node):
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("_"):
                        names.add(item.name)
                    stored = isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store)
                    if stored and isinstance(item.value, ast.Name) and item.value.id == "self":
                        names.add(item.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def test_no_module_reaches_into_another_objects_private_attributes():
    """``sim._x`` from outside BatchSim ties modules together behind the API's back; only ``self._x``."""
    private = _private_names_of_ecs()
    bad = []
    for folder in LIBRARY:
        for path in python_files(folder):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Attribute) or node.attr not in private:
                    continue
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue
                value = node.value
                if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
                    continue  # an override calling its base class
                bad.append(f"{rel(path)}:{node.lineno} {ast.unparse(node)}")
    assert not bad, "private attributes read from outside their object; add a public method:\n" + "\n".join(bad)


# -- the parameter naming convention of systems ----------------------------------------------


def env_is_written(name: str) -> bool:
    """False while an environment's folder has no env.py yet (another change is still writing it)."""
    return (ROOT / "envs" / name / "env.py").exists()


@pytest.mark.parametrize("name", envs.names())
def test_system_parameters_follow_the_naming_convention(name):
    if not env_is_written(name):
        pytest.skip(f"envs/{name}/env.py does not exist yet")
    spec = envs.make(name)
    assert spec.systems, f"env {name!r} has no systems"
    declared = {p.name for p in spec.params} | set(spec.resources)
    if dataclasses.is_dataclass(spec.config):
        declared |= {f.name for f in dataclasses.fields(spec.config)}
    bad = []
    for system in spec.systems:
        assert isinstance(system, ecs.System), f"env {name!r}: {system!r} is not an ecs.System"
        for param in system.param_types:
            if parse_param(param).kind != AccessKind.OTHER:
                continue  # <x>_in, <x>_out, world_<x>_in|out, <arch>__<x>_in|out
            if param in declared:
                continue
            fields = getattr(system.param_types[param], "ecs_resources", None)
            if fields is not None:  # an ecs.resource_bundle: every field must be declared
                bad += [f"{system.name}({param}.{f})" for f in fields if f not in declared]
                continue
            if system.is_func and param in ("world", "row"):
                continue
            bad.append(f"{system.name}({param})")
    assert not bad, (
        f"env {name!r}: kernel parameters that are neither <x>_in / <x>_out nor a declared parameter, resource "
        f"or config field: {bad}"
    )


MAX_PARAMETERS = 16


@pytest.mark.parametrize("name", envs.names())
def test_system_signatures_stay_short(name):
    """No system lists more than about 15 parameters: groups of columns, singletons and resources are
    passed as bundles (``ecs.bundle``, ``ecs.resource_bundle``)."""
    if not env_is_written(name):
        pytest.skip(f"envs/{name}/env.py does not exist yet")
    long = {s.name: len(s.param_types) for s in envs.make(name).systems if len(s.param_types) > MAX_PARAMETERS}
    assert not long, f"env {name!r}: systems with more than {MAX_PARAMETERS} parameters: {long}; bundle them"


# -- environment folders ----------------------------------------------------------------------


def test_every_registered_environment_has_a_folder_and_back():
    folders = {p.name for p in env_folders()}
    assert set(envs.names()) == folders


@pytest.mark.parametrize("name", [p.name for p in env_folders()])
def test_environment_folder_contents(name):
    folder = ROOT / "envs" / name
    if not env_is_written(name):
        pytest.skip(f"envs/{name}/env.py does not exist yet")
    missing = [f for f in ("env.py", "kernels.py", f"{name}.yaml", "README.md") if not (folder / f).is_file()]
    assert not missing, f"envs/{name} is missing {missing}"
    doc = ast.get_docstring(ast.parse((folder / "env.py").read_text())) or ""
    absent = [w for w in ("Action", "Observation", "Reward", "Reset", "Termination") if w not in doc]
    assert not absent, f"envs/{name}/env.py's module docstring has no {absent} table"


def iter_library_files() -> Iterator[Path]:
    for folder in LIBRARY:
        yield from python_files(folder)


def test_library_files_parse():
    # A syntax error would make every check above vacuous for that file.
    files = list(iter_library_files())
    assert len(files) >= 10
    for path in files:
        ast.parse(path.read_text(), filename=str(path))
