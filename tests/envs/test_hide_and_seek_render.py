"""Hide-and-seek renderer: the camera projection agrees with the ray caster, agents are drawn larger
with a heading line, and the legend shows exactly the colours the kernel paints."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ecs
import envs
from envs.hide_and_seek import render

W, H = 160, 120


def build(agents) -> ecs.BatchSim:
    env = envs.make("hide_and_seek", max_episode_steps=30, prep_fraction=0.0, fixed_agents=agents)
    return ecs.BatchSim(env, 1, device="cpu", seed=0)


def agent_rows(sim: ecs.BatchSim) -> np.ndarray:
    rows = sim.tensor("agent", "body_row").numpy()[0]
    return rows[sim.tensor("agent", "alive").numpy()[0] != 0]


def hue_mask(frame: np.ndarray, team: str) -> np.ndarray:
    """Pixels whose dominant channel is the team's (blue hiders, red seekers), shaded or not."""
    r, g, b = (frame[..., k].astype(int) for k in range(3))
    return (b > r + 40) & (b > g + 20) if team == "hider" else (r > g + 60) & (r > b + 60)


@pytest.mark.parametrize(
    "layout", [((0, 1.0, 0.0, 0.0), (1, -1.5, 1.2, 1.0)), ((0, -2.0, -1.0, 2.0), (1, 0.5, 2.0, -2.5))]
)
def test_projection_lands_on_the_ray_cast_agents(layout):
    sim = build(layout)
    frame = render.render(sim, [0], width=W, height=H, agent_scale=1.0, headings=False)[0]
    pos = sim.tensor("body", "position").numpy()[0]
    for team, row in zip(("hider", "seeker"), agent_rows(sim), strict=True):
        x, y = np.round(render.project(pos[row][None], sim.env.config.floor_size, W, H)[0]).astype(int)
        assert 0 <= x < W and 0 <= y < H
        patch = frame[max(y - 1, 0) : y + 2, max(x - 1, 0) : x + 2]
        assert hue_mask(patch, team).any(), (team, (x, y), patch.reshape(-1, 3).tolist())
    # A floor point away from everything projects onto floor colour (light grey, no hue).
    fx, fy = np.round(render.project(np.array([[2.5, -2.5, 0.0]]), sim.env.config.floor_size, W, H)[0]).astype(int)
    r, g, b = frame[fy, fx].astype(int)
    assert min(r, g, b) > 120 and max(r, g, b) - min(r, g, b) < 40


def test_agents_are_drawn_larger_on_request():
    sim = build(((0, 1.0, 0.0, 0.0), (1, -1.5, 1.2, 1.0)))
    area = {}
    for scale in (1.0, 2.0):
        frame = render.render(sim, [0], width=W, height=H, agent_scale=scale, headings=False)[0]
        area[scale] = int(hue_mask(frame, "hider").sum())
    assert area[1.0] > 0
    assert area[2.0] > 2.5 * area[1.0]  # twice the radius: about four times the pixels
    with pytest.raises(ValueError, match="agent_scale"):
        render.render(sim, [0], agent_scale=0.5)
    with pytest.raises(ValueError, match="worlds"):
        render.render(sim, [1])


@pytest.mark.parametrize("yaw", [0.0, math.pi / 2, math.pi, -math.pi / 2])
def test_heading_line_points_along_the_agent_heading(yaw):
    sim = build(((0, 0.0, 0.0, yaw), (1, -2.5, -2.5, 0.0)))
    plain = render.render(sim, [0], width=W, height=H, headings=False)[0]
    marked = render.render(sim, [0], width=W, height=H, headings=True)[0]
    white = (marked.min(axis=-1) > 235) & (np.abs(marked.astype(int) - plain.astype(int)).sum(axis=-1) > 0)
    ys, xs = np.nonzero(white)
    hider = agent_rows(sim)[0]
    pos = sim.tensor("body", "position").numpy()[0, hider]
    radius, scale = sim.env.config.agent_radius, 1.6  # the default agent_scale
    top = pos + np.array([0.0, 0.0, (2 * scale - 1) * radius])  # the drawn sphere's top, where the line starts
    floor = sim.env.config.floor_size
    start = render.project(top[None], floor, W, H)[0]
    ahead = render.project((top + 0.5 * np.array([math.cos(yaw), math.sin(yaw), 0.0]))[None], floor, W, H)[0]
    toward = (ahead - start) / np.linalg.norm(ahead - start)
    # The drawn pixels near the hider (the seeker, far away, has its own line) lie ahead of the line's
    # start in the image, along the projected heading.
    offsets = np.stack([xs, ys], axis=-1) - start
    along = offsets[np.linalg.norm(offsets, axis=-1) < 20] @ toward
    assert len(along) >= 3 and along.min() > -2.0 and along.mean() > 1.0, along.tolist()


def test_legend_shows_every_palette_colour():
    strip = render.legend(400)
    assert strip.shape[1] == 400 and strip.dtype == np.uint8
    pixels = {tuple(p) for p in strip.reshape(-1, 3).tolist()}
    for name, rgb in render.PALETTE.items():
        assert tuple(round(255 * c) for c in rgb) in pixels, name
    narrow = render.legend(120)  # wraps into more rows instead of clipping
    assert narrow.shape[0] > strip.shape[0]
    image = np.zeros((30, 120, 3), np.uint8)
    assert render.with_legend(image).shape == (30 + narrow.shape[0], 120, 3)
