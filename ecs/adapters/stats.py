"""Episode statistics accumulated on the simulation's device, read with one host sync.

``EpisodeStats(sim)`` keeps, in persistent torch buffers on ``sim.device``: the return and length
of every world's current episode, and, over the episodes that finished since the last
``clear()``, their count and the sums of their returns, squared returns and lengths. ``update()``
after each ``sim.step()`` folds in ``sim.rewards`` and the episode flags with torch ops only (no
host sync, no Python branching on device values); ``summary()`` reads everything back at once.

For a multi-agent env (rewards ``[num_worlds, num_agents]``) returns are kept per agent: the
current returns are ``[num_worlds, num_agents]`` and the finished sums ``[num_agents]``.

``extra`` adds an environment's own per-episode statistics: per-world singletons that the env
writes in the step an episode ends (as ``final_obs``; hide-and-seek's ``final_max_box_move`` and
the rest, listed in ``envs.hide_and_seek.FINAL_STATS``). Their values in the worlds that ended
are summed with the returns, and ``summary()`` reports their means over finished episodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import EcsError

if TYPE_CHECKING:
    from ..sim import BatchSim

__all__ = ["EpisodeStats"]


class EpisodeStats:
    """Per-world episode returns and lengths, and totals over finished episodes, on the device.

    Args:
        sim: the simulation whose ``rewards``, ``terminated`` and ``truncated`` are read.
        extra: per-episode statistics to average over finished episodes: singleton names, or a mapping
            ``{key in summary(): singleton name}``. Each singleton (``sim.tensor("world", name)``,
            ``[num_worlds, *shape]``) must hold, in a world whose episode ended with the step just taken,
            that episode's value.

    Raises:
        ecs.EcsError: an ``extra`` singleton the simulation does not have, or an ``extra`` key that
            ``summary()`` already uses.

    Attributes:
        episode_return: float32 ``[num_worlds]`` (or ``[num_worlds, num_agents]``), return so far.
        episode_length: int64 ``[num_worlds]``, steps so far in the current episode.
        count: int64 ``[]``, episodes finished since the last ``clear()``.
        return_sum: float64 ``[]`` (or ``[num_agents]``), sum of their returns.
        return_sq_sum: float64, like ``return_sum``, sum of their squared returns.
        length_sum: int64 ``[]``, sum of their lengths.
        extra_sum: ``{key: float64 [*shape]}``, sums of the ``extra`` statistics over them.
    """

    _SUMMARY_KEYS = ("episodes", "mean_return", "std_return", "mean_length")

    def __init__(self, sim: BatchSim, *, extra: Sequence[str] | Mapping[str, str] = ()) -> None:
        import torch

        self.sim = sim
        rewards = sim.rewards
        dev = rewards.device
        agents = tuple(rewards.shape[1:])
        self.episode_return = torch.zeros(rewards.shape, dtype=torch.float32, device=dev)
        self.episode_length = torch.zeros(sim.num_worlds, dtype=torch.int64, device=dev)
        self.count = torch.zeros((), dtype=torch.int64, device=dev)
        self.return_sum = torch.zeros(agents, dtype=torch.float64, device=dev)
        self.return_sq_sum = torch.zeros(agents, dtype=torch.float64, device=dev)
        self.length_sum = torch.zeros((), dtype=torch.int64, device=dev)
        self._done = torch.zeros(sim.num_worlds, dtype=torch.bool, device=dev)
        names = dict(extra) if isinstance(extra, Mapping) else {name: name for name in extra}
        clash = sorted(set(names) & set(self._SUMMARY_KEYS))
        if clash:
            raise EcsError(f"extra keys {clash} collide with summary() keys {list(self._SUMMARY_KEYS)}; rename them")
        self._extra = {key: sim.tensor("world", singleton) for key, singleton in names.items()}
        self.extra_sum = {
            key: torch.zeros(tuple(view.shape[1:]), dtype=torch.float64, device=dev)
            for key, view in self._extra.items()
        }

    def update(self) -> None:
        """Folds in the step just taken. Call once after every ``sim.step()``; never syncs."""
        import torch

        sim = self.sim
        done = torch.logical_or(sim.terminated, sim.truncated, out=self._done)
        self.episode_return += sim.rewards
        self.episode_length += 1
        # Worlds that ended on this step: their episode is complete (same-step reset).
        done_r = done.view(-1, *([1] * (self.episode_return.ndim - 1)))
        finished = torch.where(done_r, self.episode_return, 0.0).double()
        self.return_sum += finished.sum(0)
        self.return_sq_sum += finished.square().sum(0)
        self.length_sum += torch.where(done, self.episode_length, 0).sum()
        self.count += done.sum()
        for key, view in self._extra.items():
            self.extra_sum[key] += torch.where(done.view(-1, *([1] * (view.ndim - 1))), view, 0).double().sum(0)
        self.episode_return.masked_fill_(done_r, 0.0)
        self.episode_length.masked_fill_(done, 0)

    def reset(self, mask: Any = None) -> None:
        """Zeroes the current episodes of every world (or where ``mask`` is true); call it with ``sim.reset``."""
        if mask is None:
            self.episode_return.zero_()
            self.episode_length.zero_()
            return
        import torch

        mask = torch.as_tensor(mask, device=self.episode_length.device)
        self.episode_return.masked_fill_(mask.view(-1, *([1] * (self.episode_return.ndim - 1))), 0.0)
        self.episode_length.masked_fill_(mask, 0)

    def clear(self) -> None:
        """Forgets the finished episodes (the current ones continue)."""
        self.count.zero_()
        self.return_sum.zero_()
        self.return_sq_sum.zero_()
        self.length_sum.zero_()
        for total in self.extra_sum.values():
            total.zero_()

    def summary(self, *, clear: bool = False) -> dict[str, Any]:
        """Finished-episode statistics, read with one host sync.

        Args:
            clear: also forget the finished episodes, so the next summary covers only later ones.

        Returns:
            ``{"episodes": int, "mean_return": float | list, "std_return": ..., "mean_length": float}``
            and, for each ``extra`` key, its mean over the finished episodes (a float, or a list for a
            shaped statistic); the means are NaN when no episode finished. Per-agent values are lists for
            multi-agent envs.
        """
        import torch

        packed = torch.cat(
            [
                self.count.double().view(1),
                self.length_sum.double().view(1),
                self.return_sum.reshape(-1),
                self.return_sq_sum.reshape(-1),
                *(total.reshape(-1) for total in self.extra_sum.values()),
            ]
        ).cpu()
        if clear:
            self.clear()
        n = int(packed[0])
        k = self.return_sum.numel()
        sums, sq = packed[2 : 2 + k], packed[2 + k : 2 + 2 * k]
        nan = float("nan")
        mean = sums / n if n else torch.full_like(sums, nan)
        std = (sq / n - mean.square()).clamp_min(0).sqrt() if n else torch.full_like(sums, nan)
        as_out = (lambda t: float(t[0])) if self.return_sum.ndim == 0 else (lambda t: t.tolist())
        out = {
            "episodes": n,
            "mean_return": as_out(mean),
            "std_return": as_out(std),
            "mean_length": float(packed[1]) / n if n else nan,
        }
        at = 2 + 2 * k
        for key, total in self.extra_sum.items():
            part = packed[at : at + total.numel()]
            at += total.numel()
            value = part / n if n else torch.full_like(part, nan)
            out[key] = float(value[0]) if total.ndim == 0 else value.reshape(total.shape).tolist()
        return out
