"""The GPU campaign in one command: ``python -m ecs gpu-report --out DIR``.

Runs the stages below in order, each in its own process under its own time limit and within a
total budget (``--budget-s``, default 520 s: one 10-minute device call with margin). After every
stage ``report.json`` and ``report.md`` in ``DIR`` are rewritten, so a crash or a timeout keeps
what finished; a failed stage is recorded with the tail of its output and the run goes on.

| stage | what it measures |
|---|---|
| ``device`` | GPU name, driver, Warp and torch versions |
| ``solver`` | hide-and-seek's step time in each form of the solver: first every form compiled without fused multiply-adds (``solver_fma=False``) at 1k worlds, each of whose states must equal a thread per world's bit for bit, and the fastest of them at 16k and 64k; then, with FMA, the block of lanes per world staged and cached (``solver_staged``, ``solver_cache``: the CUDA default below ``physics.AUTO_WORLD_FROM`` worlds) at 1k..256k and 128k, staged at 1k..64k, whole with and without its cache at 1k and 16k; the share of each solver stage at 1k and 16k (``solver_timing``; staged, ``sim.profile`` of its launches), and at 1k for two fixed layouts of one and two manifolds (``PROBE_SCENES``: one manifold's solve in cycles, and its staged launches timed); a thread per world at 1k (its stage shares too), staged at 16k..256k and 128k (the CUDA default from ``AUTO_WORLD_FROM``) and, its worlds sorted by work (``solver_order``) or the tables interleaved (``interleave_worlds``), at 64k and 256k; last, its staged launches timed at 256k |
| ``hide_and_seek`` | env steps/s against num_worlds (1k..256k on a GPU; each at the CUDA defaults for its count), both sensor forms (``wide_sensors``), ``sim.profile`` per system at 16k worlds, and at 16k and 64k the rate at fewer substeps of more contact passes, at Madrona's step, without sleeping bodies and without kept contact rows (``PHYSICS_BUDGETS``) |
| ``identity`` | run-to-run bit-identity: two fresh sims per env (cartpole, hide-and-seek), 300 steps of seeded random actions with resets, every state array compared (``--hide-and-seek KEY=VALUE,...`` sets hide-and-seek's config here and in ``hide_and_seek``) |
| ``soak`` | hide-and-seek soaked as ``examples/soak.py --policy sticky`` soaks it on the CPU, at the CUDA defaults for 16k and 256k worlds (``SOAK_RUNS``): every value finite, every body inside the outside walls, and the deepest contact and fastest body against the CPU soak's limits (50 mm, 50 m/s) |
| ``cartpole`` | first its two targets (``bench_suite.py --bandwidth --overhead``: the fused step against the bandwidth bound from ``sim.step_bytes``, host time of one captured step), then ``python -m ecs bench cartpole`` at 4k..1M worlds and ``bench_suite.py``'s throughput against N and K with eager torch and JAX baselines |
| ``policy_step`` | a captured policy forward plus step (``ecs.adapters.PolicyStep``) against the two done separately |
| ``tests`` | the test suite's CUDA cases (``pytest -k cuda``) |
| ``registers`` | registers, local memory and max threads per block of the hide-and-seek kernels, read from the CUDA driver |
| ``envs`` | ``python -m ecs bench`` of every registered env at 1k and 16k worlds |
| ``dist`` | ``python -m ecs dist-bench cartpole`` as one rank |

One device call finishes what decides: with the default budget and stage limits, ``python -m ecs gpu-report
--out DIR`` runs device, solver, hide_and_seek, identity, soak and cartpole; ``--resume`` in a later call runs only the
stages not yet in ``DIR/report.json``. A kernel cache in the checkout's ``.wpcache`` (built beforehand with
``python -m tests.cuda_codegen``) is used where ``WARP_CACHE_PATH`` names no other. On CPU, ``--device cpu --quick`` runs every stage at toy sizes (the tests use it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

# In the order of what a short device lease should measure first (a stage left over runs with --resume).
STAGES = (
    "device",
    "solver",
    "hide_and_seek",
    "identity",
    "soak",
    "cartpole",
    "policy_step",
    "tests",
    "registers",
    "envs",
    "dist",
)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A kernel cache built on any machine (``python -m tests.cuda_codegen ... --cache .wpcache``) and carried to the GPU
# machine: the stages use it where WARP_CACHE_PATH names no other, so they spend no device time compiling.
CACHE = os.path.join(ROOT, ".wpcache")


# -- stages (each runs in a child process and returns a JSON-able dict) ----------------------------------


def _sim(env_name: str, num_worlds: int, device: str, seed: int = 0, interleave_worlds: bool = False, **overrides: Any):
    import importlib

    import warp as wp

    wp.config.log_level = wp.LOG_WARNING
    from .sim import BatchSim

    env = importlib.import_module("envs").make(env_name, **overrides)
    return BatchSim(env, num_worlds, device=device, seed=seed, interleave_worlds=interleave_worlds)


def _random_actions(sim, gen) -> dict:
    """One uniform draw from every action space (Discrete, MultiDiscrete or Box), shaped like ``sim.actions``."""
    import numpy as np
    import torch

    out = {}
    for key, space in sim.action_space.spaces.items():
        view = sim.actions[key]
        u = torch.rand(tuple(view.shape), generator=gen, dtype=torch.float64)
        if hasattr(space, "nvec") or hasattr(space, "n"):
            count = torch.as_tensor(np.asarray(getattr(space, "nvec", getattr(space, "n", 1))), dtype=torch.float64)
            start = torch.as_tensor(np.asarray(getattr(space, "start", 0)), dtype=torch.float64)
            value = (u * count).floor() + start
        else:
            low = torch.as_tensor(np.clip(space.low, -1.0, 1.0), dtype=torch.float64)
            high = torch.as_tensor(np.clip(space.high, -1.0, 1.0), dtype=torch.float64)
            value = low + u * (high - low)
        out[key] = value.to(view.device, view.dtype)
    return out


def _timed(fn, steps: int, repeats: int, device: str, window_s: float | None = None) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` windows of ``steps`` calls. With ``window_s``
    a window holds fewer calls where one call, timed first, says ``steps`` would take longer than
    ``window_s`` seconds (at least one), so a slow configuration costs seconds, not minutes."""
    import warp as wp

    if window_s is not None:
        wp.synchronize_device(device)
        t0 = time.perf_counter()
        fn()
        wp.synchronize_device(device)
        steps = max(1, min(steps, int(window_s / max(time.perf_counter() - t0, 1e-9))))
    times = []
    for _ in range(repeats):
        wp.synchronize_device(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        wp.synchronize_device(device)
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times)


_PARTIAL = threading.Lock()  # one writer of a stage's result at a time (the solver stage's watchdog is a thread)


def _partial(args: argparse.Namespace, result: dict) -> None:
    """Writes a stage's result so far; the orchestrator keeps it if the stage runs out of time."""
    with _PARTIAL, open(os.path.join(args.out, f"stage_{args.stage}.json"), "w") as f:
        json.dump(result, f, default=str)


