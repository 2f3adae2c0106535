"""Distributed throughput: ``python -m ecs dist-bench`` as a script, for launchers that take a file.

    torchrun --standalone --nproc-per-node=gpu examples/benchmarks/dist_bench.py cartpole --num-worlds 65536
    torchrun --standalone --nproc-per-node=2 examples/benchmarks/dist_bench.py cartpole --device cpu --num-worlds 64

Every rank steps ``--num-worlds / ranks`` worlds; rank 0 prints each rank's rate and the aggregate
(world-steps of all ranks over the slowest rank's time in the same window).
"""

from __future__ import annotations

import sys

from ecs.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["dist-bench", *sys.argv[1:]]))
