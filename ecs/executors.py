"""Executors: how ``step()``, ``run(k)`` and ``reset()`` reach the device, chosen once per simulation.

A *recorder* turns the step program (``ecs.program``) into launches: ``Recorder`` launches a
kernel per system and engine rule, ``FusedRecorder`` one generated kernel per step (or per run of
k steps). An *executor* decides when those launches happen:

- ``Eager``: every call launches them anew (``capture=False``; debugging).
- ``Captured``: the step, the reset and each kind of run are recorded once into a graph, and
  every call replays it (the default; CUDA graphs on a GPU, Warp's replayed command lists on CPU).
- ``Threaded``: CPU only, fused envs: a call over enough world-steps runs the fused kernel on
  several threads, which share the worlds block by block; smaller calls (and, by default, calls
  for which the threads are not faster) go to the executor it wraps.
- ``Eager`` over a ``SplitRecorder``: CPU only, unfused envs with world-local raw kernels
  (``System(world_local=True)``: physics, sensors): each of those runs on chunks of worlds, one
  thread each, the other launches as they are.

Every executor gives the same results bit for bit (``tests/ecs/test_executors.py`` runs them
side by side). ``ecs.diagnostics`` adds instrumented recorders (timing, NaN checks) built with
``Recorder.variant``; they share the storage and never change the simulation's own executor.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import warp as wp

from . import engine_kernels as ek
from .errors import EcsError
from .fusion import FusedKernel, build_fused
from .graph import TaskGraph
from .program import RESET, STEP, IfEnded, Item, Phases, Rule
from .schema import EnvSpec, Phase
from .storage import INT32_MAX, Storage

if TYPE_CHECKING:
    from .flags import ErrorFlags


@dataclass
class Launch:
    """One kernel launch with its arguments bound."""

    name: str
    phase: Phase
    kernel: wp.Kernel
    dim: Any
    inputs: list[Any]
    block_dim: int | None = None  # lanes per block of a tiled launch (the last axis of dim); None: Warp's default


class Recorder:
    """Launches the step program kernel by kernel, eagerly or inside an open capture.

    Args:
        storage: the simulation's arrays.
        graph: the env's systems bound to them.
        flags: where invalid actions are counted.
        generated: the env's engine kernels (``engine_kernels.generate``).
        schedule_seed: run each phase's systems in this seed's random valid order.
        dim_context: what a raw system's ``dim`` callable receives (the ``BatchSim``).
    """

    fused = False

    def __init__(
        self,
        storage: Storage,
        graph: TaskGraph,
        flags: ErrorFlags,
        generated: ek.Generated,
        *,
        schedule_seed: int | None,
        dim_context: Any = None,
    ) -> None:
        self.storage, self.graph, self.flags, self.generated = storage, graph, flags, generated
        self.schedule_seed, self.dim_context = schedule_seed, dim_context
        self.device, self.num_worlds = storage.device, storage.num_worlds
        dev = self.device
        self.ok = wp.zeros(1, dtype=wp.int32, device=dev)
        self.any_done = wp.zeros(1, dtype=wp.int32, device=dev)
        self.one = wp.array([1], dtype=wp.int32, device=dev)
        self.run_k = wp.array([1], dtype=wp.int32, device=dev)
        self.loop_cond = wp.zeros(1, dtype=wp.int32, device=dev)
        self.loop_index = wp.zeros(1, dtype=wp.int32, device=dev)
        self.staging_flat: list[wp.array] = []
        reward = storage.singletons["reward"]  # [num_worlds, agents] view, as the engine kernels take it
        self.reward2d = reward if reward.ndim == 2 else reward.reshape((self.num_worlds, 1))
        self.launches = {id(t): self._bind(t) for t in graph.tasks}

    def variant(self, cls: type[Recorder], **kwargs: Any) -> Recorder:
        """A recorder of class ``cls`` (unfused or fused) over the same storage, graph and flags."""
        return cls(
            self.storage,
            self.graph,
            self.flags,
            self.generated,
            schedule_seed=self.schedule_seed,
            dim_context=self.dim_context,
            **kwargs,
        )

    def _bind(self, task: Any) -> Launch:
        inputs = [self.storage.resolve(source) for _param, source in task.sources]
        if task.dim == "world":
            dim: Any = self.num_worlds
        elif task.dim == "serial":
            dim = 1
        elif task.dim == "entity":
            dim = (self.num_worlds, self.storage.capacity(task.archetype))
        else:
            dim = task.dim(self.dim_context)
        lanes = task.system.block_dim
        if lanes is not None:
            # A CPU launch runs a block's lanes side by side only where Warp is told to; else one lane each.
            if wp.get_device(self.device).is_cpu and not wp.config.enable_cpu_blocks:
                lanes = 1
            dim = (*(dim if isinstance(dim, tuple) else (dim,)), lanes)
        return Launch(task.name, task.phase, task.kernel, dim, inputs, lanes)

    def module_variants(self) -> list[tuple[Any, int | None]]:
        """The modules of ``kernels()``, each with the block size its launches use (None: Warp's default)."""
        tiled = {id(launch.kernel): launch.block_dim for launch in self.launches.values() if launch.block_dim}
        variants = {}
        for kernel in self.kernels():
            block_dim = tiled.get(id(kernel))
            variants[(id(kernel.module), block_dim)] = (kernel.module, block_dim)
        return list(variants.values())

    def kernels(self) -> list[wp.Kernel]:
        """Every kernel this recorder may launch (loaded before the first capture)."""
        g = self.generated
        return [
            *(t.kernel for t in self.graph.tasks),
            g.validate,
            g.copy_final_obs,
            g.load_actions,
            ek.gate_step,
            ek.begin_step,
        ]

    # -- launching ----------------------------------------------------------------------------

    def launch(self, launch: Launch) -> None:
        """Launches one kernel; instrumented recorders override this."""
        wp.launch(launch.kernel, dim=launch.dim, inputs=launch.inputs, device=self.device, block_dim=launch.block_dim)

    def engine(self, name: str, kernel: wp.Kernel, dim: Any, inputs: list[Any]) -> None:
        self.launch(Launch(name, Phase.NONE, kernel, dim, inputs))

    def phases(self, phases: tuple[Phase, ...]) -> None:
        for phase in phases:
            for task in self.graph.order(phase, self.schedule_seed):
                self.launch(self.launches[id(task)])

    def program(self, items: tuple[Item, ...]) -> None:
        """Records a program (``ecs.program``): systems, engine rules and the ended-worlds branch."""
        s, st, reward = self.storage.singletons, self.storage, self.reward2d
        W = self.num_worlds
        for item in items:
            if isinstance(item, Phases):
                self.phases(item.phases)
            elif isinstance(item, IfEnded):
                wp.capture_if(condition=self.any_done, on_true=lambda body=item.body: self.program(body))
            elif item is Rule.BEGIN_STEP:
                horizon = int(st.env.max_episode_steps)
                inputs = [horizon, s["episode_step"], reward, s["terminated"], s["truncated"]]
                self.engine("begin_step", ek.begin_step, W, inputs)
            elif item is Rule.FINISH_STEP:
                inputs = [s["terminated"], s["truncated"], s["reset"], self.any_done]
                self.engine("finish_step", ek.finish_step, W, inputs)
            elif item is Rule.COPY_FINAL_OBS:
                self.engine("copy_final_obs", self.generated.copy_final_obs, W, [s["reset"], *self.generated.obs_pairs])
            elif item in (Rule.NEW_EPISODE, Rule.NEW_EPISODE_CLEARED):
                clear = int(item is Rule.NEW_EPISODE_CLEARED)
                inputs = [clear, st.seed, st.world_offset, s["reset"], s["episode"], s["episode_step"], s["rng"]]
                self.engine("begin_episode", ek.begin_episode, W, [*inputs, reward, s["terminated"], s["truncated"]])
            elif item is Rule.REQUEST_RESET:
                self.engine("request_reset", ek.request_reset, W, [st.reset_request, s["reset"]])
            else:
                raise ValueError(f"unknown program item {item!r}")

    # -- the calls ------------------------------------------------------------------------------

    def record_step(self) -> None:
        """One step: validate the actions, then (if all are valid) the step program."""
        self._validated(self.one, self.generated.action_flat, lambda: self.body(per_step=False, steps=None))

    def record_run(self, per_step: bool) -> None:
        """``run_k`` steps, with held actions or (``per_step``) the staged ones, all validated first."""
        actions = self.staging_flat if per_step else self.generated.action_flat
        checked = self.run_k if per_step else self.one
        self._validated(checked, actions, lambda: self.body(per_step=per_step, steps=self.run_k))

    def record_reset(self) -> None:
        self.program(RESET)

    def _validated(self, checked: wp.array, actions: list[wp.array], body: Callable[[], None]) -> None:
        g = self.generated
        self.engine("validate_actions", g.validate, g.validate_dim, [self.flags.errors, checked, *actions])
        self.engine("gate_step", ek.gate_step, 1, [self.flags.errors, self.ok, self.any_done])
        wp.capture_if(condition=self.ok, on_true=body)
        self.flags.record_copies()

    def body(self, *, per_step: bool, steps: wp.array | None) -> None:
        """The steps themselves: one step program, or a device loop of ``steps[0]`` of them."""
        if steps is None:
            self.program(STEP)
            return
        self.engine("start_loop", ek.start_loop, 1, [steps, self.loop_cond, self.loop_index])
        g = self.generated

        def iteration() -> None:
            if per_step:
                pairs = [x for a, d in zip(self.staging_flat, g.action_flat2d, strict=True) for x in (a, d)]
                self.engine("load_actions", g.load_actions, self.num_worlds, [self.loop_index, *pairs])
            self.program(STEP)
            self.engine("next_iteration", ek.next_iteration, 1, [steps, self.loop_cond, self.loop_index])

        wp.capture_while(condition=self.loop_cond, while_body=iteration)

    def close(self) -> None:
        """Releases threads; the recorder is not used afterwards."""

    def staged(self, k: int) -> None:
        """The staging buffers now hold ``k`` steps (they were reallocated)."""
        self.staging_flat = [self.storage.flat(self.storage.staging[key], k) for key in self.storage.action_keys]


class FusedRecorder(Recorder):
    """Runs the steps of a call as one generated kernel (``ecs.fusion``); resets stay unfused."""

    fused = True

    def __init__(self, *args: Any, env: EnvSpec, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env = env
        # CPU: the unclaimed worlds [claims[0], claims[1]) of a fused launch, and the threads that joined it.
        self.claims = wp.zeros(4, dtype=wp.int32, device=self.device)
        self.kernel = self._build(per_step=False)
        self.kernel_per_step: FusedKernel | None = None  # built when run(k, actions) is first called

    def _build(self, *, per_step: bool) -> FusedKernel:
        return build_fused(
            self.graph,
            self.storage.layout,
            self.env,
            per_step_actions=per_step,
            schedule_seed=self.schedule_seed,
            device_is_cpu=self.device == "cpu",
        )

    def kernels(self) -> list[wp.Kernel]:
        fused = [f.kernel for f in (self.kernel, self.kernel_per_step) if f is not None]
        return [*super().kernels(), ek.open_claims, *fused]

    def staged(self, k: int) -> None:
        super().staged(k)
        if self.kernel_per_step is None:
            self.kernel_per_step = self._build(per_step=True)
            wp.load_module(self.kernel_per_step.kernel.module, device=self.device)

    def inputs(self, fused: FusedKernel, steps: wp.array, start: int = 0, stop: int | None = None) -> list:
        """Arguments of a fused kernel for worlds ``[start, stop)``: whole arrays and the range.

        On CPU the kernel's threads claim the worlds of ``[claims[0], claims[1])``, which
        ``open_claims`` sets to ``[0, num_worlds)`` before every launch.
        """
        engine = {"steps": steps, "world_base": start, "world_end": self.num_worlds if stop is None else stop}
        engine["claims"] = self.claims
        return [self.storage.resolve(source, engine) for _name, source in fused.sources]

    def body(self, *, per_step: bool, steps: wp.array | None) -> None:
        fused = self.kernel_per_step if per_step else self.kernel
        steps = self.one if steps is None else steps
        dim = self.num_worlds if fused.dim is None else fused.dim
        if self.device == "cpu":
            self.engine("open_claims", ek.open_claims, 1, [0, self.num_worlds, self.claims])
        self.launch(Launch("fused_step", Phase.NONE, fused.kernel, dim, self.inputs(fused, steps)))


class SplitRecorder(Recorder):
    """CPU: launches world-local raw kernels on chunks of worlds, one thread each, eagerly (tiled ones whole).

    A chunk gets the arrays of its worlds (slices along the world axis) and overflow counters of
    its own, merged into the simulation's after every launch with its worlds made global again.
    The worlds of a kernel are independent, so the chunks' results are those of one launch.

    Args:
        chunks: ``[(first world, end)]``, one per thread.
    """

    def __init__(self, *args: Any, chunks: list[tuple[int, int]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.chunks = chunks
        self._pool = ThreadPoolExecutor(max_workers=len(chunks) - 1)
        self._counters = [
            {name: wp.array([0, INT32_MAX], dtype=wp.int32, device="cpu") for name in self.storage.overflow}
            for _ in chunks
        ]
        # (chunk's first world, its counter, the simulation's counter) as host views, made once.
        self._merges = [
            (first, counter.numpy(), self.storage.overflow[name].numpy())
            for (first, _end), counters in zip(self.chunks, self._counters, strict=True)
            for name, counter in counters.items()
        ]
        self._split: dict[int, list] = {}
        for task in self.graph.tasks:
            launch = self.launches[id(task)]
            # Tiled kernels run whole: Warp's CPU tile storage is found through one static pointer on x86-64
            # (native/tile.h: "Ideally this would be thread_local"), so two threads must not run them at once.
            if task.system.world_local and task.system.block_dim is None:
                split = self._split_launch(task, launch)
                if split is not None:
                    self._split[id(launch)] = split

    @property
    def splits(self) -> int:
        """How many systems run on chunks of worlds."""
        return len(self._split)

    def _split_launch(self, task: Any, launch: Launch) -> list | None:
        W = self.num_worlds
        dim = launch.dim
        if not (dim == W or (isinstance(dim, tuple) and dim and dim[0] == W)):
            return None
        cmds = []
        for (first, end), counters in zip(self.chunks, self._counters, strict=True):
            inputs = [self.storage.resolve_chunk(source, first, end, counters) for _p, source in task.sources]
            if any(i is None for i in inputs):
                return None
            part = end - first if not isinstance(dim, tuple) else (end - first, *dim[1:])
            cmds.append(wp.launch(launch.kernel, dim=part, inputs=inputs, device="cpu", record_cmd=True))
        return cmds

    def launch(self, launch: Launch) -> None:
        cmds = self._split.get(id(launch))
        if cmds is None:
            super().launch(launch)
            return
        futures = [self._pool.submit(cmd.launch) for cmd in cmds[1:]]
        cmds[0].launch()
        for f in futures:
            f.result()
        for first, mine, total in self._merges:
            if mine[0] != 0:
                total[0] += mine[0]
                total[1] = min(int(total[1]), int(mine[1]) + first)
                mine[:] = (0, INT32_MAX)

    def close(self) -> None:
        self._pool.shutdown(wait=False)


# -- executors ------------------------------------------------------------------------------------


class Executor:
    """When a recorder's launches happen. ``step``, ``run`` and ``reset`` return without a host sync."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    @property
    def captured(self) -> bool:
        """Whether calls replay recorded graphs (and so whether a caller may capture a step itself)."""
        return False

    def step(self) -> None:
        self.recorder.record_step()

    def run(self, k: int, per_step: bool) -> None:
        self.recorder.record_run(per_step)

    def reset(self) -> None:
        self.recorder.record_reset()

    def staged(self, k: int) -> None:
        """Per-step actions now have room for ``k`` steps (new buffers: forget what was bound to the old)."""
        self.recorder.staged(k)

    def close(self) -> None:
        """Releases threads; the executor is not used afterwards."""
        self.recorder.close()


class Eager(Executor):
    """Launches every kernel on every call (``capture=False``, or a ``SplitRecorder``)."""


class Captured(Executor):
    """Replays graphs recorded once: the step and the reset at construction, each kind of run on first use."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(recorder)
        self._step = _capture(recorder.device, recorder.record_step)
        self._reset = _capture(recorder.device, recorder.record_reset)
        self._runs: dict[bool, Any] = {}

    @property
    def captured(self) -> bool:
        return True

    def step(self) -> None:
        wp.capture_launch(self._step)

    def run(self, k: int, per_step: bool) -> None:
        graph = self._runs.get(per_step)
        if graph is None:
            graph = self._runs[per_step] = _capture(self.recorder.device, lambda: self.recorder.record_run(per_step))
        wp.capture_launch(graph)

    def reset(self) -> None:
        wp.capture_launch(self._reset)

    def staged(self, k: int) -> None:
        super().staged(k)
        self._runs.pop(True, None)


class Threaded(Executor):
    """CPU, fused envs: large calls run the fused kernel on several threads at once.

    The threads share the worlds: each claims the next block of worlds until none is left
    (``fusion.claim_worlds``), so a thread that starts late or shares its core with another
    process steps fewer blocks instead of holding the others up. Worlds are independent, so the
    results are those of one thread. Every action is validated first and any invalid one skips
    every world, as in the captured graph. Calls below the thresholds go to ``inner``.

    The helper threads wait for calls in native code a little while after each one (``_Helper``),
    so that a call hands over in microseconds, and the first thread takes blocks of worlds from the
    front and the second from the back (``fusion.claim_worlds``), so that each steps mostly the
    worlds already in its core's cache. A second thread only pays when a core is free for it: on a
    machine whose other cores are busy it costs a hand-off and gains nothing. So with
    ``adaptive`` the calls above the thresholds time both ways (all threads, or ``inner`` alone),
    take the faster and try the other now and then (``_Timer``); both give the same worlds.

    Args:
        inner: the executor of small calls; its recorder must be a ``FusedRecorder``.
        threads: how many threads run a large call (the calling one included).
        threaded_step: whether ``step()`` uses the threads.
        run_min: the fewest world-steps (num_worlds * k) a ``run(k)`` uses them for.
        adaptive: choose between the threads and ``inner`` by timing them (else always threads).
    """

    def __init__(
        self, inner: Executor, threads: int, *, threaded_step: bool, run_min: int, adaptive: bool = False
    ) -> None:
        super().__init__(inner.recorder)
        self.inner, self.threads = inner, threads
        self.threaded_step, self.run_min, self.adaptive = threaded_step, run_min, adaptive
        self._helpers: list[_Helper] = []  # started with the first threaded call
        self._claims = self.recorder.claims.numpy()  # host memory: set before the threads start
        self._bound: dict[tuple[int, int], tuple[Any, list[Any]]] = {}
        self._timers = {"step": _Timer(), "run": _Timer()}

    @property
    def captured(self) -> bool:
        return self.inner.captured

    def step(self) -> None:
        if not self.threaded_step:
            self.inner.step()
            return
        r = self.recorder
        threaded = partial(self._threaded, r.kernel, r.one, r.generated.action_flat, r.one)
        self._call("step", r.num_worlds, self.inner.step, threaded)

    def run(self, k: int, per_step: bool) -> None:
        if self.recorder.num_worlds * k < self.run_min:
            self.inner.run(k, per_step)
            return
        r = self.recorder
        if per_step:
            threaded = partial(self._threaded, r.kernel_per_step, r.run_k, r.staging_flat, r.run_k)
        else:
            threaded = partial(self._threaded, r.kernel, r.run_k, r.generated.action_flat, r.one)
        self._call("run", r.num_worlds * k, partial(self.inner.run, k, per_step), threaded)

    def _call(self, kind: str, world_steps: int, alone: Callable[[], None], threaded: Callable[[], None]) -> None:
        if not self.adaptive:
            threaded()
            return
        timer = self._timers[kind]
        way = timer.pick()
        start = time.perf_counter()
        (threaded if way else alone)()
        if not self.recorder.flags.invalid_actions():  # a refused call stepped nothing: not a time
            timer.record(way, (time.perf_counter() - start) / world_steps)

    def reset(self) -> None:
        self.inner.reset()

    def staged(self, k: int) -> None:
        self.inner.staged(k)
        self._bound.clear()

    def _threaded(self, fused: FusedKernel, steps: wp.array, actions: list[wp.array], checked: wp.array) -> None:
        validate, graphs = self._graphs(fused, steps, actions, checked)
        wp.capture_launch(validate)
        if self.recorder.flags.invalid_actions():
            return
        self._claims[:3] = (0, self.recorder.num_worlds, 0)
        # A replay runs in C++ with the GIL released; each thread replays a graph of its own. The
        # calling thread's graph first tells the helpers that a call is there (``_Helper``), so that
        # a helper waiting for it finds the GIL free. A helper joins only if it takes its token before
        # this thread has stepped every world: one that the OS has not yet scheduled by then (its
        # core is busy) is not waited for, and skips this call.
        tokens = [threading.Lock() for _ in self._helpers]
        numbers = [
            helper.post(token, graph) for helper, token, graph in zip(self._helpers, tokens, graphs[1:], strict=True)
        ]
        wp.capture_launch(graphs[0])
        for helper, token, number in zip(self._helpers, tokens, numbers, strict=True):
            if not token.acquire(blocking=False):  # the helper holds it: it is stepping worlds
                helper.wait(number)

    def _graphs(self, fused: FusedKernel, steps: wp.array, actions: list[wp.array], checked: wp.array) -> tuple:
        """The validation of ``checked`` steps of ``actions`` and the fused launch, one per thread,
        captured once per kind of call (a replay costs a fraction of a ``wp.launch``): the calling
        thread's announces the call to the helpers first, each helper's reports when it is done."""
        key = (id(fused), id(steps))
        bound = self._bound.get(key)
        if bound is None:
            if not self._helpers:
                self._helpers = [_Helper() for _ in range(self.threads - 1)]
            r, g = self.recorder, self.recorder.generated
            args, inputs = [r.flags.errors, checked, *actions], r.inputs(fused, steps)
            validate = _capture("cpu", lambda: wp.launch(g.validate, dim=g.validate_dim, inputs=args, device="cpu"))

            def calling() -> None:
                for helper in self._helpers:
                    wp.launch(announce_call, dim=1, inputs=[helper.calls], device="cpu")
                wp.launch(fused.kernel, dim=1, inputs=inputs, device="cpu")

            def helping(helper: _Helper) -> None:
                wp.launch(fused.kernel, dim=1, inputs=inputs, device="cpu")
                wp.launch(report_call, dim=1, inputs=[helper.number, helper.done], device="cpu")
                helper.record_spin()

            launches = [_capture("cpu", calling)]
            launches += [_capture("cpu", partial(helping, helper)) for helper in self._helpers]
            bound = self._bound[key] = (validate, launches)
        return bound

    def close(self) -> None:
        for helper in self._helpers:
            helper.close()


class _Timer:
    """Seconds per world-step of two ways of making a call (0: one thread, 1: all): the median of
    each way's last ``KEEP`` calls (times on a shared machine have outliers). ``pick`` takes the
    faster; now and then it tries the other for ``TRY`` calls, so that a change (a core freed or
    taken by another process) is seen: after ``PROBE`` calls, twice as many after each try that
    found it slower still, up to ``PROBE_MAX`` (so trying a slow way costs little)."""

    PROBE, PROBE_MAX, TRY, KEEP = 16, 1024, 5, 5

    def __init__(self) -> None:
        self.times: tuple[deque[float], deque[float]] = (deque(maxlen=self.KEEP), deque(maxlen=self.KEEP))
        self.median = [0.0, 0.0]
        self.interval = self.next_try = self.PROBE
        self.trying, self.left = 0, 0  # the way being tried, and its calls still to make

    def pick(self) -> int:
        for way in (1, 0):
            if len(self.times[way]) < self.TRY:  # the first calls (the very first builds its graphs)
                return way
        if self.left:
            return self.trying
        best = self.best()
        self.next_try -= 1
        if self.next_try > 0:
            return best
        self.trying, self.left = 1 - best, self.TRY
        self.times[self.trying].clear()  # stale
        return self.trying

    def best(self) -> int:
        return 0 if self.median[0] <= self.median[1] else 1

    def record(self, way: int, seconds: float) -> None:
        times = self.times[way]
        times.append(seconds)
        self.median[way] = sorted(times)[len(times) // 2]
        if self.left:
            self.left -= 1
            if not self.left:
                slower = self.best() != self.trying
                self.interval = min(2 * self.interval, self.PROBE_MAX) if slower else self.PROBE
                self.next_try = self.interval


_PAUSE = (  # one spin-wait pause (CPU only: these functions are never launched on a GPU)
    "#if defined(__x86_64__) || defined(__i386__)\n"
    "__builtin_ia32_pause();\n"
    "#elif defined(__aarch64__)\n"
    '__asm__ __volatile__("yield");\n'
    "#endif\n"
)


@wp.func_native(
    "#if !defined(__CUDA_ARCH__)\n"
    "for (int i = 0; i < spins; ++i) {\n"
    "    if ((__atomic_load_n(&value.data[0], __ATOMIC_ACQUIRE) == target) == arrive) return 1;\n" + _PAUSE + "}\n"
    "#endif\n"
    "return 0;\n"
)
def spin_until(value: wp.array(dtype=wp.int32), target: int, arrive: int, spins: int) -> int:
    """Spins (a pause per turn) until ``value[0] == target`` (``arrive`` 1) or ``!=`` (0), at most ``spins`` turns."""
    ...


@wp.func_native("#if !defined(__CUDA_ARCH__)\n__atomic_fetch_add(&calls.data[0], 1, __ATOMIC_RELEASE);\n#endif\n")
def add_call(calls: wp.array(dtype=wp.int32)):
    """``calls[0] += 1``, atomically, seen by other threads after everything this thread wrote before."""
    ...


@wp.func_native(
    "#if !defined(__CUDA_ARCH__)\n__atomic_store_n(&done.data[0], number.data[0], __ATOMIC_RELEASE);\n#endif\n"
)
def set_done(number: wp.array(dtype=wp.int32), done: wp.array(dtype=wp.int32)):
    """``done[0] = number[0]``, seen by other threads after everything this thread wrote before."""
    ...


@wp.kernel
def await_value(value: wp.array(dtype=wp.int32), target: wp.array(dtype=wp.int32), arrive: int, spins: int):
    spin_until(value, target[0], arrive, spins)


@wp.kernel
def announce_call(calls: wp.array(dtype=wp.int32)):
    add_call(calls)


@wp.kernel
def report_call(number: wp.array(dtype=wp.int32), done: wp.array(dtype=wp.int32)):
    set_done(number, done)


class _Helper:
    """A thread that steps worlds in ``Threaded`` calls.

    A thread that the OS wakes starts tens of microseconds after it is asked to, as long as it takes
    to step a few thousand cartpole worlds, and so does one that waits for the GIL. So a call is
    posted from Python (``post``: a token, a graph and the call's number) and then announced from
    native code, at the start of the calling thread's graph (``calls``, with the GIL released).
    After each call the helper waits for the next announcement in native code, for up to ``SPINS``
    pauses (about 0.1 ms), and sleeps only once a wait found nothing announced and nothing posted;
    a post wakes it. It steps worlds only if it takes the token before the calling thread (which
    takes it once it has stepped every world); its graph then sets ``done`` to the call's number,
    which the calling thread waits for, also in native code, and goes on waiting for the next call.
    """

    SPINS = 4096  # pauses of a helper waiting for the next call
    WAIT = 1 << 20  # pauses of the calling thread waiting for a helper, between checks from Python

    def __init__(self) -> None:
        self.calls, self.seen, self.number, self.done, self.expect = (
            wp.zeros(1, dtype=wp.int32, device="cpu") for _ in range(5)
        )
        self._calls, self._seen, self._number, self._done, self._expect = (
            a.numpy() for a in (self.calls, self.seen, self.number, self.done, self.expect)
        )
        self._spin = _capture("cpu", self.record_spin)
        self._finish = _capture(
            "cpu", lambda: wp.launch(await_value, dim=1, inputs=[self.done, self.expect, 1, self.WAIT], device="cpu")
        )
        self._posted = 0
        self.error: Exception | None = None
        self._job: tuple[threading.Lock, Any, int] | None = None
        self._wake = threading.Event()
        self._stop = False
        threading.Thread(target=self._run, name="ecs-threaded-helper", daemon=True).start()

    def record_spin(self) -> None:
        """The wait for the next call (``calls[0]`` past ``seen[0]``), for up to ``SPINS`` pauses."""
        wp.launch(await_value, dim=1, inputs=[self.calls, self.seen, 0, self.SPINS], device="cpu")

    def post(self, token: threading.Lock, graph: Any) -> int:
        """Offers the helper the next call (the calling thread's graph announces it); returns its number."""
        self._posted += 1
        self._job = (token, graph, self._posted)
        self._wake.set()  # a sleeping helper wakes and waits for the announcement
        return self._posted

    def wait(self, number: int) -> None:
        """Returns once the helper has finished call ``number``; raises what stopped it, if anything did."""
        self._expect[0] = number
        while int(self._done[0]) != number:
            wp.capture_launch(self._finish)
        if self.error is not None:
            raise EcsError(f"a CPU helper thread failed while stepping worlds: {self.error!r}") from self.error

    def _run(self) -> None:
        seen = 0
        while not self._stop:
            self._wake.wait()
            self._wake.clear()
            waited = False  # whether the helper has waited for a call since the last one it saw
            while not self._stop:
                announced = int(self._calls[0])
                if announced == seen:
                    if waited and self._posted == seen:
                        break  # no call came: sleep until one is posted (post() wakes it after counting it)
                    self._seen[0] = seen
                    wp.capture_launch(self._spin)
                    waited = True
                    continue
                seen, waited = announced, False
                token, graph, number = self._job  # posted before it was announced
                if token.acquire(blocking=False):
                    # Steps worlds, reports the call done and waits for the next one, all without the
                    # GIL, which the calling thread needs just then.
                    self._number[0], self._seen[0] = number, seen
                    try:
                        wp.capture_launch(graph)
                    except Exception as e:  # reported to the calling thread, which waits for the call
                        self.error = e
                        self._done[0] = number
                        return
                    waited = True

    def close(self) -> None:
        self._stop = True
        self._wake.set()


def _capture(device: str, record: Callable[[], None]) -> Any:
    """A graph of the launches ``record`` makes (on CPU, a command list replayed in C++)."""
    with wp.ScopedCapture(device=device, force_module_load=False) as capture:
        record()
    return capture.graph
