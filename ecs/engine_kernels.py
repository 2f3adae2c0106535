"""The engine's own kernels: episode bookkeeping, the validity gate, and the reset entry point.

Generated per environment (they depend on its actions and observations): action validation and
the masked copy into ``final_obs``; see ``sim.py``.
"""

import warp as wp

from .funcs import episode_rng

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


@wp.kernel
def begin_step(
    horizon: wp.int32,
    world_episode_step_out: wp.array(dtype=wp.int32),
    world_terminated_out: wp.array(dtype=wp.bool),
    world_truncated_out: wp.array(dtype=wp.bool),
):
    world = wp.tid()
    step = world_episode_step_out[world] + 1
    world_episode_step_out[world] = step
    world_terminated_out[world] = False
    world_truncated_out[world] = horizon > 0 and step >= horizon


@wp.kernel
def finish_step(
    world_terminated_in: wp.array(dtype=wp.bool),
    world_truncated_out: wp.array(dtype=wp.bool),
    world_reset_out: wp.array(dtype=wp.int32),
    any_done_out: wp.array(dtype=wp.int32),
):
    """Terminated wins over truncated; ended worlds are flagged for the same-step reset."""
    world = wp.tid()
    done = world_terminated_in[world]
    if done:
        world_truncated_out[world] = False
    else:
        done = world_truncated_out[world]
    if done:
        world_reset_out[world] = 1
        any_done_out[0] = 1
    else:
        world_reset_out[world] = 0


@wp.kernel
def request_reset(request_in: wp.array(dtype=wp.int32), world_reset_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    world_reset_out[world] = wp.where(request_in[world] != 0, 1, 0)


@wp.func
def _begin_episode(
    world: int,
    seed_in: wp.array(dtype=wp.int32),
    world_offset_in: wp.array(dtype=wp.int32),
    world_episode_out: wp.array(dtype=wp.int32),
    world_episode_step_out: wp.array(dtype=wp.int32),
    world_rng_out: wp.array(dtype=wp.uint32),
):
    episode = world_episode_out[world] + 1
    world_episode_out[world] = episode
    world_episode_step_out[world] = 0
    world_rng_out[world] = episode_rng(seed_in[0], world_offset_in[0] + world, episode)


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
    _begin_episode(world, seed_in, world_offset_in, world_episode_out, world_episode_step_out, world_rng_out)
    if clear_outputs != 0:
        for a in range(world_reward_out.shape[1]):
            world_reward_out[world, a] = 0.0
        world_terminated_out[world] = False
        world_truncated_out[world] = False


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
