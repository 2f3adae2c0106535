"""An environment written outside the repository: registered with ``envs.register`` or named as
``package.module:make``, it builds, steps and runs through ``python -m ecs graph | profile | bench``.

The package below is written from the README's "Writing an environment" section only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import ecs
import envs

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "drift_pkg"  # unique: Warp and sys.modules key modules by name

ENV_SOURCE = '''
"""Drifters: a few particles per world drift with their velocity plus a wind the trainer sets."""

import os
from dataclasses import dataclass
from typing import Any

import warp as wp

import ecs


@dataclass(frozen=True)
class DriftConfig:
    dt: float = 0.1  # s per step
    count: int = 3  # particles spawned at reset
    capacity: int = 4  # rows of the particle table per world
    max_episode_steps: int = 5


@ecs.component
class Position:
    """Particle position [m]."""

    value: wp.vec2


@ecs.component
class Velocity:
    """Particle velocity [m/s], drawn at reset."""

    value: wp.vec2


@ecs.component(singleton=True)
class Wind:
    """Action: wind velocity added to every particle's [m/s]. Exported as ``wind``, ``[num_worlds, 2]``."""

    value: wp.vec2


@ecs.component(singleton=True)
class Centre:
    """Observation: mean position of the live particles [m]. Exported as ``centre``, ``[num_worlds, 2]``."""

    value: wp.vec2


@wp.func
def drift_particles(dt: float, world_wind_in: wp.vec2, velocity_in: wp.vec2, position_out: wp.vec2):
    return position_out + (velocity_in + world_wind_in) * dt


@wp.kernel
def spawn_particles(
    count: int,
    world_reset_in: wp.array(dtype=wp.int32),
    world_rng_out: wp.array(dtype=wp.uint32),
    particle__alive_out: wp.array2d(dtype=wp.int32),
    particle__generation_out: wp.array2d(dtype=wp.int32),
    particle__overflow_out: wp.array(dtype=wp.int32),
    particle__position_out: wp.array2d(dtype=wp.vec2),
    particle__velocity_out: wp.array2d(dtype=wp.vec2),
):
    world = wp.tid()
    if world_reset_in[world] == 0:
        return
    for row in range(particle__alive_out.shape[1]):
        ecs.despawn(particle__alive_out, world, row)
    state = world_rng_out[world]
    for _ in range(count):
        row = ecs.spawn(particle__alive_out, particle__generation_out, particle__overflow_out, world)
        if row >= 0:
            particle__position_out[world, row] = wp.vec2(wp.randf(state, -1.0, 1.0), wp.randf(state, -1.0, 1.0))
            particle__velocity_out[world, row] = wp.vec2(wp.randf(state, -1.0, 1.0), wp.randf(state, -1.0, 1.0))
    world_rng_out[world] = state


@wp.kernel
def observe_centre(
    particle__alive_in: wp.array2d(dtype=wp.int32),
    particle__position_in: wp.array2d(dtype=wp.vec2),
    world_centre_out: wp.array(dtype=wp.vec2),
):
    world = wp.tid()
    total = wp.vec2(0.0, 0.0)
    n = float(0.0)
    for row in range(particle__alive_in.shape[1]):
        if particle__alive_in[world, row] != 0:
            total = total + particle__position_in[world, row]
            n = n + 1.0
    world_centre_out[world] = total / wp.max(n, 1.0)


def make(config: str | os.PathLike | None = None, **overrides: Any) -> ecs.EnvSpec:
    cfg = ecs.load_config(DriftConfig, config, **overrides)
    return ecs.EnvSpec(
        name="drifters",
        config=cfg,
        archetypes=[ecs.Archetype("particle", (Position, Velocity), capacity=cfg.capacity)],
        singletons=[Wind, Centre],
        systems=[
            ecs.System(drift_particles, ecs.Phase.PHYSICS),
            ecs.System(spawn_particles, ecs.Phase.RESET, dim="world"),
            ecs.System(observe_centre, ecs.Phase.OBSERVE, dim="world"),
        ],
        actions={"wind": ecs.Action(Wind, low=-1.0, high=1.0)},
        observations={"centre": ecs.Observation(Centre)},
        max_episode_steps=cfg.max_episode_steps,
    )


def not_a_spec(config=None, **overrides):
    return {"name": "drifters"}


def no_config(count: int = 3) -> ecs.EnvSpec:
    return make(count=count)
