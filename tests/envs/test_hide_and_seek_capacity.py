"""Hide-and-seek's pair and contact tables sized from its config (``max_pairs``, ``max_contacts``).

With their capacity fixed at 256 rows per world, a config of 15 to 20 boxes filled the pair table within a few
steps and stopped with ``ecs.CapacityError``, whose message told the user to edit an archetype they never wrote.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import ecs
import envs
from envs.hide_and_seek.env import DEFAULT_ROWS, pairs_bound
from systems import physics

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from soak import random_actions

CROWDED = {"max_boxes": 20, "min_boxes": 15, "floor_size": 4.0}


def play(sim: ecs.BatchSim, steps: int, seed: int) -> tuple[int, int]:
    """Steps under sticky random play; the most pair and contact rows any world used after a step."""
    g = torch.Generator().manual_seed(seed)
    pairs = contacts = 0
    for i in range(steps):
        random_actions(sim, g, 20.0 if i else 1.0)
        sim.step()
        pairs = max(pairs, int(sim.tensor("world", "pair_count").max()))
        contacts = max(contacts, int(sim.tensor("world", "contact_count").max()))
    return pairs, contacts


def brute_force_pairs(max_walls: int, max_boxes: int) -> int:
    """Every two body rows of which at least one moves: the floor and walls are static, the rest move."""
    static = 1 + max_walls
    rows = static + max_boxes + 2 + 6
    return sum(1 for i in range(rows) for j in range(i + 1, rows) if j >= static)


@pytest.mark.parametrize(("max_walls", "max_boxes"), [(12, 9), (12, 20), (10, 1), (30, 9), (16, 40)])
def test_the_pairs_bound_counts_every_pair_that_moves(max_walls, max_boxes):
    assert pairs_bound(max_walls, max_boxes) == brute_force_pairs(max_walls, max_boxes)


def test_rows_keep_the_default_and_grow_with_the_walls_and_boxes():
    default = envs.make("hide_and_seek").config
    assert (default.pair_rows, default.contact_rows) == (DEFAULT_ROWS, DEFAULT_ROWS) == (256, 256)
    fewer = envs.make("hide_and_seek", max_boxes=4, min_boxes=2, min_elongated_boxes=1).config
    assert fewer.pair_rows == 256  # never fewer rows than the default's
    rows = [envs.make("hide_and_seek", max_boxes=n, min_boxes=3).config.pair_rows for n in (9, 12, 20, 40)]
    assert rows == sorted(rows) and rows[0] == 256 < rows[1]
    for n, r in zip((9, 12, 20, 40), rows, strict=True):
        assert r % 32 == 0 and r >= 256 * pairs_bound(12, n) / pairs_bound(12, 9)
    walls = envs.make("hide_and_seek", max_walls=20).config
    assert walls.pair_rows == walls.contact_rows > 256
    chosen = envs.make("hide_and_seek", max_pairs=100, max_contacts=600).config
    assert (chosen.pair_rows, chosen.contact_rows) == (100, 600)


def test_twenty_boxes_step_past_the_old_fixed_capacity():
    sim = ecs.BatchSim(envs.make("hide_and_seek", **CROWDED), 16, device="cpu", seed=3)
    assert sim.env.config.pair_rows == 544
    pairs, contacts = play(sim, 12, seed=3)
    assert pairs > 256  # what the fixed tables could not hold
    assert 0 < contacts <= sim.env.config.contact_rows


@pytest.mark.parametrize(
    ("override", "name"),
    [({"max_pairs": 128}, "max_pairs"), ({"max_contacts": 40}, "max_contacts")],
)
def test_a_full_table_names_the_config_field_that_raises_it(override, name):
    sim = ecs.BatchSim(envs.make("hide_and_seek", **CROWDED, **override), 16, device="cpu", seed=3)
    with pytest.raises(ecs.CapacityError) as info:
        play(sim, 12, seed=3)
    message = str(info.value)
    table = "pair" if name == "max_pairs" else "contact"
    assert f"archetype '{table}' is full" in message
    assert f"capacity is {override[name]} entities per world" in message
    assert f"raise {name} in hide-and-seek's config" in message and "Archetype(" not in message


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_pairs": 0}, "max_pairs must be null"),
        ({"max_pairs": True}, "max_pairs must be an int"),
        ({"max_contacts": 2.5}, "max_contacts must be an int"),
        ({"max_contacts": -3}, "max_contacts must be null"),
        ({"max_contacts": 300, "solver_cache": True}, "256 contacts per world, got max_bodies=30, max_contacts=300"),
        ({"max_boxes": 20, "min_boxes": 3, "solver_cache": True}, "got max_bodies=41, max_contacts=544"),
    ],
)
def test_bad_table_sizes_are_refused(overrides, message):
    with pytest.raises(ecs.ConfigError, match=message):
        envs.make("hide_and_seek", **overrides)


def test_physics_archetypes_take_grow_hints_for_their_own_tables_only():
    cfg = physics.PhysicsConfig()
    tables = {a.name: a for a in physics.archetypes(cfg, grow={"contact": "raise contacts"})}
    assert tables["contact"].grow == "raise contacts" and tables["pair"].grow == ""
    with pytest.raises(ecs.ConfigError, match=r"grow names no physics archetype: \['agent'\]"):
        physics.archetypes(cfg, grow={"agent": "raise agents"})
    with pytest.raises(ecs.SchemaError, match="grow must be a str"):
        ecs.Archetype("thing", (), capacity=2, grow=3)