def stage_device(args: argparse.Namespace) -> dict:
    import torch
    import warp as wp

    wp.init()
    info = {
        "device": args.device,
        "warp": wp.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if args.device.startswith("cuda"):
        d = wp.get_device(args.device)
        info.update(name=d.name, arch=d.arch, sm_count=getattr(d, "sm_count", None), memory_gib=d.total_memory / 2**30)
        try:
            smi = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            info["nvidia_smi"] = smi.stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            info["nvidia_smi"] = f"unavailable: {e}"
    else:
        info["name"] = platform.processor() or platform.machine()
    # Profilers on the machine (None where absent): Nsight Compute's stall reasons would tell a kernel held by
    # instruction fetch (its code larger than the SM's instruction caches) from one held by memory or dependencies.
    info["profilers"] = {tool: shutil.which(tool) for tool in ("ncu", "nsys", "cuobjdump", "nvdisasm")}
    info["kernel_cache"] = wp.config.kernel_cache_dir  # the checkout's .wpcache where one was carried
    return info


def stage_identity(args: argparse.Namespace) -> dict:
    import hashlib

    import torch

    steps = 30 if args.quick else 300
    out = {}
    for env_name, worlds, extra in (
        ("cartpole", 64 if args.quick else 4096, {}),
        ("hide_and_seek", 4 if args.quick else 256, {"max_episode_steps": 12 if args.quick else 40, **_hs(args)}),
    ):
        digests = []
        for attempt in range(2):
            t0 = time.perf_counter()
            sim = _sim(env_name, worlds, args.device, seed=3, **extra)
            _say(f"identity {env_name} run {attempt}: built {worlds} worlds in {time.perf_counter() - t0:.1f} s")
            gen = torch.Generator().manual_seed(7)
            for _ in range(steps):
                for key, value in _random_actions(sim, gen).items():
                    sim.actions[key].copy_(value)
                sim.step()
            arrays = sim.state_dict()["arrays"]
            _say(f"identity {env_name} run {attempt}: {steps} steps done after {time.perf_counter() - t0:.1f} s")
            digests.append({k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in arrays.items()})
            episodes = int(arrays["singleton/episode"].sum())
        differ = sorted(k for k in digests[0] if digests[0][k] != digests[1][k])
        out[env_name] = {
            "num_worlds": worlds,
            "steps": steps,
            "identical": not differ,
            "differing_arrays": differ,
            "episodes_begun": episodes,
        }
    return out


# The soak stage's runs: worlds and steps, each at the CUDA defaults for its count (the block staged and cached below
# physics.AUTO_WORLD_FROM worlds, a thread per world staged from it), and the depth and speed the checks allow.
SOAK_RUNS = ((16384, 100), (262144, 10))
SOAK_MAX_DEPTH = 0.05  # m, as examples/soak.py
SOAK_MAX_SPEED = 50.0  # m/s


def stage_soak(args: argparse.Namespace) -> dict:
    """Hide-and-seek soaked on the device as ``examples/soak.py --policy sticky`` soaks it on the CPU: agents hold
    their actions for about 20 steps, and every 10 steps the checks run (values finite, bodies inside the outside
    walls, the deepest contact and fastest body kept with where they were)."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("soak_example", os.path.join(ROOT, "examples", "soak.py"))
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    result: dict[str, Any] = {"max_depth": SOAK_MAX_DEPTH, "max_speed": SOAK_MAX_SPEED, "runs": []}
    for worlds, steps in ((8, 40),) if args.quick else SOAK_RUNS:
        t0 = time.perf_counter()
        sim = _sim("hide_and_seek", worlds, args.device, seed=1, **_hs(args))
        row: dict[str, Any] = {"num_worlds": worlds, "steps": 0, "problem": None}
        result["runs"].append(row)
        gen = torch.Generator().manual_seed(1)
        worst = {"speed": 0.0, "depth": 0.0}
        for i in range(steps):
            soak.random_actions(sim, gen, 20.0 if i else 1.0)
            sim.step()
            if (i + 1) % 10 == 0 or i + 1 == steps:
                problem = soak.check(sim, i + 1, float("inf"), float("inf"), worst)
                row.update(steps=i + 1, world_steps=worlds * (i + 1), seconds=time.perf_counter() - t0)
                row.update(max_contact_depth=worst["depth"], max_body_speed=worst["speed"])
                row["deepest_contact_at"] = worst.get("deepest_at")
                if problem is not None:
                    row["problem"] = problem
                _partial(args, result)
                if problem is not None:
                    break
        row["passed"] = row["problem"] is None and worst["depth"] <= SOAK_MAX_DEPTH and worst["speed"] <= SOAK_MAX_SPEED
        _say(f"soak {worlds} worlds: {row}")
        del sim
    return result


def _pairs(text: str, what: str) -> dict[str, Any]:
    """``KEY=VALUE,...`` with each value read as YAML (``true``, ``16``, ``block``): ``--hide-and-seek`` and
    ``--limit``."""
    import yaml

    out = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"gpu-report: {what} takes KEY=VALUE,... got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _hs(args: argparse.Namespace) -> dict[str, Any]:
    """The hide-and-seek config fields that ``--hide-and-seek`` sets for the identity and hide_and_seek stages."""
    return _pairs(getattr(args, "hide_and_seek", "") or "", "--hide-and-seek")


def stage_hide_and_seek(args: argparse.Namespace) -> dict:
    counts = [4, 16] if args.quick else [1024, 4096, 16384, 65536, 262144]
    steps, repeats, window = (5, 3, None) if args.quick else (50, 3, 1.0)
    profile_worlds = counts[-1] if args.quick else 16384
    result: dict[str, Any] = {"throughput": [], "profile_num_worlds": profile_worlds}
    t0 = time.perf_counter()
    sim = _sim("hide_and_seek", profile_worlds, args.device, **_hs(args))
    result["config"] = _hs(args)
    result["profile"] = str(sim.profile(5 if args.quick else 10))
    _say(f"hide_and_seek profile at {profile_worlds} worlds in {time.perf_counter() - t0:.1f} s")
    _partial(args, result)
    del sim
    rows = result["throughput"]
    for wide in (True, False):
        for n in counts:
            row: dict[str, Any] = {"num_worlds": n, "wide_sensors": wide}
            rows.append(row)
            _hs_rate(args, row, f"hide_and_seek {n} worlds wide={wide}", steps, repeats, window, wide_sensors=wide)
            _partial(args, result)
        if wide:  # the budgets before the sensors a thread per agent (slower on every GPU so far)
            result["budgets"] = []
            _physics_budgets(args, result, [4] if args.quick else [16384, 65536], steps, repeats, window)
    return result


def stage_solver(args: argparse.Namespace) -> dict:
    import hashlib
    import importlib

    import torch
    import warp as wp

    # On CPU a block's lanes run side by side only with cooperative blocks (else one lane per world).
    wp.config.enable_cpu_blocks = True
    counts = [4] if args.quick else [1024, 16384, 65536, 262144]
    steps, repeats, window = (3, 2, None) if args.quick else (30, 3, 1.0)
    # In the order a short lease should measure them. First, every layout compiled without fused multiply-adds
    # (solver_fma=False) at the smallest count: on CUDA the compiler fuses a multiply and an add wherever it can, in
    # each kernel differently, so states with FMA agree across layouts only to rounding (on an H100, 2026-11-27, no
    # two layouts gave the same bits after 5 steps); without, each must equal a thread per world's bit for bit, which
    # shows the layouts compute the same thing on the GPU (no race between lanes, no stale cache row). The fastest
    # form (staged and cached) without FMA at 16k and 64k, then with FMA at every count, prices it, and a thread per
    # world staged (the CUDA default from solver_world_from worlds) at 16k..256k right after it. Then the rest
    # with FMA, the default: staged (solver_staged: four kernels a substep, solver.STAGED) without the cache; the
    # block whole with and without its cache (solver_cache: a world's poses, velocities and contact rows in use in
    # 23 KB of the block's shared memory) at every count; where the block's time goes (its stage shares, and the
    # staged launches profiled, at 1k and 16k); a thread per world at the smallest count (on an H100 12x slower than
    # the block whole, results/gpu/h100-2026-11-26), and staged (where it fills a GPU: on an H200 it passed the block
    # staged and cached at 256k, results/gpu/h200-2026-11-27) with the tables interleaved
    # (BatchSim(interleave_worlds=True): a warp's threads, each a world, read adjacent addresses) at 64k and 256k;
    # the whole kernels only at 1k and 16k, to compare with the campaigns before the solver's code shrank (one copy of
    # the contact solve where there were four); no longer the block interleaved (as fast as without on an H100,
    # 2026-11-27) nor capped at 128 registers (slower on an H100 and an H200): results/gpu/.
    # The block of 8 and of 4 lanes per world (solver_lanes: a warp of 4 or 8 worlds on CUDA, so an SM keeps 4 or 8
    # times the worlds at once), staged without the cache, checked without FMA and timed with it after the default.
    # The two forms that the "auto" layout picks between on CUDA (physics.AUTO_WORLD_FROM) one after the other, and
    # also at 131,072 worlds, between the counts where they ran even and where a thread per world led.
    # Right after them, a thread per world staged with its worlds sorted by work (solver_order: a warp's threads step
    # worlds of like cost; on a CPU thread a warp of 32 worlds in their own order waits 4.1x the mean world's solver
    # cycles for its slowest, sorted by their moving contact rows 1.9x, examples/benchmarks/world_spread.py) at 64k
    # and 256k. The warp of 8 lanes a world (4 worlds a warp) sorted too, checked without FMA at 1k and timed at 16k and
    # 64k after the unsorted one (its warps wait 2.0x the mean world's cycles unsorted, 1.3x sorted, on that count).
    decide = counts if args.quick else [*counts[:3], 131072, *counts[3:]]
    # (layout, registers per thread, worlds interleaved, staged, cached, fma, lanes per world, worlds sorted by
    # work (solver_order), world counts)
    variants = [
        ("world", None, False, False, False, False, 32, False, counts[:1]),
        ("block", None, False, False, False, False, 32, False, counts[:1]),
        ("block", None, False, False, True, False, 32, False, counts[:1]),
        ("block", None, False, True, False, False, 32, False, counts[:1]),
        ("block", None, False, True, False, False, 8, False, counts[:1]),
        ("block", None, False, True, False, False, 4, False, counts[:1]),
        ("block", None, False, True, False, False, 8, True, counts[:1]),
        ("world", None, False, True, False, False, 32, False, counts[:1]),
        ("block", None, False, True, True, False, 32, False, counts[:3]),
        ("block", None, False, True, True, True, 32, False, decide),
        ("world", None, False, True, False, True, 32, False, decide[1:] or decide),
        ("world", None, False, True, False, True, 32, True, counts[2:] or counts),
        ("block", None, False, True, False, True, 8, False, counts),
        ("block", None, False, True, False, True, 8, True, counts[1:3] or counts),
        ("block", None, False, True, False, True, 4, False, counts),
        ("block", None, False, True, False, True, 32, False, counts[:3]),
        ("block", None, False, False, False, True, 32, False, counts[:2]),
        ("block", None, False, False, True, True, 32, False, counts[:2]),
        ("world", None, False, False, False, True, 32, False, counts[:1]),
        ("world", None, True, True, False, True, 32, False, counts[2:] or counts),
    ]
    if args.quick:  # on CPU every kernel without FMA is another compile: the whole ones only; 8 lanes, not 4
        variants = [v for v in variants if (v[5] or not (v[3] or v[4])) and v[6] in (8, 32)]
    if args.solver_forms:
        variants = _solver_forms(args.solver_forms)
        counts = sorted({n for v in variants for n in v[-1]})
    result: dict[str, Any] = {"rows": [], "identical": {}, "stages": [], "staged_profile": []}
    digests: dict[int, dict[str, list[str]]] = {n: {} for v in variants for n in v[-1]}
    scratch = {c.name for c in importlib.import_module("systems.solver").SCRATCH_COMPONENTS}
    for layout, registers, interleave, staged, cached, fma, lanes, ordered, variant_counts in variants:
        label = layout + ("" if registers is None else f", {registers} registers") + (", interleaved" * interleave)
        label += ", staged" * staged + ", cached" * cached + f", {lanes} lanes" * (lanes != 32) + ", no FMA" * (not fma)
        label += ", ordered" * ordered
        # Where the time goes, once the forms that decide the CUDA default (staged and cached; 8 and 4 lanes) are
        # timed, so that a short lease gets both before the rest.
        if label == "block, staged" and not args.solver_forms:
            for n in counts[:2]:
                result["stages"].append(_solver_stages(args, "block", n))
                _partial(args, result)
            for n in counts[:2]:
                result["staged_profile"].append(_staged_profile(args, n))
                _partial(args, result)
            result["stages"].append(_solver_stages(args, "world", counts[0]))
            _partial(args, result)
            for scene in list(PROBE_SCENES)[1:]:  # one manifold's solve, timed on its own
                result["stages"].append(_solver_stages(args, "block", counts[0], scene))
                result["staged_profile"].append(_staged_profile(args, counts[0], scene))
                _partial(args, result)
        for n in variant_counts:
            # A variant that does not finish in this long is taken to hang (a kernel the GPU never returns
            # from): the row says so, and the stage ends with the rows before it.
            watchdog = threading.Timer(args.variant_timeout_s, _hung, (args, result, n, label))
            watchdog.daemon = True
            watchdog.start()
            t0 = time.perf_counter()
            try:
                sim = _sim(
                    "hide_and_seek",
                    n,
                    args.device,
                    seed=2,
                    interleave_worlds=interleave,
                    solver_layout=layout,
                    solver_registers=registers,
                    solver_staged=staged,
                    solver_cache=cached,
                    solver_fma=fma,
                    solver_lanes=lanes,
                    solver_order=ordered,
                )
            except Exception as e:  # e.g. out of memory at the largest counts
                watchdog.cancel()
                result["rows"].append({"num_worlds": n, "layout": label, "error": f"{type(e).__name__}: {e}"[:300]})
                _say(f"solver {label} {n} worlds: {result['rows'][-1]['error']}")
                continue
            built = time.perf_counter() - t0
            gen = torch.Generator().manual_seed(1)
            for _ in range(5):
                for key, value in _random_actions(sim, gen).items():
                    sim.actions[key].copy_(value)
                sim.step()
            # The bodies' state: the solver's scratch columns hold what each layout leaves there (the block's
            # velocity-pass marks, say), which is no part of the result.
            digests[n][label] = [
                hashlib.sha256(a.numpy().tobytes()).hexdigest()
                for name, a in sim.tables["body"].items()
                if name not in scratch
            ]
            per_step = _timed(sim.step, steps, repeats, args.device, window)
            watchdog.cancel()
            result["rows"].append(
                {"num_worlds": n, "layout": label, "us_per_step": per_step * 1e6, "env_steps_per_s": n / per_step}
            )
            _say(f"solver {label} {n} worlds: built in {built:.1f} s, {per_step * 1e6:.1f} us/step")
            # Without FMA against a thread per world without; with FMA against a thread per world, or where none
            # ran at this count, against the block (on CPU all of them give the same state); a form with its worlds
            # sorted (solver_order) first against the same form unsorted, the same kernels but for the world a thread
            # takes.
            for other, digest in digests[n].items():
                group = ("world, no FMA",) if "no FMA" in other else ("world", "block")
                if ", ordered" in other:
                    group = (other.replace(", ordered", ""), *group)
                reference = next((r for r in group if r in digests[n]), None)
                if reference is not None and reference != other:
                    result["identical"].setdefault(str(n), {})[other] = digest == digests[n][reference]
                    result.setdefault("references", {}).setdefault(str(n), {})[other] = reference
            _partial(args, result)
            del sim
    if not args.solver_forms:
        # The form that fills a GPU at the largest count (a thread per world, staged: results/gpu/h200-2026-11-27):
        # where its time goes there, last, so that it costs a short lease none of the rows above.
        result["staged_profile"].append(_staged_profile(args, counts[-1], layout="world"))
        _partial(args, result)
    return result


# (physics_substeps, contact_passes, other config fields): the solver's work per step against how far it converges.
# Hide-and-seek's default first; on CPU (envs/hide_and_seek/README.md, "Substeps and passes") 6 substeps of 3 passes
# ran 1.05x as fast as 8 of 2 with about its overlaps (3.7 cm deepest, 8 of 2: 3.5 cm), 4 of 4 1.22x with 6.2 cm. The
# second row is Madrona's step (its gpu_hideseek: 1/30 s in 4 substeps, gravity -9.8) where this env keeps OpenAI's
# (0.075 s, gravity -50): the rate to set beside Madrona's 1.9M env steps/s, as each of its steps simulates 2.25x
# less time than one of OpenAI's (second, so that a stage cut short by its limit still has it).
# The third is the default without sleeping bodies (sleep_substeps 0; hide-and-seek's 16 let bodies at rest sleep),
# the price of the solve for what sits still: on CPU the solver took 1.64x the cycles without. The fourth collides
# every pair every substep (keep_resting_contacts off: pairs of sleeping and static bodies keep their rows by
# default), the price of their narrowphase: on CPU the narrowphase took 1.6x the cycles without kept rows. The last is
# one contact pass a substep, which holds pressed rows since chains are swept after the last pass (solver.mark_chains):
# on CPU it ran 1.09x the default under the held-grab stress, with 0.05 contacts deeper than 2 cm per 1k world-steps.
MADRONA_STEP = {"physics_dt": 1.0 / 30.0, "gravity": -9.8}
NO_SLEEP = {"sleep_substeps": 0}
NO_KEPT_ROWS = {"keep_resting_contacts": False}
PHYSICS_BUDGETS = (
    (8, 2, {}),
    (4, 2, MADRONA_STEP),
    (8, 2, NO_SLEEP),
    (8, 2, NO_KEPT_ROWS),
    (6, 3, {}),
    (6, 2, {}),
    (4, 4, {}),
    (8, 1, {}),
)


def _physics_budgets(args: argparse.Namespace, result: dict, counts: list[int], steps: int, repeats: int, window):
    """Hide-and-seek's env steps/s at each of ``PHYSICS_BUDGETS`` (with ``--hide-and-seek``'s fields) and
    ``counts`` worlds, into ``result["budgets"]`` row by row: what fewer substeps of more passes buy on this
    device, and the rate at Madrona's step. Each row names its step (``physics_dt``) and the simulated seconds per
    second of wall time."""
    rows = result["budgets"]
    for substeps, passes, fields in PHYSICS_BUDGETS:
        dt = float((_hs(args) | fields).get("physics_dt", _default_physics_dt()))
        for n in counts:
            row: dict[str, Any] = {"num_worlds": n, "physics_substeps": substeps, "contact_passes": passes}
            row.update(
                fields,
                physics_dt=dt,
                madrona_step=fields is MADRONA_STEP,
                sleeping=fields is not NO_SLEEP,
                kept_rows=fields is not NO_SLEEP and fields is not NO_KEPT_ROWS,
            )
            rows.append(row)
            label = f"hide_and_seek {n} worlds, {substeps} substeps of {passes} passes, {dt:.4g} s a step"
            budget = {"physics_substeps": substeps, "contact_passes": passes, **fields}
            _hs_rate(args, row, label, steps, repeats, window, **budget)
            if "env_steps_per_s" in row:
                row["simulated_s_per_s"] = row["env_steps_per_s"] * dt
            _partial(args, result)


def _default_physics_dt() -> float:
    """Hide-and-seek's step [s] by default (its config's ``physics_dt``)."""
    import importlib

    return float(importlib.import_module("envs.hide_and_seek").HideAndSeekConfig().physics_dt)


def _hs_rate(args: argparse.Namespace, row: dict, label: str, steps: int, repeats: int, window, **overrides: Any):
    """Hide-and-seek at ``row["num_worlds"]`` worlds with ``--hide-and-seek``'s fields and ``overrides``: its env
    steps/s and us per step of random play into ``row`` (or the error, where it cannot be built)."""
    import torch

    n = row["num_worlds"]
    t0 = time.perf_counter()
    try:
        sim = _sim("hide_and_seek", n, args.device, **(_hs(args) | overrides))
    except Exception as e:  # e.g. out of memory at the largest counts
        row["error"] = f"{type(e).__name__}: {e}"[:300]
        _say(f"{label}: {row['error']}")
        return
    _say(f"{label}: built in {time.perf_counter() - t0:.1f} s")
    # The solver's form at this count (the "auto" layout's CUDA build turns at solver_world_from): its solve kernel.
    solves = [t.kernel.key for t in sim.graph.tasks if t.name.startswith(("solver_solve_", "step_bodies"))]
    row["solver_kernel"] = solves[0] if solves else None
    gen = torch.Generator().manual_seed(1)
    for key, value in _random_actions(sim, gen).items():
        sim.actions[key].copy_(value)
    for _ in range(3):
        sim.step()
    per_step = _timed(sim.step, steps, repeats, args.device, window)
    row.update(env_steps_per_s=n / per_step, us_per_step=per_step * 1e6)
    _say(f"{label}: {n / per_step:,.0f} env steps/s ({per_step * 1e6:.1f} us/step)")


def _stepped_sim(args: argparse.Namespace, n: int, row: dict, **overrides: Any):
    """Hide-and-seek at ``n`` worlds with ``overrides``, stepped once with seeded random actions; None (and the
    error in ``row``) where it cannot be built."""
    import torch

    try:
        sim = _sim("hide_and_seek", n, args.device, seed=2, **overrides)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {e}"[:300]
        return None
    gen = torch.Generator().manual_seed(1)
    for key, value in _random_actions(sim, gen).items():
        sim.actions[key].copy_(value)
    sim.step()
    return sim


def _solver_forms(text: str) -> list[tuple]:
    """``--solver-forms``: ``LAYOUT[:REGISTERS][:staged][:cached][:nofma][:interleaved][:ordered][:lLANES]@N[+N...]``,
    comma-separated, as the solver stage's variants (layout, registers, interleaved, staged, cached, fma, lanes per
    world, worlds sorted by work, world counts)."""
    forms = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        form, sep, worlds = item.partition("@")
        layout, *flags = form.split(":")
        known = {"staged", "cached", "nofma", "interleaved", "ordered"}
        registers = [f for f in flags if f.isdigit()]
        lanes = [f for f in flags if f[:1] == "l" and f[1:] in ("4", "8", "16", "32")]
        if (
            not sep
            or layout not in ("world", "block")
            or set(flags) - known - set(registers) - set(lanes)
            or len(registers) > 1
            or len(lanes) > 1
            or not all(w.isdigit() and int(w) > 0 for w in worlds.split("+"))
        ):
            raise SystemExit(
                "gpu-report: --solver-forms takes LAYOUT[:REGISTERS][:staged][:cached][:nofma][:interleaved][:ordered]"
                "[:lLANES]"
                f"@N[+N...], "
                f"LAYOUT world or block, got {item!r}"
            )
        counts = [int(w) for w in worlds.split("+")]
        reg = int(registers[0]) if registers else None
        forms.append(
            (
                layout,
                reg,
                "interleaved" in flags,
                "staged" in flags,
                "cached" in flags,
                "nofma" not in flags,
                int(lanes[0][1:]) if lanes else 32,
                "ordered" in flags,
                counts,
            )
        )
    return forms


# Fixed hide-and-seek layouts whose solve is known, to time one manifold's solve on the device (``_solver_stages``):
# the random level's levels stage holds about 10 manifolds in 1-2 levels a pass, so its cycles per manifold solve
# are comparable with these. A seeker is static in the preparation phase: "agent alone" has one contact row (a
# sphere on the floor), "box and agent" five (a cube's four on the floor, the sphere's one).
PROBE_SCENES: dict[str, dict[str, Any]] = {
    "random level": {},
    "agent alone": {"fixed_agents": ((0, -1.5, -1.5, 0.0), (1, 1.5, -1.5, 3.1416))},
    "box and agent": {
        "fixed_agents": ((0, -1.5, -1.5, 0.0), (1, 1.5, -1.5, 3.1416)),
        "fixed_boxes": ((0.0, 1.0, 0.3),),
    },
}


def _solver_stages(args: argparse.Namespace, layout: str, n: int, scene: str = "random level") -> dict:
    """Where the solver's time goes: hide-and-seek (``scene``, of ``PROBE_SCENES``) with ``solver_timing``, each
    stage's clock cycles (lane 0 of every world, ``world.solver_cycles``) per world-step and as a share of the
    solver's cycles, and the mean contact rows per world."""
    import importlib

    import torch

    stages = importlib.import_module("systems.solver").SOLVER_STAGES
    row: dict[str, Any] = {"num_worlds": n, "layout": layout, "scene": scene}
    sim = _stepped_sim(
        args, n, row, solver_layout=layout, solver_timing=True, solver_cache=False, **PROBE_SCENES[scene]
    )
    if sim is None:
        return row
    cycles = sim.tensor("world", "solver_cycles")
    cycles.zero_()
    steps = 2 if args.quick else 5
    for _ in range(steps):
        sim.step()
    total = cycles.to(torch.float64).sum(0).cpu().tolist()
    row["cycles_per_world_step"] = {name: t / (n * steps) for name, t in zip(stages, total, strict=True)}
    row["share"] = {name: t / max(sum(total), 1.0) for name, t in zip(stages, total, strict=True)}
    row["contact_rows"] = float(sim.tensor("world", "contact_count").to(torch.float64).mean())
    _say(f"solver stages {layout} {n} worlds, {scene}: " + ", ".join(f"{k} {v:.0%}" for k, v in row["share"].items()))
    return row


