"""Benchmark suite: the data-collection experiments of Gleeson et al. 2022 on cartpole.

"Optimizing Data Collection in Deep Reinforcement Learning" compares GPU-vectorised simulators
with CPU ones, an ML compiler with eager PyTorch at small batch sizes, and fusing K simulator
steps into one kernel (with more gain for memory-bound simulators). This script repeats those
experiments for this engine:

1. **Throughput vs worlds** (their Figure 4): cartpole world-steps per second for ``N = 2^min ..
   2^max`` worlds, for each backend below, and for ``K`` steps per call.
2. **K-step fusion** (their Figure 8): ``sim.run(K)`` runs K steps as one generated kernel; its
   speedup over ``K = 1``, for several ``N``.
3. **State and compute factors** (their Figure 9): a cartpole variant carrying ``S`` extra float32
   values per world (memory-bound knob) and integrating in ``C`` substeps (compute-bound knob),
   built with the public ``ecs`` API in ``factor_env.py``; the gain of K-step fusion vs ``S`` and ``C``.
4. ``--overhead``: launch overhead, an env of 20 tiny systems at 64 worlds, captured step vs eager
   launches.
5. ``--bandwidth``: the fused cartpole ``step()`` against the device's memory-bandwidth bound for
   the bytes it must move per world-step (``bench_bandwidth`` states the arithmetic), and the host
   time of one ``step()``.

Backends (``--backends``; each is skipped, with the reason printed, where it cannot run):

| name | what one call does |
|---|---|
| ``gym-vector`` | Gymnasium's numpy ``CartPoleVectorEnv``: K ``step()`` calls |
| ``gym-sync`` | Gymnasium's ``SyncVectorEnv`` of ``CartPole-v1`` (N <= 2^``--sync-max-log2`` only): K ``step()`` calls |
| ``torch-cpu``, ``torch-cuda`` | an eager vectorised torch cartpole (this file; same float32 dynamics as ``envs/cartpole``, same-step auto-reset): K steps; cuda only where present |
| ``jax`` | the same cartpole under ``jax.jit`` with ``lax.scan`` over the K steps (only where ``jax`` imports) |
| ``engine-eager`` | ``BatchSim(capture=False, fuse=False)``: K ``step()`` calls, every kernel launched from Python |
| ``engine-captured`` | ``BatchSim(fuse=False)``: K ``step()`` calls, one captured graph replay each |
| ``engine-fused`` | ``BatchSim(fuse=True)``: K ``step()`` calls, one generated kernel each |
| ``engine-fused-run`` | ``BatchSim(fuse=True)``: one ``sim.run(K)``, K steps in one kernel launch |
| ``engine-captured-run`` | ``BatchSim(fuse=False)``: one ``sim.run(K)`` (graph loop; not run unless named) |

**Actions**: random. A pool of 16 batches of uniform {0, 1} actions is drawn before timing; call
``i`` hands batch ``i mod 16`` to the backend and holds it for all K steps of the call (as
``sim.run(K)`` with no ``actions`` holds ``sim.actions``), for every backend alike.

**Timing**: per world count, every (backend, K) cell gets an untimed warm-up (at least two calls,
``--warmup`` seconds; JIT compiles and graph captures happen here), then a calibration call sizes
its timed window to about ``--window`` seconds. Then ``--repeats`` windows of every cell are
timed, interleaved across cells so that a noisy machine hurts them alike; the device is
synchronised before each clock read and garbage collection is paused. The rate is the median
window's world-steps per second (``N * K * calls / seconds``). A cell whose one call takes more
than ``--cell-cap`` seconds is skipped; otherwise its repeats are cut so its windows fit in the cap.

Backends that loop K single steps in Python (all but ``jax`` and the ``*-run`` ones) do the same
work per step for any K, so by default they are measured at the smallest K only;
``--loop-all-k`` measures them at every K.

    python examples/benchmarks/bench_suite.py --json suite.json --plots suite-plots --overhead
    python examples/benchmarks/bench_suite.py --full                 # N up to 2^20
    python examples/benchmarks/bench_suite.py --min-log2 0 --max-log2 2 --ks 1 10 --repeats 1
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # factor_env.py lives next to this script

ALL_BACKENDS = (
    "gym-vector",
    "gym-sync",
    "torch-cpu",
    "torch-cuda",
    "jax",
    "engine-eager",
    "engine-captured",
    "engine-fused",
    "engine-fused-run",
    "engine-captured-run",
)
DEFAULT_BACKENDS = tuple(b for b in ALL_BACKENDS if b != "engine-captured-run")
K_NATIVE = ("jax", "engine-fused-run", "engine-captured-run")  # one call runs K steps without Python
POOL = 16  # action batches drawn before timing


@dataclass(frozen=True)
class CartpoleConsts:
    """Gymnasium CartPole-v1 (and ``envs/cartpole``) constants."""

    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5
    force_mag: float = 10.0
    tau: float = 0.02
    x_threshold: float = 2.4
    theta_threshold: float = 12.0 * 2.0 * math.pi / 360.0
    reset_noise: float = 0.05
    max_episode_steps: int = 500
    pad_decay: float = 0.999


CP = CartpoleConsts()


@dataclass
class Stepper:
    """One cell: ``call(i)`` advances all ``num_worlds`` worlds ``k`` steps with action batch ``i``."""

    backend: str
    num_worlds: int
    k: int
    call: Callable[[int], None]
    sync: Callable[[], None]
    calls: int = 1
    repeats: int = 0
    seconds: list[float] = field(default_factory=list)
    skipped: str | None = None
    next_i: int = 0

    def run(self, calls: int) -> float:
        """Seconds for ``calls`` calls, device synchronised before each clock read."""
        self.sync()
        t0 = time.perf_counter()
        for i in range(self.next_i, self.next_i + calls):
            self.call(i)
        self.sync()
        self.next_i += calls
        return time.perf_counter() - t0

    def row(self) -> dict[str, Any]:
        rate = None
        if self.seconds and self.skipped is None:
            rate = self.num_worlds * self.k * self.calls / statistics.median(self.seconds)
        return {
            "backend": self.backend,
            "num_worlds": self.num_worlds,
            "k": self.k,
            "rate": rate,
            "calls_per_window": self.calls,
            "seconds": self.seconds,
            "skipped": self.skipped,
        }


# -- eager torch cartpole ------------------------------------------------------------------------


class TorchCartpole:
    """Vectorised cartpole in eager torch, float32, structure of arrays, same-step auto-reset.

    The same operations in the same order as ``envs/cartpole/kernels.py`` (Gymnasium's order);
    ``pad`` carries that many extra float32 values per world (scaled by ``pad_decay`` each step,
    set to 1 on reset) and ``substeps`` integrates in that many Euler substeps (the factor sweep).
    """

    def __init__(self, num_worlds: int, device: str, seed: int, *, pad: int = 0, substeps: int = 1) -> None:
        import torch

        self.torch = torch
        self.n, self.device, self.substeps = num_worlds, device, substeps
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.state = self._noise()  # [4, N]: x, x_dot, theta, theta_dot
        self.final_obs = torch.zeros_like(self.state)
        self.steps = torch.zeros(num_worlds, dtype=torch.int32, device=device)
        self.pad = torch.ones(num_worlds, pad, device=device) if pad else None
        self.reward = torch.zeros(num_worlds, device=device)
        self.terminated = torch.zeros(num_worlds, dtype=torch.bool, device=device)
        self.truncated = torch.zeros_like(self.terminated)

    def _noise(self):
        t = self.torch.rand(4, self.n, generator=self.gen, device=self.device)
        return t * (2.0 * CP.reset_noise) - CP.reset_noise

    def step(self, action) -> None:
        torch = self.torch
        x, x_dot, theta, theta_dot = self.state.unbind(0)
        force = torch.where(action == 1, CP.force_mag, -CP.force_mag)
        total_mass = CP.masspole + CP.masscart
        polemass_length = CP.masspole * CP.length
        dt = CP.tau / self.substeps if self.substeps > 1 else CP.tau
        for _ in range(self.substeps):
            costheta = torch.cos(theta)
            sintheta = torch.sin(theta)
            temp = (force + polemass_length * theta_dot * theta_dot * sintheta) / total_mass
            thetaacc = (CP.gravity * sintheta - costheta * temp) / (
                CP.length * (4.0 / 3.0 - CP.masspole * costheta * costheta / total_mass)
            )
            xacc = temp - polemass_length * thetaacc * costheta / total_mass
            x = x + dt * x_dot
            x_dot = x_dot + dt * xacc
            theta = theta + dt * theta_dot
            theta_dot = theta_dot + dt * thetaacc
        new = torch.stack((x, x_dot, theta, theta_dot))
        if self.pad is not None:
            self.pad.mul_(CP.pad_decay)
        fell = (x < -CP.x_threshold) | (x > CP.x_threshold) | (theta < -CP.theta_threshold)
        fell |= theta > CP.theta_threshold
        self.steps += 1
        truncated = (self.steps >= CP.max_episode_steps) & ~fell
        done = fell | truncated
        self.reward.fill_(1.0)
        self.terminated.copy_(fell)
        self.truncated.copy_(truncated)
        self.final_obs = torch.where(done, new, self.final_obs)
        self.state = torch.where(done, self._noise(), new)
        self.steps.masked_fill_(done, 0)
        if self.pad is not None:
            self.pad.masked_fill_(done[:, None], 1.0)


# -- JAX cartpole --------------------------------------------------------------------------------


def jax_status() -> str | None:
    """None when JAX is importable, else the reason it is skipped."""
    try:
        import jax  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        return f"jax is not importable ({type(e).__name__}: {e}); pip install jax"
    return None


def make_jax_runner(num_worlds: int, seed: int):
    """(init carry, {k: jitted run of k steps}) for the JAX cartpole, same dynamics as the torch one."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    n = num_worlds

    def noise(key):
        return jax.random.uniform(key, (4, n), jnp.float32, -CP.reset_noise, CP.reset_noise)

    def one_step(carry, action):
        state, steps, key, final_obs, _reward, _term, _trunc = carry
        x, x_dot, theta, theta_dot = state
        force = jnp.where(action == 1, jnp.float32(CP.force_mag), jnp.float32(-CP.force_mag))
        total_mass = CP.masspole + CP.masscart
        polemass_length = CP.masspole * CP.length
        costheta = jnp.cos(theta)
        sintheta = jnp.sin(theta)
        temp = (force + polemass_length * theta_dot * theta_dot * sintheta) / total_mass
        thetaacc = (CP.gravity * sintheta - costheta * temp) / (
            CP.length * (4.0 / 3.0 - CP.masspole * costheta * costheta / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        new = jnp.stack(
            (x + CP.tau * x_dot, x_dot + CP.tau * xacc, theta + CP.tau * theta_dot, theta_dot + CP.tau * thetaacc)
        )
        fell = (new[0] < -CP.x_threshold) | (new[0] > CP.x_threshold)
        fell = fell | (new[2] < -CP.theta_threshold) | (new[2] > CP.theta_threshold)
        steps = steps + 1
        trunc = (steps >= CP.max_episode_steps) & ~fell
        done = fell | trunc
        key, sub = jax.random.split(key)
        final_obs = jnp.where(done, new, final_obs)
        state = jnp.where(done, noise(sub), new)
        steps = jnp.where(done, 0, steps)
        return state, steps, key, final_obs, jnp.ones(n, jnp.float32), fell, trunc

    def run(carry, action, k):
        return lax.scan(lambda c, _: (one_step(c, action), None), carry, None, length=k)[0]

    # The first state from numpy: no per-N compile of the random-number kernels before timing.
    rng = np.random.default_rng(seed)
    state = jnp.asarray(rng.uniform(-CP.reset_noise, CP.reset_noise, size=(4, n)).astype(np.float32))
    key = jax.random.PRNGKey(seed)
    carry = (
        state,
        jnp.zeros(n, jnp.int32),
        key,
        jnp.zeros_like(state),
        jnp.zeros(n, jnp.float32),
        jnp.zeros(n, bool),
        jnp.zeros(n, bool),
    )
    return carry, lambda k: jax.jit(lambda c, a: run(c, a, k))


# -- building the cells --------------------------------------------------------------------------


class Context:
    """What the steppers of one world count share: the action pool, devices, options."""

    def __init__(self, args: argparse.Namespace, engine_device: str, num_worlds: int) -> None:
        self.args, self.engine_device, self.n = args, engine_device, num_worlds
        rng = np.random.default_rng(args.seed + num_worlds)
        self.pool_np = rng.integers(0, 2, size=(POOL, num_worlds), dtype=np.int32)
        self._sims: dict[str, Any] = {}
        self._pools: dict[str, Any] = {}

    def torch_pool(self, device: str):
        import torch

        if device not in self._pools:
            self._pools[device] = torch.from_numpy(self.pool_np).to(device)
        return self._pools[device]

    def sim(self, kind: str, env_factory: Callable[[], Any] | None = None, key: str = "cartpole"):
        """The BatchSim of one kind (eager, captured, fused) of env ``key``, built once per context."""
        if (kind, key) not in self._sims:
            import ecs
            import envs

            env = env_factory() if env_factory is not None else envs.make("cartpole")
            options = {
                "eager": {"capture": False, "fuse": False},
                "captured": {"fuse": False},
                "fused": {"fuse": True},
            }[kind]
            self._sims[kind, key] = ecs.BatchSim(env, self.n, device=self.engine_device, seed=self.args.seed, **options)
        return self._sims[kind, key]

    def check(self) -> None:
        for sim in self._sims.values():
            sim.check()


def engine_stepper(ctx: Context, backend: str, k: int, sim) -> Stepper:
    import warp as wp

    push = sim.actions["push"]
    pool = ctx.torch_pool(str(push.device))
    dev = sim.device

    if backend.endswith("-run"):

        def call(i: int) -> None:
            push.copy_(pool[i % POOL])  # in place, as a trainer writes its actions
            sim.run(k)

    else:

        def call(i: int) -> None:
            push.copy_(pool[i % POOL])
            for _ in range(k):
                sim.step()

    return Stepper(backend, ctx.n, k, call, lambda: wp.synchronize_device(dev))


def torch_stepper(ctx: Context, backend: str, k: int, env: TorchCartpole) -> Stepper:
    import torch

    pool = ctx.torch_pool(env.device)

    def call(i: int) -> None:
        action = pool[i % POOL]
        for _ in range(k):
            env.step(action)

    sync = torch.cuda.synchronize if env.device.startswith("cuda") else (lambda: None)
    return Stepper(backend, ctx.n, k, call, sync)


def backend_skip_reason(backend: str, n: int, args: argparse.Namespace) -> str | None:
    if backend == "gym-sync" and n > 2**args.sync_max_log2:
        return f"SyncVectorEnv only up to N = 2^{args.sync_max_log2} (--sync-max-log2)"
    if backend == "torch-cuda":
        import torch

        if not torch.cuda.is_available():
            return "no CUDA device for torch"
    if backend == "jax":
        return jax_status()
    return None


def make_steppers(ctx: Context, backend: str, ks: list[int]) -> list[Stepper]:
    """The cells of one backend at one world count (one per K it is measured at)."""
    args, n = ctx.args, ctx.n
    if backend not in K_NATIVE and not args.loop_all_k:
        ks = ks[:1]
    if backend == "gym-vector":
        from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

        env = CartPoleVectorEnv(num_envs=n)
        env.reset(seed=args.seed)
        return [_gym_stepper(ctx, backend, k, env) for k in ks]
    if backend == "gym-sync":
        import gymnasium as gym
        from gymnasium.vector import SyncVectorEnv

        env = SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n)])
        env.reset(seed=args.seed)
        return [_gym_stepper(ctx, backend, k, env) for k in ks]
    if backend in ("torch-cpu", "torch-cuda"):
        env = TorchCartpole(n, "cpu" if backend == "torch-cpu" else "cuda", args.seed)
        return [torch_stepper(ctx, backend, k, env) for k in ks]
    if backend == "jax":
        import jax

        carry, compile_k = make_jax_runner(n, args.seed)
        pool = jax.device_put(ctx.pool_np)
        pool = [pool[i] for i in range(POOL)]
        holder = {"carry": carry}
        steppers = []
        for k in ks:
            fn = compile_k(k)

            def call(i: int, fn=fn) -> None:
                holder["carry"] = fn(holder["carry"], pool[i % POOL])

            steppers.append(Stepper(backend, n, k, call, lambda: jax.block_until_ready(holder["carry"])))
        return steppers
    kind = {
        "engine-eager": "eager",
        "engine-captured": "captured",
        "engine-captured-run": "captured",
        "engine-fused": "fused",
        "engine-fused-run": "fused",
    }[backend]
    sim = ctx.sim(kind)
    return [engine_stepper(ctx, backend, k, sim) for k in ks]


