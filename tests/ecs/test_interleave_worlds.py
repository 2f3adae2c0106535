"""``BatchSim(interleave_worlds=True)``: every table column stored row by row (row ``r`` of every world side by
side), so that threads that each step a world read adjacent addresses on a GPU. The columns stay ``[world, row]``
views; kernels, fused steps, CPU threads, torch views, writes through ``sim.tensor`` and checkpoints all see the
same values, and every env steps to the same state bit for bit as with the default layout.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ecs
import envs

OVERRIDES = {"hide_and_seek": {"max_episode_steps": 12, "prep_fraction": 0.0}}  # episodes end: resets run


def random_actions(sim: ecs.BatchSim, gen: torch.Generator) -> None:
    """Uniform draws from each action space (Discrete, MultiDiscrete or Box)."""
    for key, space in sim.action_space.spaces.items():
        view = sim.actions[key]
        if view.dtype.is_floating_point:
            low, high = (
                np.broadcast_to(space.low, view.shape[1:]).copy(),
                np.broadcast_to(space.high, view.shape[1:]).copy(),
            )
            u = torch.rand(tuple(view.shape), generator=gen)
            view.copy_(torch.as_tensor(low) + u * torch.as_tensor(high - low))
        else:
            n = getattr(space, "nvec", getattr(space, "n", 2))
            u = torch.rand(tuple(view.shape), generator=gen)
            view.copy_((u * torch.as_tensor(np.broadcast_to(n, view.shape[1:]).copy())).to(view.dtype))


def play(sim: ecs.BatchSim, steps: int, seed: int = 1) -> dict[str, np.ndarray]:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        random_actions(sim, gen)
        sim.step()
    return {k: np.asarray(v).copy() for k, v in sim.state_dict()["arrays"].items()}


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray], label: str) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=f"{label}: {key}")


@pytest.mark.parametrize("name", envs.names())
def test_every_env_steps_the_same_with_worlds_interleaved(name):
    make = lambda inter, **kw: ecs.BatchSim(  # noqa: E731
        envs.make(name, **OVERRIDES.get(name, {})), 6, device="cpu", seed=4, interleave_worlds=inter, **kw
    )
    sim = make(True)
    for archetype, columns in sim.tables.items():
        for column, arr in columns.items():
            # World w's row r sits next to world w + 1's: the world axis is the contiguous one.
            assert arr.strides[0] == arr.strides[1] // sim.num_worlds, (archetype, column, arr.strides)
    want = play(make(False), 30)
    assert_same(want, play(sim, 30), "interleaved")
    if name == "hide_and_seek":  # world-local raw kernels on chunks of worlds, one CPU thread each
        assert_same(want, play(make(True, cpu_threads=2), 30), "interleaved, 2 CPU threads")
        assert want["singleton/episode"].max() >= 2  # episodes ended and worlds were reset
        # The solver staged, a thread per world (a GPU's form at the largest world counts), reads and writes the
        # interleaved rows alike (but for the solver's scratch: what one stage leaves the next).
        from systems import solver

        staged = envs.make(name, **OVERRIDES[name], solver_layout="world", solver_staged=True)
        sim = ecs.BatchSim(staged, 6, device="cpu", seed=4, interleave_worlds=True)
        assert any(t.name == "solver_solve_0" for t in sim.graph.tasks)
        scratch = {
            c.name for c in (*solver.SCRATCH_COMPONENTS, *solver.CONTACT_SCRATCH_COMPONENTS, solver.SolverCounts)
        }
        got = play(sim, 30)
        kept = [k for k in want if k.split("/")[-1] not in scratch]
        assert len(kept) < len(want) and "table/body/position" in kept
        assert_same({k: want[k] for k in kept}, {k: got[k] for k in kept}, "interleaved, solver staged")


def test_writes_through_tensors_and_checkpoints_cross_layouts():
    spec = envs.make("hide_and_seek", **OVERRIDES["hide_and_seek"])
    plain = ecs.BatchSim(spec, 4, device="cpu", seed=2)
    inter = ecs.BatchSim(spec, 4, device="cpu", seed=2, interleave_worlds=True)
    play(plain, 5)
    play(inter, 5)
    for sim in (plain, inter):  # a torch view writes into the strided column
        sim.tensor("body", "position")[2, 5, 0] += 0.25
    assert_same(play(plain, 5, seed=3), play(inter, 5, seed=3), "after a write through sim.tensor")
    # A state saved in one layout loads into the other, and both go on alike.
    other = ecs.BatchSim(spec, 4, device="cpu", seed=2)
    other.load_state_dict(inter.state_dict())
    assert_same(play(other, 5, seed=5), play(inter, 5, seed=5), "state of the interleaved sim in a plain one")
    plain.load_state_dict(other.state_dict())
    inter.load_state_dict(other.state_dict())
    assert_same(play(plain, 3, seed=6), play(inter, 3, seed=6), "a plain sim's state in an interleaved one")


def test_interleave_worlds_must_be_a_bool():
    with pytest.raises(ecs.EcsError, match=r"interleave_worlds must be True or False, got 'yes'"):
        ecs.BatchSim(envs.make("cartpole"), 2, device="cpu", interleave_worlds="yes")