def _staged_profile(args: argparse.Namespace, n: int, scene: str = "random level", layout: str = "block") -> dict:
    """The staged solver's launches (the block's with its cache on CUDA, as by default; or a thread per world's,
    ``layout`` "world") timed one by one (``sim.profile``: a device synchronisation around each), summed over the
    substeps per stage of ``solver.STAGED``: seconds per step and share of the solver's time, in hide-and-seek's
    ``scene`` (of ``PROBE_SCENES``)."""
    import importlib

    staged = importlib.import_module("systems.solver").STAGED
    row: dict[str, Any] = {"num_worlds": n, "scene": scene, "layout": layout}
    sim = _stepped_sim(args, n, row, solver_layout=layout, solver_staged=True, **PROBE_SCENES[scene])
    if sim is None:
        return row
    tree = sim.profile(2 if args.quick else 5).as_dict()["tree"]
    seconds = dict.fromkeys(staged, 0.0)
    for phase in tree["children"]:
        for system in phase["children"]:
            parts = system["name"].split("_")
            if len(parts) == 3 and parts[0] == "solver" and parts[1] in seconds:
                seconds[parts[1]] += system["seconds"]
    total = sum(seconds.values())
    row["seconds_per_step"] = seconds
    row["share"] = {k: v / total if total > 0 else 0.0 for k, v in seconds.items()}
    row["step_seconds"] = tree["seconds"]
    _say(f"staged solver {n} worlds, {scene}: " + ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in seconds.items()))
    return row


