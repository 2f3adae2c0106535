"""The engine's own kernels: episode bookkeeping, the validity gate, and the reset entry point.

The rules of an episode (``next_step``, ``end_step``, ``next_episode``) are device functions that
both these kernels and the fused step (``ecs.fusion``) call, so they are written once. Generated
per environment, because they depend on its actions and observations: action validation, the
copy of a run's staged actions into ``sim.actions``, and the masked copy into ``final_obs``
(``generate``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import warp as wp

from .codegen import build_kernel, build_native, generated_module, type_expr
from .funcs import episode_rng

if TYPE_CHECKING:
    from .storage import Storage

wp.set_module_options({"enable_backward": False})

INT32_MAX = 2147483647


@wp.kernel
def gate_step(
    errors_in: wp.array(dtype=wp.int32),
    ok_out: wp.array(dtype=wp.int32),
    any_done_out: wp.array(dtype=wp.int32),
):
    """The step runs only when no error is pending: an invalid action leaves every world unchanged."""
    if errors_in[0] == 0:
        ok_out[0] = 1
    else:
        ok_out[0] = 0
    any_done_out[0] = 0


# -- the rules of an episode, one home for the unfused kernels and the fused step -------------


@wp.func
def next_step(horizon: wp.int32, episode_step: wp.int32):
    """A step begins: the episode's step count, and whether the time limit truncates it (not terminated yet)."""
    step = episode_step + 1
    return step, horizon > 0 and step >= horizon


@wp.func
def end_step(terminated: bool, truncated: bool):
    """A step ends: terminated wins over truncated; an ended world is flagged (1) for the same-step reset."""
    return truncated and not terminated, wp.where(terminated or truncated, 1, 0)


@wp.func
def next_episode(seed: wp.int32, global_world: wp.int32, episode: wp.int32):
    """An episode begins: its number, and the RNG state drawn from (seed, global world, episode)."""
    number = episode + 1
    return number, episode_rng(seed, global_world, number)


@wp.kernel
def begin_step(
    horizon: wp.int32,
    world_episode_step_out: wp.array(dtype=wp.int32),
    world_reward_out: wp.array2d(dtype=wp.float32),
    world_terminated_out: wp.array(dtype=wp.bool),
    world_truncated_out: wp.array(dtype=wp.bool),
):
    world = wp.tid()
    step, truncated = next_step(horizon, world_episode_step_out[world])
    world_episode_step_out[world] = step
    for a in range(world_reward_out.shape[1]):
        world_reward_out[world, a] = 0.0
    world_terminated_out[world] = False
    world_truncated_out[world] = truncated


@wp.kernel
def finish_step(
    world_terminated_in: wp.array(dtype=wp.bool),
    world_truncated_out: wp.array(dtype=wp.bool),
    world_reset_out: wp.array(dtype=wp.int32),
    any_done_out: wp.array(dtype=wp.int32),
):
    """Ended worlds are flagged for the same-step reset, and any_done tells the graph to run it."""
    world = wp.tid()
    truncated, reset = end_step(world_terminated_in[world], world_truncated_out[world])
    world_truncated_out[world] = truncated
    world_reset_out[world] = reset
    if reset != 0:
        any_done_out[0] = 1