def _gym_stepper(ctx: Context, backend: str, k: int, env) -> Stepper:
    pool = ctx.pool_np

    def call(i: int) -> None:
        action = pool[i % POOL]
        for _ in range(k):
            env.step(action)

    return Stepper(backend, ctx.n, k, call, lambda: None)


# -- measuring -----------------------------------------------------------------------------------


def measure(steppers: list[Stepper], args: argparse.Namespace) -> None:
    """Warm-up and calibration per cell, then ``repeats`` interleaved timed windows of every cell.

    Garbage collection is off throughout (a collection inside a window would be charged to
    whichever backend happened to allocate); it runs once before each round of windows.
    """
    gc.collect()
    gc.disable()
    try:
        for st in steppers:
            if st.skipped:
                continue
            try:
                t0 = time.perf_counter()
                calls = 0
                while calls < 2 or time.perf_counter() - t0 < args.warmup:
                    st.run(1)
                    calls += 1
                    if time.perf_counter() - t0 > args.cell_cap:
                        break
                per_call = st.run(1)
                if per_call > args.cell_cap:
                    st.skipped = f"one call takes {per_call:.1f} s > --cell-cap {args.cell_cap} s"
                    continue
                st.calls = max(1, math.ceil(args.window / max(per_call, 1e-9)))
                st.repeats = min(args.repeats, max(1, int(args.cell_cap // (st.calls * per_call))))
            except Exception as e:  # one backend failing (e.g. out of memory) must not end the suite
                st.skipped = f"failed: {type(e).__name__}: {e}"
        for r in range(args.repeats):
            gc.collect()
            for st in steppers:
                if st.skipped is None and r < st.repeats:
                    st.seconds.append(st.run(st.calls))
    finally:
        gc.enable()


def bench_throughput(args: argparse.Namespace, engine_device: str) -> list[dict]:
    rows: list[dict] = []
    ks = sorted(set(args.ks))
    print(
        f"\n== throughput: cartpole world-steps/s, engine on {engine_device}; median of {args.repeats} windows "
        f"of ~{args.window} s; random actions held for the K steps of a call =="
    )
    reported_skips: set[tuple[str, str]] = set()
    for log2 in range(args.min_log2, args.max_log2 + 1):
        n = 2**log2
        ctx = Context(args, engine_device, n)
        steppers: list[Stepper] = []
        for backend in args.backends:
            reason = backend_skip_reason(backend, n, args)
            if reason is not None:
                if (backend, reason) not in reported_skips:
                    print(f"  skip {backend}: {reason}")
                    reported_skips.add((backend, reason))
                rows.append({"backend": backend, "num_worlds": n, "k": None, "rate": None, "skipped": reason})
                continue
            try:
                steppers += make_steppers(ctx, backend, ks)
            except Exception as e:
                reason = f"failed to build: {type(e).__name__}: {e}"
                print(f"  skip {backend} at N={n}: {reason}")
                rows.append({"backend": backend, "num_worlds": n, "k": None, "rate": None, "skipped": reason})
        t0 = time.perf_counter()
        measure(steppers, args)
        ctx.check()  # an invalid action would have raised; nothing may be pending
        new = [st.row() for st in steppers]
        rows += new
        print(f"  N = 2^{log2} = {n}: {len(steppers)} cells in {time.perf_counter() - t0:.1f} s", flush=True)
        for st in steppers:
            if st.skipped:
                print(f"    skipped {st.backend} K={st.k}: {st.skipped}")
    return rows


# -- state and compute factors -------------------------------------------------------------------


def bench_factors(args: argparse.Namespace, engine_device: str) -> dict:
    """Engine captured / fused / fused run(K) and eager torch, for each state factor S and compute factor C."""
    import factor_env

    n = args.factor_num_worlds
    k = args.factor_k
    configs = [(s, 1) for s in args.states] + [(0, c) for c in args.computes if c != 1]
    configs = list(dict.fromkeys(configs))
    print(
        f"\n== factors: cartpole + S carried floats, C substeps; N = {n}, fused run(K={k}) vs K = 1; "
        f"engine on {engine_device} =="
    )
    ctx = Context(args, engine_device, n)
    steppers: list[Stepper] = []
    labels: list[tuple[int, int, Stepper]] = []
    for s, c in configs:

        def factory(s=s, c=c):
            return factor_env.make_factor_env(state_factor=s, compute_factor=c)

        for backend, kk, kind in (
            ("engine-captured", 1, "captured"),
            ("engine-fused", 1, "fused"),
            ("engine-fused-run", k, "fused"),
        ):
            st = engine_stepper(ctx, backend, kk, ctx.sim(kind, factory, key=f"s{s}_c{c}"))
            steppers.append(st)
            labels.append((s, c, st))
        if "torch-cpu" in args.backends or "torch-cuda" in args.backends:
            tdev = "cuda" if engine_device.startswith("cuda") else "cpu"
            env = TorchCartpole(n, tdev, args.seed, pad=s, substeps=c)
            st = torch_stepper(ctx, f"torch-{tdev}", 1, env)
            steppers.append(st)
            labels.append((s, c, st))
    t0 = time.perf_counter()
    measure(steppers, args)
    ctx.check()
    rows = []
    for s, c, st in labels:
        row = st.row()
        row.update(state_factor=s, compute_factor=c)
        rows.append(row)
    print(f"  {len(steppers)} cells in {time.perf_counter() - t0:.1f} s")
    return {"num_worlds": n, "k": k, "states": list(args.states), "computes": list(args.computes), "rows": rows}


# -- launch overhead -----------------------------------------------------------------------------


def bench_overhead(args: argparse.Namespace, engine_device: str) -> dict:
    """A 20-system env at 64 worlds: eager launches vs the captured step (and the fused step)."""
    import factor_env
    import torch
    import warp as wp

    import ecs

    n, systems = args.overhead_num_worlds, args.overhead_systems
    print(f"\n== overhead: {systems} chained systems, {n} worlds, engine on {engine_device} ==")
    steppers, sims = [], []
    rng = np.random.default_rng(args.seed)
    pool_np = rng.integers(0, 2, size=(POOL, n), dtype=np.int32)
    for backend, options in (
        ("engine-eager", {"capture": False, "fuse": False}),
        ("engine-captured", {"fuse": False}),
        ("engine-fused", {"fuse": True}),
    ):
        sim = ecs.BatchSim(factor_env.make_chain_env(systems), n, device=engine_device, seed=args.seed, **options)
        sims.append(sim)
        nudge = sim.actions["nudge"]
        pool = torch.from_numpy(pool_np).to(nudge.device)

        def call(i: int, sim=sim, nudge=nudge, pool=pool) -> None:
            nudge.copy_(pool[i % POOL])
            sim.step()

        steppers.append(Stepper(backend, n, 1, call, lambda dev=sim.device: wp.synchronize_device(dev)))
    measure(steppers, args)
    out: dict[str, Any] = {"num_worlds": n, "systems": systems, "system_kernels": len(sims[0].graph.tasks), "rows": []}
    per_step = {}
    for st in steppers:
        row = st.row()
        out["rows"].append(row)
        if row["rate"]:
            per_step[st.backend] = n / row["rate"]
    for key, value in per_step.items():
        out[f"{key.replace('-', '_')}_us_per_step"] = value * 1e6
    if "engine-eager" in per_step and "engine-captured" in per_step:
        out["eager_over_captured"] = per_step["engine-eager"] / per_step["engine-captured"]
    if "engine-eager" in per_step and "engine-fused" in per_step:
        out["eager_over_fused"] = per_step["engine-eager"] / per_step["engine-fused"]
    return out


# -- memory bandwidth and host overhead -----------------------------------------------------------


def bench_bandwidth(args: argparse.Namespace, engine_device: str) -> dict:
    """Fused cartpole ``step()`` against the device's copy bandwidth, and the host time of a step.

    Bytes per world-step: what the fused step reads and writes (``sim.step_bytes``: the state it
    carries, the action, episode counters, RNG state, observation, reward and flags) plus the
    action check's read of the actions. The bound is the rate at which the device copies memory
    (``wp.copy`` of a large array; a copy reads and writes each byte, so bandwidth = 2 * bytes /
    time). Host time: ``step()`` calls on a 1-world simulation timed without synchronising (on
    CUDA, the time to enqueue a captured graph; on CPU the step itself runs in the call).
    """
    import warp as wp

    import ecs
    import envs

    n = args.bandwidth_num_worlds
    print(f"\n== memory bandwidth: fused cartpole step() at {n} worlds, engine on {engine_device} ==")
    sim = ecs.BatchSim(envs.make("cartpole"), n, device=engine_device, seed=args.seed, fuse=True)
    read, written = sim.step_bytes
    action_bytes = sum(t.element_size() * t[0].numel() for t in sim.actions.values())
    per_world_step = read + written + action_bytes
    copy_elems = args.copy_mib * (1 << 20) // 4
    src = wp.zeros(copy_elems, dtype=wp.float32, device=engine_device)
    dst = wp.zeros_like(src)

    def sync() -> None:
        wp.synchronize_device(engine_device)

    steppers = [
        Stepper("engine-fused step()", n, 1, lambda i: sim.step(), sync),
        Stepper("wp.copy", copy_elems, 1, lambda i: wp.copy(dst, src), sync),
    ]
    measure(steppers, args)
    step_rate, copy_rate = (st.row()["rate"] for st in steppers)
    out: dict[str, Any] = {
        "num_worlds": n,
        "read_bytes": read,
        "write_bytes": written,
        "action_check_bytes": action_bytes,
        "bytes_per_world_step": per_world_step,
        "world_steps_per_s": step_rate,
        "copy_mib": args.copy_mib,
    }
    if step_rate and copy_rate:
        out["achieved_gb_per_s"] = step_rate * per_world_step / 1e9
        out["copy_gb_per_s"] = copy_rate * 4 * 2 / 1e9
        out["fraction_of_bound"] = out["achieved_gb_per_s"] / out["copy_gb_per_s"]
        out["bound_world_steps_per_s"] = out["copy_gb_per_s"] * 1e9 / per_world_step
    one = ecs.BatchSim(envs.make("cartpole"), 1, device=engine_device, seed=args.seed)
    host = []
    for _ in range(max(3, args.repeats)):
        one.step()
        sync()
        t0 = time.perf_counter()
        for _ in range(200):
            one.step()
        host.append((time.perf_counter() - t0) / 200)
        sync()
    out["host_us_per_step"] = statistics.median(host) * 1e6
    out["host_step_runs_on_host"] = engine_device == "cpu"
    return out


# -- reporting -----------------------------------------------------------------------------------


def print_bandwidth(b: dict) -> None:
    print(
        f"\nbandwidth: {b['bytes_per_world_step']} bytes per world-step (step reads {b['read_bytes']}, "
        f"writes {b['write_bytes']}; action check reads {b['action_check_bytes']}) at {b['num_worlds']} worlds"
    )
    if "fraction_of_bound" in b:
        print(
            f"  fused step(): {si(b['world_steps_per_s'])} world-steps/s = {b['achieved_gb_per_s']:.1f} GB/s; "
            f"wp.copy of {b['copy_mib']} MiB: {b['copy_gb_per_s']:.1f} GB/s; "
            f"bound {si(b['bound_world_steps_per_s'])} world-steps/s; {100 * b['fraction_of_bound']:.0f}% of it"
        )
    where = "host time, the step runs inside the call" if b["host_step_runs_on_host"] else "host time to enqueue"
    print(f"  one step() of a 1-world sim: {b['host_us_per_step']:.1f} us ({where})")


def si(x: float | None) -> str:
    if x is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def rate_of(rows: list[dict], backend: str, n: int, k: int | None) -> float | None:
    for r in rows:
        if r["backend"] == backend and r["num_worlds"] == n and (k is None or r["k"] == k) and r.get("rate"):
            return r["rate"]
    return None


def print_throughput(rows: list[dict], args: argparse.Namespace) -> None:
    ks = sorted(set(args.ks))
    k0 = ks[0]
    ns = sorted({r["num_worlds"] for r in rows})
    backends = [b for b in args.backends if any(r["backend"] == b and r.get("rate") for r in rows)]
    print(f"\nworld-steps/s at K = {k0} (one action batch per call; '-' = not run)")
    print(f"{'N':>8} " + " ".join(f"{b:>19}" for b in backends))
    for n in ns:
        print(f"{n:>8} " + " ".join(f"{si(rate_of(rows, b, n, k0)):>19}" for b in backends))
    native = [b for b in backends if b in K_NATIVE or args.loop_all_k]
    if len(ks) > 1 and native:
        print(f"\nK steps per call: world-steps/s (speedup over K = {k0})")
        header = f"{'N':>8} {'backend':>20} " + " ".join(f"{'K=' + str(k):>16}" for k in ks)
        print(header)
        for n in ns:
            for b in native:
                base = rate_of(rows, b, n, k0)
                if base is None:
                    continue
                cells = []
                for k in ks:
                    r = rate_of(rows, b, n, k)
                    cells.append(f"{si(r)} ({r / base:.1f}x)" if r else "-")
                print(f"{n:>8} {b:>20} " + " ".join(f"{c:>16}" for c in cells))


def print_factors(f: dict) -> None:
    rows = f["rows"]
    k = f["k"]
    print(f"\nfactors at N = {f['num_worlds']}: world-steps/s; gain = fused run(K={k}) over each")
    print(
        f"{'S':>5} {'C':>4} {'captured':>10} {'fused K=1':>10} {'run K=' + str(k):>10} {'torch':>10} "
        f"{'gain/fused':>11} {'gain/capt':>10} {'run/torch':>10}"
    )
    for s, c in dict.fromkeys((r["state_factor"], r["compute_factor"]) for r in rows):
        rates = {r["backend"]: r.get("rate") for r in rows if r["state_factor"] == s and r["compute_factor"] == c}
        cap, fus, run = rates.get("engine-captured"), rates.get("engine-fused"), rates.get("engine-fused-run")
        tor = next((v for b, v in rates.items() if b.startswith("torch")), None)

        def ratio(a: float | None, b: float | None) -> str:
            return f"{a / b:.2f}x" if a and b else "-"

        print(
            f"{s:>5} {c:>4} {si(cap):>10} {si(fus):>10} {si(run):>10} {si(tor):>10} "
            f"{ratio(run, fus):>11} {ratio(run, cap):>10} {ratio(run, tor):>10}"
        )


def factor_gains(f: dict) -> list[dict]:
    """Per (S, C): fused run(K) over fused step, over captured step and over eager torch."""
    out = []
    for s, c in dict.fromkeys((r["state_factor"], r["compute_factor"]) for r in f["rows"]):
        rates = {r["backend"]: r.get("rate") for r in f["rows"] if r["state_factor"] == s and r["compute_factor"] == c}
        run = rates.get("engine-fused-run")
        torch_rate = next((v for b, v in rates.items() if b.startswith("torch")), None)
        row = {"state_factor": s, "compute_factor": c}
        for key, base in (
            ("over_fused_step", rates.get("engine-fused")),
            ("over_captured_step", rates.get("engine-captured")),
            ("over_torch", torch_rate),
        ):
            row[key] = run / base if run and base else None
        out.append(row)
    return out


def print_overhead(o: dict) -> None:
    print(f"\noverhead: {o['systems']} systems at {o['num_worlds']} worlds, microseconds per step")
    for key in ("engine_eager", "engine_captured", "engine_fused"):
        v = o.get(f"{key}_us_per_step")
        print(f"  {key.replace('_', '-'):>16}: {v:10.1f} us" if v else f"  {key:>16}: -")
    if o.get("eager_over_captured"):
        print(f"  eager launches / captured step = {o['eager_over_captured']:.1f}x")
    if o.get("eager_over_fused"):
        print(f"  eager launches / fused step    = {o['eager_over_fused']:.1f}x")


# -- plots ---------------------------------------------------------------------------------------

_STYLE = {
    "gym-vector": ("tab:gray", "o"),
    "gym-sync": ("tab:brown", "v"),
    "torch-cpu": ("tab:orange", "s"),
    "torch-cuda": ("gold", "s"),
    "jax": ("tab:purple", "D"),
    "engine-eager": ("tab:pink", "^"),
    "engine-captured": ("tab:cyan", "^"),
    "engine-fused": ("tab:blue", "^"),
    "engine-fused-run": ("tab:green", "*"),
    "engine-captured-run": ("tab:olive", "*"),
}


def make_plots(result: dict, out_dir: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    meta = result["meta"]
    where = f"engine on {meta['engine_device']}, {meta['cpu_count']} CPU cores"
    paths = []
    rows = result["throughput"]
    ks = sorted(set(meta["ks"]))
    if rows and any(r.get("rate") for r in rows):
        # (a) throughput vs N
        fig, ax = plt.subplots(figsize=(9, 6))
        for b in meta["backends"]:
            color, marker = _STYLE.get(b, ("black", "o"))
            for k, style in ((ks[0], "-"), (ks[-1], "--")):
                if k != ks[0] and b not in K_NATIVE:
                    continue
                pts = sorted(
                    (r["num_worlds"], r["rate"]) for r in rows if r["backend"] == b and r["k"] == k and r.get("rate")
                )
                if len(ks) == 1 and style == "--":
                    continue
                if pts:
                    label = b if k == ks[0] else f"{b}, K={k}"
                    ax.plot(*zip(*pts, strict=True), style, color=color, marker=marker, label=label, markersize=5)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("number of worlds N (log scale)")
        ax.set_ylabel("throughput [world-steps / s] (log scale)")
        ax.set_title(f"Cartpole throughput vs number of worlds (K = {ks[0]} unless noted)\n{where}")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="backend")
        paths.append(_save(fig, out_dir, "throughput_vs_worlds.png"))
        plt.close(fig)

        # (b) speedup of K-step fusion vs K
        native = [b for b in ("engine-fused-run", "jax", "engine-captured-run") if b in meta["backends"]]
        ns = sorted({r["num_worlds"] for r in rows if r["backend"] in native and r.get("rate")})
        if len(ks) > 1 and ns:
            pick = ns if len(ns) <= 5 else [ns[round(i * (len(ns) - 1) / 4)] for i in range(5)]
            fig, ax = plt.subplots(figsize=(8, 5.5))
            cmap = plt.get_cmap("viridis")
            for j, n in enumerate(pick):
                color = cmap(j / max(1, len(pick) - 1))
                for b, style in zip(native, ("-", ":", "-."), strict=False):
                    base = rate_of(rows, b, n, ks[0])
                    pts = [(k, rate_of(rows, b, n, k) / base) for k in ks if base and rate_of(rows, b, n, k)]
                    if pts:
                        name = {"engine-fused-run": "engine run(K)", "jax": "JAX scan(K)"}.get(b, b)
                        ax.plot(*zip(*pts, strict=True), style, marker="o", color=color, label=f"{name}, N={n}")
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xticks(ks)
            ax.set_xticklabels([str(k) for k in ks])
            ax.set_xlabel("K, steps fused into one call (log scale)")
            ax.set_ylabel(f"speedup over K = {ks[0]} (log scale)")
            _times_axis(ax)
            ax.set_title(f"K-step fusion: throughput at K over throughput at K = {ks[0]}\n{where}")
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=7, ncol=2, loc="upper left")
            paths.append(_save(fig, out_dir, "fusion_speedup_vs_k.png"))
            plt.close(fig)

    # (c) fusion gains vs S and C
    f = result.get("factors")
    if f and f["rows"]:
        gains = factor_gains(f)
        fig, axes = plt.subplots(1, 2, figsize=(12, 5))
        series = (
            ("over_fused_step", f"fused run(K={f['k']}) / fused step (K=1)", "tab:green"),
            ("over_captured_step", f"fused run(K={f['k']}) / captured unfused step", "tab:blue"),
            ("over_torch", f"fused run(K={f['k']}) / eager torch", "tab:orange"),
        )
        for ax, knob, fixed, label in (
            (axes[0], "state_factor", ("compute_factor", 1), "state factor S: extra float32 values per world"),
            (axes[1], "compute_factor", ("state_factor", 0), "compute factor C: Euler substeps per step"),
        ):
            sel = sorted((g for g in gains if g[fixed[0]] == fixed[1]), key=lambda g: g[knob])
            xs = list(range(len(sel)))
            for key, name, color in series:
                pts = [(x, g[key]) for x, g in zip(xs, sel, strict=True) if g[key]]
                if pts:
                    ax.plot(*zip(*pts, strict=True), "-o", color=color, label=name)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xticks(xs)
            ax.set_xticklabels([str(g[knob]) for g in sel])
            ax.set_yscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel("speedup (log scale)")
            _times_axis(ax)
            ax.set_title(f"vs {knob.split('_')[0]} factor ({fixed[0].split('_')[0][0].upper()} = {fixed[1]})")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f"Gain of K-step fusion vs state and compute factors, N = {f['num_worlds']} worlds; {where}")
        fig.tight_layout()
        paths.append(_save(fig, out_dir, "fusion_vs_factors.png"))
        plt.close(fig)
    return paths


def _times_axis(ax) -> None:
    """Plain ``2x`` labels on a log speedup axis (not ``2 x 10^0``)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def _save(fig, out_dir: str, name: str) -> str:
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


# -- main ----------------------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    import gymnasium
    import torch
    import warp

    out = {
        "python": platform.python_version(),
        "warp": warp.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "gymnasium": gymnasium.__version__,
    }
    if jax_status() is None:
        import jax

        out["jax"] = jax.__version__
        out["jax_backend"] = jax.default_backend()
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-log2", type=int, default=0, help="smallest world count 2^min (default 0)")
    p.add_argument(
        "--max-log2", type=int, default=None, help="largest world count 2^max (default 16 on CPU, 20 on CUDA)"
    )
    p.add_argument("--full", action="store_true", help="world counts up to 2^20")
    p.add_argument(
        "--ks", type=int, nargs="+", default=[1, 10, 100, 1000], help="steps per call (default 1 10 100 1000)"
    )
    p.add_argument(
        "--backends",
        nargs="+",
        default=list(DEFAULT_BACKENDS),
        choices=ALL_BACKENDS,
        metavar="NAME",
        help=f"backends to run (default: {' '.join(DEFAULT_BACKENDS)}; also: engine-captured-run)",
    )
    p.add_argument("--loop-all-k", action="store_true", help="measure Python-loop backends at every K, not the first")
    p.add_argument("--sync-max-log2", type=int, default=10, help="largest N for gym-sync is 2^this (default 10)")
    p.add_argument("--repeats", type=int, default=5, help="timed windows per cell; the median counts (default 5)")
    p.add_argument("--window", type=float, default=0.1, help="target seconds per timed window (default 0.1)")
    p.add_argument("--warmup", type=float, default=0.05, help="least untimed warm-up seconds per cell (default 0.05)")
    p.add_argument("--cell-cap", type=float, default=5.0, help="most seconds of timed windows per cell (default 5)")
    p.add_argument("--device", default=None, help="engine device: cpu or cuda:N (default: cuda:0 when present)")
    p.add_argument(
        "--cpu-threads",
        type=int,
        default=1,
        help="threads for torch and JAX on the CPU (default 1: core for core with the engine's one-core CPU launches)",
    )
    p.add_argument("--seed", type=int, default=0, help="simulation and action seed (default 0)")
    p.add_argument("--no-throughput", action="store_true", help="skip the throughput-vs-N experiment")
    p.add_argument("--no-factors", action="store_true", help="skip the state/compute factor sweep")
    p.add_argument(
        "--factor-num-worlds", type=int, default=None, help="N of the factor sweep (default 4096 on CPU, 65536 on CUDA)"
    )
    p.add_argument("--factor-k", type=int, default=100, help="K of fused run(K) in the factor sweep (default 100)")
    p.add_argument(
        "--states", type=int, nargs="+", default=[0, 8, 32, 128, 512], help="state factors S (default 0 8 32 128 512)"
    )
    p.add_argument(
        "--computes", type=int, nargs="+", default=[1, 4, 16, 64], help="compute factors C (default 1 4 16 64)"
    )
    p.add_argument("--overhead", action="store_true", help="also measure launch overhead (captured vs eager)")
    p.add_argument("--overhead-num-worlds", type=int, default=64, help="worlds of the overhead env (default 64)")
    p.add_argument("--overhead-systems", type=int, default=20, help="systems of the overhead env (default 20)")
    p.add_argument(
        "--bandwidth", action="store_true", help="also measure the fused step against copy bandwidth, and host time"
    )
    p.add_argument(
        "--bandwidth-num-worlds",
        type=int,
        default=None,
        help="worlds of the bandwidth run (default 2^22 CUDA, 2^16 CPU)",
    )
    p.add_argument("--copy-mib", type=int, default=None, help="MiB copied for the bound (default 1024 CUDA, 256 CPU)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    p.add_argument("--plots", metavar="DIR", help="write PNG plots into DIR")
    return p


def main(argv: list[str] | None = None) -> dict:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.window <= 0 or args.cell_cap <= 0 or min(args.ks) < 1 or args.cpu_threads < 1:
        parser.error("--repeats, --ks and --cpu-threads must be >= 1; --window and --cell-cap > 0")
    if min(args.states) < 0 or min(args.computes) < 1:
        parser.error("--states must be >= 0 and --computes >= 1")
    if "XLA_FLAGS" not in os.environ and args.cpu_threads == 1:
        # JAX's CPU backend: one thread for its ops, like torch.set_num_threads(1).
        os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    import torch
    import warp as wp

    wp.config.log_level = wp.LOG_WARNING
    torch.set_num_threads(args.cpu_threads)
    engine_device = args.device or ("cuda:0" if wp.is_cuda_available() else "cpu")
    on_cuda = engine_device.startswith("cuda")
    if args.max_log2 is None:
        args.max_log2 = 20 if (args.full or on_cuda) else 16
    elif args.full:
        args.max_log2 = max(args.max_log2, 20)
    if not 0 <= args.min_log2 <= args.max_log2 <= 30:
        parser.error("need 0 <= --min-log2 <= --max-log2 <= 30")
    if args.factor_num_worlds is None:
        args.factor_num_worlds = 65536 if on_cuda else 4096
    if args.bandwidth_num_worlds is None:
        args.bandwidth_num_worlds = 2**22 if on_cuda else 2**16
    if args.copy_mib is None:
        args.copy_mib = 1024 if on_cuda else 256
    if args.bandwidth_num_worlds < 1 or args.copy_mib < 1:
        parser.error("--bandwidth-num-worlds and --copy-mib must be >= 1")
    args.states = list(dict.fromkeys(args.states))
    args.computes = list(dict.fromkeys(args.computes))

    meta = {
        "engine_device": engine_device,
        "backends": list(args.backends),
        "ks": sorted(set(args.ks)),
        "num_worlds": [2**i for i in range(args.min_log2, args.max_log2 + 1)],
        "repeats": args.repeats,
        "window_s": args.window,
        "warmup_s": args.warmup,
        "cell_cap_s": args.cell_cap,
        "loop_all_k": args.loop_all_k,
        "cpu_threads": args.cpu_threads,
        "seed": args.seed,
        "actions": (
            f"random uniform {{0,1}} from a pool of {POOL} batches drawn before timing; call i uses batch i mod "
            f"{POOL}, held for the K steps of the call"
        ),
        "rate": "world-steps per second = N * K * calls / median window seconds",
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor(),
        "versions": _versions(),
        "argv": sys.argv[1:] if argv is None else list(argv),
    }
    print(
        f"bench suite: engine on {engine_device}; torch/JAX CPU threads {args.cpu_threads}; "
        f"{os.cpu_count()} CPU cores; versions {meta['versions']}"
    )
    result: dict[str, Any] = {"benchmark": "bench_suite", "meta": meta, "throughput": [], "factors": None}
    result["overhead"] = None
    result["bandwidth"] = None
    t_start = time.perf_counter()
    if not args.no_throughput:
        result["throughput"] = bench_throughput(args, engine_device)
        print_throughput(result["throughput"], args)
    if not args.no_factors:
        result["factors"] = bench_factors(args, engine_device)
        result["factors"]["gains"] = factor_gains(result["factors"])
        print_factors(result["factors"])
    if args.overhead:
        result["overhead"] = bench_overhead(args, engine_device)
        print_overhead(result["overhead"])
    if args.bandwidth:
        result["bandwidth"] = bench_bandwidth(args, engine_device)
        print_bandwidth(result["bandwidth"])
    result["plots"] = make_plots(result, args.plots) if args.plots else []
    for path in result["plots"]:
        print(f"wrote {path}")
    meta["total_s"] = time.perf_counter() - t_start
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.json}")
    print(f"total {meta['total_s']:.0f} s")
    return result


if __name__ == "__main__":
    main()