def _hung(args: argparse.Namespace, result: dict, n: int, label: str) -> None:
    """The solver stage's watchdog: records that variant ``label`` at ``n`` worlds did not finish, and ends the stage."""
    result["rows"].append(
        {"num_worlds": n, "layout": label, "error": f"did not finish in {args.variant_timeout_s:g} s (hangs?)"}
    )
    _say(f"solver {label} {n} worlds: {result['rows'][-1]['error']}; the stage ends here")
    _partial(args, result)
    _PARTIAL.acquire()  # held until the exit: the stage's own thread writes nothing after this
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the measured rows stand; a --resume does not run the hanging variant again


def _run(cmd: list[str], timeout: float) -> dict:
    """Runs a command with its output appended live to the stage's log (kept when a stage times out)."""
    import tempfile

    log, scratch = os.environ.get("ECS_GPU_REPORT_LOG"), None
    if log is None:  # a stage run on its own, outside the orchestrator: a scratch log for the tail
        fd, log = scratch = tempfile.mkstemp(prefix="gpu-report-", suffix=".log")
        os.close(fd)
    t0 = time.perf_counter()
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        start = f.tell()
        rc = _run_group(cmd, f, timeout, group=False)
        rc = "timed out" if rc is None else rc
    tail = _tail(log, 3000, start)
    if scratch:
        os.unlink(log)
    return {"cmd": " ".join(cmd), "rc": rc, "seconds": time.perf_counter() - t0, "tail": tail}


