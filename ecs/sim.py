"""BatchSim: many worlds of one environment, stepped together by one captured graph replay.

A thin front: it checks arguments and wires the engine's parts together, each of which holds one
concern. ``Storage`` (``ecs.storage``) plans and owns every array; ``TaskGraph`` (``ecs.graph``)
binds the systems; the step program (``ecs.program``) orders the engine's rules and the phases,
for the recorders and the fused generator alike; an executor (``ecs.executors``), chosen once,
runs the calls; ``ErrorFlags`` (``ecs.flags``) brings errors to the host; ``ecs.checkpoint``
saves and restores states; ``ecs.diagnostics`` profiles and hunts NaNs with recorders of its own.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import warp as wp

from . import checkpoint, diagnostics
from . import engine_kernels as ek
from .codegen import load_modules
from .errors import ActionError, EcsError
from .executors import Captured, Eager, Executor, FusedRecorder, Recorder, SplitRecorder, Threaded
from .flags import ErrorFlags, action_error
from .fusion import CPU_BLOCK, why_not_fusable
from .graph import TaskGraph
from .schema import EnvSpec
from .storage import Storage
from .torch_bridge import ActionDict, TorchViews, copy_into

STATE_FORMAT_VERSION = checkpoint.STATE_FORMAT_VERSION


def resolve_device(device: str | None) -> str:
    """``None`` picks ``cuda:0`` when present, else ``cpu``; anything else must name a Warp device."""
    wp.init()
    if device is None:
        return "cuda:0" if wp.is_cuda_available() else "cpu"
    names = [d.alias for d in wp.get_devices()]
    device = str(device)
    if device == "cuda" and "cuda:0" in names:
        device = "cuda:0"
    if device not in names:
        raise EcsError(f"device {device!r} is not available here; available devices: {names}. Pass one of them or None")
    return device


class _Bound:
    """A BatchSim attribute that the engine reads and writes every step: reading it is free, rebinding is refused.

    ``sim.obs = {...}`` would leave the engine writing tensors nobody reads (and ``sim.actions = ...``
    reading tensors nobody writes), so the error says how to write in place instead.
    """

    def __init__(self, slot: str, fix: str) -> None:
        self.slot, self.fix = slot, fix

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, sim: Any, owner: type | None = None) -> Any:
        return self if sim is None else getattr(sim, self.slot)

    def __set__(self, sim: Any, value: Any) -> None:
        raise AttributeError(
            f"sim.{self.name} cannot be rebound: the engine keeps using its own persistent tensors, so the new "
            f"object would be cut off from the simulation. {self.fix}"
        )


class BatchSim:
    """Many worlds of one environment on one device.

    Args:
        env: the environment spec (``envs.make(name)``).
        num_worlds: number of worlds, >= 1.
        device: ``"cpu"``, ``"cuda:N"``, or None for ``cuda:0`` when present, else ``cpu``.
        seed: base seed; world ``w`` of episode ``e`` draws from (seed, world_offset + w, e).
        world_offset: global index of this simulation's world 0 (for runs split across processes).
        capture: capture the step into one graph (default); False launches eagerly, for debugging.
        schedule_seed: run the systems of each phase in a random valid order drawn from this seed,
            to expose order bugs (results must not change).
        params: values for per-world parameters, replacing the env's: one value (shared by all
            worlds) or a sequence (world ``w`` reads entry ``w % len``), e.g. one per world for
            domain randomisation.
        fuse: run each step as one generated kernel (``ecs.fusion``). None fuses when every
            system is a ``@wp.func`` (world-local); True requires it; False never fuses. Fused
            and unfused steps give the same results.
        cpu_threads: on CPU, a fused step runs on this many threads, which share the worlds block
            by block (Warp's CPU backend runs one launch on one core). None uses every core the
            process may run on, up to one thread per 256 worlds, for ``step()`` from 4096 worlds
            and ``run(k)`` from 16384 world-steps per call, and only while they are faster than
            one thread (timed as it runs: on a machine whose other cores are busy they are not).
            An explicit number always uses them.
            Unfused, the world-local raw kernels (``System(world_local=True)``: physics, sensors)
            run on that many threads instead, by default up to one per 16 worlds; the step then
            launches eagerly (Python runs between launches), which costs nothing next to them.
        interleave_worlds: store every table column row by row, row ``r`` of every world side by side
            (``[capacity, num_worlds]`` in memory; ``sim.tables`` and ``sim.tensor`` are strided views indexed
            ``[world, row]`` as ever). Kernels with a thread per world then read adjacent addresses on a GPU,
            where the default layout (each world's rows together) makes every thread of a warp read its own
            cache line. The results are the same bit for bit; which layout is faster is for measurement
            (``python -m ecs gpu-report``). On CPU, one thread steps a world at a time, so the default suits it.

    Raises:
        EcsError: bad arguments, an invalid env spec or task graph, or a simulation that would not
            fit in memory; each message names the problem and the fix.
    """

    obs = _Bound("_obs", "Read sim.obs[key]; keep a copy with .clone().")
    final_obs = _Bound("_final_obs_t", "Read sim.final_obs[key]; keep a copy with .clone().")
    actions = _Bound("_actions", "Write in place: sim.actions[key] = value (checked) or sim.actions[key].copy_(value).")
    rewards = _Bound("_rewards", "Read it; keep a copy with sim.rewards.clone().")
    terminated = _Bound("_terminated", "Read it; keep a copy with .clone().")
    truncated = _Bound("_truncated", "Read it; keep a copy with .clone().")
    params = _Bound("_params_t", "Write in place: sim.params[name] = value (checked).")

    def __init__(
        self,
        env: EnvSpec,
        num_worlds: int,
        *,
        device: str | None = None,
        seed: int = 0,
        world_offset: int = 0,
        capture: bool = True,
        schedule_seed: int | None = None,
        params: Mapping[str, Any] | None = None,
        fuse: bool | None = None,
        cpu_threads: int | None = None,
        interleave_worlds: bool = False,
    ) -> None:
        _check_arguments(env, num_worlds, seed, world_offset, schedule_seed, capture, fuse, cpu_threads)
        if interleave_worlds not in (True, False):
            raise EcsError(f"interleave_worlds must be True or False, got {interleave_worlds!r}")
        env.validate()
        self.env = env
        self.num_worlds = int(num_worlds)
        self.device = resolve_device(device)
        self.seed = int(seed)
        self.world_offset = int(world_offset)
        is_cpu = self.device == "cpu"
        values = _param_values(env, params or {})
        self.storage = Storage(
            env, self.num_worlds, self.device, values, self.seed, self.world_offset, bool(interleave_worlds)
        )
        self.graph = TaskGraph(
            env.systems, self.storage.layout, device_is_cpu=is_cpu, env_name=env.name, num_worlds=self.num_worlds
        )
        capacities = {a.name: a.capacity for a in env.archetypes}
        grow = {a.name: a.grow for a in env.archetypes if a.grow}
        self.flags = ErrorFlags(self.storage.overflow, capacities, self.device, grow)
        reason = why_not_fusable(self.graph, env)
        if fuse and reason is not None:
            raise EcsError(f"env {env.name!r} cannot be fused: {reason}. Pass fuse=None or fuse=False")
        parts = (self.storage, self.graph, self.flags, ek.generate(self.storage))
        fused = fuse is not False and reason is None
        chunks = _chunks(self.num_worlds, is_cpu, fused, cpu_threads)
        split = not fused and len(chunks) > 1 and any(t.system.world_local for t in self.graph.tasks)
        if fused:
            recorder: Recorder = FusedRecorder(*parts, env=env, schedule_seed=schedule_seed, dim_context=self)
        elif split:
            recorder = SplitRecorder(*parts, chunks=chunks, schedule_seed=schedule_seed, dim_context=self)
        else:
            recorder = Recorder(*parts, schedule_seed=schedule_seed, dim_context=self)
        self._views = TorchViews(self.storage)
        self._obs = self._views.obs
        self._final_obs_t = self._views.final_obs
        self._actions = ActionDict(self._views.actions)
        self._rewards = self._views.rewards
        self._terminated = self._views.terminated
        self._truncated = self._views.truncated
        self._params_t = self._views.params
        self._last_k = 1
        self._validated = ("step()", 0)  # the call whose actions the last validation read
        load_modules(recorder.module_variants(), self.device)
        self.executor: Executor = _choose_executor(recorder, capture, chunks, cpu_threads)
        self.reset()

    # -- public API --------------------------------------------------------------------------

    @property
    def tables(self) -> dict[str, dict[str, wp.array]]:
        """``{archetype: {column: wp.array [num_worlds, capacity, *shape]}}``, engine columns included."""
        return self.storage.tables

    @property
    def singletons(self) -> dict[str, wp.array]:
        """``{name: wp.array [num_worlds, *shape]}``, the engine's singletons included."""
        return self.storage.singletons

    @property
    def overflow(self) -> dict[str, wp.array]:
        """``{archetype: wp.array [failed spawns, first failing world]}``, cleared when raised."""
        return self.storage.overflow

    def step(self, actions: Mapping[str, Any] | None = None) -> None:
        """Advances every world by one step (one graph replay; no allocation, no host sync).

        Args:
            actions: optional ``{key: tensor}`` copied into ``sim.actions`` first (validated).

        Raises:
            ActionError: an action was out of range or not finite. On CPU this step() raises it;
                on CUDA the next step() (or ``check()``) does. No world was advanced.
            CapacityError: a spawn found its archetype full.
        """
        if actions is not None:
            self.actions.update(actions)
        cpu = self.device == "cpu"
        if not cpu:
            self.raise_pending()
        self._validated = ("step()", 0)
        self.executor.step()
        if cpu:
            self.raise_pending()

    @property
    def fused(self) -> bool:
        """Whether each step runs as one generated kernel (see ``fuse=``)."""
        return self.executor.recorder.fused

    @property
    def step_bytes(self) -> tuple[int, int] | None:
        """Bytes a fused step reads and writes per world, or None when not fused.

        They are the singletons the step carries or writes and every row of the entity columns its
        systems touch; not parameters (often one shared value) nor final observations (written only
        when an episode ends). The action check before the step reads the actions once more.
        """
        if not self.fused:
            return None
        fused = self.executor.recorder.kernel
        return fused.read_bytes, fused.write_bytes

    def run(self, k: int, actions: Mapping[str, Any] | None = None) -> None:
        """Advances every world by ``k`` steps in one graph replay (one kernel launch when fused).

        Args:
            k: number of steps, >= 1.
            actions: None holds ``sim.actions`` constant for all k steps; or ``{key: tensor}`` with
                a leading axis of k (``[k, num_worlds, ...]``), step i using entry i. Staging
                buffers grow (and the run graph is captured again) only when k exceeds every
                earlier k.

        Afterwards ``obs``, ``rewards``, ``terminated`` and ``truncated`` describe the last step;
        episodes that end inside the run are reset in place, as with ``step()``. Every action
        of every step is validated before the first step; one invalid value skips the whole run.
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise EcsError(f"run(k): k must be an int >= 1, got {k!r}")
        k = int(k)
        per_step = actions is not None
        if per_step:
            self._stage_actions(k, actions)
        cpu = self.device == "cpu"
        if not cpu:
            self.raise_pending()
        self._validated = (f"run({k}, actions)", k) if per_step else (f"run({k})", 0)
        if k != self._last_k:
            self.executor.recorder.run_k.fill_(k)
            self._last_k = k
        self.executor.run(k, per_step)
        if cpu:
            self.raise_pending()

    def _stage_actions(self, k: int, actions: Mapping[str, Any]) -> None:
        keys = set(self.storage.action_keys)
        if set(actions) != keys:
            raise ActionError(f"run(k, actions) needs exactly the keys {sorted(keys)}, got {sorted(actions)}")
        checked = {key: self.actions.checked(key, value, steps=k) for key, value in actions.items()}
        if self.storage.grow_staging(k):
            self._views.restage()
            self.executor.staged(k)
        for key, value in checked.items():
            copy_into(self._views.staging[key][:k], value)

    def reset(self, mask: Any = None) -> None:
        """Resets every world, or the worlds where ``mask`` (bool, ``[num_worlds]``) is true."""
        self._views.request_reset(mask)
        self.executor.reset()
        if self.device == "cpu":
            self.raise_pending()

    def reseed(self, seed: int) -> None:
        """Draws every later episode from ``seed``, restarts the episode counters and resets every world.

        Afterwards world ``w`` draws the random numbers of a freshly built ``BatchSim`` with this seed
        and world offset (episode 0 first), so its trajectory under the same actions is the same.
        """
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**31:
            raise EcsError(f"seed must be an int in [0, 2**31), got {seed!r}")
        self.seed = int(seed)
        self.storage.seed.assign(np.array([self.seed], dtype=np.int32))
        self.singletons["episode"].fill_(-1)
        self.reset()

    def check(self) -> None:
        """Synchronises with the device and raises any pending ActionError or CapacityError."""
        self.flags.sync()
        self.raise_pending()

    def raise_pending(self) -> None:
        """Raises an ActionError or CapacityError that an earlier call left in the host flags, without a sync.

        On CUDA these are the flags of the last step that finished; ``check()`` waits for the device first.
        """
        self.flags.raise_pending(self._action_error)

    def _action_error(self, count: int) -> ActionError:
        call, staged = self._validated
        views = self._views.staging if staged else self.actions
        values = {key: (v[:staged] if staged else v[None]).cpu().numpy() for key, v in views.items()}
        return action_error(self.env, call, count, values, staged=bool(staged))

    def tensor(self, archetype: str, component: str):
        """Zero-copy torch view of a column, ``[num_worlds, capacity, *shape]``.

        ``tensor("world", name)`` gives a singleton, ``[num_worlds, *shape]``.
        """
        return self._views.column(archetype, component)

    @property
    def observation_space(self):
        """Gymnasium ``Dict`` space of one world's observations."""
        return self._views.observation_space()

    @property
    def action_space(self):
        """Gymnasium ``Dict`` space of one world's actions."""
        return self._views.action_space()

    def memory(self) -> dict[str, int]:
        """Bytes allocated per archetype column, singleton and engine buffer."""
        return self.storage.memory()

    # -- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The full simulation state as numpy arrays plus metadata; restoring it continues bit-identically."""
        self.check()
        return checkpoint.state_of(self.storage, seed=self.seed, world_offset=self.world_offset)

    def load_state_dict(self, state: Mapping[str, Any]) -> list[str]:
        """Restores ``state_dict()`` output. Everything is checked before anything is written.

        Returns:
            The arrays of a state saved by an earlier engine that were brought across to their present form by
            their components' ``upgrade`` (``ecs.zeros_if_missing``, ``ecs.zero_padded``), by their names in
            ``state_dict()["arrays"]``; empty for a state of this engine.
        """
        return self.load_checked_state(checkpoint.check_state(self.storage, state))

    def load_checked_state(self, checked: checkpoint.CheckedState) -> list[str]:
        """The second half of ``load_state_dict``: writes a state that ``ecs.checkpoint.check_state(sim.storage,
        state)`` passed for this simulation, and returns what it upgraded. For callers that check the states of
        several simulations before writing any (``ecs.distributed``'s ``load``)."""
        checkpoint.write_state(self.storage, checked)
        self.seed, self.world_offset = checked.seed, checked.world_offset
        self.flags.clear()
        return checked.upgraded

    def save(self, path: str | os.PathLike) -> None:
        """Writes ``state_dict()`` to ``path`` atomically (a temporary file beside it, then a rename).

        A crash while saving leaves the previous file intact.
        """
        checkpoint.save_state(self.state_dict(), path)

    def load(self, path: str | os.PathLike) -> list[str]:
        """Restores a file written by ``save``; checked like ``load_state_dict``, nothing changes on error.

        Returns:
            The arrays brought across from an earlier form, as ``load_state_dict`` returns them.
        """
        return self.load_state_dict(checkpoint.load_state(path))

    # -- diagnostics -------------------------------------------------------------------------

    def find_nan(self, steps: int = 1, *, bounds: Mapping[str, tuple[float, float]] | None = None) -> None:
        """Runs ``steps`` eager steps, checking after every system each column it touches.

        Float columns must stay finite; ``bounds`` adds ranges, keyed like ``state_dict()["arrays"]``
        (``"table/body/position": (-20, 20)``, ``"singleton/cart_position": (-3, 3)``; live rows
        only for tables). A debugging mode: much slower than ``step()``. The first bad value
        raises ``EcsError`` naming the system, the column, the index and the world; the simulation
        is left as it was at that point (mid-step). Returns quietly when every value is fine.
        """
        diagnostics.find_nan(self, steps, bounds)

    def profile(self, steps: int = 100):
        """Times every system over ``steps`` eager steps; the simulation state is restored afterwards.

        Returns:
            ``Profile``: a tree of phases and systems with mean time per step and share of the step;
            ``print()`` it. The captured step's mean wall time is measured separately.
        """
        return diagnostics.profile(self, steps)

    def __reduce__(self):
        """Refuses pickling: a live simulation holds device memory and captured graphs."""
        raise TypeError(
            f"a BatchSim ({self.env.name!r}, {self.num_worlds} worlds on {self.device}) cannot be pickled: it holds "
            "device arrays and captured graphs. Build the BatchSim inside the worker process instead (pass "
            "envs.make(...) arguments, not the sim); to run more environments, raise num_worlds rather than "
            "concatenating vector envs in subprocesses; to copy the state, use sim.state_dict() or sim.save(path)"
        )


def _check_arguments(
    env: Any, num_worlds: Any, seed: Any, world_offset: Any, schedule_seed: Any, capture: Any, fuse: Any, threads: Any
) -> None:
    if not isinstance(env, EnvSpec):
        raise EcsError(f"env must be an ecs.EnvSpec (from envs.make(name)), got {type(env).__name__}")
    if isinstance(num_worlds, bool) or not isinstance(num_worlds, (int, np.integer)) or num_worlds < 1:
        raise EcsError(f"num_worlds must be an int >= 1, got {num_worlds!r}")
    for label, value in (("seed", seed), ("world_offset", world_offset)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < 2**31:
            raise EcsError(f"{label} must be an int in [0, 2**31), got {value!r}")
    if world_offset + num_worlds > 2**31:
        raise EcsError(f"world_offset + num_worlds = {world_offset + num_worlds} exceeds 2**31 global worlds")
    if schedule_seed is not None and (
        isinstance(schedule_seed, bool) or not isinstance(schedule_seed, (int, np.integer)) or schedule_seed < 0
    ):
        raise EcsError(f"schedule_seed must be None or an int >= 0, got {schedule_seed!r}")
    for label, value, allowed in (("capture", capture, (True, False)), ("fuse", fuse, (None, True, False))):
        if not any(value is a for a in allowed):
            raise EcsError(f"{label} must be one of {allowed}, got {value!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise EcsError(f"cpu_threads must be None or an int >= 1, got {threads!r}")


def _param_values(env: EnvSpec, overrides: Mapping[str, Any]) -> dict[str, np.ndarray]:
    declared = {p.name: p for p in env.params}
    unknown = sorted(set(overrides) - set(declared))
    if unknown:
        raise EcsError(f"unknown parameter(s) {unknown} for env {env.name!r}; parameters: {sorted(declared)}")
    values = {name: p.value for name, p in declared.items()}
    for name, value in overrides.items():
        values[name] = dataclasses.replace(declared[name], value=value).value
    return values


def _chunks(num_worlds: int, is_cpu: bool, fused: bool, cpu_threads: int | None) -> list[tuple[int, int]]:
    """Worlds per CPU thread: ``cpu_threads`` of them, or by default every usable core, up to one
    per 256 worlds for a fused step (cheap per world) and one per 16 for unfused systems."""
    threads = 1
    if is_cpu:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        per_thread = CPU_BLOCK if fused else 16
        threads = cpu_threads if cpu_threads is not None else max(1, min(cores, num_worlds // per_thread))
        threads = min(threads, num_worlds)
    bounds = np.linspace(0, num_worlds, threads + 1).astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


def _choose_executor(
    recorder: Recorder, capture: bool, chunks: list[tuple[int, int]], cpu_threads: int | None
) -> Executor:
    """Captured or eager; on CPU, threads for a fused step over enough worlds, and an eager
    executor for a recorder that splits world-local kernels (it runs Python between launches)."""
    if isinstance(recorder, SplitRecorder):
        if recorder.splits:
            return Eager(recorder)
        recorder.close()  # nothing to split after all (e.g. per-world parameters of another length)
        recorder = recorder.variant(Recorder)
    executor: Executor = Captured(recorder) if capture else Eager(recorder)
    if not recorder.fused or len(chunks) <= 1:
        return executor
    # A threaded call pays a hand-off (about 12 us on a 2-core VM with the other core free), so by
    # default threads serve step() from 4096 worlds and run(k) from 16384 world-steps per call,
    # and only while they are faster (on a machine whose other cores are busy they are not).
    W, explicit = recorder.num_worlds, cpu_threads is not None
    return Threaded(
        executor,
        len(chunks),
        threaded_step=explicit or W >= 4096,
        run_min=1 if explicit else 16384,
        adaptive=not explicit,
    )
