"""Hide-and-seek renderer: the camera projection agrees with the ray caster, agents are drawn larger
with a heading line, and the legend shows exactly the colours the kernel paints."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

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


def walled(prob: float) -> ecs.BatchSim:
    env = envs.make("hide_and_seek", max_episode_steps=30, prep_fraction=0.0, outside_walls_prob=prob)
    return ecs.BatchSim(env, 1, device="cpu", seed=0)


def grey(pixel: np.ndarray) -> bool:
    """A wall's grey: dim, and bluish by at most a little (walls are (0.45, 0.45, 0.5) before shading)."""
    r, g, b = (int(c) for c in pixel)
    return max(r, g, b) < 140 and abs(r - g) < 8 and 0 <= b - r < 20


def hider_inside_the_near_wall(x: float) -> ecs.BatchSim:
    """A world with its 4 m outside walls, the floor and the agents alone (no boxes, ramps or inner walls), the hider
    at ``x`` 0.7 m inside the outside wall on the camera's side."""
    sim = walled(1.0)
    kind, alive = sim.tensor("body", "kind")[0], sim.tensor("body", "alive")[0]
    top = (sim.tensor("body", "position")[0] + sim.tensor("body", "size")[0])[:, 2]
    assert int(((kind == render.WALL_KIND) & (alive != 0) & (top > 3.0)).sum()) == 4
    alive[(kind == render.BOX_KIND) | (kind == render.RAMP_KIND) | ((kind == render.WALL_KIND) & (top < 3.0))] = 0
    r = sim.env.config.agent_radius
    rows = agent_rows(sim)
    sim.tensor("body", "position")[0, rows[0]] = torch.tensor([x, -2.2, r])
    for j, row in enumerate(rows[1:]):  # the others in the open, at the back of the room
        sim.tensor("body", "position")[0, row] = torch.tensor([-2.0 + 1.0 * j, 2.4, r])
    return sim


@pytest.mark.parametrize("x", [-1.5, 0.2, 1.8])
def test_the_tall_outside_walls_are_cut_away_to_show_the_room(x):
    """The 4 m outside wall on the camera's side hides a hider 0.7 m inside it unless walls are drawn cut at
    ``wall_cut``; cut, the wall still shows at its foot."""
    sim = hider_inside_the_near_wall(x)
    floor = sim.env.config.floor_size
    px, py = np.round(render.project(np.array([[x, -2.2, 0.15]]), floor, W, H)[0]).astype(int)
    foot = np.array([[x + 0.6, -0.5 * floor, 0.3]])  # the near wall's outer face, below the cut
    fx, fy = np.round(render.project(foot, floor, W, H)[0]).astype(int)
    seen = {}
    for cut in (render.WALL_CUT, None):
        frame = render.render(sim, [0], width=W, height=H, agent_scale=1.0, headings=False, wall_cut=cut)[0]
        seen[cut] = bool(hue_mask(frame[py - 1 : py + 2, px - 1 : px + 2], "hider").any())
        assert grey(frame[fy, fx]), (cut, frame[fy, fx])
    assert seen == {render.WALL_CUT: True, None: False}


@pytest.mark.parametrize("x", [-1.5, 0.2, 1.8])
def test_heading_lines_are_drawn_only_for_agents_in_sight(x):
    """The hider hidden behind the whole near wall gets no heading line over the wall; cut away, it gets its line.
    An agent in sight either way keeps its line."""
    sim = hider_inside_the_near_wall(x)
    floor = sim.env.config.floor_size
    hider, other = agent_rows(sim)[[0, -1]]
    pos = sim.tensor("body", "position").numpy()[0]
    lined = {}
    for cut in (render.WALL_CUT, None):
        plain, marked = (render.render(sim, [0], width=W, height=H, headings=h, wall_cut=cut)[0] for h in (False, True))
        changed = np.abs(marked.astype(int) - plain.astype(int)).sum(axis=-1) > 0
        ys, xs = np.nonzero(changed)
        for name, row in (("hider", hider), ("other", other)):
            top = pos[row] + np.array([0.0, 0.0, (2 * 1.6 - 1) * sim.env.config.agent_radius])  # the drawn top
            start = render.project(top[None], floor, W, H)[0]
            lined[name, cut] = int((np.hypot(xs - start[0], ys - start[1]) < 4).sum())
    assert lined["hider", render.WALL_CUT] > 0 and lined["hider", None] == 0, lined
    assert lined["other", render.WALL_CUT] > 0 and lined["other", None] > 0, lined


def test_walls_below_the_cut_are_drawn_whole():
    """Without outside walls every wall is 0.5 m high, below the cut: the picture is the same either way."""
    sim = walled(0.0)
    assert (sim.tensor("body", "kind").numpy()[0] == render.WALL_KIND).any()
    cut = render.render(sim, [0], width=W, height=H)[0]
    whole = render.render(sim, [0], width=W, height=H, wall_cut=None)[0]
    np.testing.assert_array_equal(cut, whole)
    for bad in (0.0, -1.0, float("inf"), float("nan"), "1", True):
        with pytest.raises(ValueError, match="wall_cut"):
            render.render(sim, [0], wall_cut=bad)
    with pytest.raises(ValueError, match="agent_scale"):
        render.render(sim, [0], agent_scale="2")


def test_cut_walls_lowers_only_live_upright_walls_that_rise_above_the_cut():
    kind = np.array([[render.WALL_KIND] * 4 + [render.BOX_KIND]])
    alive = np.array([[True, True, False, True, True]])
    size = np.array([[[1.0, 0.05, 2.0], [1.0, 0.05, 0.25], [1.0, 0.05, 2.0], [1.0, 0.05, 2.0], [0.25, 0.25, 2.0]]])
    position = np.array([[[0.0, 0.0, 2.0], [0.0, 0.0, 0.25], [0.0, 0.0, 2.0], [0.0, 0.0, 2.0], [0.0, 0.0, 2.0]]])
    s = math.sin(0.3)
    rotation = np.array([[[0.0, 0.0, s, math.cos(0.3)]] * 3 + [[s, 0.0, 0.0, math.cos(0.3)], [0.0, 0.0, 0.0, 1.0]]])
    size_out, position_out = size.copy(), position.copy()
    render.cut_walls(alive, kind, size_out, position_out, rotation, 1.0)
    # The tall upright wall now spans z in [0, 1]; the low one, the dead one, the tilted one and the box are as they were.
    np.testing.assert_allclose(size_out[0, 0], [1.0, 0.05, 0.5])
    np.testing.assert_allclose(position_out[0, 0], [0.0, 0.0, 0.5])
    np.testing.assert_array_equal(size_out[0, 1:], size[0, 1:])
    np.testing.assert_array_equal(position_out[0, 1:], position[0, 1:])
