"""Scale-out with ``torch.distributed``: one ``BatchSim`` per rank, statistics reduced with ``all_reduce``.

Launch one process per GPU with ``torchrun`` (which sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``)::

    torchrun --standalone --nproc-per-node=gpu -m ecs dist-bench cartpole --num-worlds 65536

and in the program::

    sim = ecs.distributed.make_sim(envs.make("cartpole"), global_num_worlds=65536, seed=0)
    ctx = ecs.distributed.context()  # rank, world_size, local_rank, device, world_offset, ...

A global world count ``G`` split over ``R`` ranks gives every rank ``N = G / R`` worlds, and rank ``r``
simulates the global worlds ``r * N .. r * N + N - 1`` (``BatchSim(world_offset=r * N)``). Random
numbers are keyed by the global world index, so world ``i`` of rank ``r`` follows exactly the
trajectory of world ``r * N + i`` of a single-process run with ``G`` worlds, given the same actions.

The process group uses NCCL when the simulation runs on CUDA and gloo on the CPU; reduction
tensors live on the rank's GPU for NCCL and on the CPU for gloo. Without ``torchrun`` (no
``WORLD_SIZE`` in the environment) everything runs as a single rank and no process group is made.

torch is imported inside functions only: importing ``ecs`` never imports torch.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import glob
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import warp as wp

from .errors import EcsError

if TYPE_CHECKING:
    import torch

    from .schema import EnvSpec
    from .sim import BatchSim

_BACKENDS = ("nccl", "gloo")
_context: DistContext | None = None
_owns_group = False


@dataclass(frozen=True)
class EpisodeStats:
    """Episode statistics summed over every rank.

    Attributes:
        episodes: episodes that ended.
        return_sum: sum of their undiscounted returns.
        length_sum: sum of their lengths [steps].
    """

    episodes: int
    return_sum: float
    length_sum: int

    @property
    def mean_return(self) -> float:
        """Mean return of the ended episodes (NaN when none ended)."""
        return self.return_sum / self.episodes if self.episodes else float("nan")

    @property
    def mean_length(self) -> float:
        """Mean length of the ended episodes [steps] (NaN when none ended)."""
        return self.length_sum / self.episodes if self.episodes else float("nan")


@dataclass(frozen=True)
class Throughput:
    """World-steps per second of one timed window over every rank.

    The aggregate rate is the total of world-steps over all ranks divided by the wall time of the
    slowest rank over the same window (started after a barrier); it is never a sum of per-rank
    rates, which would credit fast ranks for time they spent waiting for slow ones.

    Attributes:
        world_steps: world-steps of all ranks together.
        elapsed_s: the longest rank's wall time [s].
        rank_world_steps: world-steps of each rank, indexed by rank.
        rank_elapsed_s: wall time of each rank [s], indexed by rank.
    """

    world_steps: int
    elapsed_s: float
    rank_world_steps: tuple[int, ...] = field(default=())
    rank_elapsed_s: tuple[float, ...] = field(default=())

    @property
    def rate(self) -> float:
        """Aggregate world-steps per second: ``world_steps / elapsed_s``."""
        return self.world_steps / self.elapsed_s

    @property
    def rank_rates(self) -> tuple[float, ...]:
        """Each rank's own world-steps per second."""
        return tuple(s / t for s, t in zip(self.rank_world_steps, self.rank_elapsed_s, strict=True))


def combine_throughput(rank_world_steps: Sequence[int], rank_elapsed_s: Sequence[float]) -> Throughput:
    """The aggregate of per-rank world-steps and wall times: total world-steps over the longest time.

    Raises:
        EcsError: empty or mismatched inputs, negative steps or a non-positive time.
    """
    steps, times = [int(s) for s in rank_world_steps], [float(t) for t in rank_elapsed_s]
    if not steps or len(steps) != len(times):
        raise EcsError(f"need one world-step count and one time per rank, got {len(steps)} and {len(times)}")
    if min(steps) < 0 or not min(times) > 0:
        raise EcsError(f"world-steps must be >= 0 and times > 0, got steps {steps} and times {times}")
    return Throughput(sum(steps), max(times), tuple(steps), tuple(times))


