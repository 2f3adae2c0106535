"""Bad input that used to pass silently or fail with a raw error: each gets an error naming the fix,
and the simulation is unchanged afterwards."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ecs
import envs


@pytest.fixture()
def sim() -> ecs.BatchSim:
    s = ecs.BatchSim(envs.make("cartpole"), 4, device="cpu", seed=1)
    s.step()
    return s


def state(sim: ecs.BatchSim) -> dict[str, np.ndarray]:
    return sim.state_dict()["arrays"]


def assert_unchanged(before: dict[str, np.ndarray], sim: ecs.BatchSim) -> None:
    after = state(sim)
    for k in before:
        np.testing.assert_array_equal(before[k], after[k], err_msg=k)


@pytest.mark.parametrize("name", ["obs", "final_obs", "actions", "params", "rewards", "terminated", "truncated"])
def test_engine_attributes_cannot_be_rebound(sim, name):
    kept = getattr(sim, name)
    with pytest.raises(AttributeError, match=f"sim.{name} cannot be rebound.*in place|sim.{name} cannot be rebound"):
        setattr(sim, name, {})
    assert getattr(sim, name) is kept


def test_outputs_cannot_be_replaced_or_deleted(sim):
    kept = sim.obs["state"]
    with pytest.raises(TypeError, match=r"clone\(\)"):
        sim.obs["state"] = torch.zeros_like(kept)
    with pytest.raises(TypeError, match="cannot be deleted"):
        del sim.final_obs["state"]
    with pytest.raises(ecs.ActionError, match="cannot be deleted"):
        del sim.actions["push"]
    assert sim.obs["state"] is kept and "push" in sim.actions
    sim.step()  # still connected: the step writes the same tensor
    assert sim.obs["state"] is kept


def test_params_are_checked_and_written_in_place(sim):
    buf = sim.params["force_mag"]
    before = state(sim)
    for bad, match in (
        (math.nan, "finite"),
        ([1.0, 2.0], "one value or"),
        ("strong", "numbers"),
        (torch.tensor([1.0]).to_sparse(), "dense"),
    ):
        with pytest.raises(ecs.EcsError, match=match):
            sim.params["force_mag"] = bad
    with pytest.raises(ecs.EcsError, match="cannot be deleted"):
        del sim.params["force_mag"]
    with pytest.raises(ecs.EcsError, match="unknown parameter"):
        sim.params["force"] = 1.0
    assert_unchanged(before, sim)
    sim.params["force_mag"] = 12.5
    assert sim.params["force_mag"] is buf and buf.tolist() == [12.5]
    with pytest.raises(ecs.SchemaError, match="finite"):
        ecs.BatchSim(envs.make("cartpole"), 2, device="cpu", params={"force_mag": math.nan})


def test_sparse_and_meta_inputs_are_refused(sim):
    before = state(sim)
    with pytest.raises(ecs.ActionError, match="dense"):
        sim.actions["push"] = torch.zeros(4, dtype=torch.int32).to_sparse()
    with pytest.raises(ecs.EcsError, match="meta"):
        sim.reset(torch.zeros(4, dtype=torch.bool, device="meta"))
    with pytest.raises(ecs.EcsError, match="dense"):
        sim.reset(torch.zeros(4, dtype=torch.bool).to_sparse())
    assert_unchanged(before, sim)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"schedule_seed": "abc"}, "schedule_seed must be None or an int"),
        ({"schedule_seed": -1}, "schedule_seed must be None or an int"),
        ({"fuse": "no"}, "fuse must be one of"),
        ({"capture": "no"}, "capture must be one of"),
        ({"capture": 0}, "capture must be one of"),
    ],
)
def test_constructor_flags_are_checked(kwargs, match):
    with pytest.raises(ecs.EcsError, match=match):
        ecs.BatchSim(envs.make("cartpole"), 2, device="cpu", **kwargs)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"max_episode_steps": 2**32 + 5}, "32-bit"),
        ({"max_episode_steps": 2**31 + 5}, "32-bit"),
        ({"move_force": math.inf}, "move_force must be a finite number"),
        ({"move_damping": -50.0}, "move_damping must be a finite number >= 0"),
        ({"out_of_bounds_reward": math.nan}, "out_of_bounds_reward must be a finite number"),
        ({"gravity": math.inf}, "gravity must be a finite number"),
        ({"box_friction": -0.1}, "box_friction must be a finite number >= 0"),
    ],
)
def test_absurd_configs_are_refused(overrides, match):
    with pytest.raises(ecs.ConfigError, match=match):
        envs.make("hide_and_seek", **overrides)


def test_yaml_duplicate_keys_are_refused_and_exponents_are_floats(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("max_episode_steps: 10\nforce_mag: 5.0\nmax_episode_steps: 20\n")
    with pytest.raises(ecs.ConfigError, match="duplicate key 'max_episode_steps'"):
        envs.make("cartpole", config=dup)
    exp = tmp_path / "exp.yaml"
    exp.write_text("force_mag: 1e1\nmax_episode_steps: 300\n")
    cfg = envs.make("cartpole", config=exp).config
    assert cfg.force_mag == 10.0 and cfg.max_episode_steps == 300


def test_first_build_shows_compile_progress_and_a_cached_build_shows_nothing(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "WARP_CACHE_PATH": str(tmp_path / "cache"), "PYTHONPATH": str(root)}
    env.pop("TQDM_DISABLE", None)
    code = "import ecs, envs; ecs.BatchSim(envs.make('cartpole'), 2, device='cpu'); print('built')"
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=True)
        for _ in range(2)
    ]
    assert all(r.stdout.rstrip().endswith("built") for r in runs)
    assert "compiling kernels for cpu" in runs[0].stderr and "module" in runs[0].stderr
    assert "compiling kernels" not in runs[1].stderr
