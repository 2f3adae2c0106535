"""A ray-cast renderer for hide-and-seek worlds, written in Warp: one thread per pixel per world.

An oblique pinhole camera looks down at the floor; every pixel casts one ray against the world's
bodies (``systems.raycast.cast_ray``) and one shadow ray towards the light. Colours by body kind:
hiders blue, seekers red (a lighter cap marks where an agent looks), boxes tan, ramps green, walls
grey, the floor a light checkerboard (darker outside the play area). A locked box or ramp takes its
locking team's colour, striped.

```python
from envs.hide_and_seek import render
frames = render.render(sim, worlds=[0, 1, 2, 3])  # uint8 [4, H, W, 3]
render.save_png("out/hns.png", render.tile(frames, cols=2))
```
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
import warp as wp

from systems.geometry import PLANE, SPHERE, face_normal, face_offset, num_faces
from systems.raycast import cast_ray

from .kernels import BOX_KIND, FLOOR_KIND, HIDER_KIND, RAMP_KIND, SEEKER_KIND, WALL_KIND

wp.set_module_options({"enable_backward": False})


@wp.func
def surface_normal(shape: wp.int32, size: wp.vec3, x: wp.vec3, q: wp.quat, p: wp.vec3) -> wp.vec3:
    """Outward normal of a body's surface at (or very near) the point ``p``."""
    if shape == SPHERE:
        return wp.normalize(p - x)
    if shape == PLANE:
        return wp.quat_rotate(q, wp.vec3(0.0, 0.0, 1.0))
    pl = wp.quat_rotate_inv(q, p - x)
    best = wp.float32(-1.0e30)
    n = wp.vec3(0.0, 0.0, 1.0)
    for i in range(num_faces(shape)):
        ni = face_normal(shape, size, i)
        s = wp.dot(ni, pl) - face_offset(shape, size, i)
        if s > best:
            best = s
            n = ni
    return wp.quat_rotate(q, n)


@wp.func
def team_colour(team_plus_one: wp.int32) -> wp.vec3:
    if team_plus_one == 1:
        return wp.vec3(0.15, 0.35, 0.95)
    return wp.vec3(0.9, 0.15, 0.12)


@wp.kernel
def render_worlds(
    worlds: wp.array[wp.int32],
    cam_pos: wp.vec3,
    cam_fwd: wp.vec3,
    cam_right: wp.vec3,
    cam_up: wp.vec3,
    tan_half_fov: float,
    floor_half: float,
    light: wp.vec3,
    alive: wp.array2d[wp.int32],
    kind: wp.array2d[wp.int32],
    shape: wp.array2d[wp.int32],
    size: wp.array2d[wp.vec3],
    position: wp.array2d[wp.vec3],
    rotation: wp.array2d[wp.quat],
    locked_by: wp.array2d[wp.int32],
    image: wp.array3d[wp.vec3],
):
    i, py, px = wp.tid()
    world = worlds[i]
    h = image.shape[1]
    w = image.shape[2]
    u = (2.0 * (float(px) + 0.5) / float(w) - 1.0) * tan_half_fov * float(w) / float(h)
    v = (1.0 - 2.0 * (float(py) + 0.5) / float(h)) * tan_half_fov
    d = wp.normalize(cam_fwd + u * cam_right + v * cam_up)
    t, hit = cast_ray(alive, shape, size, position, rotation, world, cam_pos, d, 1000.0, -1)
    if hit < 0:
        image[i, py, px] = wp.vec3(0.62, 0.75, 0.9) * (0.8 + 0.2 * v)
        return
    p = cam_pos + d * t
    x = position[world, hit]
    q = rotation[world, hit]
    n = surface_normal(shape[world, hit], size[world, hit], x, q, p)
    k = kind[world, hit]
    c = wp.vec3(0.8, 0.8, 0.8)
    if k == FLOOR_KIND:
        checker = (int(wp.floor(p[0] / 0.5)) + int(wp.floor(p[1] / 0.5))) % 2
        c = wp.where(checker == 0, wp.vec3(0.86, 0.85, 0.8), wp.vec3(0.78, 0.77, 0.72))
        if wp.abs(p[0]) > floor_half or wp.abs(p[1]) > floor_half:
            c = c * 0.55
    elif k == WALL_KIND:
        c = wp.vec3(0.45, 0.45, 0.5)
    elif k == BOX_KIND:
        c = wp.vec3(0.85, 0.62, 0.3)
    elif k == RAMP_KIND:
        c = wp.vec3(0.3, 0.7, 0.3)
    elif k == HIDER_KIND or k == SEEKER_KIND:  # noqa: SIM109 (Warp has no `in`)
        c = team_colour(wp.where(k == HIDER_KIND, 1, 2))
        forward = wp.quat_rotate(q, wp.vec3(1.0, 0.0, 0.0))
        if wp.dot(n, forward) > 0.75:
            c = c * 0.4 + wp.vec3(0.6, 0.6, 0.6)
    lock = locked_by[world, hit]
    if lock != 0:
        stripe = int(wp.floor((p[0] + p[1] + p[2]) / 0.08)) % 2
        c = wp.where(stripe == 0, team_colour(lock), c * 0.5 + team_colour(lock) * 0.5)
    shade = 0.35 + 0.65 * wp.max(wp.dot(n, light), 0.0)
    o = p + n * 1.0e-3
    _ts, hs = cast_ray(alive, shape, size, position, rotation, world, o, light, 100.0, -1)
    if hs >= 0 and shape[world, hs] != PLANE:
        shade = shade * 0.6
    image[i, py, px] = c * shade