@dataclass
class Window:
    """A timed window; ``elapsed_s`` is set when the ``with`` block ends."""

    elapsed_s: float = float("nan")


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the distributed run.

    Attributes:
        rank: global rank, ``0 <= rank < world_size``.
        world_size: number of ranks (processes).
        local_rank: rank on this node; picks the GPU ``cuda:{local_rank}``.
        device: the Warp device of this rank's simulation (``"cpu"`` or ``"cuda:N"``).
        backend: the process group backend (``"nccl"`` or ``"gloo"``), or None for a single
            process launched without torchrun.
        global_num_worlds: worlds over all ranks.
        num_worlds: worlds of this rank, ``global_num_worlds // world_size``.
        world_offset: global index of this rank's world 0, ``rank * num_worlds``.
    """

    rank: int
    world_size: int
    local_rank: int
    device: str
    backend: str | None
    global_num_worlds: int
    num_worlds: int
    world_offset: int

    @property
    def is_main(self) -> bool:
        """True on rank 0, the rank that logs."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True when a process group exists (launched by torchrun)."""
        return self.backend is not None

    def comm_device(self) -> torch.device:
        """The torch device reduction tensors live on: the rank's GPU for NCCL, else the CPU."""
        import torch

        return torch.device(self.device) if self.backend == "nccl" else torch.device("cpu")

    def log(self, *args: Any) -> None:
        """Prints from rank 0 only."""
        if self.is_main:
            print(*args, flush=True)

    def barrier(self) -> None:
        """Waits until every rank gets here (a no-op for a single process)."""
        if not self.distributed:
            return
        import torch.distributed as dist

        if self.backend == "nccl":
            dist.barrier(device_ids=[int(self.device.split(":")[1])])
        else:
            dist.barrier()

    def _all_reduce(self, values: torch.Tensor, op: str) -> torch.Tensor:
        if self.distributed:
            import torch.distributed as dist

            dist.all_reduce(values, op=getattr(dist.ReduceOp, op))
        return values

    def _all_gather(self, values: torch.Tensor) -> list[torch.Tensor]:
        if not self.distributed:
            return [values]
        import torch.distributed as dist

        out = [values.clone() for _ in range(self.world_size)]
        dist.all_gather(out, values)
        return out

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (any picklable object), indexed by rank, on every rank."""
        if not self.distributed:
            return [value]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, value)
        return out

    def reduce_steps(self, world_steps: int | torch.Tensor) -> int:
        """Sum of world-step counts over every rank (int64)."""
        import torch

        t = torch.as_tensor(world_steps, dtype=torch.int64).reshape(1).to(self.comm_device())
        return int(self._all_reduce(t, "SUM").item())

    def reduce_episode_stats(
        self,
        episodes: int | torch.Tensor,
        return_sum: float | torch.Tensor,
        length_sum: int | torch.Tensor,
    ) -> EpisodeStats:
        """Sums this rank's ended episodes, their returns and their lengths over every rank.

        Counts are reduced as int64, returns as float64. Arguments may be numbers or 0-d tensors
        on any device (tensors on the GPU stay there until the result is read).
        """
        import torch

        dev = self.comm_device()
        counts = torch.stack([torch.as_tensor(x, dtype=torch.int64).to(dev) for x in (episodes, length_sum)])
        returns = torch.as_tensor(return_sum, dtype=torch.float64).reshape(1).to(dev)
        self._all_reduce(counts, "SUM")
        self._all_reduce(returns, "SUM")
        counts = counts.cpu()
        return EpisodeStats(int(counts[0]), float(returns.item()), int(counts[1]))

    def throughput(self, world_steps: int, elapsed_s: float) -> Throughput:
        """The aggregate throughput of one window: world-steps summed, elapsed time reduced with MAX.

        Every rank must call it for the same window (see ``window()``); each gets the same result.
        """
        import torch

        dev = self.comm_device()
        total = torch.tensor([world_steps], dtype=torch.int64, device=dev)
        longest = torch.tensor([elapsed_s], dtype=torch.float64, device=dev)
        self._all_reduce(total, "SUM")
        self._all_reduce(longest, "MAX")
        rows = torch.stack(
            self._all_gather(torch.tensor([float(world_steps), elapsed_s], dtype=torch.float64, device=dev))
        )
        rows = rows.cpu()
        return Throughput(
            int(total.item()),
            float(longest.item()),
            tuple(int(s) for s in rows[:, 0].tolist()),
            tuple(float(t) for t in rows[:, 1].tolist()),
        )

    def state_path(self, path: str | os.PathLike) -> str:
        """This rank's file of the distributed checkpoint ``path``: ``run.npz`` -> ``run.rank1-of-4.npz``."""
        root, ext = os.path.splitext(os.fspath(path))
        return f"{root}.rank{self.rank}-of-{self.world_size}{ext or '.npz'}"

    def _sim_problem(self, sim: BatchSim) -> str | None:
        if sim.world_offset == self.world_offset and sim.num_worlds == self.num_worlds:
            return None
        return (
            f"rank {self.rank} simulates worlds {self.world_offset}..{self.world_offset + self.num_worlds - 1}, "
            f"but this simulation holds worlds {sim.world_offset}..{sim.world_offset + sim.num_worlds - 1}; "
            "pass the simulation make_sim() built on this rank"
        )

    def _refused(self, problem: str | None) -> str | None:
        """Every rank's problem gathered (each rank must call this, so none waits on one that raised alone): the
        ranks that have one and why, or None."""
        refused = [(rank, p) for rank, p in enumerate(self.gather(problem)) if p is not None]
        return "; ".join(f"rank {rank}: {p}" for rank, p in refused) or None

    def save(self, sim: BatchSim, path: str | os.PathLike) -> str:
        """Saves this rank's simulation to its file of ``path`` (``state_path``, atomically, as ``sim.save``) and
        waits until every rank has saved; returns the file. Call it on every rank.

        Raises:
            EcsError: on every rank, where some rank's ``sim`` is not its simulation (other worlds); none saves.
        """
        refused = self._refused(self._sim_problem(sim))
        if refused:
            raise EcsError(f"distributed checkpoint not saved: {refused}")
        file = self.state_path(path)
        sim.save(file)
        self.barrier()
        return file

    def load(self, sim: BatchSim, path: str | os.PathLike) -> list[str]:
        """Loads every rank's file of ``path`` (``state_path``) into its simulation, or none. Each rank first reads
        and checks its own file, as ``sim.load`` does, and that it holds this rank's worlds (a file of another rank,
        or of a run that split its worlds otherwise, would silently duplicate worlds); where any rank's is refused,
        every rank raises the same ``StateDictError``, naming each such rank and why, and no simulation changes.
        Call it on every rank.

        Where ``path`` was saved over another number of ranks (no file of this run's number exists, one complete set
        of another does), each rank takes its worlds from the files that hold them: a run goes on over more or fewer
        GPUs, each world as it would have (its random numbers follow its global index), given the same world count.

        Returns:
            The arrays brought across from an earlier form, as ``sim.load_state_dict`` returns them.

        Raises:
            StateDictError: on every rank, where some rank's file is missing, damaged or not for its simulation, or
                its ``sim`` is not its simulation.
        """
        from . import checkpoint
        from .errors import StateDictError

        file = self.state_path(path)
        checked, problem = None, self._sim_problem(sim)
        try:
            if problem is not None:
                raise StateDictError(problem)
            saved_by = _saved_world_sizes(path)
            if saved_by and self.world_size not in saved_by:
                state = self._resplit(path, saved_by)
            else:
                state = checkpoint.load_state(file)
            offset = state.get("world_offset")
            if offset != self.world_offset:
                raise StateDictError(
                    f"{file!r} holds the worlds from {offset!r} on, where this rank's start at {self.world_offset}: "
                    "it was saved by another rank, or by a run that split its worlds otherwise"
                )
            checked = checkpoint.check_state(sim.storage, state)
        except StateDictError as e:
            problem = str(e)
        except Exception as e:  # any failure is gathered, so no rank waits on one that raised alone
            problem = f"{type(e).__name__}: {e}"
        refused = self._refused(problem)
        if refused or checked is None:
            raise StateDictError(f"distributed checkpoint not loaded, no rank changed: {refused}")
        upgraded = sim.load_checked_state(checked)
        self.barrier()
        return upgraded

    def _resplit(self, path: str | os.PathLike, saved_by: dict[int, dict[int, str]]) -> dict[str, Any]:
        """This rank's worlds of a checkpoint saved over another number of ranks: the rows of each rank file that
        hold them, joined along the world axis (tables, singletons, final observations, per-world parameters);
        shared parameters and the spawn-overflow flags, the same in every file, once."""
        import numpy as np

        from . import checkpoint
        from .errors import StateDictError

        if len(saved_by) > 1:
            sizes = ", ".join(f"{r} ranks" for r in sorted(saved_by))
            raise StateDictError(f"{os.fspath(path)!r} was saved by runs of {sizes}; keep the files of one run only")
        ((ranks, files),) = saved_by.items()
        missing = [r for r in range(ranks) if r not in files]
        if missing:
            raise StateDictError(
                f"{os.fspath(path)!r} was saved over {ranks} ranks, but the files of ranks {missing} are missing"
            )
        lo, hi = self.world_offset, self.world_offset + self.num_worlds
        states = [checkpoint.load_state(files[r]) for r in range(ranks)]
        n = states[0].get("num_worlds")
        if not isinstance(n, int) or n * ranks != self.global_num_worlds:
            raise StateDictError(
                f"{os.fspath(path)!r} holds {n!r} worlds on each of {ranks} ranks, where this run has "
                f"{self.global_num_worlds} worlds in all; resume it with as many worlds"
            )
        meta = [{k: v for k, v in st.items() if k not in ("arrays", "world_offset")} for st in states]
        if any(m != meta[0] for m in meta) or [st.get("world_offset") for st in states] != list(range(0, ranks * n, n)):
            raise StateDictError(
                f"{os.fspath(path)!r}: its rank files are not of one run (their env, config, seed or world offsets "
                "differ); keep the files of one run only"
            )
        pieces = [(s, max(lo, r * n) - r * n, min(hi, r * n + n) - r * n) for r, s in enumerate(states)]
        pieces = [(s, a, b) for s, a, b in pieces if a < b]
        arrays: dict[str, Any] = {}
        for key, first in states[0]["arrays"].items():
            if checkpoint.per_world(key, first, n):
                arrays[key] = np.concatenate([np.asarray(s["arrays"][key])[a:b] for s, a, b in pieces])
                continue
            if any(not np.array_equal(s["arrays"].get(key), first) for s in states):
                raise StateDictError(f"{os.fspath(path)!r}: the rank files disagree on {key!r}, which they share")
            arrays[key] = first
        return {**states[0], "num_worlds": self.num_worlds, "world_offset": lo, "arrays": arrays}

    @contextlib.contextmanager
    def window(self) -> Iterator[Window]:
        """Times a block on this rank: a barrier and a device sync first, a device sync at the end.

        Starting after a barrier puts every rank's window over the same span of time, so the
        longest ``elapsed_s`` is the wall time of the whole run's window.
        """
        w = Window()
        wp.synchronize_device(self.device)
        self.barrier()
        t0 = time.perf_counter()
        yield w
        wp.synchronize_device(self.device)
        w.elapsed_s = time.perf_counter() - t0