'''

SYSTEMS = ("drift_particles", "spawn_particles", "observe_centre")


@pytest.fixture(scope="module")
def package_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user_env")
    (root / PACKAGE).mkdir()
    (root / PACKAGE / "__init__.py").write_text("")
    (root / PACKAGE / "env.py").write_text(textwrap.dedent(ENV_SOURCE))
    return root


@pytest.fixture
def on_path(package_dir, monkeypatch) -> Path:
    monkeypatch.syspath_prepend(str(package_dir))
    return package_dir


@pytest.fixture
def registered():
    """Names registered by a test, unregistered afterwards (the registry is process-wide)."""
    names: list[str] = []
    yield names
    for name in names:
        if name in envs.names():
            envs.unregister(name)


def test_cli_runs_a_user_env_through_graph_profile_bench_and_dist_bench(package_dir):
    spec = f"{PACKAGE}.env:make"
    # One interpreter for the four commands: their kernels compile once. It runs them as the `ecs`
    # console script would, without the current directory on sys.path: the CLI adds it for a spec.
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.getcwd()]
        from ecs.__main__ import main
        for argv in (
            ["graph", {spec!r}],
            ["profile", {spec!r}, "--num-worlds", "4", "--steps", "5"],
            ["bench", {spec!r}, "--num-worlds", "4", "--steps", "20", "--repeats", "2"],
            ["dist-bench", {spec!r}, "--device", "cpu", "--num-worlds", "4", "--steps", "20", "--repeats", "1"],
        ):
            print("== " + argv[0], flush=True)
            if main(argv) != 0:
                sys.exit(1)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WARP_QUIET": "1"}
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=package_dir, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    graph, profile, bench, dist = out.stdout.split("== ")[1:]
    assert "TaskGraph of 'drifters'" in graph
    for name in SYSTEMS:
        assert name in graph and name in profile, (name, graph, profile)
    assert "PHYSICS" in graph and "RESET" in graph and "OBSERVE" in graph
    rate = next(line for line in bench.splitlines() if line.endswith("us per step)"))
    assert float(rate.split()[0].replace(",", "")) > 0, bench
    aggregate = next(line for line in dist.splitlines() if line.startswith("aggregate:"))
    assert float(aggregate.split()[1].replace(",", "")) > 0, dist


def test_cli_through_python_m_with_the_package_in_the_current_directory(package_dir):
    # `python -m ecs` puts the current directory on the path: no PYTHONPATH entry for the package.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WARP_QUIET": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "ecs", "graph", f"{PACKAGE}.env:make"],
        cwd=package_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert all(name in out.stdout for name in SYSTEMS), out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "ecs", "graph", "no_such_pkg.env:make"],
        cwd=package_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bad.returncode == 1
    assert "module 'no_such_pkg.env' was not found" in bad.stderr and "PYTHONPATH" in bad.stderr, bad.stderr
    unknown = subprocess.run(
        [sys.executable, "-m", "ecs", "bench", "drifterz"], cwd=package_dir, env=env, capture_output=True, text=True
    )
    assert unknown.returncode == 1 and "unknown environment 'drifterz'" in unknown.stderr, unknown.stderr


def reference_positions(position: np.ndarray, velocity: np.ndarray, wind: np.ndarray, dt: float, steps: int):
    p = position.astype(np.float32).copy()
    for _ in range(steps):
        p = p + (velocity + wind[:, None, :]) * np.float32(dt)
    return p


@pytest.mark.parametrize("form", ["callable", "string"])
def test_registered_env_builds_and_steps_like_its_reference(on_path, registered, form):
    import drift_pkg.env as user_env

    factory = user_env.make if form == "callable" else f"{PACKAGE}.env:make"
    envs.register("drifters", factory)
    registered.append("drifters")
    assert "drifters" in envs.names()
    spec = envs.make("drifters", dt=0.25, max_episode_steps=0)
    assert isinstance(spec, ecs.EnvSpec) and spec.config.dt == 0.25
    sim = ecs.BatchSim(spec, 3, device="cpu", seed=1)
    alive = sim.tensor("particle", "alive").numpy().astype(bool)
    assert (alive.sum(axis=1) == 3).all()
    p0 = sim.tensor("particle", "position").numpy().copy()
    v = sim.tensor("particle", "velocity").numpy().copy()
    wind = np.array([[0.5, -0.25], [0.0, 0.0], [-1.0, 1.0]], dtype=np.float32)
    sim.actions["wind"] = torch.from_numpy(wind)
    for _ in range(4):
        sim.step()
    expected = reference_positions(p0, v, wind, 0.25, 4)
    got = sim.tensor("particle", "position").numpy()
    np.testing.assert_allclose(got[alive], expected[alive], rtol=1e-6, atol=1e-6)
    centre = np.stack([got[w][alive[w]].mean(axis=0) for w in range(3)])
    np.testing.assert_allclose(sim.obs["centre"].numpy(), centre, rtol=1e-5, atol=1e-6)


def test_factory_strings_resolve_without_registering(on_path):
    a = envs.make(f"{PACKAGE}.env:make", count=2)
    assert a.name == "drifters" and a.config.count == 2


def test_config_file_reaches_the_factory(on_path, tmp_path):
    path = tmp_path / "drift.yaml"
    path.write_text("dt: 0.5\n")
    assert envs.make(f"{PACKAGE}.env:make", config=str(path)).config.dt == 0.5
    with pytest.raises(ecs.ConfigError, match=r"takes no config argument.*config=None parameter"):
        envs.make(f"{PACKAGE}.env:no_config", config=str(path))
    assert envs.make(f"{PACKAGE}.env:no_config", count=1).config.count == 1


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "invalid: give a non-empty name"),
        ("my:env", "without ':' or whitespace"),
        ("my env", "without ':' or whitespace"),
        (3, "must be a str, got int"),
        ("cartpole", "'cartpole' is a built-in environment.*overwrite=True"),
    ],
)
def test_bad_names_are_refused(name, message):
    before = envs.names()
    with pytest.raises(ecs.ConfigError, match=message):
        envs.register(name, lambda config=None, **o: None)
    assert envs.names() == before


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (42, "factory must be callable.*got int 42"),
        ("drift_pkg.env", "is not 'package.module:function'"),
        ("drift_pkg.env:make:x", "is not 'package.module:function'"),
        ("drift pkg:make", "is not 'package.module:function'"),
    ],
)
def test_bad_factories_are_refused(factory, message):
    before = envs.names()
    with pytest.raises(ecs.ConfigError, match=message):
        envs.register("drifters_bad", factory)
    assert envs.names() == before


def test_make_time_errors_name_the_factory_and_the_fix(on_path, registered):
    envs.register("not_spec", f"{PACKAGE}.env:not_a_spec")
    envs.register("missing_module", "no_such_pkg.env:make")
    envs.register("missing_attr", f"{PACKAGE}.env:mak")
    registered.extend(["not_spec", "missing_module", "missing_attr"])
    with pytest.raises(ecs.ConfigError, match=r"drift_pkg\.env\.not_a_spec returned dict, not an ecs\.EnvSpec"):
        envs.make("not_spec")
    with pytest.raises(ecs.ConfigError, match=r"module 'no_such_pkg\.env' was not found.*PYTHONPATH"):
        envs.make("missing_module")
    with pytest.raises(ecs.ConfigError, match=r"has no attribute 'mak'.*'drift_pkg\.env:make'"):
        envs.make("missing_attr")
    with pytest.raises(ecs.ConfigError, match=r"unknown environment 'drifterz'.*package\.module:make"):
        envs.make("drifterz")
    with pytest.raises(ecs.ConfigError, match="unknown config key"):  # the factory's own validation
        envs.make(f"{PACKAGE}.env:make", nope=1)


def test_taken_names_need_overwrite_and_unregister_restores_builtins(on_path, registered):
    import drift_pkg.env as user_env

    envs.register("drifters", user_env.make)
    registered.append("drifters")
    envs.register("drifters", user_env.make)  # the same factory again: nothing to overwrite
    with pytest.raises(ecs.ConfigError, match=r"'drifters' is already registered.*overwrite=True"):
        envs.register("drifters", user_env.no_config)
    envs.register("drifters", user_env.no_config, overwrite=True)
    assert envs.make("drifters").name == "drifters"

    envs.register("cartpole", user_env.make, overwrite=True)
    try:
        assert envs.make("cartpole").name == "drifters"
    finally:
        envs.unregister("cartpole")
    assert envs.make("cartpole").name == "cartpole"
    with pytest.raises(ecs.ConfigError, match="built in and cannot be unregistered"):
        envs.unregister("cartpole")
    with pytest.raises(ecs.ConfigError, match="'nothing' is not registered"):
        envs.unregister("nothing")


def test_installed_packages_register_through_entry_points(package_dir, monkeypatch, registered):
    # A pip-installed package's metadata: a dist-info folder on sys.path with entry_points.txt.
    site = package_dir / "site"
    dist = site / "drift_pkg-0.1.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: drift-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        f"[{envs.ENTRY_POINT_GROUP}]\ndrifters_ep = {PACKAGE}.env:make\ncartpole = {PACKAGE}.env:make\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(package_dir))
    monkeypatch.setattr(envs, "_entry_points_read", False)
    registered.append("drifters_ep")
    with pytest.warns(UserWarning, match="entry point cartpole .* is ignored: the name is taken"):
        assert "drifters_ep" in envs.names()
    assert envs.make("drifters_ep").name == "drifters"
    assert envs.make("cartpole").name == "cartpole"  # a built-in is never replaced by an entry point
