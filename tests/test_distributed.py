"""Scale-out with ``torch.distributed`` (``ecs.distributed``): two gloo ranks on the CPU.

Multi-rank runs are real ``torchrun`` launches (``python -m torch.distributed.run --standalone``,
which picks a free port) in their own process group, each under a timeout that kills the group.
The single-process reference runs first, which also fills the Warp kernel cache before two ranks
read it at once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ecs
from ecs import distributed

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 300  # seconds per launch; a cold kernel cache compiles every module first
WORLDS_PER_RANK = 4
RANKS = 2
STEPS = 120


def run(args: list[str], *, ranks: int | None = None, returncode: int | None = 0) -> subprocess.CompletedProcess:
    """Runs ``python args`` (or ``torchrun --nproc-per-node=ranks args``) in a new session, killed on timeout."""
    env = dict(os.environ, OMP_NUM_THREADS="1", WARP_QUIET="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    launcher = [] if ranks is None else ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    cmd = [sys.executable, *launcher, *args]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    result = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if returncode is not None:
        assert proc.returncode == returncode, f"{cmd} exited {proc.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    return result


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory) -> dict:
    """The single-process run of RANKS * N worlds, then the same worlds over RANKS ranks."""
    base = tmp_path_factory.mktemp("dist")
    worker = ["-m", "tests.dist_rollout", "--num-worlds", str(RANKS * WORLDS_PER_RANK), "--steps", str(STEPS)]
    run([*worker, "--out", str(base / "single")])
    run([*worker, "--out", str(base / "ranks")], ranks=RANKS)

    def load(folder: str, rank: int) -> tuple[dict, dict]:
        arrays = np.load(base / folder / f"rank{rank}.npz")
        return {k: arrays[k] for k in arrays.files}, json.loads((base / folder / f"rank{rank}.json").read_text())

    return {"single": load("single", 0), "ranks": [load("ranks", r) for r in range(RANKS)]}


def test_rank_worlds_follow_the_single_process_worlds_bit_for_bit(rollouts):
    single, info = rollouts["single"]
    assert info["world_size"] == 1 and info["backend"] is None and info["num_worlds"] == RANKS * WORLDS_PER_RANK
    assert int(single["terminated"].sum()) > 10, "the rollout must include many auto-resets"
    for rank, (arrays, meta) in enumerate(rollouts["ranks"]):
        assert (meta["rank"], meta["world_size"], meta["local_rank"], meta["backend"]) == (rank, RANKS, rank, "gloo")
        assert meta["num_worlds"] == WORLDS_PER_RANK
        assert meta["world_offset"] == meta["sim_world_offset"] == rank * WORLDS_PER_RANK
        worlds = slice(rank * WORLDS_PER_RANK, (rank + 1) * WORLDS_PER_RANK)
        assert set(arrays) == set(single) == {"obs", "final_obs", "rewards", "terminated", "truncated"}
        for key, value in arrays.items():
            want = np.ascontiguousarray(single[key][:, worlds])
            assert value.dtype == want.dtype and value.shape == want.shape, key
            assert value.tobytes() == want.tobytes(), f"rank {rank}: {key} differs from worlds {worlds}"
    # Ranks simulate different worlds: their first observations differ.
    assert not np.array_equal(rollouts["ranks"][0][0]["obs"][0], rollouts["ranks"][1][0]["obs"][0])


def test_reduced_episode_statistics_and_steps_match_the_single_process_run(rollouts):
    _, single = rollouts["single"]
    metas = [meta for _, meta in rollouts["ranks"]]
    total = {k: sum(m["local"][k] for m in metas) for k in ("episodes", "return_sum", "length_sum")}
    assert all(m["local"]["episodes"] > 0 for m in metas)
    assert total["episodes"] < single["local"]["episodes"] * 2, "each rank alone must see only part of the episodes"
    for meta in metas:
        assert meta["reduced"] == total
        assert meta["reduced"] == single["local"] == single["reduced"]
        assert meta["total_world_steps"] == RANKS * WORLDS_PER_RANK * STEPS == single["world_steps"]


def test_aggregate_throughput_is_total_steps_over_the_slowest_rank(rollouts):
    metas = [meta for _, meta in rollouts["ranks"]]
    throughputs = [m["throughput"] for m in metas]
    assert all(t == throughputs[0] for t in throughputs), "every rank must get the same aggregate"
    t = throughputs[0]
    assert t["rank_world_steps"] == [m["world_steps"] for m in metas] == [WORLDS_PER_RANK * STEPS] * RANKS
    assert t["rank_elapsed_s"] == [m["elapsed_s"] for m in metas]
    assert t["world_steps"] == RANKS * WORLDS_PER_RANK * STEPS
    assert t["elapsed_s"] == max(m["elapsed_s"] for m in metas)
    assert t["rate"] == pytest.approx(t["world_steps"] / t["elapsed_s"])


def test_combine_throughput_with_fake_timings():
    # Two ranks of 1000 world-steps, one taking 1 s and one 4 s: the run took 4 s.
    t = distributed.combine_throughput([1000, 1000], [1.0, 4.0])
    assert (t.world_steps, t.elapsed_s) == (2000, 4.0)
    assert t.rate == 500.0
    assert t.rank_rates == (1000.0, 250.0)
    assert t.rate < sum(t.rank_rates)  # a sum of per-rank rates (1250) would overstate it
    uneven = distributed.combine_throughput([300, 100, 200], [0.5, 0.25, 2.0])
    assert uneven.rate == 600 / 2.0
    with pytest.raises(ecs.EcsError, match="one time per rank"):
        distributed.combine_throughput([1, 2], [1.0])
    with pytest.raises(ecs.EcsError, match="times > 0"):
        distributed.combine_throughput([1, 2], [1.0, 0.0])


def test_split_worlds():
    assert [distributed.split_worlds(12, 4, r) for r in range(4)] == [(3, 0), (3, 3), (3, 6), (3, 9)]
    assert distributed.split_worlds(7, 1, 0) == (7, 0)
    with pytest.raises(ecs.EcsError, match=r"global_num_worlds 10 is not divisible by the 4 ranks.*e\.g\. 8 or 12"):
        distributed.split_worlds(10, 4, 0)
    with pytest.raises(ecs.EcsError, match=r"global_num_worlds 3 is not divisible by the 4 ranks.*e\.g\. 4"):
        distributed.split_worlds(3, 4, 0)
    with pytest.raises(ecs.EcsError, match="rank 4 of world size 4"):
        distributed.split_worlds(8, 4, 4)
    with pytest.raises(ecs.EcsError, match="global_num_worlds must be an int >= 1"):
        distributed.split_worlds(0, 1, 0)


@pytest.fixture
def launched(monkeypatch):
    """Sets torchrun's variables for this process; the errors tested are raised before any rendezvous."""

    def set_env(rank: int, world_size: int, local_rank: int) -> None:
        for name, value in (("RANK", rank), ("WORLD_SIZE", world_size), ("LOCAL_RANK", local_rank)):
            monkeypatch.setenv(name, str(value))
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", "1")  # never contacted

    yield set_env
    distributed.shutdown()


