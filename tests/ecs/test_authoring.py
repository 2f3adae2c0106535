"""Authoring: raw RESET kernels are gated per world, richer @wp.func systems, column bundles."""

import numpy as np
import pytest
import torch
import warp as wp

import ecs

wp.set_module_options({"enable_backward": False})


def _sync(t: torch.Tensor) -> None:
    if t.is_cuda:
        torch.cuda.synchronize(t.device)


# -- raw RESET kernels run only for the worlds being reset --------------------------------------


@ecs.component(singleton=True)
class Stop:
    """Action: 1 terminates the episode at this step."""

    value: wp.int32


@ecs.component(singleton=True)
class Mark:
    """Set by the RESET kernels, counted up by PHYSICS."""

    value: wp.int32


@wp.func
def count_mark(world_mark_out: wp.int32):
    return world_mark_out + 1


@wp.func
def judge_stop(world_stop_in: wp.int32, world_terminated_out: wp.bool):
    return world_stop_in != 0


@wp.kernel
def reset_mark_early_return(world_reset_in: wp.array(dtype=wp.int32), world_mark_out: wp.array(dtype=wp.int32)):
    """Gated by an early return."""
    world = wp.tid()
    if world_reset_in[world] == 0:
        return
    world_mark_out[world] = 100 + world


@wp.kernel
def reset_mark_nested(world_reset_in: wp.array(dtype=wp.int32), world_mark_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    if world_reset_in[world] != 0:
        world_mark_out[world] = 100 + world


@wp.kernel
def reset_mark_ungated(world_reset_in: wp.array(dtype=wp.int32), world_mark_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    world_mark_out[world] = 100 + world


@wp.kernel
def reset_mark_late_gate(world_reset_in: wp.array(dtype=wp.int32), world_mark_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    world_mark_out[world] = 0
    if world_reset_in[world] == 0:
        return
    world_mark_out[world] = 100 + world


@wp.kernel
def reset_mark_partial_gate(world_reset_in: wp.array(dtype=wp.int32), world_mark_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    if world_reset_in[world] != 0:
        world_mark_out[world] = 100 + world
    world_mark_out[world] = world_mark_out[world] + 0


@wp.kernel
def reset_mark_no_flag(world_mark_out: wp.array(dtype=wp.int32)):
    world = wp.tid()
    world_mark_out[world] = 100 + world


def _mark_env(reset_kernel) -> ecs.EnvSpec:
    return ecs.EnvSpec(
        name="authoring_mark",
        config=None,
        singletons=[Stop, Mark],
        systems=[
            ecs.System(count_mark, ecs.Phase.PHYSICS),
            ecs.System(judge_stop, ecs.Phase.REWARD),
            ecs.System(reset_kernel, ecs.Phase.RESET, dim="world"),
        ],
        actions={"stop": ecs.Action(Stop, low=0, high=1)},
    )


@pytest.mark.parametrize("kernel", [reset_mark_early_return, reset_mark_nested])
def test_gated_raw_reset_kernel_touches_only_reset_worlds(device, kernel):
    sim = ecs.BatchSim(_mark_env(kernel), 4, device=device)
    mark = sim.tensor("world", "mark")
    np.testing.assert_array_equal(mark.cpu().numpy(), [100, 101, 102, 103])
    sim.step()
    np.testing.assert_array_equal(mark.cpu().numpy(), [101, 102, 103, 104])
    sim.reset(torch.tensor([False, True, False, False]))
    np.testing.assert_array_equal(mark.cpu().numpy(), [101, 101, 103, 104])
    # World 2 ends: its same-step reset touches it alone.
    sim.actions["stop"].copy_(torch.tensor([0, 0, 1, 0], dtype=torch.int32))
    _sync(sim.actions["stop"])
    sim.step()
    np.testing.assert_array_equal(mark.cpu().numpy(), [102, 102, 102, 105])


@pytest.mark.parametrize(
    ("kernel", "where"),
    [
        (reset_mark_ungated, "line"),
        (reset_mark_late_gate, "line"),
        (reset_mark_partial_gate, "line"),
        (reset_mark_no_flag, "needs a world_reset_in parameter"),
    ],
)
def test_ungated_raw_reset_kernel_is_refused(kernel, where):
    with pytest.raises(ecs.GraphError) as info:
        ecs.BatchSim(_mark_env(kernel), 2, device="cpu")
    msg = str(info.value)
    assert kernel.key in msg and "(RESET)" in msg and where in msg
    assert "if world_reset_in[world] == 0:" in msg and "return" in msg  # the fix, spelt out
