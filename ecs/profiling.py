"""Per-system timing of a simulation step, as a tree of phases and systems."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .schema import Phase

if TYPE_CHECKING:
    from .sim import BatchSim


@dataclass
class Node:
    """One line of the tree: a phase or a system, with mean seconds per step."""

    name: str
    seconds: float
    children: list[Node] = field(default_factory=list)


@dataclass
class Profile:
    """Result of ``sim.profile(steps)``.

    Attributes:
        root: the tree (phases, then systems), times are means per step of eager launches with a
            device synchronisation around each, so they add up to more than a captured step.
        captured_step: mean wall time of one captured step over the same number of steps [s].
        steps: steps timed.
        num_worlds: worlds stepped.
    """

    root: Node
    captured_step: float
    steps: int
    num_worlds: int
    device: str
    fused: bool = False

    @classmethod
    def from_timer(cls, timer: dict[tuple[Phase, str], float], steps: int, captured: float, sim: BatchSim) -> Profile:
        phases: dict[str, Node] = {}
        for (phase, name), total in timer.items():
            label = "ENGINE" if phase == Phase.NONE else phase.name
            node = phases.setdefault(label, Node(label, 0.0))
            node.children.append(Node(name, total / steps))
            node.seconds += total / steps
        order = ["ENGINE"] + [p.name for p in Phase if p != Phase.NONE]
        children = [phases[k] for k in order if k in phases]
        root = Node("step (eager, synchronised)", sum(n.seconds for n in children), children)
        return cls(root, captured, steps, sim.num_worlds, sim.device, sim.fused)

    def as_dict(self) -> dict[str, Any]:
        def walk(n: Node) -> dict[str, Any]:
            return {"name": n.name, "seconds": n.seconds, "children": [walk(c) for c in n.children]}

        return {
            "tree": walk(self.root),
            "captured_step": self.captured_step,
            "steps": self.steps,
            "num_worlds": self.num_worlds,
            "device": self.device,
        }

    def __str__(self) -> str:
        total = self.root.seconds or 1e-30
        lines = [
            f"profile: {self.num_worlds} worlds on {self.device}, {self.steps} steps; "
            f"captured step{' (fused)' if self.fused else ''} {self.captured_step * 1e6:.1f} us "
            f"({self.num_worlds / max(self.captured_step, 1e-30):,.0f} world-steps/s)"
        ]

        def walk(n: Node, depth: int) -> None:
            lines.append(
                f"{'  ' * depth}{n.name:<{40 - 2 * depth}} {n.seconds * 1e6:10.1f} us  {100 * n.seconds / total:5.1f}%"
            )
            for c in sorted(n.children, key=lambda c: -c.seconds):
                walk(c, depth + 1)

        walk(self.root, 0)
        return "\n".join(lines)