def test_indivisible_world_count_is_refused_naming_the_numbers(launched):
    import envs

    launched(1, 3, 1)
    with pytest.raises(ecs.EcsError, match=r"global_num_worlds 8 is not divisible by the 3 ranks.*multiple of 3"):
        distributed.make_sim(envs.make("cartpole"), 8, device="cpu")


def test_local_rank_without_a_gpu_is_refused_naming_the_numbers(launched):
    import warp as wp

    count = wp.get_cuda_device_count()
    launched(count, count + 1, count)  # the local rank one past the last GPU (0 where there is none)
    with pytest.raises(
        ecs.EcsError, match=rf"local rank {count} needs cuda:{count}, but this machine has {count} CUDA"
    ):
        distributed.init(4 * (count + 1), device="cuda")


def test_bad_backend_and_world_offset_are_refused(monkeypatch):
    import envs

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ecs.EcsError, match="'nccl' needs CUDA"):
        distributed.init(4, device="cpu", backend="nccl")
    with pytest.raises(ecs.EcsError, match="backend must be one of"):
        distributed.init(4, device="cpu", backend="mpi")
    with pytest.raises(ecs.EcsError, match="sets world_offset from the rank"):
        distributed.make_sim(envs.make("cartpole"), 4, device="cpu", world_offset=2)


