"""The ordered solver (``PhysicsConfig.solver_order``): a thread per world's staged kernels step the worlds sorted by
their work (``physics.order_worlds``: contact rows with a body that moves, in ``solver.ORDER_BUCKETS`` buckets), so
that a GPU warp's threads step worlds of like cost. Which thread steps which world changes nothing: the state is an
unordered solver's bit for bit, and the order is a permutation sorted by the work that a numpy count finds in the
step before. Hide-and-seek under sticky play (actions held for steps, so boxes are dragged and pushed and worlds
differ in their work), with resets, captured, eager and with CPU threads; fewer worlds than buckets keep their own
order.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

import ecs
import envs
from systems import physics, solver
from systems.rigid_body import Response

from .test_solver_block import assert_same, state

HOLD = 8  # steps an agent holds its actions, on average


def sticky_play(sim: ecs.BatchSim, gen: torch.Generator, first: bool) -> None:
    """Each agent draws its move, grab and lock again with probability ``1 / HOLD`` (all of them at the first step)."""
    again = None
    for key, a in sim.actions.items():
        high = 11 if key == "move" else 2  # move bins 0..10; grab and lock 0 or 1
        fresh = torch.randint(0, high, tuple(a.shape), generator=gen, dtype=torch.int32)
        if again is None:
            again = torch.rand(tuple(a.shape[:2]), generator=gen) < (1.0 if first else 1.0 / HOLD)
        mask = again.reshape(tuple(a.shape[:2]) + (1,) * (a.dim() - 2))
        a.copy_(torch.where(mask, fresh, a))
    sim.step()


def make(num_worlds: int, ordered: bool, **options) -> ecs.BatchSim:
    spec = envs.make(
        "hide_and_seek",
        prep_fraction=0.0,
        max_episode_steps=12,
        solver_layout="world",
        solver_staged=True,
        solver_order=ordered,
    )
    return ecs.BatchSim(spec, num_worlds, device="cpu", seed=4, **options)


def work_buckets(before: dict[str, np.ndarray]) -> np.ndarray:
    """Each world's bucket by numpy: its contact rows in use with a body that moves (dynamic, not locked, not
    asleep), at most ``ORDER_BUCKETS - 1``."""
    moving = (before["response"] == int(Response.DYNAMIC)) & (before["motion_lock"] == 0)
    out = np.zeros(len(before["count"]), dtype=np.int64)
    for w, n in enumerate(before["count"]):
        a, b = before["body_a"][w, :n], before["body_b"][w, :n]
        out[w] = int((moving[w, a] | moving[w, b]).sum())
    return np.minimum(out, solver.ORDER_BUCKETS - 1)


@pytest.mark.parametrize("num_worlds", [70, 12])
def test_an_ordered_solver_steps_every_world_as_an_unordered_one(num_worlds):
    """70 worlds (more than ``ORDER_BUCKETS``: sorted) and 12 (fewer: in their own order). The ordered kernels are not
    world-local: with CPU threads they run whole, the other systems on chunks of worlds."""
    sims = {
        "unordered": make(num_worlds, False),
        "ordered": make(num_worlds, True),
        "ordered eager": make(num_worlds, True, capture=False),
        "ordered threads": make(num_worlds, True, cpu_threads=2),
    }
    gens = {label: torch.Generator().manual_seed(7) for label in sims}
    moved = resets = 0
    for step in range(36):
        for label, sim in sims.items():
            sticky_play(sim, gens[label], step == 0)
        order = sims["ordered"].tensor("world", "solver_counts").numpy()[:, solver.ORDER_WORLD]
        moved += int(np.any(order != np.arange(num_worlds)))
        resets += int(sims["unordered"].truncated.sum())
        if step % 6 == 5:
            for label, sim in sims.items():
                assert_same(state(sims["unordered"]), state(sim), f"{label}, step {step}")
    assert resets > 0  # episodes ended and began again
    if num_worlds >= solver.ORDER_BUCKETS:
        assert moved > 30, moved  # the threads stepped the worlds out of their own order
    else:
        assert moved == 0


def test_the_order_sorts_the_worlds_by_their_moving_contacts():
    """At each step the order is a permutation of the worlds; the buckets of the worlds in slot order never fall;
    and each world's bucket is numpy's count of its contact rows with a body that moves, in the step before."""
    n = 96
    sim = make(n, True)
    gen = torch.Generator().manual_seed(11)
    seen = set()
    for step in range(30):
        before = {
            "count": sim.tensor("world", "contact_count").numpy().copy(),
            "body_a": sim.tensor("contact", "contact_body_a").numpy().copy(),
            "body_b": sim.tensor("contact", "contact_body_b").numpy().copy(),
            "response": sim.tensor("body", "response").numpy().copy(),
            "motion_lock": sim.tensor("body", "motion_lock").numpy().copy(),
        }
        sticky_play(sim, gen, step == 0)
        counts = sim.tensor("world", "solver_counts").numpy()
        order = counts[:, solver.ORDER_WORLD]
        buckets = counts[:, solver.ORDER_BUCKET]
        assert sorted(order.tolist()) == list(range(n)), step
        assert np.all(np.diff(buckets[order]) >= 0), step
        np.testing.assert_array_equal(buckets, work_buckets(before), err_msg=f"step {step}")
        seen.update(buckets.tolist())
    assert len(seen) >= 8, seen  # the worlds spread over many buckets: the sort had work to do


def test_the_order_is_a_config_choice_of_the_staged_kernels_that_run_several_worlds_a_warp():
    """``solver_order`` adds the four ordering launches (PHYSICS) and the ordered kernels wherever a thread per world
    runs staged (the "world" layout staged, the "auto" layout's CUDA build from ``solver_world_from`` worlds) and a
    CUDA warp of several worlds (``solver_lanes`` below 32) staged. Other forms ignore it. A value that is not a bool
    is refused."""
    from ecs.graph import TaskGraph

    def kernels(is_cpu: bool, n: int, **fields) -> list[str]:
        spec = envs.make("hide_and_seek", max_episode_steps=8, physics_substeps=1, solver_order=True, **fields)
        layout = ecs.BatchSim(spec, 2, device="cpu", seed=0).storage.layout
        graph = TaskGraph(spec.systems, layout, device_is_cpu=is_cpu, num_worlds=n, env_name=spec.name)
        return [t.kernel.key for t in graph.tasks if t.phase in (ecs.Phase.PHYSICS, ecs.Phase.COLLIDE)]

    order = [k.key for k in solver.ORDER_KERNELS]
    ordered = [f"step_bodies_{stage}_ordered" for stage in solver.STAGED]
    staged = {"solver_layout": "world", "solver_staged": True}
    for is_cpu in (True, False):
        assert kernels(is_cpu, 2, **staged) == ["find_pairs", *order, *ordered, "end_substeps"]
    edge = physics.AUTO_WORLD_FROM
    assert kernels(False, edge) == ["find_pairs", *order, *ordered, "end_substeps"]
    assert order[0] not in kernels(False, edge - 1)  # the block, staged and cached
    assert order[0] not in kernels(True, edge)  # the CPU's whole kernel
    assert kernels(True, 2, solver_layout="world", solver_staged=False) == ["find_pairs", "step_bodies"]
    # A CUDA warp of 4 worlds (8 lanes each), staged: the ordering launches and its sorted kernels; its CPU build
    # (a block of one world) keeps the worlds' own order.
    packed = [f"step_bodies_{stage}_block_l8_g4_ordered" for stage in solver.STAGED]
    assert kernels(False, 2, solver_lanes=8) == ["find_pairs", *order, *packed, "end_substeps"]
    assert order[0] not in kernels(True, 2, solver_lanes=8, solver_staged=True)
    for bad in (1, "yes", None):
        with pytest.raises(ecs.ConfigError, match=r"solver_order must be True or False"):
            physics.PhysicsConfig(solver_order=bad)
        with pytest.raises(ValueError, match=r"solver_order must be true or false"):
            envs.make("hide_and_seek", solver_order=bad)
    with pytest.raises(ValueError, match=r"a thread per world's or a warp of several worlds'"):
        solver.step_kernel(True, stage="solve", ordered=True)


def test_the_ordered_kernels_step_the_world_each_thread_is_given():
    """Without the ordering launches, the order written by hand: the worlds reversed step as in their own order; an
    order that gives world 0 to every thread steps world 0 again and again and no other, so the kernels read it."""
    n = 6

    def sim_with(order: np.ndarray | None) -> ecs.BatchSim:
        sim = make(n, order is not None)
        if order is not None:
            spec = replace(sim.env, systems=[s for s in sim.env.systems if s.fn not in solver.ORDER_KERNELS])
            sim = ecs.BatchSim(spec, n, device="cpu", seed=4)
            counts = sim.tensor("world", "solver_counts")
            counts[:, solver.ORDER_WORLD] = torch.from_numpy(order)
        return sim

    sims = {"own": sim_with(None), "reversed": sim_with(np.arange(n)[::-1].copy()), "zeros": sim_with(np.zeros(n, int))}
    gens = {label: torch.Generator().manual_seed(2) for label in sims}
    for step in range(4):
        for label, sim in sims.items():
            sticky_play(sim, gens[label], step == 0)
    own, rev, zeros = (state(s) for s in sims.values())
    assert_same(own, rev, "reversed")
    position = "position"
    assert not np.array_equal(own[position][1:], zeros[position][1:])  # the others were never stepped
    assert not np.array_equal(own[position][0], zeros[position][0])  # world 0 stepped six times a substep
