"""A ray-cast renderer for hide-and-seek worlds, written in Warp: one thread per pixel per world.

An oblique pinhole camera looks down at the floor; every pixel casts one ray against the world's
bodies (``systems.raycast.cast_ray``) and one shadow ray towards the light. Colours by body kind
(``PALETTE``, also drawn by ``legend``): hiders blue, seekers red, boxes tan, ramps green, walls
grey, the floor a light checkerboard (darker outside the play area). Walls are drawn up to ``WALL_CUT``
(1 m) by default, a cutaway that shows the room behind the tall outside walls. A locked box or ramp takes its
locking team's colour, striped. Agents are drawn ``agent_scale`` times their size (standing on the
floor) so they read at small resolutions, with a white line from their top along their heading where the camera
sees them.

```python
from envs.hide_and_seek import render
frames = render.render(sim, worlds=[0, 1, 2, 3])  # uint8 [4, H, W, 3]
render.save_png("out/hns.png", render.with_legend(render.tile(frames, cols=2)))
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

# Body colours (linear RGB in [0, 1]), shared by the kernel and the legend.
PALETTE: dict[str, tuple[float, float, float]] = {
    "hider": (0.15, 0.35, 0.95),
    "seeker": (0.9, 0.15, 0.12),
    "box": (0.85, 0.62, 0.3),
    "ramp": (0.3, 0.7, 0.3),
    "wall": (0.45, 0.45, 0.5),
    "floor": (0.86, 0.85, 0.8),
    "outside play area": (0.86 * 0.55, 0.85 * 0.55, 0.8 * 0.55),
}
HIDER_RGB = wp.constant(wp.vec3(*PALETTE["hider"]))
SEEKER_RGB = wp.constant(wp.vec3(*PALETTE["seeker"]))
BOX_RGB = wp.constant(wp.vec3(*PALETTE["box"]))
RAMP_RGB = wp.constant(wp.vec3(*PALETTE["ramp"]))
WALL_RGB = wp.constant(wp.vec3(*PALETTE["wall"]))
FLOOR_RGB = wp.constant(wp.vec3(*PALETTE["floor"]))
TAN_HALF_FOV = math.tan(math.radians(25.0))
# m: walls are drawn up to this height by default (``render(wall_cut=...)``): the inner walls (0.5 m) whole, the
# outside walls (4 m) cut away, so that the room they enclose shows; seen from the camera, a 4 m wall on the near edge
# of a 6 m floor hid all of it.
WALL_CUT = 1.0


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
        return HIDER_RGB
    return SEEKER_RGB


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
        c = wp.where(checker == 0, FLOOR_RGB, FLOOR_RGB * 0.91)
        if wp.abs(p[0]) > floor_half or wp.abs(p[1]) > floor_half:
            c = c * 0.55
    elif k == WALL_KIND:
        c = WALL_RGB
    elif k == BOX_KIND:
        c = BOX_RGB
    elif k == RAMP_KIND:
        c = RAMP_RGB
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


@wp.kernel
def first_hits(
    worlds: wp.array[wp.int32],
    targets: wp.array[wp.vec3],
    cam_pos: wp.vec3,
    alive: wp.array2d[wp.int32],
    shape: wp.array2d[wp.int32],
    size: wp.array2d[wp.vec3],
    position: wp.array2d[wp.vec3],
    rotation: wp.array2d[wp.quat],
    hits: wp.array[wp.int32],
):
    """The body row that the camera's ray towards ``targets[i]`` meets first in world ``worlds[i]``, or -1 where it
    reaches the point without meeting one."""
    i = wp.tid()
    to = targets[i] - cam_pos
    _t, hit = cast_ray(alive, shape, size, position, rotation, worlds[i], cam_pos, wp.normalize(to), wp.length(to), -1)
    hits[i] = hit


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


def project(points: np.ndarray, floor_size: float, width: int, height: int) -> np.ndarray:
    """Pixel coordinates (x right, y down; float) of world points ``[n, 3]`` seen by ``camera(floor_size)``."""
    pos, fwd, right, up = (np.array(v, dtype=np.float64) for v in camera(floor_size))
    rel = np.asarray(points, dtype=np.float64) - pos
    depth = rel @ fwd
    u = rel @ right / depth / (TAN_HALF_FOV * width / height)
    v = rel @ up / depth / TAN_HALF_FOV
    return np.stack([(u + 1.0) * width / 2.0 - 0.5, (1.0 - v) * height / 2.0 - 0.5], axis=-1)


def render(
    sim,
    worlds: Sequence[int] = (0,),
    *,
    width: int = 240,
    height: int = 180,
    agent_scale: float = 1.6,
    headings: bool = True,
    wall_cut: float | None = WALL_CUT,
) -> np.ndarray:
    """Renders ``worlds`` of a hide-and-seek simulation: uint8 ``[len(worlds), height, width, 3]``.

    Args:
        agent_scale: agents are drawn this many times their radius, resting on the floor (>= 1;
            1 draws them as simulated).
        headings: draw a white line from the top of each agent that the camera sees along its heading
            (none for an agent hidden behind a wall or a box).
        wall_cut: upright walls are drawn (and cast shadows) only up to this height in metres, a
            cutaway: the 4 m outside walls would otherwise hide the room from the oblique camera.
            ``None`` draws every wall whole.
    """
    worlds = [int(w) for w in worlds]
    if not worlds or min(worlds) < 0 or max(worlds) >= sim.num_worlds:
        raise ValueError(f"worlds must be indices in [0, {sim.num_worlds}), got {worlds}")
    if not (_real(agent_scale) and math.isfinite(agent_scale) and agent_scale >= 1.0):
        raise ValueError(f"agent_scale must be a finite number >= 1, got {agent_scale!r}")
    if wall_cut is not None and not (_real(wall_cut) and math.isfinite(wall_cut) and wall_cut > 0.0):
        raise ValueError(
            f"wall_cut must be a finite height > 0 in metres, or None to draw walls whole; got {wall_cut!r}"
        )
    t = sim.tables["body"]
    cfg = sim.env.config
    cam_pos, fwd, right, up = camera(cfg.floor_size)
    light = np.array([-0.4, -0.6, 1.0])
    light /= np.linalg.norm(light)
    # Agents drawn larger: scaled sizes, centres raised so the spheres still rest on the floor.
    kind, size, position = t["kind"].numpy(), t["size"].numpy().copy(), t["position"].numpy().copy()
    alive = t["alive"].numpy() != 0
    agent = alive & ((kind == HIDER_KIND) | (kind == SEEKER_KIND))
    position[agent, 2] += (agent_scale - 1.0) * size[agent, 0]
    size[agent] *= agent_scale
    if wall_cut is not None:
        cut_walls(alive, kind, size, position, t["rotation"].numpy(), wall_cut)
    image = wp.zeros((len(worlds), height, width), dtype=wp.vec3, device=sim.device)
    drawn = (
        wp.array(size, dtype=wp.vec3, device=sim.device),
        wp.array(position, dtype=wp.vec3, device=sim.device),
        t["rotation"],
    )
    wp.launch(
        render_worlds,
        dim=(len(worlds), height, width),
        inputs=[
            wp.array(worlds, dtype=wp.int32, device=sim.device),
            cam_pos,
            fwd,
            right,
            up,
            TAN_HALF_FOV,
            0.5 * cfg.floor_size,
            wp.vec3(*light),
            t["alive"],
            t["kind"],
            t["shape"],
            *drawn,
            t["locked_by"],
            image,
        ],
        device=sim.device,
    )
    frames = (np.clip(image.numpy(), 0.0, 1.0) * 255).astype(np.uint8)
    if headings:
        rotation = t["rotation"].numpy()
        frame_of, row = np.nonzero(agent[worlds])
        w_of = np.asarray(worlds, dtype=np.int32)[frame_of]
        # A line is drawn where the camera sees its agent: the ray towards a point inside the drawn sphere, halfway
        # from its centre to its top, meets that agent first.
        inside = position[w_of, row] + np.array([0.0, 0.0, 0.5]) * size[w_of, row, :1]
        hits = wp.zeros(len(row), dtype=wp.int32, device=sim.device)
        if len(row):
            wp.launch(
                first_hits,
                dim=len(row),
                inputs=[
                    wp.array(w_of, dtype=wp.int32, device=sim.device),
                    wp.array(inside, dtype=wp.vec3, device=sim.device),
                    cam_pos,
                    t["alive"],
                    t["shape"],
                    *drawn,
                ],
                outputs=[hits],
                device=sim.device,
            )
        seen = hits.numpy() == row
        for i, w in enumerate(worlds):
            rows = row[seen & (frame_of == i)]
            frames[i] = _draw_headings(
                frames[i], position[w, rows], rotation[w, rows], size[w, rows, 0], cfg.floor_size
            )
    return frames


def _real(value: object) -> bool:
    """Whether ``value`` is a real number (an int or float, not a bool)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def cut_walls(
    alive: np.ndarray, kind: np.ndarray, size: np.ndarray, position: np.ndarray, rotation: np.ndarray, cut: float
) -> None:
    """Lowers the tops of the live upright walls that rise above ``cut`` (m) to it, in ``size`` and ``position``
    (half extents and centres, ``[worlds, bodies, 3]``, changed in place); their bottoms stay where they are. A wall
    is upright when its local z axis is the world's (turned about z only, as hide-and-seek places them)."""
    x, y = rotation[..., 0], rotation[..., 1]
    upright = np.abs(1.0 - 2.0 * (x * x + y * y)) > 1.0 - 1.0e-4  # the z row of the rotation matrix, zz entry
    bottom = position[..., 2] - size[..., 2]
    tall = alive & (kind == WALL_KIND) & upright & (position[..., 2] + size[..., 2] > cut) & (bottom < cut)
    half = 0.5 * (cut - bottom[tall])
    size[tall, 2] = half
    position[tall, 2] = bottom[tall] + half