def _saved_world_sizes(path: str | os.PathLike) -> dict[int, dict[int, str]]:
    """The rank files of the distributed checkpoint ``path`` that exist: ``{world size: {rank: file}}``."""
    root, ext = os.path.splitext(os.fspath(path))
    found: dict[int, dict[int, str]] = {}
    pattern = re.compile(re.escape(os.path.basename(root)) + r"\.rank(\d+)-of-(\d+)" + re.escape(ext or ".npz") + "$")
    for file in glob.glob(glob.escape(root) + ".rank*-of-*" + glob.escape(ext or ".npz")):
        m = pattern.match(os.path.basename(file))
        if m and int(m.group(1)) < int(m.group(2)):
            found.setdefault(int(m.group(2)), {})[int(m.group(1))] = file
    return found


def _env_int(name: str, default: int | None) -> int:
    text = os.environ.get(name)
    if text is None:
        if default is None:
            raise EcsError(f"environment variable {name} is not set; launch with torchrun, which sets it")
        return default
    try:
        return int(text)
    except ValueError:
        raise EcsError(f"environment variable {name} must be an integer, got {text!r}") from None


def split_worlds(global_num_worlds: int, world_size: int, rank: int) -> tuple[int, int]:
    """``(num_worlds, world_offset)`` of ``rank`` when ``global_num_worlds`` are split over ``world_size`` ranks.

    Raises:
        EcsError: a world count below the rank count, or one the rank count does not divide.
    """
    G, R = global_num_worlds, world_size
    if isinstance(G, bool) or not isinstance(G, int) or G < 1:
        raise EcsError(f"global_num_worlds must be an int >= 1, got {G!r}")
    if not isinstance(R, int) or R < 1 or not 0 <= rank < R:
        raise EcsError(f"rank {rank} of world size {R} is not a valid rank; need 0 <= rank < world size")
    if G % R:
        lower, upper = G // R * R, (G // R + 1) * R
        hint = f"{lower} or {upper}" if lower else f"{upper}"
        raise EcsError(
            f"global_num_worlds {G} is not divisible by the {R} ranks (each rank simulates the same number of "
            f"worlds); pass a multiple of {R}, e.g. {hint}"
        )
    n = G // R
    return n, rank * n


