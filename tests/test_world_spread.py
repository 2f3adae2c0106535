"""examples/benchmarks/world_spread.py: the spread of the solver's work across worlds, priced as warps' waits."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "benchmarks"))
import world_spread


def test_overhead_is_the_warps_slowest_over_their_mean():
    cost = np.array([1.0, 3.0, 2.0, 2.0, 8.0, 0.0])
    # warps of 2 in this order: (1, 3) (2, 2) (8, 0): maxima 3 + 2 + 8 = 13, means 2 + 2 + 4 = 8
    assert world_spread.overhead(np.arange(6), cost, 2) == pytest.approx(13 / 8)
    assert world_spread.overhead(np.argsort(cost), cost, 2) == pytest.approx((1 + 2 + 8) / (0.5 + 2 + 5.5))
    assert world_spread.overhead(np.arange(6), cost, 1) == pytest.approx(1.0)
    assert world_spread.overhead(np.arange(6), cost, 4) == pytest.approx(3 / 2)  # the last two left out


def test_the_script_prices_each_order_and_the_best_costs_least(tmp_path, capsys):
    out = tmp_path / "spread.json"
    args = ["--num-worlds", "64", "--steps", "3", "--warmup", "4", "--groups", "32", "8", "--json", str(out)]
    assert world_spread.main(args) == 0
    result = json.loads(out.read_text())
    assert set(result["overhead"]) == {"32", "8"}
    for group in result["overhead"].values():
        assert list(group) == list(world_spread.ORDERS)
        best = group["own cycles (best)"]
        assert all(v >= 1.0 - 1e-9 for v in group.values()), group
        assert all(best <= v + 1e-9 for v in group.values()), group
    c = result["cycles_per_world_step"]
    assert 0 < c["median"] <= c["p90"] <= c["max"]
    assert "a warp's wait for its slowest world" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        world_spread.main(["--num-worlds", "8", "--groups", "16"])