# Seconds between the stack reports of a running stage (``_report_stack``).
STACK_EVERY_S = 45.0


def _report_stack(every_s: float) -> threading.Event:
    """Writes the main thread's stack to stderr (the stage's log) every ``every_s`` seconds from a daemon thread, so
    a stage that runs long shows where. The thread takes the GIL to read the frames: ``faulthandler``'s timer reads
    them from a thread of its own without it, and a stage that was compiling kernels (frames coming and going in
    ``inspect``) died of SIGSEGV in the middle of such a dump (exit -11, the solver stage on CPU). Returns the event
    that stops the reports."""
    import traceback

    main = threading.main_thread().ident
    stop = threading.Event()

    def report() -> None:
        start = time.perf_counter()
        while not stop.wait(every_s):
            frame = sys._current_frames().get(main)
            if frame is None:
                return
            stack = "".join(traceback.format_stack(frame))
            sys.stderr.write(f"[still running after {time.perf_counter() - start:.0f} s] main thread:\n{stack}")
            sys.stderr.flush()

    threading.Thread(target=report, name="stack-report", daemon=True).start()
    return stop


def _run_group(cmd: list[str], log, timeout: float, env: dict | None = None, group: bool = True) -> int | None:
    """Runs ``cmd`` with output to ``log``; on timeout asks it for its threads' stacks (SIGUSR1, which a stage
    answers with ``faulthandler``), kills it and returns None. With ``group`` it runs in its own process group and
    the whole group is killed (a stage and the benchmarks it started, so none keeps the GPU busy)."""
    import signal

    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=group)
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        if group:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                os.kill(p.pid, signal.SIGUSR1)  # the stage itself, not the benchmarks it started
                p.wait(timeout=2.0)
            with contextlib.suppress(ProcessLookupError):  # the whole group has ended meanwhile
                os.killpg(p.pid, signal.SIGKILL)
        else:
            p.kill()
        p.wait()
        return None


