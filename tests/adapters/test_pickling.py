"""A live BatchSim refuses pickling (and so every adapter holding one) with an error saying what to do instead."""

from __future__ import annotations

import copy
import pickle

import cloudpickle
import pytest

import ecs
import envs
from ecs.adapters.gymnasium import GymVectorEnv


@pytest.fixture(scope="module")
def sim():
    return ecs.BatchSim(envs.make("cartpole"), num_worlds=4, device="cpu", seed=0)


def test_pickling_a_live_sim_names_the_alternatives(sim):
    for dump in (pickle.dumps, cloudpickle.dumps, copy.deepcopy, copy.copy):
        with pytest.raises(TypeError, match=r"cannot be pickled.*inside the worker.*num_worlds.*sim\.save"):
            dump(sim)


def test_pickling_an_adapter_refuses_the_same_way(sim):
    # What subprocess vector envs (SuperSuit's concat_vec_envs, SB3's SubprocVecEnv) do to an env.
    with pytest.raises(TypeError, match=r"cartpole.*4 worlds on cpu.*cannot be pickled"):
        cloudpickle.dumps(GymVectorEnv(sim))


def test_the_suggested_alternative_round_trips(sim, tmp_path):
    sim.step()
    sim.save(tmp_path / "state.npz")
    twin = ecs.BatchSim(envs.make("cartpole"), num_worlds=4, device="cpu", seed=0)
    twin.load(tmp_path / "state.npz")
    sim.step()
    twin.step()
    assert (twin.obs["state"] == sim.obs["state"]).all()