def _draw_headings(frame: np.ndarray, centres: np.ndarray, quats: np.ndarray, radii: np.ndarray, floor: float):
    from PIL import Image, ImageDraw

    if len(centres) == 0:
        return frame
    x, y, z, w = quats.T.astype(np.float64)
    forward = np.stack([1 - 2 * (y * y + z * z), 2 * (x * y + z * w), np.zeros_like(x)], axis=-1)
    forward /= np.maximum(np.linalg.norm(forward, axis=-1, keepdims=True), 1e-9)
    # The line starts at the top of the sphere, so the sphere does not hide it.
    top = centres + np.array([0.0, 0.0, 1.0]) * radii[:, None]
    h, wd = frame.shape[:2]
    a = project(top, floor, wd, h)
    b = project(top + forward * 2.2 * radii[:, None], floor, wd, h)
    image = Image.fromarray(frame)
    draw = ImageDraw.Draw(image)
    width = max(1, round(h / 120))
    for (ax, ay), (bx, by) in zip(a, b, strict=True):
        draw.line([(ax, ay), (bx, by)], fill=(20, 20, 20), width=width + 2)
        draw.line([(ax, ay), (bx, by)], fill=(255, 255, 255), width=width)
    return np.asarray(image)


def legend(width: int, *, row_height: int = 20) -> np.ndarray:
    """Rows ``[k * row_height, width, 3]`` naming the body colours (``PALETTE``) and the lock stripes."""
    from PIL import Image, ImageDraw

    entries = [(name, tuple(round(255 * c) for c in rgb)) for name, rgb in PALETTE.items()]
    entries.append(("locked: striped in the locking team's colour", None))
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    box, place, x, row = row_height - 8, [], 4, 0
    for name, rgb in entries:  # lay out first, wrapping to a new row where one is full
        need = (box + 4 if rgb is not None else 0) + int(measure.textlength(name)) + 12
        if x > 4 and x + need > width:
            x, row = 4, row + 1
        place.append((x, row, name, rgb))
        x += need
    image = Image.new("RGB", (width, (row + 1) * row_height), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    for x, row, name, rgb in place:
        top = row * row_height
        if rgb is not None:
            draw.rectangle([x, top + 4, x + box, top + 4 + box], fill=rgb, outline=(60, 60, 60))
            x += box + 4
        draw.text((x, top + (row_height - 11) // 2), name, fill=(30, 30, 30))
    return np.asarray(image)


def with_legend(image: np.ndarray) -> np.ndarray:
    """``image`` with the colour legend below it."""
    return np.concatenate([image, legend(image.shape[1])], axis=0)


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
