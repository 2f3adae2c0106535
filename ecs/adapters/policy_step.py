"""Simulation/inference fusion: a torch policy's forward pass and the step as one graph replay.

On CUDA the policy and the simulation step are captured into one CUDA graph on one stream
(Warp's launches join torch's capture through ``wp.ScopedCapture(external=True)``), so a
whole rollout step costs one replay. On CPU there is no graph to share, so ``PolicyStep``
calls the policy and then ``sim.step()``: the same results, for code that runs on both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import warp as wp

from ..errors import EcsError
from ..torch_bridge import copy_into

if TYPE_CHECKING:
    from ..sim import BatchSim

Policy = Callable[[Mapping[str, Any]], Mapping[str, Any]]


class PolicyStep:
    """``policy(sim.obs) -> {action key: tensor}`` followed by ``sim.step()``, replayed as one graph.

    Args:
        sim: the simulation.
        policy: maps the observation dict to a dict of actions with the shapes and dtypes of
            ``sim.actions``. It must not allocate differently from call to call (true of
            ``torch.no_grad()`` inference with fixed shapes) and must not synchronise with the
            host; sampling with torch's CUDA generator is capturable.
        warmup: forward passes run before capture, so the policy allocates its workspaces; the
            actions they write are restored afterwards.

    Call the object to run one rollout step.
    """

    def __init__(self, sim: BatchSim, policy: Policy, *, warmup: int = 3) -> None:
        import torch

        self.sim = sim
        self.policy = policy
        self._graph = None
        if sim.device == "cpu":
            return
        if not sim.executor.captured:
            raise EcsError("PolicyStep needs a captured simulation; build the BatchSim with capture=True")
        saved = sim.state_dict()
        stream = torch.cuda.Stream(device=sim.device)
        stream.wait_stream(torch.cuda.current_stream(sim.device))
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                self._write_actions(torch.no_grad)
        torch.cuda.current_stream(sim.device).wait_stream(stream)
        self._graph = torch.cuda.CUDAGraph()
        wp_stream = wp.stream_from_torch(stream)
        # Enter Warp's stream before torch begins the capture: ScopedStream makes the new stream wait
        # on the old one, and that wait inside a capture invalidates it (seen on an H100: the policy's
        # first cuBLAS call then failed with cudaErrorStreamCaptureInvalidated).
        with wp.ScopedStream(wp_stream), torch.cuda.graph(self._graph, stream=stream):
            self._write_actions(torch.no_grad)
            with wp.ScopedCapture(device=sim.device, stream=wp_stream, external=True):
                sim.executor.recorder.record_step()
        sim.load_state_dict(saved)

    def _write_actions(self, no_grad: Callable[[], Any]) -> None:
        with no_grad():
            out = self.policy(self.sim.obs)
        missing = sorted(set(self.sim.actions) - set(out))
        if missing:
            raise EcsError(f"policy returned no value for action(s) {missing}; it must return every key of sim.actions")
        for key, view in self.sim.actions.items():
            copy_into(view, out[key])  # torch's copy_ on a GPU (and inside the CUDA graph), numpy's on the CPU

    def __call__(self) -> None:
        """One rollout step: actions from the policy, then the simulation step."""
        if self._graph is None:
            import torch

            self._write_actions(torch.no_grad)
            self.sim.step()
            return
        self.sim.raise_pending()
        self._graph.replay()