def _pick_device(device: str | None, local_rank: int) -> str:
    wp.init()
    count = wp.get_cuda_device_count()
    if device is None:
        device = "cuda" if count else "cpu"
    device = str(device)
    if device == "cpu":
        return device
    if device == "cuda":
        device = f"cuda:{local_rank}"
    if not device.startswith("cuda:") or not device[5:].isdigit():
        raise EcsError(f"device must be None, 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    index = int(device[5:])
    if index >= count:
        fix = f"start at most {count} processes per node (--nproc-per-node={count}) or " if count else ""
        raise EcsError(
            f"local rank {local_rank} needs {device}, but this machine has {count} CUDA device(s); {fix}pass "
            "device='cpu'"
        )
    return device


def init(
    global_num_worlds: int,
    *,
    device: str | None = None,
    backend: str | None = None,
    timeout_s: float | None = None,
) -> DistContext:
    """Joins the process group torchrun describes and works out this rank's device and worlds.

    Args:
        global_num_worlds: worlds over all ranks; must be a multiple of the rank count.
        device: None for ``cuda:{local_rank}`` when CUDA is present, else ``cpu``; ``"cuda"`` for
            ``cuda:{local_rank}``; ``"cpu"``; or an explicit ``"cuda:N"``.
        backend: ``"nccl"`` or ``"gloo"``; None picks NCCL for CUDA and gloo for the CPU.
        timeout_s: collective timeout in seconds (torch's default when None).

    Returns:
        The context, also kept for ``context()``. A process group made by an earlier call is reused.

    Raises:
        EcsError: a bad or missing torchrun variable, a world count the rank count does not divide,
            a local rank without a matching GPU, or NCCL asked for on the CPU.
    """
    global _context, _owns_group
    launched = "WORLD_SIZE" in os.environ
    world_size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0 if not launched else None)
    local_rank = _env_int("LOCAL_RANK", rank)
    num_worlds, offset = split_worlds(global_num_worlds, world_size, rank)
    dev = _pick_device(device, local_rank)
    if backend is None:
        backend = "gloo" if dev == "cpu" else "nccl"
    if backend not in _BACKENDS:
        raise EcsError(f"backend must be one of {_BACKENDS} or None, got {backend!r}")
    if backend == "nccl" and dev == "cpu":
        raise EcsError("backend 'nccl' needs CUDA devices; use backend='gloo' (the default) for device='cpu'")

    if launched:
        import torch
        import torch.distributed as dist

        if not dist.is_initialized():
            missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
            if missing:
                raise EcsError(f"environment variables {missing} are not set; launch with torchrun, which sets them")
            if backend == "nccl":
                torch.cuda.set_device(int(dev.split(":")[1]))
            kwargs: dict[str, Any] = {}
            if timeout_s is not None:
                kwargs["timeout"] = datetime.timedelta(seconds=timeout_s)
            dist.init_process_group(backend=backend, init_method="env://", world_size=world_size, rank=rank, **kwargs)
            _owns_group = True
        else:
            backend = dist.get_backend()
    else:
        backend = None
    _context = DistContext(rank, world_size, local_rank, dev, backend, int(global_num_worlds), num_worlds, offset)
    return _context


