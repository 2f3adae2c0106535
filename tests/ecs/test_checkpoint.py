"""Checkpoints: a damaged or edited state is refused before it can crash a step, and files on disk
that are not saved states give StateDictError naming the path; saves are atomic and clean up."""

from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest
import warp as wp

import ecs
import envs


@pytest.fixture(scope="module")
def sim() -> ecs.BatchSim:
    s = ecs.BatchSim(envs.make("hide_and_seek", max_episode_steps=30), 2, device="cpu", seed=4)
    for _ in range(3):
        s.step()
    return s


EDITS = [
    # The state that segfaulted the next step: every agent's body row far outside the body table.
    ("table/agent/body_row", (slice(None),), 10**6, "rows of 'body'"),
    ("table/agent/body_row", (1, 0), -1, "rows of 'body'"),  # not nullable
    ("table/agent/reach_target", (0, 0), -2, "or -1"),  # nullable, but -2 is no row
    ("table/agent/lidar_hit", (1, 0, 5), 31, "rows of 'body'"),
    ("table/pair/pair_body_a", (0, 0), 99, "rows of 'body'"),
    ("table/body/locker", (1, 14), 6, "rows of 'agent'"),  # a lock rule reads the locker's team
    ("singleton/pair_count", (1,), 10**5, "counts rows of 'pair'"),
    ("table/body/position", (0, 3, 0), np.nan, "finite"),
    ("table/body/linear_velocity", (1, 3, 2), np.inf, "finite"),
    ("singleton/self_obs", (0, 0, 0), -np.inf, "finite"),
    ("table/body/alive", (1, 2), 7, "alive must be 0 or 1"),
    ("table/body/generation", (0, 4), -1, "generations"),
    ("singleton/episode_step", (0,), -3, "episode_step"),
    ("singleton/episode", (1,), -2, "episode"),
]


@pytest.mark.parametrize(("key", "index", "value", "why"), EDITS, ids=[f"{e[0]}={e[2]}" for e in EDITS])
def test_an_edited_state_is_refused_and_nothing_changes(sim, key, index, value, why):
    d = sim.state_dict()
    before = sim.state_dict()["arrays"]
    d["arrays"][key][index] = value
    with pytest.raises(ecs.StateDictError, match=why) as info:
        sim.load_state_dict(d)
    assert key in str(info.value) and "Load an unmodified state" in str(info.value)
    after = sim.state_dict()["arrays"]
    for k in before:
        np.testing.assert_array_equal(before[k], after[k], err_msg=k)


def test_values_that_a_sim_does_hold_load(sim):
    d = sim.state_dict()
    d["arrays"]["table/agent/reach_target"][:] = -1  # nullable: no target
    alive = d["arrays"]["table/body/alive"]
    dead = np.argwhere(alive == 0)[0]
    d["arrays"]["table/body/position"][tuple(dead)] = np.nan  # a dead row's stale value is never read
    sim.load_state_dict(d)
    sim.step()


def test_index_declarations_are_checked():
    with pytest.raises(ecs.SchemaError, match="integer dtype"):
        ecs.Component("row", wp.float32, index_of="body")
    with pytest.raises(ecs.SchemaError, match="nullable=True only goes with index_of"):
        ecs.Component("row", wp.int32, nullable=True)
    spec = envs.make("foraging")
    bad = ecs.Component("target", wp.int32, index_of="body")
    arch = ecs.Archetype("tagged", (bad,), capacity=1)
    with pytest.raises(ecs.SchemaError, match="index_of='body', which is not an archetype"):
        ecs.EnvSpec(
            name="tagged",
            config=spec.config,
            archetypes=[*spec.archetypes, arch],
            singletons=spec.singletons,
            systems=spec.systems,
            actions=spec.actions,
            observations=spec.observations,
        ).validate()


@pytest.fixture()
def saved(tmp_path):
    s = ecs.BatchSim(envs.make("cartpole"), 4, device="cpu")
    s.step()
    path = tmp_path / "state.npz"
    s.save(path)
    return s, path


def _damage_crc(path) -> None:
    """Flips a byte inside the first stored array's data, leaving the zip structure readable."""
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.startswith("a/"))
    raw = bytearray(path.read_bytes())
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.file_size // 2
    raw[at] ^= 0xFF
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("damage", ["truncated", "crc", "empty", "npy", "folder", "text"])
def test_damaged_files_give_state_dict_errors(saved, tmp_path, damage):
    sim, path = saved
    target = tmp_path / "bad.npz"
    if damage == "truncated":
        target.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "crc":
        target.write_bytes(path.read_bytes())
        _damage_crc(target)
    elif damage == "empty":
        target.write_bytes(b"")
    elif damage == "npy":
        target = tmp_path / "bad.npy"
        np.save(target, np.zeros(3))
    elif damage == "folder":
        target.mkdir()
    else:
        target.write_text("not a state")
    before = sim.state_dict()["arrays"]
    with pytest.raises(ecs.StateDictError) as info:
        sim.load(target)
    assert str(target) in str(info.value)
    for k, v in sim.state_dict()["arrays"].items():
        np.testing.assert_array_equal(v, before[k])


def test_failed_save_names_the_target_and_leaves_nothing(saved, tmp_path):
    sim, _ = saved
    target = tmp_path / "missing-folder" / "state.npz"
    with pytest.raises(FileNotFoundError, match=r"cannot save the state to .*missing-folder/state\.npz"):
        sim.save(target)
    assert not (tmp_path / "missing-folder").exists()


def test_leftovers_of_killed_saves_are_removed_by_the_next_save(saved, tmp_path):
    sim, path = saved
    leftover = tmp_path / ".state.npz.ecs-tmp-abc123.npz"  # what a save killed before its rename leaves
    leftover.write_bytes(b"partial")
    other = tmp_path / ".other.npz.ecs-tmp-xyz.npz"  # another target's: not ours to remove
    other.write_bytes(b"partial")
    sim.save(path)
    assert not leftover.exists() and other.exists()
    assert sorted(os.listdir(tmp_path)) == sorted([".other.npz.ecs-tmp-xyz.npz", "state.npz"])
    sim.load(path)


def test_worlds_of_a_state_step_on_as_they_did_among_the_others():
    """``checkpoint.worlds_of``: worlds 1 and 2 of a 4-world cartpole, loaded into a 2-world simulation, step on bit
    for bit as they did among the others; a range outside the state is refused."""
    from ecs import checkpoint

    big = ecs.BatchSim(envs.make("cartpole"), 4, device="cpu", seed=7)
    for _ in range(5):
        big.step()
    part = checkpoint.worlds_of(big.state_dict(), 1, 3)
    assert part["num_worlds"] == 2 and part["world_offset"] == 1
    small = ecs.BatchSim(envs.make("cartpole"), 2, device="cpu", seed=7, world_offset=1)
    small.load_state_dict(part)
    for _ in range(30):  # through resets: each world's episodes draw from (seed, world_offset + w, e)
        big.step()
        small.step()
    for key, value in small.state_dict()["arrays"].items():
        if checkpoint.per_world(key, value, 2):
            np.testing.assert_array_equal(value, big.state_dict()["arrays"][key][1:3], err_msg=key)
    with pytest.raises(ecs.StateDictError, match="not worlds of this state's 4"):
        checkpoint.worlds_of(big.state_dict(), 3, 5)
