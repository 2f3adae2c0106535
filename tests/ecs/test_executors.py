"""Every executor gives the same worlds, bit for bit, and diagnostics never change the simulation's own.

Like bevy's tests over every executor: each env runs the same calls (steps with fresh actions,
episodes ending inside runs, runs with held and with staged actions, masked resets) under eager
and captured launches of the unfused systems and, where the env fuses, of the fused kernel,
eagerly, captured and on CPU threads.
"""

import threading
import time

import numpy as np
import pytest
import torch
import warp as wp

import ecs
import envs
from ecs import executors, fusion, program
from ecs.executors import Captured, Eager, FusedRecorder, SplitRecorder, Threaded
from ecs.schema import Phase

# (env, overrides, worlds): short episodes so that resets happen inside steps and runs.
ENVS = {
    "cartpole": ({"max_episode_steps": 9}, 21),
    "foraging": ({"max_episode_steps": 11}, 7),
    "predator_prey": ({"max_episode_steps": 13}, 6),
    "escape_room": ({"max_episode_steps": 10}, 3),
    "hide_and_seek": ({"max_episode_steps": 8}, 2),
}

# name: BatchSim options; the fused ones only for envs that fuse.
EXECUTORS = {
    "eager": {"capture": False, "fuse": False},
    "captured": {"capture": True, "fuse": False},
    "fused-eager": {"capture": False, "fuse": True},
    "fused-captured": {"capture": True, "fuse": True},
    "fused-threads": {"capture": True, "fuse": True, "cpu_threads": 2},
    "split-threads": {"capture": True, "fuse": False, "cpu_threads": 2},
}


