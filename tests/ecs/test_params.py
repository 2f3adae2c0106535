"""Per-world parameters given at build time: shared, per world, and cycled."""

import numpy as np
import pytest
import torch

import ecs
import envs


def _run(sim: ecs.BatchSim, steps: int) -> np.ndarray:
    sim.actions["push"].fill_(1)
    for _ in range(steps):
        sim.step()
    return sim.tensor("world", "cart_velocity").cpu().clone().numpy()


def test_per_world_force_changes_only_its_world(device):
    env = envs.make("cartpole")
    forces = np.array([10.0, 20.0, 10.0, 5.0], dtype=np.float32)
    sim = ecs.BatchSim(env, 4, device=device, params={"force_mag": forces})
    assert sim.params["force_mag"].shape == (4,)
    base = ecs.BatchSim(env, 4, device=device)
    v, v0 = _run(sim, 3), _run(base, 3)
    # Same RNG keys, so the initial states agree; only the force differs.
    np.testing.assert_array_equal(v[[0, 2]], v0[[0, 2]])
    assert v[1] > v0[1] > v[3]


def test_short_parameter_cycles_over_worlds(device):
    env = envs.make("cartpole")
    sim = ecs.BatchSim(env, 6, device=device, params={"force_mag": [10.0, 30.0]})
    ref = ecs.BatchSim(env, 6, device=device, params={"force_mag": [10.0, 30.0, 10.0, 30.0, 10.0, 30.0]})
    np.testing.assert_array_equal(_run(sim, 4), _run(ref, 4))


def test_bad_parameter_overrides_are_refused():
    env = envs.make("cartpole")
    with pytest.raises(ecs.EcsError, match=r"unknown parameter.*'mass'.*force_mag"):
        ecs.BatchSim(env, 2, device="cpu", params={"mass": 1.0})
    with pytest.raises(ecs.SchemaError, match="force_mag"):
        ecs.BatchSim(env, 2, device="cpu", params={"force_mag": np.zeros((2, 2))})
    sim = ecs.BatchSim(env, 2, device="cpu", params={"force_mag": 12.5})
    assert sim.params["force_mag"].tolist() == [12.5]
    assert torch.equal(sim.params["force_mag"], torch.tensor([12.5]))