def camera(floor_size: float) -> tuple[wp.vec3, wp.vec3, wp.vec3, wp.vec3]:
    """Position, forward, right and up of the oblique camera for a floor of ``floor_size``."""
    pos = np.array([0.0, -0.95, 1.05]) * floor_size
    target = np.array([0.0, -0.05 * floor_size, 0.0])
    fwd = target - pos
    fwd /= np.linalg.norm(fwd)
    right = np.cross(fwd, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, fwd)
    return wp.vec3(*pos), wp.vec3(*fwd), wp.vec3(*right), wp.vec3(*up)


def render(sim, worlds: Sequence[int] = (0,), *, width: int = 240, height: int = 180) -> np.ndarray:
    """Renders ``worlds`` of a hide-and-seek simulation: uint8 ``[len(worlds), height, width, 3]``."""
    worlds = [int(w) for w in worlds]
    if not worlds or min(worlds) < 0 or max(worlds) >= sim.num_worlds:
        raise ValueError(f"worlds must be indices in [0, {sim.num_worlds}), got {worlds}")
    t = sim.tables["body"]
    cfg = sim.env.config
    cam_pos, fwd, right, up = camera(cfg.floor_size)
    light = np.array([-0.4, -0.6, 1.0])
    light /= np.linalg.norm(light)
    image = wp.zeros((len(worlds), height, width), dtype=wp.vec3, device=sim.device)
    wp.launch(
        render_worlds,
        dim=(len(worlds), height, width),
        inputs=[
            wp.array(worlds, dtype=wp.int32, device=sim.device),
            cam_pos,
            fwd,
            right,
            up,
            math.tan(math.radians(25.0)),
            0.5 * cfg.floor_size,
            wp.vec3(*light),
            t["alive"],
            t["kind"],
            t["shape"],
            t["size"],
            t["position"],
            t["rotation"],
            t["locked_by"],
            image,
        ],
        device=sim.device,
    )
    return (np.clip(image.numpy(), 0.0, 1.0) * 255).astype(np.uint8)


def tile(images: np.ndarray, cols: int = 2, *, gap: int = 4) -> np.ndarray:
    """Images ``[n, H, W, 3]`` side by side in a grid of ``cols`` columns, white gaps between."""
    n, h, w, _ = images.shape
    rows = -(-n // cols)
    out = np.full((rows * h + (rows - 1) * gap, cols * w + (cols - 1) * gap, 3), 255, np.uint8)
    for k in range(n):
        r, c = divmod(k, cols)
        out[r * (h + gap) : r * (h + gap) + h, c * (w + gap) : c * (w + gap) + w] = images[k]
    return out


def save_png(path: str | os.PathLike, image: np.ndarray) -> None:
    from PIL import Image

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    Image.fromarray(image).save(path)


def save_gif(path: str | os.PathLike, frames: Sequence[np.ndarray], *, fps: float = 15.0) -> None:
    from PIL import Image

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