def test_single_process_without_torchrun_is_rank_zero_of_one(monkeypatch, tmp_path):
    import envs

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    try:
        sim = distributed.make_sim(envs.make("cartpole"), 6, device="cpu", seed=2)
        ctx = distributed.context()
        assert (ctx.rank, ctx.world_size, ctx.num_worlds, ctx.world_offset, ctx.backend) == (0, 1, 6, 0, None)
        assert sim.num_worlds == 6 and sim.world_offset == 0 and ctx.is_main and not ctx.distributed
        stats = ctx.reduce_episode_stats(3, 45.0, 45)
        assert (stats.episodes, stats.return_sum, stats.length_sum, stats.mean_return) == (3, 45.0, 45, 15.0)
        assert ctx.reduce_steps(600) == 600
        with ctx.window() as w:
            sim.step()
        t = ctx.throughput(6, w.elapsed_s)
        assert (t.world_steps, t.elapsed_s, t.rank_elapsed_s) == (6, w.elapsed_s, (w.elapsed_s,))
        # A checkpoint of one rank: its own file, resumed; a file of other worlds refused, nothing changed.
        assert ctx.state_path("run") == "run.rank0-of-1.npz" and ctx.state_path("a/run.pt") == "a/run.rank0-of-1.pt"
        path = tmp_path / "run.npz"
        assert ctx.save(sim, path) == str(tmp_path / "run.rank0-of-1.npz")
        fresh = distributed.make_sim(envs.make("cartpole"), 6, device="cpu", seed=9)
        assert ctx.load(fresh, path) == []
        assert fresh.state_dict()["arrays"].keys() == sim.state_dict()["arrays"].keys()
        for key, value in sim.state_dict()["arrays"].items():
            np.testing.assert_array_equal(fresh.state_dict()["arrays"][key], value, err_msg=key)
        shifted = ecs.BatchSim(envs.make("cartpole"), 6, device="cpu", world_offset=6)
        shifted.save(tmp_path / "run.rank0-of-1.npz")
        before = fresh.state_dict()["arrays"]["singleton/rng"].copy()
        with pytest.raises(
            ecs.StateDictError, match=r"rank 0: .* holds the worlds from 6 on, where this rank's start at 0"
        ):
            ctx.load(fresh, path)
        np.testing.assert_array_equal(fresh.state_dict()["arrays"]["singleton/rng"], before)
        for call in (ctx.load, ctx.save):
            with pytest.raises(
                ecs.EcsError, match=r"rank 0: rank 0 simulates worlds 0..5, but this simulation holds worlds 6..11"
            ):
                call(shifted, path)
    finally:
        distributed.shutdown()
    with pytest.raises(ecs.EcsError, match="no distributed context"):
        distributed.context()


