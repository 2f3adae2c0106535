"""BatchSim: many worlds of one environment, stepped together by one captured graph replay."""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import warp as wp

from . import engine_kernels as ek
from .checkpoint import check_values, load_state, save_state
from .codegen import build_kernel, load_modules, type_expr
from .errors import ActionError, CapacityError, EcsError, SchemaError, StateDictError
from .fusion import CPU_BLOCK, FusedKernel, build_fused, why_not_fusable
from .graph import Layout, Task, TaskGraph, make_bundle
from .memory import check_fits, estimate
from .schema import ENGINE_COLUMNS, Component, EnvSpec, Phase, dtype_shape, scalar_type
from .torch_bridge import ActionDict, TorchViews

STATE_FORMAT_VERSION = 1
_INT32_MAX = ek.INT32_MAX
_BEFORE_RESET = (Phase.ACT, Phase.PHYSICS, Phase.COLLIDE, Phase.REWARD)
_OBSERVE = (Phase.SENSE, Phase.OBSERVE)


@dataclass
class _Launch:
    name: str
    phase: Phase
    kernel: wp.Kernel
    dim: Any
    inputs: list[Any]


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
        cpu_threads: on CPU, a fused step runs on this many threads, each over its own chunk of
            worlds (Warp's CPU backend runs one launch on one core). None uses every core the
            process may run on, up to one thread per 256 worlds; then ``run(k)`` uses them for
            at least 16384 world-steps per call and ``step()`` from 32768 worlds on (below, the
            thread hand-off costs more than it saves). An explicit number always uses them.

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
        env.validate()
        self.env = env
        self.num_worlds = int(num_worlds)
        self.device = resolve_device(device)
        self.seed = int(seed)
        self.world_offset = int(world_offset)
        self._is_cpu = self.device == "cpu"
        self._schedule_seed = schedule_seed
        self._num_agents = env.num_agents

        self._param_values = self._check_params(params or {})
        self._layout = self._make_layout()
        check_fits(estimate(self._layout, env, self.num_worlds), self.device, self.num_worlds)
        self.graph = TaskGraph(env.systems, self._layout, device_is_cpu=self._is_cpu, env_name=env.name)
        self._allocate()
        self._make_engine_kernels()
        self._launches = {id(t): self._make_launch(t) for t in self.graph.tasks}
        self._fused = self._fused_per_step = None
        reason = why_not_fusable(self.graph, env)
        if fuse and reason is not None:
            raise EcsError(f"env {env.name!r} cannot be fused: {reason}. Pass fuse=None or fuse=False")
        if fuse is not False and reason is None:
            self._fused = build_fused(
                self.graph,
                self._layout,
                env,
                per_step_actions=False,
                schedule_seed=schedule_seed,
                device_is_cpu=self._is_cpu,
            )
        self._capture_enabled = capture
        self._setup_threads(cpu_threads)
        self._run_graphs: dict[bool, Any] = {}
        self._views = TorchViews(self)
        self._obs = self._views.obs
        self._final_obs_t = self._views.final_obs
        self._actions = ActionDict(self, self._views.actions)
        self._rewards = self._views.rewards
        self._terminated = self._views.terminated
        self._truncated = self._views.truncated
        self._params_t = self._views.params
        self._load_modules()
        self._step_graph = self._capture(self._record_step) if capture else None
        self._reset_graph = self._capture(self._record_reset) if capture else None
        self.reset()

    # -- construction ----------------------------------------------------------------------

    def _setup_threads(self, cpu_threads: int | None) -> None:
        if cpu_threads is not None and (
            isinstance(cpu_threads, bool) or not isinstance(cpu_threads, int) or cpu_threads < 1
        ):
            raise EcsError(f"cpu_threads must be None or an int >= 1, got {cpu_threads!r}")
        threads = 1
        if self._is_cpu and self._fused is not None:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            threads = cpu_threads if cpu_threads is not None else max(1, min(cores, self.num_worlds // CPU_BLOCK))
            threads = min(threads, self.num_worlds)
        bounds = np.linspace(0, self.num_worlds, threads + 1).astype(int)
        self._chunks = [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]
        self._chunk_launches: dict[tuple[int, int], list] = {}
        self._pool = ThreadPoolExecutor(max_workers=threads - 1) if threads > 1 else None
        # A call pays a thread hand-off (about 0.3 ms measured on a 2-core VM), so by default
        # threads serve step() only from 32768 worlds, run(k) from 16384 world-steps per call.
        self._threaded_step = self._pool is not None and (cpu_threads is not None or self.num_worlds >= 32768)
        self._threaded_run_min = 1 if cpu_threads is not None else 16384

    def _check_params(self, overrides: Mapping[str, Any]) -> dict[str, np.ndarray]:
        declared = {p.name: p for p in self.env.params}
        unknown = sorted(set(overrides) - set(declared))
        if unknown:
            raise EcsError(f"unknown parameter(s) {unknown} for env {self.env.name!r}; parameters: {sorted(declared)}")
        values = {name: p.value for name, p in declared.items()}
        for name, value in overrides.items():
            values[name] = dataclasses.replace(declared[name], value=value).value
        return values

    def _make_layout(self) -> Layout:
        env = self.env
        reward_shape = () if env.num_agents is None else (env.num_agents,)
        singles = {
            "rng": Component("rng", wp.uint32, singleton=True, doc="per-world RNG state, advanced by wp.randf"),
            "episode": Component("episode", wp.int32, singleton=True, doc="episodes begun in this world, from 0"),
            "episode_step": Component("episode_step", wp.int32, singleton=True, doc="steps taken in the episode"),
            "reset": Component("reset", wp.int32, singleton=True, doc="1 while this world is being reset"),
            "reward": Component(
                "reward", wp.float32, reward_shape, singleton=True, doc="reward of the last transition"
            ),
            "terminated": Component("terminated", wp.bool, singleton=True, doc="the MDP reached a terminal state"),
            "truncated": Component("truncated", wp.bool, singleton=True, doc="the time limit ended the episode"),
        }
        for s in env.singletons:
            singles[s.name] = s
        comps: dict[str, Component] = {}
        for a in env.archetypes:
            for c in a.components:
                if comps.setdefault(c.name, c) != c:
                    raise SchemaError(f"env {env.name!r}: two different components are named {c.name!r}")
                if c.name in singles:
                    raise SchemaError(f"env {env.name!r}: {c.name!r} is both an entity component and a singleton")
        resources = dict(env.resources)
        resources["__config__"] = env.config
        return Layout({a.name: a for a in env.archetypes}, singles, {p.name: p for p in env.params}, resources)

    def _allocate(self) -> None:
        W, dev = self.num_worlds, self.device
        self.tables: dict[str, dict[str, wp.array]] = {}
        self.overflow: dict[str, wp.array] = {}
        for a in self.env.archetypes:
            cols = {name: wp.zeros((W, a.capacity), dtype=wp.int32, device=dev) for name in ENGINE_COLUMNS}
            for c in a.components:
                cols[c.name] = wp.zeros((W, a.capacity, *c.shape), dtype=c.dtype, device=dev)
            self.tables[a.name] = cols
            self.overflow[a.name] = wp.array([0, _INT32_MAX], dtype=wp.int32, device=dev)
        self.singletons = {
            n: wp.zeros((W, *c.shape), dtype=c.dtype, device=dev) for n, c in self._layout.singletons.items()
        }
        self.singletons["episode"].fill_(-1)
        self._params = {
            p.name: wp.array(self._param_values[p.name], dtype=p.dtype, device=dev) for p in self.env.params
        }
        self._final_obs = {
            k: wp.zeros((W, *o.component.shape), dtype=o.component.dtype, device=dev)
            for k, o in self.env.observations.items()
        }
        self._seed = wp.array([self.seed], dtype=wp.int32, device=dev)
        self._world_offset = wp.array([self.world_offset], dtype=wp.int32, device=dev)
        self._errors = wp.array([0, _INT32_MAX], dtype=wp.int32, device=dev)
        self._ok = wp.zeros(1, dtype=wp.int32, device=dev)
        self._any_done = wp.zeros(1, dtype=wp.int32, device=dev)
        self._reset_request = wp.zeros(W, dtype=wp.int32, device=dev)
        self._one = wp.array([1], dtype=wp.int32, device=dev)
        self._run_k = wp.array([1], dtype=wp.int32, device=dev)
        self._loop_cond = wp.zeros(1, dtype=wp.int32, device=dev)
        self._loop_index = wp.zeros(1, dtype=wp.int32, device=dev)
        self._staging: dict[str, wp.array] = {}
        self._staging_steps = 0
        self._last_k = 1
        # Error flags reach the host without a sync: on CPU they are host memory already; on CUDA
        # the captured step copies them into pinned memory that the next step() reads.
        flags = [self._errors, *self.overflow.values()]
        if self._is_cpu:
            self._flag_mirrors = flags
        else:
            self._flag_mirrors = [wp.zeros_like(f, device="cpu", pinned=True) for f in flags]
        self._flag_np = [m.numpy() for m in self._flag_mirrors]

    def _flat(self, arr: wp.array, steps: int | None = None) -> wp.array:
        """A ``(num_worlds, n)`` scalar view of a per-world array, or ``(steps, num_worlds, n)`` (no copy)."""
        lead = 1 if steps is None else 2
        n = int(np.prod(arr.shape[lead:], dtype=np.int64)) * int(np.prod(dtype_shape(arr.dtype), dtype=np.int64))
        shape = (self.num_worlds, n) if steps is None else (steps, self.num_worlds, n)
        return wp.array(ptr=arr.ptr, dtype=scalar_type(arr.dtype), shape=shape, device=arr.device)

    def _make_engine_kernels(self) -> None:
        env, module = self.env, f"ecs_gen_{self.env.name}"
        self._action_keys = sorted(env.actions)
        # Validation reads actions as (steps, num_worlds, n): one step for step(), k for run(k, actions).
        ns: dict[str, Any] = {}
        params, body = ["errors: wp.array(dtype=wp.int32)", "steps: wp.array(dtype=wp.int32)"], []
        load_params, load_body = ["index: wp.array(dtype=wp.int32)"], []
        self._action_flat, self._action_flat2d = [], []
        for k_index, key in enumerate(self._action_keys):
            action = env.actions[key]
            arr = self.singletons[action.component.name]
            flat = self._flat(arr)
            self._action_flat2d.append(flat)
            self._action_flat.append(
                wp.array(ptr=flat.ptr, dtype=flat.dtype, shape=(1, *flat.shape), device=flat.device)
            )
            t = type_expr(flat.dtype, ns)
            params.append(f"a{k_index}: wp.array(dtype={t}, ndim=3)")
            load_params += [f"src{k_index}: wp.array(dtype={t}, ndim=3)", f"dst{k_index}: wp.array(dtype={t}, ndim=2)"]
            load_body += [
                f"    for i in range(dst{k_index}.shape[1]):",
                f"        dst{k_index}[world, i] = src{k_index}[index[0], world, i]",
            ]
            if action.discrete:
                bad = f"v{k_index} < {int(action.low)} or v{k_index} > {int(action.high)}"
            else:
                bad = f"not wp.isfinite(float(v{k_index}))"
            body += [
                "    for it in range(steps[0]):",
                f"        for i in range(a{k_index}.shape[2]):",
                # One local per action: Warp refuses to rebind a name to a value of another dtype.
                f"            v{k_index} = a{k_index}[it, world, i]",
                f"            if {bad}:",
                "                wp.atomic_add(errors, 0, 1)",
                f"                wp.atomic_min(errors, 1, world * {max(1, len(self._action_keys))} + {k_index})",
            ]
        src = "def validate_actions(\n" + "".join(f"    {p},\n" for p in params) + "):\n    world = wp.tid()\n"
        src += "\n".join(body) + "\n" if body else "    pass\n"
        self._validate_kernel = build_kernel("validate_actions", src, ns, module)
        src = "def load_actions(\n" + "".join(f"    {p},\n" for p in load_params) + "):\n    world = wp.tid()\n"
        src += "\n".join(load_body) + "\n" if load_body else "    pass\n"
        self._load_actions_kernel = build_kernel("load_actions", src, ns, module)

        ns = {}
        params, body = ["world_reset_in: wp.array(dtype=wp.int32)"], []
        self._obs_pairs = []
        for o_index, key in enumerate(sorted(env.observations)):
            src_arr = self._flat(self.singletons[env.observations[key].component.name])
            dst_arr = self._flat(self._final_obs[key])
            self._obs_pairs += [src_arr, dst_arr]
            t = type_expr(src_arr.dtype, ns)
            params += [f"s{o_index}: wp.array(dtype={t}, ndim=2)", f"d{o_index}: wp.array(dtype={t}, ndim=2)"]
            body += [
                f"    for i in range(s{o_index}.shape[1]):",
                f"        d{o_index}[world, i] = s{o_index}[world, i]",
            ]
        src = "def copy_final_obs(\n" + "".join(f"    {p},\n" for p in params) + "):\n    world = wp.tid()\n"
        src += "    if world_reset_in[world] == 0:\n        return\n"
        src += "\n".join(body) + "\n" if body else "    pass\n"
        self._final_obs_kernel = build_kernel("copy_final_obs", src, ns, module)

    def _make_launch(self, task: Task) -> _Launch:
        W = self.num_worlds
        inputs = []
        for _param, source in task.sources:
            kind = source[0]
            if kind == "column":
                inputs.append(self.tables[source[1]][source[2]])
            elif kind == "singleton":
                inputs.append(self.singletons[source[1]])
            elif kind == "overflow":
                inputs.append(self.overflow[source[1]])
            elif kind == "param":
                inputs.append(self._params[source[1]])
            elif kind == "bundle":  # a struct of columns (ecs.bundle), filled once here
                inputs.append(make_bundle(source[3], self.tables[source[1]], source[2]))
            else:
                inputs.append(source[1])
        if task.dim == "world":
            dim: Any = W
        elif task.dim == "serial":
            dim = 1
        elif task.dim == "entity":
            dim = (W, self.env_archetype(task.archetype).capacity)
        else:
            dim = task.dim(self)
        return _Launch(task.name, task.phase, task.kernel, dim, inputs)

    def env_archetype(self, name: str):
        return next(a for a in self.env.archetypes if a.name == name)

    def _load_modules(self) -> None:
        kernels = [t.kernel for t in self.graph.tasks]
        kernels += [self._validate_kernel, self._final_obs_kernel, self._load_actions_kernel, ek.gate_step]
        kernels += [f.kernel for f in (self._fused, self._fused_per_step) if f is not None]
        load_modules(list({id(k.module): k.module for k in kernels}.values()), self.device)

    # -- recording ---------------------------------------------------------------------------

    def _launch(self, launch: _Launch) -> None:
        timer = self._timer
        if timer is not None:
            wp.synchronize_device(self.device)
            t0 = time.perf_counter()
        wp.launch(launch.kernel, dim=launch.dim, inputs=launch.inputs, device=self.device)
        if self._nan_labels is not None:
            self._check_finite(launch)
        if timer is not None:
            wp.synchronize_device(self.device)
            timer[(launch.phase, launch.name)] = timer.get((launch.phase, launch.name), 0.0) + time.perf_counter() - t0

    _timer: dict | None = None
    _nan_labels: dict[int, str] | None = None
    _nan_bounds: dict[str, tuple[float, float]] = {}  # noqa: RUF012 - replaced, never mutated

    def _check_finite(self, launch: _Launch) -> None:
        wp.synchronize_device(self.device)
        for arr in launch.inputs:
            label = self._nan_labels.get(id(arr)) if isinstance(arr, wp.array) else None
            if label is None:
                continue
            is_float = scalar_type(arr.dtype) in (wp.float16, wp.float32, wp.float64)
            bound = self._nan_bounds.get(label)
            if not is_float and bound is None:
                continue
            values = arr.numpy()
            bad = ~np.isfinite(values) if is_float else np.zeros(values.shape, dtype=bool)
            what = "non-finite value"
            if not bad.any() and bound is not None:
                bad = (values < bound[0]) | (values > bound[1])
                if label.startswith("table/"):  # dead rows hold stale values
                    alive = self._state_arrays()[label.rsplit("/", 1)[0] + "/alive"].numpy() != 0
                    bad &= alive.reshape(alive.shape + (1,) * (bad.ndim - alive.ndim))
                what = f"value outside [{bound[0]}, {bound[1]}]"
            if bad.any():
                index = tuple(int(i) for i in np.argwhere(bad)[0])
                worlds = int(bad.reshape(self.num_worlds, -1).any(axis=1).sum())
                if launch.kernel is None:
                    where, why = "before the step", "it was set by the caller or by an earlier step()"
                else:
                    where, why = (
                        f"after system {launch.name!r} ({launch.phase.name})",
                        "every value was in range before it ran",
                    )
                raise EcsError(
                    f"{what} {where}: {label}{list(index)} is {values[index]} in world {index[0]} "
                    f"({worlds} world(s) affected); {why}."
                )

    def find_nan(self, steps: int = 1, *, bounds: Mapping[str, tuple[float, float]] | None = None) -> None:
        """Runs ``steps`` eager steps, checking after every system each column it touches.

        Float columns must stay finite; ``bounds`` adds ranges, keyed like ``state_dict()["arrays"]``
        (``"table/body/position": (-20, 20)``, ``"singleton/cart_position": (-3, 3)``; live rows
        only for tables). A debugging mode: much slower than ``step()``. The first bad value
        raises ``EcsError`` naming the system, the column, the index and the world; the simulation
        is left as it was at that point (mid-step). Returns quietly when every value is fine.
        """
        if not isinstance(steps, int) or steps < 1:
            raise EcsError(f"find_nan steps must be an int >= 1, got {steps!r}")
        arrays = {k: v for k, v in self._state_arrays().items() if not k.startswith("param/")}
        bounds = dict(bounds or {})
        unknown = sorted(set(bounds) - set(arrays))
        if unknown:
            raise EcsError(f"find_nan bounds name unknown arrays {unknown}; known: {sorted(arrays)}")
        for key, bound in bounds.items():
            if len(bound) != 2 or not bound[0] <= bound[1]:
                raise EcsError(f"find_nan bounds[{key!r}] must be (low, high) with low <= high, got {bound!r}")
        self._nan_labels, self._nan_bounds = {id(v): k for k, v in arrays.items()}, bounds
        self._check_finite(_Launch("(state before the step)", Phase.NONE, None, 0, list(arrays.values())))
        fused, self._fused = self._fused, None  # system by system, so run the unfused step
        try:
            for _ in range(steps):
                self._record_step()
                self._raise_pending()
        finally:
            self._nan_labels, self._nan_bounds, self._fused = None, {}, fused

    def _engine(self, name: str, kernel: wp.Kernel, dim: Any, inputs: list[Any]) -> None:
        self._launch(_Launch(name, Phase.NONE, kernel, dim, inputs))

    def _run_phases(self, phases: tuple[Phase, ...]) -> None:
        for phase in phases:
            for task in self.graph.order(phase, self._schedule_seed):
                self._launch(self._launches[id(task)])

    def _reward2d(self) -> wp.array:
        r = self.singletons["reward"]
        return r if r.ndim == 2 else r.reshape((self.num_worlds, 1))

    def _begin_episode(self, clear_outputs: int) -> None:
        s = self.singletons
        self._engine(
            "begin_episode",
            ek.begin_episode,
            self.num_worlds,
            [
                clear_outputs,
                self._seed,
                self._world_offset,
                s["reset"],
                s["episode"],
                s["episode_step"],
                s["rng"],
                self._reward2d(),
                s["terminated"],
                s["truncated"],
            ],
        )

    def _record_step(self) -> None:
        W = self.num_worlds
        self._engine("validate_actions", self._validate_kernel, W, [self._errors, self._one, *self._action_flat])
        self._engine("gate_step", ek.gate_step, 1, [self._errors, self._ok, self._any_done])
        if self._fused is not None:
            wp.capture_if(condition=self._ok, on_true=lambda: self._launch_fused(self._fused, self._one))
        else:
            wp.capture_if(condition=self._ok, on_true=self._record_step_body)
        self._record_flag_copies()

    def _record_flag_copies(self) -> None:
        if not self._is_cpu:
            for src, dst in zip([self._errors, *self.overflow.values()], self._flag_mirrors, strict=True):
                wp.copy(dst, src)

    def _fused_inputs(self, fused: FusedKernel, steps: wp.array, start: int = 0, stop: int | None = None) -> list:
        """Arguments of a fused kernel for worlds ``[start, stop)`` (whole arrays and the range)."""
        stop = self.num_worlds if stop is None else stop
        part = slice(None)  # the kernel indexes whole arrays by world, as the unfused systems do
        inputs = []
        for _name, source in fused.sources:
            kind = source[0]
            if kind == "singleton":
                inputs.append(self.singletons[source[1]][part])
            elif kind == "column":
                inputs.append(self.tables[source[1]][source[2]][part])
            elif kind == "overflow":
                inputs.append(self.overflow[source[1]])
            elif kind == "param":
                inputs.append(self._params[source[1]])
            elif kind == "value":
                inputs.append(source[2])
            elif kind == "final_obs":
                inputs.append(self._final_obs[source[1]][part])
            elif kind == "staging":
                inputs.append(self._staging[source[1]][:, part])
            else:
                engine = {
                    "seed": self._seed,
                    "world_offset": self._world_offset,
                    "steps": steps,
                    "world_base": start,
                    "world_end": stop,
                }
                inputs.append(engine[source[1]])
        return inputs

    def _launch_fused(self, fused: FusedKernel, steps: wp.array) -> None:
        dim = self.num_worlds if fused.dim is None else fused.dim
        self._launch(_Launch("fused_step", Phase.NONE, fused.kernel, dim, self._fused_inputs(fused, steps)))

    def _parallel_fused(self, fused: FusedKernel, steps: wp.array, actions: list[wp.array], checked: wp.array) -> None:
        """CPU only: validates, then runs the fused kernel on world chunks, one thread each.

        Same semantics as the captured graph: worlds are independent, so chunks may run
        concurrently; any invalid action skips every world.
        """
        # `checked` steps of `actions` are validated: one when actions are held, k when staged.
        wp.launch(self._validate_kernel, dim=self.num_worlds, inputs=[self._errors, checked, *actions], device="cpu")
        if self._flag_np[0][0] != 0:
            return
        key = (id(fused), id(steps))
        launches = self._chunk_launches.get(key)
        if launches is None:
            launches = [
                wp.launch(
                    fused.kernel, dim=1, inputs=self._fused_inputs(fused, steps, a, b), device="cpu", record_cmd=True
                )
                for a, b in self._chunks
            ]
            self._chunk_launches[key] = launches
        futures = [self._pool.submit(launch.launch) for launch in launches[1:]]
        launches[0].launch()
        for f in futures:
            f.result()

    def _record_run(self, per_step: bool) -> None:
        W = self.num_worlds
        actions = self._staging_flat if per_step else None
        steps = self._run_k if per_step else self._one
        self._engine(
            "validate_actions", self._validate_kernel, W, [self._errors, steps, *(actions or self._action_flat)]
        )
        self._engine("gate_step", ek.gate_step, 1, [self._errors, self._ok, self._any_done])
        if self._fused is not None:
            fused = self._fused_per_step if per_step else self._fused
            wp.capture_if(condition=self._ok, on_true=lambda: self._launch_fused(fused, self._run_k))
        else:
            wp.capture_if(condition=self._ok, on_true=lambda: self._record_loop(actions))
        self._record_flag_copies()

    def _record_loop(self, actions: list[wp.array] | None) -> None:
        self._engine("start_loop", ek.start_loop, 1, [self._run_k, self._loop_cond, self._loop_index])

        def body() -> None:
            if actions is not None:
                pairs = [x for a, d in zip(actions, self._action_flat2d, strict=True) for x in (a, d)]
                self._engine("load_actions", self._load_actions_kernel, self.num_worlds, [self._loop_index, *pairs])
            self._record_step_body()
            self._engine("next_iteration", ek.next_iteration, 1, [self._run_k, self._loop_cond, self._loop_index])

        wp.capture_while(condition=self._loop_cond, while_body=body)

    def _record_step_body(self) -> None:
        W, s = self.num_worlds, self.singletons
        self.singletons["reward"].zero_()
        horizon = int(self.env.max_episode_steps)
        self._engine("begin_step", ek.begin_step, W, [horizon, s["episode_step"], s["terminated"], s["truncated"]])
        self._run_phases(_BEFORE_RESET)
        self._engine("finish_step", ek.finish_step, W, [s["terminated"], s["truncated"], s["reset"], self._any_done])
        wp.capture_if(condition=self._any_done, on_true=self._record_same_step_reset)
        self._run_phases(_OBSERVE)

    def _record_same_step_reset(self) -> None:
        # Observe the last state of the ended episodes, keep it in final_obs, then reset them.
        self._run_phases(_OBSERVE)
        self._engine(
            "copy_final_obs", self._final_obs_kernel, self.num_worlds, [self.singletons["reset"], *self._obs_pairs]
        )
        self._begin_episode(clear_outputs=0)
        self._run_phases((Phase.RESET,))

    def _record_reset(self) -> None:
        self._engine(
            "request_reset", ek.request_reset, self.num_worlds, [self._reset_request, self.singletons["reset"]]
        )
        self._begin_episode(clear_outputs=1)
        self._run_phases((Phase.RESET, *_OBSERVE))

    def _capture(self, record: Callable[[], None]) -> Any:
        with wp.ScopedCapture(device=self.device, force_module_load=False) as capture:
            record()
        return capture.graph

    # -- public API --------------------------------------------------------------------------

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
        if not self._is_cpu:
            self._raise_pending()
        self._validated = ("step()", 0)
        if self._threaded_step:
            self._parallel_fused(self._fused, self._one, self._action_flat, self._one)
        elif self._step_graph is not None:
            wp.capture_launch(self._step_graph)
        else:
            self._record_step()
        if self._is_cpu:
            self._raise_pending()

    @property
    def fused(self) -> bool:
        """Whether each step runs as one generated kernel (see ``fuse=``)."""
        return self._fused is not None

    @property
    def step_bytes(self) -> tuple[int, int] | None:
        """Bytes a fused step reads and writes per world, or None when not fused.

        They are the singletons the step carries or writes and every row of the entity columns its
        systems touch; not parameters (often one shared value) nor final observations (written only
        when an episode ends). The action check before the step reads the actions once more.
        """
        return None if self._fused is None else (self._fused.read_bytes, self._fused.write_bytes)

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
        if not self._is_cpu:
            self._raise_pending()
        self._validated = (f"run({k}, actions)", k) if per_step else (f"run({k})", 0)
        if k != self._last_k:
            self._run_k.fill_(k)
            self._last_k = k
        if self._pool is not None and self.num_worlds * k >= self._threaded_run_min:
            fused = self._fused_per_step if per_step else self._fused
            if per_step:
                self._parallel_fused(fused, self._run_k, self._staging_flat, self._run_k)
            else:
                self._parallel_fused(fused, self._run_k, self._action_flat, self._one)
        elif not self._capture_enabled:
            self._record_run(per_step)
        else:
            graph = self._run_graphs.get(per_step)
            if graph is None:
                graph = self._run_graphs[per_step] = self._capture(lambda: self._record_run(per_step))
            wp.capture_launch(graph)
        if self._is_cpu:
            self._raise_pending()

    def _stage_actions(self, k: int, actions: Mapping[str, Any]) -> None:
        keys = set(self._action_keys)
        if set(actions) != keys:
            raise ActionError(f"run(k, actions) needs exactly the keys {sorted(keys)}, got {sorted(actions)}")
        checked = {key: self.actions._checked(key, value, steps=k) for key, value in actions.items()}
        if k > self._staging_steps:
            for key in self._action_keys:
                comp = self.env.actions[key].component
                self._staging[key] = wp.zeros((k, self.num_worlds, *comp.shape), dtype=comp.dtype, device=self.device)
            self._staging_steps = k
            self._staging_t = {key: wp.to_torch(a) for key, a in self._staging.items()}
            self._staging_flat = [self._flat(self._staging[key], k) for key in self._action_keys]
            if self._fused is not None:
                self._fused_per_step = build_fused(
                    self.graph,
                    self._layout,
                    self.env,
                    per_step_actions=True,
                    schedule_seed=self._schedule_seed,
                    device_is_cpu=self._is_cpu,
                )
                wp.load_module(self._fused_per_step.kernel.module, device=self.device)
            self._run_graphs.pop(True, None)
            self._chunk_launches.clear()
        for key, value in checked.items():
            self._staging_t[key][:k].copy_(value)

    def reset(self, mask: Any = None) -> None:
        """Resets every world, or the worlds where ``mask`` (bool, ``[num_worlds]``) is true."""
        self._views.request_reset(mask)
        if self._reset_graph is not None:
            wp.capture_launch(self._reset_graph)
        else:
            self._record_reset()
        if self._is_cpu:
            self._raise_pending()

    def reseed(self, seed: int) -> None:
        """Draws every later episode from ``seed``, restarts the episode counters and resets every world.

        Afterwards world ``w`` draws the random numbers of a freshly built ``BatchSim`` with this seed
        and world offset (episode 0 first), so its trajectory under the same actions is the same.
        """
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**31:
            raise EcsError(f"seed must be an int in [0, 2**31), got {seed!r}")
        self.seed = int(seed)
        self._seed.assign(np.array([self.seed], dtype=np.int32))
        self.singletons["episode"].fill_(-1)
        self.reset()

    def check(self) -> None:
        """Synchronises with the device and raises any pending ActionError or CapacityError."""
        wp.synchronize_device(self.device)
        if not self._is_cpu:
            for src, dst in zip([self._errors, *self.overflow.values()], self._flag_mirrors, strict=True):
                wp.copy(dst, src)
            wp.synchronize_device(self.device)
        self._raise_pending()

    def _clear_flags(self) -> None:
        for arr, mirror in zip([self._errors, *self.overflow.values()], self._flag_mirrors, strict=True):
            arr.assign(np.array([0, _INT32_MAX], dtype=np.int32))
            if mirror is not arr:
                mirror.numpy()[:] = (0, _INT32_MAX)

    def _raise_pending(self) -> None:
        errors, *overflows = self._flag_np
        if errors[0] == 0 and all(o[0] == 0 for o in overflows):
            return
        count = int(errors[0])
        over = [(a, int(o[0]), int(o[1])) for a, o in zip(self.overflow, overflows, strict=True) if o[0] > 0]
        self._clear_flags()
        if count:
            raise self._action_error(count)
        arch, n, world = over[0]
        cap = self.env_archetype(arch).capacity
        raise CapacityError(
            f"archetype {arch!r} is full: {n} spawn(s) failed (first in world {world}) because its capacity is {cap} "
            f"entities per world. Raise capacity in Archetype({arch!r}, ..., capacity=...) or despawn sooner."
        )

    _validated: tuple[str, int] = ("step()", 0)  # the call whose actions the last validation read

    def _action_error(self, count: int) -> ActionError:
        """The first invalid action of the call that was validated, found on the host (an error path only)."""
        call, staged = self._validated
        for key in self._action_keys:
            action = self.env.actions[key]
            values = (self._staging_t[key][:staged] if staged else self.actions[key][None]).cpu().numpy()
            if action.discrete:
                bad = (values < action.low) | (values > action.high)
                expected = f"integers in [{int(action.low)}, {int(action.high)}]"
            else:
                bad = ~np.isfinite(values)
                expected = "finite floats (no NaN or infinity)"
            if bad.any():
                step, world = (int(i) for i in np.argwhere(bad)[0][:2])
                where = f"actions[{key!r}][{step}] (step {step} of the run)" if staged else f"sim.actions[{key!r}]"
                return ActionError(
                    f"invalid action in {call}: {where} of world {world} is {values[step, world].tolist()}, but it "
                    f"must hold {expected} ({count} invalid value(s) in all). No world was advanced; fix the actions "
                    f"and call {call.split('(')[0]}() again."
                )
        return ActionError(
            f"invalid action in {call} ({count} invalid value(s)), no longer present in the actions; no world was advanced"
        )

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
        return estimate(self._layout, self.env, self.num_worlds)

    # -- state -------------------------------------------------------------------------------

    def _state_arrays(self) -> dict[str, wp.array]:
        arrays: dict[str, wp.array] = {}
        for a, cols in self.tables.items():
            for c, arr in cols.items():
                arrays[f"table/{a}/{c}"] = arr
            arrays[f"overflow/{a}"] = self.overflow[a]
        for n, arr in self.singletons.items():
            arrays[f"singleton/{n}"] = arr
        for n, arr in self._params.items():
            arrays[f"param/{n}"] = arr
        for k, arr in self._final_obs.items():
            arrays[f"final_obs/{k}"] = arr
        return arrays

    def state_dict(self) -> dict[str, Any]:
        """The full simulation state as numpy arrays plus metadata; restoring it continues bit-identically."""
        self.check()
        return {
            "format_version": STATE_FORMAT_VERSION,
            "env": self.env.name,
            "config": _config_dict(self.env.config),
            "num_worlds": self.num_worlds,
            "seed": self.seed,
            "world_offset": self.world_offset,
            "arrays": {k: v.numpy().copy() for k, v in self._state_arrays().items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores ``state_dict()`` output. Everything is checked before anything is written."""
        if not isinstance(state, Mapping) or "arrays" not in state:
            raise StateDictError("not a BatchSim state dict: expected a mapping with 'arrays' (from sim.state_dict())")
        if state.get("format_version") != STATE_FORMAT_VERSION:
            raise StateDictError(
                f"state dict format version {state.get('format_version')!r} is not supported; this engine reads "
                f"version {STATE_FORMAT_VERSION}"
            )
        for field, mine in (("env", self.env.name), ("num_worlds", self.num_worlds)):
            if state.get(field) != mine:
                raise StateDictError(
                    f"state dict is for {field}={state.get(field)!r}, this simulation has {field}={mine!r}"
                )
        if state.get("config") != _config_dict(self.env.config):
            raise StateDictError(
                "state dict was saved with a different env config; build the BatchSim with the same config "
                f"(saved: {state.get('config')!r})"
            )
        seed, world_offset = state.get("seed"), state.get("world_offset")
        for label, value in (("seed", seed), ("world_offset", world_offset)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < 2**31:
                raise StateDictError(f"state dict {label} must be an int in [0, 2**31), got {value!r}")
        if world_offset + self.num_worlds > 2**31:
            raise StateDictError(f"state dict world_offset {world_offset} + num_worlds exceeds 2**31 global worlds")
        arrays, mine = state["arrays"], self._state_arrays()
        missing, extra = sorted(set(mine) - set(arrays)), sorted(set(arrays) - set(mine))
        if missing or extra:
            raise StateDictError(f"state dict arrays do not match: missing {missing}, unexpected {extra}")
        for k, arr in mine.items():
            v = np.asarray(arrays[k])
            want = arr.numpy() if self._is_cpu else None
            shape = tuple(arr.shape) + dtype_shape(arr.dtype)
            dtype = want.dtype if want is not None else np.dtype(wp.dtype_to_numpy(scalar_type(arr.dtype)))
            if v.shape != shape or v.dtype != dtype:
                raise StateDictError(f"state dict array {k!r} is {v.dtype}{v.shape}, expected {dtype}{shape}")
        components = dict(self._layout.singletons)
        for a in self.env.archetypes:
            components.update({c.name: c for c in a.components})
        capacities = {a.name: a.capacity for a in self.env.archetypes}
        check_values({k: np.asarray(arrays[k]) for k in mine}, components=components, capacities=capacities)
        for k, arr in mine.items():
            arr.assign(np.asarray(arrays[k]))
        # The captured reset reads seed and world offset from device arrays: update those too, or
        # the next episode would draw from this simulation's construction seed.
        self.seed, self.world_offset = int(seed), int(world_offset)
        self._seed.assign(np.array([self.seed], dtype=np.int32))
        self._world_offset.assign(np.array([self.world_offset], dtype=np.int32))
        self._clear_flags()

    def save(self, path: str | os.PathLike) -> None:
        """Writes ``state_dict()`` to ``path`` atomically (a temporary file beside it, then a rename).

        A crash while saving leaves the previous file intact.
        """
        save_state(self.state_dict(), path)

    def load(self, path: str | os.PathLike) -> None:
        """Restores a file written by ``save``; checked like ``load_state_dict``, nothing changes on error."""
        self.load_state_dict(load_state(path))

    # -- profiling ---------------------------------------------------------------------------

    def profile(self, steps: int = 100):
        """Times every system over ``steps`` eager steps; the simulation state is restored afterwards.

        Returns:
            ``Profile``: a tree of phases and systems with mean time per step and share of the step;
            ``print()`` it. The captured step's mean wall time is measured separately.
        """
        from .profiling import Profile

        if not isinstance(steps, int) or steps < 1:
            raise EcsError(f"profile steps must be an int >= 1, got {steps!r}")
        saved = self.state_dict()
        fused = self._fused
        try:
            # Per-system times come from the unfused step, launched eagerly.
            self._timer, self._fused = {}, None
            for _ in range(steps):
                self._record_step()
            timer, self._timer, self._fused = self._timer, None, fused
            self.load_state_dict(saved)
            wp.synchronize_device(self.device)
            t0 = time.perf_counter()
            for _ in range(steps):
                self.step()
            wp.synchronize_device(self.device)
            captured = (time.perf_counter() - t0) / steps
        finally:
            self._timer, self._fused = None, fused
            self.load_state_dict(saved)
        return Profile.from_timer(timer, steps, captured, self)

    def __reduce__(self):
        """Refuses pickling: a live simulation holds device memory and captured graphs."""
        raise TypeError(
            f"a BatchSim ({self.env.name!r}, {self.num_worlds} worlds on {self.device}) cannot be pickled: it holds "
            "device arrays and captured graphs. Build the BatchSim inside the worker process instead (pass "
            "envs.make(...) arguments, not the sim); to run more environments, raise num_worlds rather than "
            "concatenating vector envs in subprocesses; to copy the state, use sim.state_dict() or sim.save(path)"
        )


def _config_dict(cfg: Any) -> Any:
    if dataclasses.is_dataclass(cfg):
        return {k: _plain(v) for k, v in dataclasses.asdict(cfg).items()}
    return cfg


def _plain(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return v