def _tail(path: str, chars: int, start: int = 0) -> str:
    """The last ``chars`` characters of a log from byte ``start``, progress-bar redraws dropped."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln.rsplit("\r", 1)[-1] for ln in text.splitlines()]
    return "\n".join(ln for ln in lines if ln.strip())[-chars:]


def _say(*parts: Any) -> None:
    """A timestamped progress line in the stage's log, so a stage that runs out of time shows how far it got."""
    print(f"[{time.strftime('%H:%M:%S')}]", *parts, flush=True)


def stage_cartpole(args: argparse.Namespace) -> dict:
    py = sys.executable
    counts = [1024] if args.quick else [4096, 65536, 1048576]
    steps = "50" if args.quick else "1000"
    # The two cartpole targets first (the fused step against the bandwidth bound, the host time of a
    # captured step), on their own and short, so that a stage cut short by its limit still has them.
    targets_json = os.path.join(args.out, "cartpole_targets.json")
    targets = [py, "examples/benchmarks/bench_suite.py", "--device", args.device, "--json", targets_json]
    targets += ["--bandwidth", "--overhead", "--no-throughput", "--no-factors", "--repeats", "3"]
    if args.quick:
        targets += ["--bandwidth-num-worlds", "256", "--copy-mib", "8", "--window", "0.05"]
    out: dict[str, Any] = {"targets": _run(targets, 60 if args.quick else 90)}
    if os.path.exists(targets_json):
        with open(targets_json) as f:
            found = json.load(f)
        out["targets_results"] = {"bandwidth": found.get("bandwidth"), "overhead": found.get("overhead")}
    out |= {
        "bench": [
            _run(
                [
                    py,
                    "-m",
                    "ecs",
                    "bench",
                    "cartpole",
                    "--device",
                    args.device,
                    "--num-worlds",
                    str(n),
                    "--steps",
                    steps,
                    "--repeats",
                    "3",
                ],
                120,
            )
            for n in counts
        ]
    }
    suite_json = os.path.join(args.out, "cartpole_suite.json")
    suite = [
        py,
        "examples/benchmarks/bench_suite.py",
        "--device",
        args.device,
        "--json",
        suite_json,
    ]
    if args.quick:
        suite += ["--max-log2", "6", "--ks", "1", "10", "--repeats", "2", "--window", "0.05", "--no-factors"]
        suite += ["--backends", "torch-cpu", "engine-captured", "engine-fused"]
    else:
        suite += [
            "--backends",
            "torch-cuda",
            "jax",
            "engine-captured",
            "engine-fused",
            "engine-fused-run",
            "--plots",
            args.out,
            # Short windows: the full N sweep at the defaults took ~7 s per N on an H100.
            "--window",
            "0.03",
            "--repeats",
            "3",
            "--cell-cap",
            "1",
        ]
    out["suite"] = _run(suite, 60 if args.quick else 240)
    if os.path.exists(suite_json):
        with open(suite_json) as f:
            out["suite_results"] = json.load(f)
    return out


def stage_envs(args: argparse.Namespace) -> dict:
    import importlib

    names = importlib.import_module("envs").names()
    counts, steps = ([8], "10") if args.quick else ([1024, 16384], "100")
    py = sys.executable
    return {
        name: [
            _run(
                [
                    py,
                    "-m",
                    "ecs",
                    "bench",
                    name,
                    "--device",
                    args.device,
                    "--num-worlds",
                    str(n),
                    "--steps",
                    steps,
                    "--repeats",
                    "3",
                ],
                120,
            )
            for n in counts
        ]
        for name in names
    }


def stage_registers(args: argparse.Namespace) -> dict:
    """Per kernel: registers, local (spill) bytes, max threads per block, from cuFuncGetAttribute."""
    if not args.device.startswith("cuda"):
        return {"skipped": "registers come from the CUDA driver; run on a GPU (or ../shared/gpu/registers.py offline)"}
    import ctypes

    import warp as wp

    # (layout, registers, timed, staged, cached): what the solver stage runs; building a sim loads every module of
    # its step
    solvers = (
        ("world", None, False, False, False),
        ("block", None, False, False, False),
        ("block", None, False, False, True),
        ("block", None, False, True, False),
        ("block", None, False, True, True),
        ("world", None, False, True, False),
        ("block", 128, False, False, False),
        ("block", None, True, False, False),
    )
    sims = [
        _sim(
            "hide_and_seek",
            64,
            args.device,
            solver_layout=lay,
            solver_registers=r,
            solver_timing=t,
            solver_staged=s,
            solver_cache=c,
        )
        for lay, r, t, s, c in solvers
    ]
    cuda = ctypes.CDLL("libcuda.so.1")
    attrs = {"max_threads_per_block": 0, "local_bytes": 3, "registers": 4}
    rows = []
    dev = wp.get_device(args.device)
    tasks = {task.kernel.key: task for sim in sims for task in sim.graph.tasks}  # the block solver added once
    for task in tasks.values():
        module = task.kernel.module
        for (ctx, _dim), exec_ in module.execs.items():
            if ctx != dev.context:
                continue
            try:
                hooks = exec_.get_kernel_hooks(task.kernel)
                fn = ctypes.c_void_p(hooks.forward)
                row = {"kernel": task.kernel.key}
                for name, code in attrs.items():
                    v = ctypes.c_int(0)
                    cuda.cuFuncGetAttribute(ctypes.byref(v), code, fn)
                    row[name] = v.value
                rows.append(row)
            except Exception as e:
                rows.append({"kernel": task.kernel.key, "error": f"{type(e).__name__}: {e}"[:200]})
    return {"kernels": rows}


def stage_policy_step(args: argparse.Namespace) -> dict:
    import torch

    from .adapters.policy_step import PolicyStep

    n = 256 if args.quick else 65536
    sim = _sim("cartpole", n, args.device)
    net = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2)).to(sim.rewards.device)

    def policy(obs):
        with torch.no_grad():
            return {"push": net(obs["state"]).argmax(-1).to(torch.int32)}

    stepper = PolicyStep(sim, policy)

    def separate():
        sim.actions["push"].copy_(policy(sim.obs)["push"])
        sim.step()

    steps, repeats = (20, 3) if args.quick else (200, 5)
    return {
        "num_worlds": n,
        "captured_us": _timed(stepper, steps, repeats, args.device) * 1e6,
        "separate_us": _timed(separate, steps, repeats, args.device) * 1e6,
    }


def stage_dist(args: argparse.Namespace) -> dict:
    n = "256" if args.quick else "65536"
    steps = "20" if args.quick else "500"
    cmd = [
        sys.executable,
        "-m",
        "ecs",
        "dist-bench",
        "cartpole",
        "--device",
        args.device,
        "--num-worlds",
        n,
        "--steps",
        steps,
        "--repeats",
        "3",
    ]
    return _run(cmd, 120)


def stage_tests(args: argparse.Namespace) -> dict:
    if not args.device.startswith("cuda") and not args.force_tests:
        return {"skipped": "the CUDA test cases need a GPU (pass --force-tests to run the selection on CPU)"}
    xml = os.path.join(args.out, "tests.xml")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cuda", "--timeout", "240"]
    cmd += ["--continue-on-collection-errors", "-rfE", f"--junitxml={xml}"]  # the GPU image lacks some test extras
    if args.quick:
        cmd += ["tests/test_gpu_report.py", "--co"]
    else:
        try:  # the cases side by side in several processes (the serial run did not finish in 300 s on an H100)
            import xdist  # noqa: F401

            cmd += ["-n", str(min(6, os.cpu_count() or 1))]
        except ImportError:
            pass
    out = _run(cmd, 300)
    out.update(_junit_failures(xml))
    return out