def _actions(sim: ecs.BatchSim, steps: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for key, action in sim.env.actions.items():
        buf = sim.actions[key]
        low, high = int(action.low), int(action.high)
        out[key] = torch.randint(low, high + 1, (steps, *buf.shape), generator=g).to(buf.dtype)
    return out


def _drive(sim: ecs.BatchSim) -> list[dict[str, np.ndarray]]:
    """The same calls for every executor; a snapshot after each kind of call."""
    acts = _actions(sim, 40, seed=7)
    snaps = []
    for i in range(12):
        sim.step({k: v[i] for k, v in acts.items()})
    snaps.append(sim.state_dict()["arrays"])
    sim.run(10, {k: v[12:22] for k, v in acts.items()})
    snaps.append(sim.state_dict()["arrays"])
    sim.run(7)  # held actions
    snaps.append(sim.state_dict()["arrays"])
    mask = torch.zeros(sim.num_worlds, dtype=torch.bool)
    mask[::2] = True
    sim.reset(mask)
    sim.run(3, {k: v[22:25] for k, v in acts.items()})  # fewer steps than staged: no new buffers
    for i in range(25, 30):
        sim.step({k: v[i] for k, v in acts.items()})
    snaps.append(sim.state_dict()["arrays"])
    snaps.append({"obs/" + k: v.cpu().numpy().copy() for k, v in sim.obs.items()})
    snaps.append({"final/" + k: v.cpu().numpy().copy() for k, v in sim.final_obs.items()})
    return snaps


@pytest.mark.parametrize("name", sorted(ENVS))
def test_every_executor_gives_the_same_worlds(name):
    overrides, worlds = ENVS[name]
    env = envs.make(name, **overrides)
    results = {}
    for label, options in EXECUTORS.items():
        if options["fuse"] and ecs.fusion.why_not_fusable(ecs.BatchSim(env, 1, fuse=False).graph, env) is not None:
            continue
        sim = ecs.BatchSim(env, worlds, device="cpu", seed=3, **options)
        split = label == "split-threads" and any(t.system.world_local for t in sim.graph.tasks)
        kind = {"eager": Eager, "captured": Captured, "fused-eager": Eager, "fused-captured": Captured}
        kind.update({"fused-threads": Threaded, "split-threads": Eager if split else Captured})
        assert type(sim.executor) is kind[label], label
        assert isinstance(sim.executor.recorder, FusedRecorder) == bool(options["fuse"])
        assert isinstance(sim.executor.recorder, SplitRecorder) == split
        results[label] = _drive(sim)
    reference = results.pop("eager")
    assert results, "no second executor ran"
    for label, snaps in results.items():
        for i, (want, got) in enumerate(zip(reference, snaps, strict=True)):
            assert want.keys() == got.keys()
            for key in want:
                np.testing.assert_array_equal(got[key], want[key], err_msg=f"{label}, snapshot {i}: {key}")


def test_calls_below_the_thread_thresholds_go_to_the_inner_executor():
    env = envs.make("cartpole", max_episode_steps=9)
    sim = ecs.BatchSim(env, 600, device="cpu")  # two blocks of worlds, default thresholds
    assert isinstance(sim.executor, Threaded)
    assert not sim.executor.threaded_step and sim.executor.run_min == 16384
    assert isinstance(sim.executor.inner, Captured)


def test_the_default_threads_time_both_ways_and_either_gives_the_same_worlds(monkeypatch):
    """From 4096 worlds a default step (and a run of 16384 world-steps) may use the threads; it
    times them against one thread and takes the faster. Forced to alternate, the calls give the
    worlds of plain unfused steps."""
    env = envs.make("cartpole", max_episode_steps=9)
    sim = ecs.BatchSim(env, 4096 + 37, device="cpu", seed=2)
    plain = ecs.BatchSim(env, 4096 + 37, device="cpu", seed=2, fuse=False)
    assert isinstance(sim.executor, Threaded) and sim.executor.threaded_step and sim.executor.adaptive
    ways = []

    def alternate(timer):
        ways.append(len(ways) % 2)
        return ways[-1]

    monkeypatch.setattr(executors._Timer, "pick", alternate)
    acts = _actions(plain, 12, seed=4)
    for i in range(8):
        for s in (sim, plain):
            s.step({k: v[i] for k, v in acts.items()})
    sim.run(4, {k: v[8:12] for k, v in acts.items()})
    for i in range(8, 12):
        plain.step({k: v[i] for k, v in acts.items()})
    assert ways == [0, 1] * 4 + [0]
    a, b = sim.state_dict()["arrays"], plain.state_dict()["arrays"]
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_the_timer_takes_the_faster_way_and_tries_the_other_less_often_while_it_stays_slower():
    timer = executors._Timer()
    cost = {0: 1.0, 1: 3.0}  # one thread faster: the other core is busy
    taken = []
    for _ in range(400):
        way = timer.pick()
        taken.append(way)
        timer.record(way, cost[way])
    tries = [i for i in range(10, len(taken)) if taken[i] == 1]
    assert tries and taken[-1] == 0
    gaps = np.diff([i for i in tries if i - 1 not in tries])  # the first call of each try
    assert list(gaps) == sorted(gaps) and gaps[-1] > gaps[0]  # ever rarer
    cost = {0: 1.0, 1: 0.5}  # the core is free now: the next try finds the threads faster
    wait, taken = timer.interval, []
    for _ in range(wait + 400):
        way = timer.pick()
        taken.append(way)
        timer.record(way, cost[way])
    assert taken[wait + timer.TRY :].count(0) <= 4 * timer.TRY  # a few tries of one thread, ever rarer


@wp.kernel
def count_call(counter: wp.array(dtype=wp.int32)):
    counter[0] = counter[0] + 1


def _counting_helper():
    """A helper whose call graph adds one to a counter (then reports the call done, as a Threaded call's does)."""
    helper = executors._Helper()
    counter = wp.zeros(1, dtype=wp.int32, device="cpu")

    def record():
        wp.launch(count_call, dim=1, inputs=[counter], device="cpu")
        wp.launch(executors.report_call, dim=1, inputs=[helper.number, helper.done], device="cpu")
        helper.record_spin()

    return helper, counter, executors._capture("cpu", record)


def _announce(helper) -> None:
    wp.launch(executors.announce_call, dim=1, inputs=[helper.calls], device="cpu")


def _await_done(helper, number: int) -> None:
    deadline = time.time() + 10
    while int(helper.done.numpy()[0]) != number:
        assert time.time() < deadline, f"the helper did not finish call {number}"
        time.sleep(0.0005)


def test_a_helper_steps_a_call_only_if_it_takes_the_token_first():
    helper, counter, graph = _counting_helper()
    try:
        late = threading.Lock()
        late.acquire()  # the calling thread stepped every world and took the token
        helper.post(late, graph)
        _announce(helper)
        time.sleep(0.05)
        assert int(counter.numpy()[0]) == 0
        # Calls back to back (the helper waits for them in native code) and after it fell asleep.
        for i in range(1, 31):
            if i % 10 == 0:
                time.sleep(0.02)
            token = threading.Lock()
            number = helper.post(token, graph)
            _announce(helper)
            _await_done(helper, number)
            assert token.locked() and int(counter.numpy()[0]) == i
    finally:
        helper.close()


def test_a_failing_helper_raises_in_the_calling_thread():
    helper = executors._Helper()
    try:
        token = threading.Lock()
        number = helper.post(token, graph=None)  # not a graph: the helper's launch raises
        _announce(helper)
        deadline = time.time() + 10
        while helper.error is None and time.time() < deadline:
            time.sleep(0.001)
        assert not token.acquire(blocking=False)  # the helper took the call
        with pytest.raises(ecs.EcsError, match="helper thread failed"):
            helper.wait(number)
    finally:
        helper.close()


@wp.kernel
def claim_all(claims: wp.array(dtype=wp.int32), block: int, owner: wp.array(dtype=wp.int32), thread: int):
    from_back = fusion.take_ticket(claims) % 2
    span = fusion.claim_worlds(claims, block, from_back)
    while span[0] < span[1]:
        for w in range(span[0], span[1]):
            owner[w] = owner[w] + 1 + 1000 * thread  # a world claimed twice would count twice
        span = fusion.claim_worlds(claims, block, from_back)


@pytest.mark.parametrize(("worlds", "block"), [(1, 256), (255, 256), (1000, 7), (4099, 256), (50000, 3)])
def test_threads_claiming_from_both_ends_take_every_world_once(worlds, block):
    """Two threads run a claiming kernel at once (launches release the GIL): every world is taken by
    exactly one of them, the first from the front and the second from the back."""
    owner = wp.zeros(worlds, dtype=wp.int32, device="cpu")
    claims = wp.array(np.array([0, worlds, 0, 0], dtype=np.int32), device="cpu")
    go = threading.Barrier(2)

    def run(thread):
        go.wait()
        wp.launch(claim_all, dim=1, inputs=[claims, block, owner, thread], device="cpu")

    threads = [threading.Thread(target=run, args=(t,)) for t in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = owner.numpy()
    assert np.all(np.isin(got, (1, 1001))), np.unique(got)  # every world once, by one of the two
    # The worlds of each thread are one run: one thread's from the front, the other's to the back.
    changes = np.flatnonzero(np.diff(got))
    assert len(changes) <= 1, f"the threads' worlds interleave at {changes[:10]}"
    front, back, tickets = claims.numpy()[:3]
    assert front >= back and tickets == 2


def test_diagnostics_leave_the_executor_and_the_state_alone():
    env = envs.make("cartpole", max_episode_steps=9)
    sim = ecs.BatchSim(env, 16, device="cpu", seed=1)
    twin = ecs.BatchSim(env, 16, device="cpu", seed=1)
    executor, recorder, kernel = sim.executor, sim.executor.recorder, sim.executor.recorder.kernel
    for s in (sim, twin):
        s.step()
    report = sim.profile(steps=5)
    sim.find_nan(steps=1)  # eager and unfused, on a recorder of its own: the step happens
    twin.step()
    assert sim.executor is executor and sim.executor.recorder is recorder and recorder.kernel is kernel
    assert sim.fused and report.fused
    names = {c.name for phase in report.root.children for c in phase.children}
    assert {"begin_step", "finish_step", "validate_actions"} <= names  # the unfused program was timed
    a, b = sim.state_dict()["arrays"], twin.state_dict()["arrays"]
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_the_step_program_orders_the_phases():
    assert list(program.phases_of(program.STEP)) == [
        Phase.ACT,
        Phase.PHYSICS,
        Phase.COLLIDE,
        Phase.REWARD,
        Phase.SENSE,  # ended worlds: their last observation, then the reset
        Phase.OBSERVE,
        Phase.RESET,
        Phase.SENSE,
        Phase.OBSERVE,
    ]
    assert list(program.phases_of(program.RESET)) == [Phase.RESET, Phase.SENSE, Phase.OBSERVE]
    every = set(program.phases_of(program.STEP)) | set(program.phases_of(program.RESET))
    assert every == {p for p in Phase if p != Phase.NONE}


@ecs.component
class LaneMark:
    """Test column: how many lanes the block of its world had, summed over the steps, at the row of each lane."""

    value: wp.int32


@wp.kernel
def mark_lanes(lane_mark_out: wp.array2d[wp.int32]):
    world, lane = wp.tid()
    lane_mark_out[world, lane] = lane_mark_out[world, lane] + wp.block_dim()


@pytest.mark.parametrize("cpu_blocks", [False, True])
def test_a_tiled_system_gets_a_block_of_lanes_per_world(cpu_blocks):
    """``block_dim``: a block of lanes per world on every executor; on CPU as many lanes as asked only with
    Warp's cooperative CPU blocks, else one, and the launch is never split among threads."""
    env = ecs.EnvSpec(
        name="tiled_lanes",
        config=None,
        archetypes=[ecs.Archetype("cell", (LaneMark,), capacity=4)],
        systems=[ecs.System(mark_lanes, Phase.PHYSICS, dim="world", world_local=True, block_dim=4)],
    )
    before = wp.config.enable_cpu_blocks
    wp.config.enable_cpu_blocks = cpu_blocks
    try:
        for label in ("eager", "captured", "split-threads"):
            sim = ecs.BatchSim(env, 5, device="cpu", **EXECUTORS[label])
            # Not split among threads: Warp's CPU tile storage is not per thread.
            assert not isinstance(sim.executor.recorder, SplitRecorder)
            for _ in range(3):
                sim.step()
            lanes = 4 if cpu_blocks else 1
            want = np.zeros((5, 4), np.int32)
            want[:, :lanes] = 3 * lanes
            np.testing.assert_array_equal(sim.tensor("cell", "lane_mark").numpy(), want, err_msg=label)
    finally:
        wp.config.enable_cpu_blocks = before