def test_a_distributed_checkpoint_resumes_every_rank_or_none(rollouts, tmp_path, monkeypatch):
    """``ctx.save`` writes one file a rank (``ckpt.rank1-of-2.npz``); ``ctx.load`` into fresh simulations of the
    same worlds resumes every rank bit for bit. Files swapped between the ranks (each holds the other's worlds) or
    missing on one rank are refused on every rank, naming the ranks and why, with no simulation changed; a
    simulation of other worlds on one rank is refused by ``ctx.save`` on every rank. A checkpoint of 2 ranks resumes
    in one process of all the worlds, each world going on as it did on its rank."""
    run(
        ["-m", "tests.dist_checkpoint", "--num-worlds", str(RANKS * WORLDS_PER_RANK), "--out", str(tmp_path)],
        ranks=RANKS,
    )
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(RANKS)]
    for rank, result in enumerate(results):
        assert result["file"] == f"ckpt.rank{rank}-of-{RANKS}.npz"
        assert result["resumed"] and result["upgraded"] == []
        # Rank 1 passed a simulation of other worlds: both refuse, naming rank 1 (rank 0 does not wait on it).
        assert result["other_sim"] == (
            "distributed checkpoint not saved: rank 1: rank 1 simulates worlds 4..7, but this simulation holds worlds "
            "5..8; pass the simulation make_sim() built on this rank"
        )
        swapped, missing = result["swapped"], result["missing"]
        assert swapped["unchanged"] and missing["unchanged"]
        assert swapped["error"].startswith("distributed checkpoint not loaded, no rank changed: rank 0: ")
        assert "holds the worlds from 4 on, where this rank's start at 0" in swapped["error"]
        assert (
            "rank 1: " in swapped["error"]
            and "holds the worlds from 0 on, where this rank's start at 4" in swapped["error"]
        )
        assert "rank 0" not in missing["error"] and "rank 1: no saved state at" in missing["error"]
    assert results[0]["swapped"]["error"] == results[1]["swapped"]["error"]

    # Saved over 2 ranks, resumed in one process of all 8 worlds: each rank's rows where they belong, and every world
    # goes on as it did on its rank (the state after 40 more steps, saved by the ranks and joined the same way).
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    import envs

    try:
        whole = distributed.make_sim(envs.make("cartpole"), RANKS * WORLDS_PER_RANK, device="cpu", seed=0)
        ctx = distributed.context()
        assert ctx.load(whole, tmp_path / "resplit.npz") == []
        table = np.random.default_rng(5).integers(0, 2, size=(80, RANKS * WORLDS_PER_RANK), dtype=np.int32)
        for t in range(20, 60):
            whole.step({"push": table[t]})
        ended = distributed.make_sim(envs.make("cartpole"), RANKS * WORLDS_PER_RANK, device="cpu", seed=0)
        ctx.load(ended, tmp_path / "after.npz")
        got, want = whole.state_dict()["arrays"], ended.state_dict()["arrays"]
        for key, value in want.items():
            np.testing.assert_array_equal(got[key], value, err_msg=key)
        assert whole.state_dict()["seed"] == 3
        # Files of one rank gone, or of two runs of other sizes, are refused, naming them.
        (tmp_path / "after.rank1-of-2.npz").unlink()
        with pytest.raises(ecs.StateDictError, match=r"saved over 2 ranks, but the files of ranks \[1\] are missing"):
            ctx.load(ended, tmp_path / "after.npz")
        for rank in range(RANKS):  # rank 0's file twice: not the files of one run
            (tmp_path / f"mixed.rank{rank}-of-2.npz").write_bytes((tmp_path / "resplit.rank0-of-2.npz").read_bytes())
        with pytest.raises(ecs.StateDictError, match=r"its rank files are not of one run"):
            ctx.load(ended, tmp_path / "mixed.npz")
        (tmp_path / "resplit.rank0-of-4.npz").write_bytes((tmp_path / "resplit.rank0-of-2.npz").read_bytes())
        with pytest.raises(ecs.StateDictError, match=r"saved by runs of 2 ranks, 4 ranks; keep the files of one run"):
            ctx.load(ended, tmp_path / "resplit.npz")
    finally:
        distributed.shutdown()


def test_dist_bench_two_ranks(rollouts):
    args = ["-m", "ecs", "dist-bench", "cartpole", "--device", "cpu", "--num-worlds", "8", "--steps", "20"]
    out = run([*args, "--repeats", "3"], ranks=RANKS).stdout
    assert "cartpole: 8 worlds on 2 rank(s) (gloo), 4 per rank; median of 3 windows of 20 steps" in out, out
    rows = re.findall(r"^\s+(\d)\s+cpu\s+4\s+(\d+)\s+([\d,]+)\s+([\d.]+)$", out, re.MULTILINE)
    assert [(r[0], r[1]) for r in rows] == [("0", "0"), ("1", "4")], out
    agg = re.search(r"^aggregate: ([\d,]+) world-steps/s \(([\d,]+) world-steps / ([\d.]+) s of the slowest", out, re.M)
    assert agg is not None, out
    assert agg.group(2) == "160"
    assert out.count("aggregate:") == 1, "only rank 0 logs"
    # An indivisible world count fails on every rank with the numbers named.
    bad = run([*args[:-4], "--num-worlds", "5", "--steps", "5"], ranks=RANKS, returncode=None)
    assert bad.returncode != 0
    assert "error: global_num_worlds 5 is not divisible by the 2 ranks" in bad.stderr, bad.stderr


def test_distributed_ppo_example_two_ranks(rollouts):
    args = ["examples/train_ppo_distributed.py", "--device", "cpu", "--num-worlds", "8", "--rollout-steps", "16"]
    out = run([*args, "--total-steps", "256", "--no-progress"], ranks=RANKS).stdout
    assert "PPO on cartpole: 8 worlds on 2 rank(s) (4 per rank, cpu), 2 updates of 128 world-steps" in out, out
    lines = re.findall(
        r"^update (\d)/2: loss (-?[\d.]+) \(policy (-?[\d.]+), value ([\d.]+), entropy ([\d.]+)\)", out, re.M
    )
    assert [line[0] for line in lines] == ["1", "2"], out
    for line in lines:
        assert 0.0 < float(line[4]) <= np.log(2) + 1e-6  # entropy of a two-action policy
        assert float(line[3]) > 0.0
    assert re.search(r"episodes \d+, mean return [\d.]+, mean length [\d.]+$", out, re.M), out