def _junit_failures(path: str) -> dict:
    """Counts and each failing test's id and message from pytest's JUnit XML (written when pytest ends)."""
    import xml.etree.ElementTree as ET

    if not os.path.exists(path):
        return {"junit": "no JUnit XML (pytest did not finish)"}
    cases = ET.parse(path).getroot().iter("testcase")
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failures = []
    for case in cases:
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            counts["failed"] += 1
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            failures.append({"test": name, "message": (bad.get("message") or "")[:500]})
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return {"counts": counts, "failures": failures}


# -- orchestration -------------------------------------------------------------------------------


def _rate_table(rows: list[dict], column: str, label: str) -> list[str]:
    """Markdown lines: env steps/s and us per step against num_worlds and ``column`` (a failed row: its error)."""
    lines = ["", f"| num_worlds | {label} | env steps/s | us per step |", "|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['num_worlds']} | {r[column]} | {r['error']} | |")
        else:
            lines.append(f"| {r['num_worlds']} | {r[column]} | {r['env_steps_per_s']:,.0f} | {r['us_per_step']:.1f} |")
    return lines


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A markdown table's lines."""
    return [f"| {' | '.join(header)} |", "|" + "---|" * len(header)] + [f"| {' | '.join(map(str, r))} |" for r in rows]


def _write(out: str, report: dict) -> None:
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    lines = [f"# GPU report: {report.get('device', '?')}", ""]
    for name in STAGES:
        entry = report["stages"].get(name)
        if entry is None:
            continue
        lines.append(f"## {name}: {entry['status']} ({entry['seconds']:.0f} s)")
        result = entry.get("result", {})
        if name == "hide_and_seek" and "throughput" in result:
            lines += _rate_table(result["throughput"], "wide_sensors", "wide sensors")
            kernels = {r["num_worlds"]: r["solver_kernel"] for r in result["throughput"] if r.get("solver_kernel")}
            if kernels:
                forms = ", ".join(f"{n:,} worlds `{k}`" for n, k in sorted(kernels.items()))
                lines += ["", f"The solver's solve kernel at each count: {forms}."]
            budgets = [r for r in result.get("budgets", []) if "env_steps_per_s" in r]
            if budgets:
                lines += [
                    "",
                    "Env steps/s at fewer substeps of more contact passes (`physics_substeps`, `contact_passes`), and at "
                    "Madrona's step (1/30 s, gravity -9.8; OpenAI's is 0.075 s, gravity -50); simulated seconds per "
                    "second compare steps of different lengths:",
                    "",
                ]
                lines += _table(
                    ["substeps x passes", "step", "num_worlds", "env steps/s", "simulated s/s"],
                    [
                        [
                            f"{r['physics_substeps']} x {r['contact_passes']}",
                            f"{r['physics_dt']:.4g} s"
                            + (", Madrona's" if r.get("madrona_step") else "")
                            + ("" if r.get("sleeping", True) else ", no sleeping")
                            + ("" if r.get("kept_rows", True) or not r.get("sleeping", True) else ", rows not kept"),
                            r["num_worlds"],
                            f"{r['env_steps_per_s']:,.0f}",
                            f"{r['simulated_s_per_s']:,.0f}",
                        ]
                        for r in budgets
                    ],
                )
            lines += ["", "```", result.get("profile", ""), "```"]
        elif name == "solver" and "rows" in result:
            lines += _rate_table(result["rows"], "layout", "solver layout")
            for n, same in result["identical"].items():
                references = result.get("references", {}).get(n, {})
                lines += [
                    f"- {n} worlds, {label}: {'the same state as' if ok else 'not the same state as'} "
                    f"{references.get(label, 'world')} (5 steps, every body column)"
                    for label, ok in same.items()
                ]
            stage_rows = [r for r in result.get("stages", []) if "share" in r]
            if stage_rows:
                names = list(stage_rows[0]["share"])
                lines += ["", "Solver stages, share of lane 0's clock cycles (`solver_timing`):", ""]
                lines += _table(
                    ["scene", "layout", "num_worlds", "contact rows", *names, "cycles per world-step"],
                    [
                        [
                            r.get("scene", "random level"),
                            r["layout"],
                            r["num_worlds"],
                            f"{r.get('contact_rows', float('nan')):.1f}",
                            *(f"{r['share'][k]:.1%}" for k in names),
                            f"{sum(r['cycles_per_world_step'].values()):,.0f}",
                        ]
                        for r in stage_rows
                    ],
                )
            staged_rows = [r for r in result.get("staged_profile", []) if "share" in r]
            if staged_rows:
                names = list(staged_rows[0]["share"])
                lines += ["", "Staged solver, each stage's launches timed by `sim.profile` (us per step, share):", ""]
                lines += _table(
                    ["scene", "layout", "num_worlds", *names, "eager step (us)"],
                    [
                        [
                            r.get("scene", "random level"),
                            r.get("layout", "block"),
                            r["num_worlds"],
                            *(f"{r['seconds_per_step'][k] * 1e6:,.0f} ({r['share'][k]:.0%})" for k in names),
                            f"{r['step_seconds'] * 1e6:,.0f}",
                        ]
                        for r in staged_rows
                    ],
                )
        elif name == "identity" and entry["status"] == "ok":
            lines += [
                f"- {env}: identical={r['identical']} ({r['num_worlds']} worlds, {r['steps']} steps)"
                for env, r in result.items()
            ]
        elif name == "soak" and "runs" in result:
            for r in result["runs"]:
                at = r.get("deepest_contact_at") or {}
                where = f" (step {at['step']}, world {at['world']}, {' on '.join(at['kinds'])})" if at else ""
                verdict = "passed" if r.get("passed") else f"FAILED: {r['problem'] or 'past a limit'}"
                lines.append(
                    f"- {r['num_worlds']:,} worlds, {r.get('world_steps', 0):,} world-steps: deepest contact "
                    f"{1000 * r.get('max_contact_depth', 0.0):.1f} mm{where}, fastest body "
                    f"{r.get('max_body_speed', 0.0):.1f} m/s: {verdict}"
                )
        elif name == "tests" and "counts" in result:
            lines.append(f"- {result['counts']}")
            lines += [f"- FAILED `{f['test']}`: {f['message'][:300]}" for f in result["failures"]]
        elif entry["status"] != "ok":
            lines += ["", "```", str(entry.get("error", ""))[-1500:], "```"]
        elif name == "envs":
            lines += ["", "| env | run | output |", "|---|---|---|"]
            for env_name, runs in result.items():
                for r in runs:
                    rate = next((ln for ln in str(r.get("tail", "")).splitlines() if "world-steps/s (" in ln), "")
                    lines.append(f"| {env_name} | exit {r.get('rc')} | {rate or 'see report.json'} |")
        elif name in ("cartpole", "dist"):
            bandwidth = (result.get("targets_results") or {}).get("bandwidth")
            if bandwidth:
                lines += [
                    f"- fused cartpole step() at {bandwidth['num_worlds']:,} worlds: "
                    f"{bandwidth['achieved_gb_per_s']:.1f} GB/s, {bandwidth['fraction_of_bound']:.0%} of the bandwidth "
                    f"bound (target: 50 %); host time of one step(): {bandwidth['host_us_per_step']:.1f} us "
                    "(target: under 10 us)"
                ]
            targets = [result["targets"]] if "targets" in result else []
            runs = [*targets, *result.get("bench", []), *([result["suite"]] if "suite" in result else [])] or [result]
            for r in runs:
                lines += ["", f"`{r.get('cmd', '')}` (exit {r.get('rc')}, {r.get('seconds', 0):.0f} s)", "```"]
                lines += [str(r.get("tail", ""))[-1500:], "```"]
        else:
            lines += ["", "```", json.dumps(result, indent=1, default=str)[:3000], "```"]
        lines.append("")
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines))