@wp.kernel
def request_reset(request_in: wp.array(dtype=wp.int32), world_reset_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    world_reset_out[world] = wp.where(request_in[world] != 0, 1, 0)


@wp.kernel
def begin_episode(
    clear_outputs: wp.int32,
    seed_in: wp.array(dtype=wp.int32),
    world_offset_in: wp.array(dtype=wp.int32),
    world_reset_in: wp.array(dtype=wp.int32),
    world_episode_out: wp.array(dtype=wp.int32),
    world_episode_step_out: wp.array(dtype=wp.int32),
    world_rng_out: wp.array(dtype=wp.uint32),
    world_reward_out: wp.array2d(dtype=wp.float32),
    world_terminated_out: wp.array(dtype=wp.bool),
    world_truncated_out: wp.array(dtype=wp.bool),
):
    """Starts a new episode in every world flagged for reset (rewards stay for same-step resets)."""
    world = wp.tid()
    if world_reset_in[world] == 0:
        return
    episode, rng = next_episode(seed_in[0], world_offset_in[0] + world, world_episode_out[world])
    world_episode_out[world] = episode
    world_episode_step_out[world] = 0
    world_rng_out[world] = rng
    if clear_outputs != 0:
        for a in range(world_reward_out.shape[1]):
            world_reward_out[world, a] = 0.0
        world_terminated_out[world] = False
        world_truncated_out[world] = False


@wp.kernel
def open_claims(first: wp.int32, end: wp.int32, claims_out: wp.array(dtype=wp.int32)):
    """The threads of a fused CPU launch claim the worlds ``[first, end)`` (``fusion.claim_worlds``), in turn."""
    claims_out[0] = first
    claims_out[1] = end
    claims_out[2] = 0


@wp.kernel
def start_loop(
    steps_in: wp.array(dtype=wp.int32),
    cond_out: wp.array(dtype=wp.int32),
    index_out: wp.array(dtype=wp.int32),
):
    index_out[0] = 0
    cond_out[0] = wp.where(steps_in[0] > 0, 1, 0)


@wp.kernel
def next_iteration(
    steps_in: wp.array(dtype=wp.int32),
    cond_out: wp.array(dtype=wp.int32),
    index_out: wp.array(dtype=wp.int32),
):
    index = index_out[0] + 1
    index_out[0] = index
    cond_out[0] = wp.where(index < steps_in[0], 1, 0)


# -- generated per environment -----------------------------------------------------------------


@dataclass
class Generated:
    """The engine kernels of one environment and the flat views they read.

    Attributes:
        validate: ``validate_actions(errors, steps, a0, a1, ...)``: counts invalid actions in the
            first ``steps[0]`` steps of ``(steps, num_worlds, n)`` action arrays, records the first.
        validate_dim: its launch dimension: a thread per world, or on the CPU one thread for all.
        load_actions: ``load_actions(index, src0, dst0, ...)``: step ``index[0]`` of staged actions
            into ``sim.actions``.
        copy_final_obs: ``copy_final_obs(reset, s0, d0, ...)``: observations of ending worlds.
        action_flat: one ``(1, num_worlds, n)`` view of each action (sorted keys), as validated.
        action_flat2d: the same as ``(num_worlds, n)``, as loaded into.
        obs_pairs: ``[s0, d0, s1, d1, ...]``, observation and final observation views.
    """

    validate: wp.Kernel
    validate_dim: int
    load_actions: wp.Kernel
    copy_final_obs: wp.Kernel
    action_flat: list[wp.array]
    action_flat2d: list[wp.array]
    obs_pairs: list[wp.array]


def _count_invalid(dtype: Any, action: Any) -> Any:
    """A CPU function ``count(a, n)``: how many of the first ``n`` values of the contiguous array
    ``a`` an action refuses (outside ``[low, high]`` when discrete, not finite otherwise), in one
    loop that the compiler vectorises."""
    ns: dict[str, Any] = {}
    t = type_expr(dtype, ns)
    if action.discrete:
        low, high = int(action.low), int(action.high)
        bad = f"(a.data[j] < {low}) + (a.data[j] > {high})"  # `int(x)` is a macro in Warp's C++
        name = f"count_outside_{low}_{high}".replace("-", "m")
    else:
        bad = "!wp::isfinite(a.data[j])"
        name = "count_nonfinite"
    snippet = f"int bad = 0;\nfor (int j = 0; j < n; ++j) {{\n    bad += {bad};\n}}\nreturn bad;"
    return build_native(f"{name}_{t}", f"a: wp.array(dtype={t}, ndim=3), n: int", snippet, ns, returns="int")


def _kernel_source(
    name: str, params: list[str], body: list[str], head: list[str] = (), *, per_world: bool = True
) -> str:
    """A kernel's source; ``per_world``: one thread per world (``world = wp.tid()``), else ``body`` loops itself."""
    src = f"def {name}(\n" + "".join(f"    {p},\n" for p in params) + "):\n"
    src += "    world = wp.tid()\n" if per_world else ""
    lines = [*head, *body]
    return src + ("\n".join(lines) + "\n" if body else "    pass\n")


def generate(storage: Storage, device_is_cpu: bool | None = None) -> Generated:
    """Builds the engine kernels of ``storage``'s environment (cached across simulations of it), in their CPU or
    CUDA form (``device_is_cpu``; by default that of the storage's device)."""
    cpu = storage.device == "cpu" if device_is_cpu is None else device_is_cpu
    env, module = storage.env, generated_module("gen", storage.env.name, cpu)
    keys = storage.action_keys
    ns: dict[str, Any] = {}
    params, body = ["errors: wp.array(dtype=wp.int32)", "steps: wp.array(dtype=wp.int32)"], []
    load_params, load_body = ["index: wp.array(dtype=wp.int32)"], []
    action_flat, action_flat2d, counts = [], [], []
    for k_index, key in enumerate(keys):
        action = env.actions[key]
        flat = storage.flat(storage.action(key))
        action_flat2d.append(flat)
        action_flat.append(wp.array(ptr=flat.ptr, dtype=flat.dtype, shape=(1, *flat.shape), device=flat.device))
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
        check = [
            # One local per action: Warp refuses to rebind a name to a value of another dtype.
            f"    v{k_index} = a{k_index}[it, world, i]",
            f"    if {bad}:",
            "        wp.atomic_add(errors, 0, 1)",
            f"        wp.atomic_min(errors, 1, world * {max(1, len(keys))} + {k_index})",
        ]
        if cpu:
            # One thread checks every world: a thread per world costs about 3x more on the CPU.
            ns[f"count_invalid{k_index}"] = _count_invalid(flat.dtype, action)
            counts.append(f"count_invalid{k_index}(a{k_index}, steps[0] * a{k_index}.shape[1] * a{k_index}.shape[2])")
            loops = ["for it in range(steps[0]):", f"    for world in range(a{k_index}.shape[1]):"]
            loops += [f"        for i in range({flat.shape[1]}):"]
            body += [f"    {line}" for line in loops] + [f"            {line}" for line in check]
        else:
            loops = ["for it in range(steps[0]):", f"    for i in range(a{k_index}.shape[2]):"]
            body += [f"    {line}" for line in loops] + [f"        {line}" for line in check]
    if counts:
        # Counting every value in one vectorised pass is most of the check; the worlds are walked,
        # counted and the first bad one recorded only when some value is invalid.
        body = [f"    if {' + '.join(counts)} == 0:", "        return", *body]
    name = "validate_actions_cpu" if cpu else "validate_actions"
    validate = build_kernel(name, _kernel_source(name, params, body, per_world=not cpu), ns, module)
    load = build_kernel("load_actions", _kernel_source("load_actions", load_params, load_body), ns, module)

    ns = {}
    params, body, obs_pairs = ["world_reset_in: wp.array(dtype=wp.int32)"], [], []
    for o_index, key in enumerate(sorted(env.observations)):
        src_arr = storage.flat(storage.singletons[env.observations[key].component.name])
        dst_arr = storage.flat(storage.final_obs[key])
        obs_pairs += [src_arr, dst_arr]
        t = type_expr(src_arr.dtype, ns)
        params += [f"s{o_index}: wp.array(dtype={t}, ndim=2)", f"d{o_index}: wp.array(dtype={t}, ndim=2)"]
        body += [f"    for i in range(s{o_index}.shape[1]):", f"        d{o_index}[world, i] = s{o_index}[world, i]"]
    gate = ["    if world_reset_in[world] == 0:", "        return"] if body else []
    source = _kernel_source("copy_final_obs", params, body, gate)
    final_obs = build_kernel("copy_final_obs", source, ns, module)
    validate_dim = 1 if cpu else storage.num_worlds
    return Generated(validate, validate_dim, load, final_obs, action_flat, action_flat2d, obs_pairs)