def context() -> DistContext:
    """The context of the last ``init()`` (or ``make_sim()``).

    Raises:
        EcsError: neither has been called in this process.
    """
    if _context is None:
        raise EcsError("no distributed context yet; call ecs.distributed.init() or make_sim() first")
    return _context


def make_sim(
    env: EnvSpec,
    global_num_worlds: int,
    *,
    device: str | None = None,
    seed: int = 0,
    backend: str | None = None,
    **kwargs: Any,
) -> BatchSim:
    """This rank's ``BatchSim``: ``global_num_worlds / world_size`` worlds at offset ``rank * num_worlds``.

    Args:
        env: the environment spec (``envs.make(name)``).
        global_num_worlds: worlds over all ranks.
        device, backend: as for ``init()``.
        seed: the run's seed, the same on every rank (worlds differ by their global index).
        **kwargs: further ``BatchSim`` keywords (``capture``, ``schedule_seed``); not ``world_offset``.

    Raises:
        EcsError: as for ``init()`` and ``BatchSim``.
    """
    from .sim import BatchSim

    if "world_offset" in kwargs:
        raise EcsError("make_sim() sets world_offset from the rank; do not pass it")
    ctx = init(global_num_worlds, device=device, backend=backend)
    return BatchSim(env, ctx.num_worlds, device=ctx.device, seed=seed, world_offset=ctx.world_offset, **kwargs)


def shutdown() -> None:
    """Destroys the process group made by ``init()`` (if any) and forgets the context."""
    global _context, _owns_group
    if _owns_group:
        import torch.distributed as dist

        if dist.is_initialized():
            # Free what still holds the group first (a DDP model in a reference cycle would
            # otherwise be torn down after it, which can abort the process at exit).
            gc.collect()
            dist.destroy_process_group()
        _owns_group = False
    _context = None