def _plot(out: str, report: dict) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        report["plots"] = "matplotlib is not installed: no plots"
        return
    rows = report["stages"].get("hide_and_seek", {}).get("result", {}).get("throughput", [])
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for wide in (True, False):
        pts = [(r["num_worlds"], r["env_steps_per_s"]) for r in rows if r["wide_sensors"] == wide and "error" not in r]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label="thread per ray/target" if wide else "thread per agent")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("num_worlds")
    ax.set_ylabel("env steps / s")
    ax.set_title(f"hide-and-seek on {report.get('device', '?')}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "hide_and_seek_throughput.png"), dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ecs gpu-report", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for report.json, report.md and plots")
    parser.add_argument("--device", default=None, help="cuda:N or cpu (default: cuda:0 when present, else cpu)")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}")
    parser.add_argument("--resume", action="store_true", help="skip the stages already in OUT/report.json")
    parser.add_argument("--budget-s", type=float, default=520.0, help="total seconds for all stages (default 520)")
    parser.add_argument("--quick", action="store_true", help="toy sizes (for CPU tests)")
    parser.add_argument("--force-tests", action="store_true", help="run the tests stage on CPU too")
    parser.add_argument(
        "--variant-timeout-s",
        type=float,
        default=120.0,
        help="solver stage: a variant that takes longer is recorded as hanging and ends the stage (default 120)",
    )
    parser.add_argument(
        "--hide-and-seek",
        default="",
        metavar="KEY=VALUE,...",
        help="hide-and-seek config fields for the identity and hide_and_seek stages, e.g. "
        "solver_staged=true,solver_cache=true (the solver stage's table says which is fastest)",
    )
    parser.add_argument(
        "--limit",
        default="",
        metavar="STAGE=SECONDS,...",
        help="a stage's own time limit, e.g. solver=150 (defaults: solver 210, hide_and_seek 110, identity 50, "
        "soak 40, cartpole 70, tests 300, envs 240, the others 120)",
    )
    parser.add_argument(
        "--solver-forms",
        default="",
        metavar="FORM@N[+N],...",
        help="the solver stage times these forms instead of its own list, each "
        "LAYOUT[:REGISTERS][:staged][:cached][:nofma][:interleaved][:lLANES]@N[+N...], e.g. "
        "world:nofma@1024,block:staged:128:nofma@1024+16384 (a thread per world without FMA first makes the "
        "others' states checked against it)",
    )
    parser.add_argument("--stage", help=argparse.SUPPRESS)  # internal: run one stage in this process
    args = parser.parse_args(argv)
    if args.device is None:
        import warp as wp

        wp.config.log_level = wp.LOG_WARNING
        args.device = "cuda:0" if wp.is_cuda_available() else "cpu"
    os.makedirs(args.out, exist_ok=True)
    if args.stage:  # child process: one stage, result to OUT/stage_<name>.json
        import faulthandler
        import signal

        _report_stack(STACK_EVERY_S)  # where a slow stage spends its time, in its log
        # A stage stuck in native code (with the GIL held, so that thread cannot report) dumps every thread's stack
        # when the parent signals it at the time limit, before the kill (_run_group).
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        _partial(args, globals()[f"stage_{args.stage}"](args))
        return 0
    wanted = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(STAGES))
    if unknown:
        parser.error(f"unknown stage(s) {unknown}; stages: {', '.join(STAGES)}")
    _solver_forms(args.solver_forms)  # a bad form fails before any stage runs
    fields = _hs(args)
    if fields:  # a bad key or value fails here, with the config's own error, before any stage runs
        import importlib

        try:
            importlib.import_module("envs").make("hide_and_seek", **fields)
        except Exception as e:
            parser.error(f"--hide-and-seek: {e}")
    path = os.path.join(args.out, "report.json")
    report = {"device": args.device, "stages": {}}
    if args.resume and os.path.exists(path):
        with open(path) as f:
            report = json.load(f)
        wanted = [s for s in wanted if report["stages"].get(s, {}).get("status") != "ok"]
    deadline = time.perf_counter() + args.budget_s
    # Sized for a 15-minute device lease: the first six stages fit one call of ``--budget-s`` (the solver's rows that
    # decide come first within its 210 s; cartpole's targets first within its 70 s).
    limits = {
        "solver": 210,
        "hide_and_seek": 110,
        "identity": 50,
        "soak": 40,
        "cartpole": 70,
        "tests": 300,
        "envs": 240,
    }
    limits |= _pairs(args.limit, "--limit")
    unknown = sorted(set(limits) - set(STAGES))
    if unknown or not all(isinstance(v, int | float) and v > 0 for v in limits.values()):
        parser.error(f"--limit takes STAGE=SECONDS with a stage of {', '.join(STAGES)}, got {args.limit!r}")
    for name in wanted:
        left = deadline - time.perf_counter()
        if left < 10:
            report["stages"][name] = {"status": "not run (budget spent; run again with --resume)", "seconds": 0.0}
            continue
        cmd = [sys.executable, "-m", "ecs.gpu_report", "--out", args.out, "--device", args.device, "--stage", name]
        cmd += ["--quick"] * args.quick + ["--force-tests"] * args.force_tests
        cmd += ["--variant-timeout-s", str(args.variant_timeout_s), "--hide-and-seek", args.hide_and_seek]
        cmd += ["--solver-forms", args.solver_forms]
        log = os.path.join(args.out, "logs", f"{name}.log")
        os.makedirs(os.path.dirname(log), exist_ok=True)
        t0 = time.perf_counter()
        print(f"gpu-report: {name} ...", file=sys.stderr, flush=True)
        env = dict(os.environ, ECS_GPU_REPORT_LOG=log, PYTHONUNBUFFERED="1")
        if "WARP_CACHE_PATH" not in env and os.path.isdir(CACHE):  # kernels built beforehand (tests.cuda_codegen)
            env["WARP_CACHE_PATH"] = CACHE
        stage_file = os.path.join(args.out, f"stage_{name}.json")
        if os.path.exists(stage_file):  # left by a killed run: not this run's result
            os.unlink(stage_file)
        open(log, "w").close()
        with open(log, "a") as f:  # append mode: the stage's own child commands write into the same log
            rc = _run_group(cmd, f, min(left, limits.get(name, 120)), env)
        status = {0: "ok", None: "timed out"}.get(rc, f"failed (exit {rc})")
        error = None if status == "ok" else _tail(log, 3000)
        entry: dict[str, Any] = {"status": status, "seconds": time.perf_counter() - t0}
        if os.path.exists(stage_file):  # a stage that ran out of time keeps what it wrote with _partial
            with open(stage_file) as f:
                entry["result"] = json.load(f)
            os.unlink(stage_file)
        if error:
            entry["error"] = error
        report["stages"][name] = entry
        if name == "device" and status == "ok":
            report["device"] = f"{entry['result'].get('name', args.device)} ({args.device})"
        _write(args.out, report)
        print(f"gpu-report: {name}: {status} in {entry['seconds']:.0f} s", file=sys.stderr, flush=True)
    _plot(args.out, report)
    _write(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
