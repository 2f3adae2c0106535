"""Hide-and-seek systems: level generation at reset (random rooms or the quadrant game), agent actions
(move, grab, lock), team rewards, episode statistics and observations. Every kernel runs one thread per
world; the reusable sensors (lidar, visibility, reach) come from ``systems.raycast``.

Body rows of a world are fixed: row 0 the floor, then ``max_walls`` wall rows, ``max_boxes`` box
rows, ``NUM_RAMPS`` ramp rows and ``NUM_AGENTS`` agent rows (hider slots first). A reset turns rows
on and off (``alive``) instead of spawning, so a slot's body row never changes.
"""

import enum

import warp as wp

import ecs
from systems.collision import shape_extent
from systems.geometry import BOX, PLANE, SPHERE, WEDGE, closest_on_polyhedron, shape_inertia
from systems.grab import GrabJoints, hold
from systems.locking import KEEP_UNLOCKED, NEW_LOCKER, LockType, decide_lock, may_unlock, try_lock, try_unlock
from systems.placement import PLACED_COLUMNS, BodyColumns, place_body
from systems.raycast import sees
from systems.rigid_body import DYNAMIC, KINEMATIC, STATIC

wp.set_module_options({"enable_backward": False})

NUM_AGENTS = 6  # agent slots: hiders 0..2, seekers 3..5
MAX_TEAM = 3
NUM_RAMPS = 2

_MAX_TEAM = wp.constant(MAX_TEAM)
_NUM_AGENTS = wp.constant(NUM_AGENTS)
_NUM_RAMPS = wp.constant(NUM_RAMPS)

SELF_FEATURES = 11
AGENT_FEATURES = 7
OBJECT_FEATURES = 13

SelfVec = wp.types.vector(length=SELF_FEATURES, dtype=wp.float32)
AgentVec = wp.types.vector(length=AGENT_FEATURES, dtype=wp.float32)
ObjectVec = wp.types.vector(length=OBJECT_FEATURES, dtype=wp.float32)
WallVec = wp.types.vector(length=6, dtype=wp.float32)
BoxVec = wp.types.vector(length=6, dtype=wp.float32)


class Kind(enum.IntEnum):
    """What a body row holds (the ``kind`` body component)."""

    NONE = 0
    FLOOR = 1
    WALL = 2
    BOX = 3
    RAMP = 4
    HIDER = 5
    SEEKER = 6


class Scenario(enum.IntEnum):
    """How a procedural level's walls are drawn (config ``scenario``, OpenAI's names)."""

    NONE = 0
    RANDOM_WALLS = 1  # "randomwalls": 1..max_rooms rooms split by walls with doors
    QUADRANT = 2  # "quadrant": one walled room in the floor's (+x, -y) corner


class RewardType(enum.IntEnum):
    """How visibility becomes the team reward (config ``reward_type``, OpenAI's ``rew_type`` names)."""

    NONE = 0
    JOINT_ZERO_SUM = 1  # "joint_zero_sum": hiders +1 if every hider is hidden, else -1; seekers the negation
    SELFISH = 2  # "selfish": a hider -1 if some seeker sees it, else +1; a seeker +1 if it sees some hider, else -1
    JOINT_MEAN = 3  # "joint_mean": each agent gets its team's mean of the selfish rewards


FLOOR_KIND = wp.constant(int(Kind.FLOOR))
WALL_KIND = wp.constant(int(Kind.WALL))
BOX_KIND = wp.constant(int(Kind.BOX))
RAMP_KIND = wp.constant(int(Kind.RAMP))
HIDER_KIND = wp.constant(int(Kind.HIDER))
SEEKER_KIND = wp.constant(int(Kind.SEEKER))

QUADRANT_SCENARIO = wp.constant(int(Scenario.QUADRANT))
SELFISH_REWARD = wp.constant(int(RewardType.SELFISH))
JOINT_MEAN_REWARD = wp.constant(int(RewardType.JOINT_MEAN))

_PLACE_TRIES = wp.constant(64)
_GRID_STEP = wp.constant(0.1)
_TEAM_ATTEMPTS = wp.constant(8)
TOGGLE_LOCK = wp.constant(int(LockType.TOGGLE))


# The body columns a reset writes, one parameter (``body_out``) bound by the engine.
Bodies = ecs.bundle("Bodies", [*PLACED_COLUMNS, ("kind", wp.int32), ("locker", wp.int32)])
# The agent columns a reset writes.
AgentSlotsReset = ecs.bundle(
    "AgentSlotsReset",
    [
        "alive",
        ("body_row", wp.int32),
        ("team", wp.int32),
        ("holding", wp.int32),
        ("lock_pressed", wp.int32),
        ("reach_target", wp.int32),
    ],
)


@wp.func
def yaw_quat(yaw: float) -> wp.quat:
    return wp.quat_from_axis_angle(wp.vec3(0.0, 0.0, 1.0), yaw)


@wp.func
def yaw_of(q: wp.quat) -> float:
    return wp.atan2(2.0 * (q[3] * q[2] + q[0] * q[1]), 1.0 - 2.0 * (q[1] * q[1] + q[2] * q[2]))


@wp.func
def put_body(
    b: Bodies,
    world: int,
    row: int,
    kind: int,
    shape: int,
    size: wp.vec3,
    position: wp.vec3,
    rotation: wp.quat,
    mass: float,
    response: int,
    friction: float,
    z_only: bool,
):
    """``place_body`` plus the body's ``kind``; with ``z_only`` the body may only turn about its z axis (kept
    vertical: every body is placed upright), as OpenAI's agents on slide-slide-hinge joints and its boxes and
    ramps with ``box_only_z_rot``."""
    columns = BodyColumns(
        alive=b.alive,
        generation=b.generation,
        shape=b.shape,
        size=b.size,
        position=b.position,
        rotation=b.rotation,
        linear_velocity=b.linear_velocity,
        angular_velocity=b.angular_velocity,
        mass=b.mass,
        inv_inertia=b.inv_inertia,
        response=b.response,
        friction=b.friction,
        restitution=b.restitution,
        force=b.force,
        torque=b.torque,
        drag=b.drag,
        prev_position=b.prev_position,
        prev_rotation=b.prev_rotation,
        locked_by=b.locked_by,
        sleep_count=b.sleep_count,
        sweep_order=b.sweep_order,
    )
    place_body(columns, world, row, shape, size, position, rotation, mass, response, friction, 0.0)
    b.kind[world, row] = kind
    if z_only and response == DYNAMIC and mass > 0.0:
        # A locked axis: the inverse inertia keeps only the z row, 1 / I_zz (the inertia about the vertical axis
        # through the centre of mass; for a wedge that is not the zz entry of the full inverse).
        izz = shape_inertia(shape, size, mass)[2, 2]
        b.inv_inertia[world, row] = wp.mat33(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0 / izz)


@wp.func
def put_wall(b: Bodies, world: int, row: int, w: WallVec, friction: float):
    """A static box from segment (x0, y0, x1, y1, thickness, height)."""
    dx = w[2] - w[0]
    dy = w[3] - w[1]
    length = wp.sqrt(dx * dx + dy * dy)
    centre = wp.vec3(0.5 * (w[0] + w[2]), 0.5 * (w[1] + w[3]), 0.5 * w[5])
    size = wp.vec3(0.5 * length + 0.5 * w[4], 0.5 * w[4], 0.5 * w[5])
    put_body(b, world, row, WALL_KIND, BOX, size, centre, yaw_quat(wp.atan2(dy, dx)), 0.0, STATIC, friction, False)


@wp.func
def fits(
    b: Bodies, world: int, x: float, y: float, ex: float, ey: float, lo: wp.vec2, hi: wp.vec2, clearance: float
) -> bool:
    """Whether the footprint (centre x, y; half extents ex, ey) lies in the region [lo, hi] and clear of every body."""
    if x - ex < lo[0] or x + ex > hi[0] or y - ey < lo[1] or y + ey > hi[1]:
        return False
    for i in range(b.alive.shape[1]):
        if b.alive[world, i] != 0 and b.shape[world, i] != PLANE:
            p = b.position[world, i]
            e = shape_extent(b.shape[world, i], b.size[world, i], b.rotation[world, i])
            if wp.abs(p[0] - x) < e[0] + ex + clearance and wp.abs(p[1] - y) < e[1] + ey + clearance:
                return False
    return True


@wp.func
def ball_room(b: Bodies, world: int, x: float, y: float, r: float, lo: wp.vec2, hi: wp.vec2) -> float:
    """The gap [m] between a ball of radius ``r`` at (x, y) and the nearest body, seen from above (negative: the
    ball's overlap): of a box or ramp its oriented footprint (a ramp's bounding box), not the world-axis box around it
    that ``fits`` tests, which a plank turned 45 degrees makes 0.7 m wider than the plank. -1e30 outside [lo, hi]."""
    if x - r < lo[0] or x + r > hi[0] or y - r < lo[1] or y + r > hi[1]:
        return -1.0e30
    room = wp.float32(1.0e30)
    for i in range(b.alive.shape[1]):
        if b.alive[world, i] != 0 and b.shape[world, i] != PLANE:
            p = b.position[world, i]
            s = b.size[world, i]
            gap = wp.length(wp.vec2(x - p[0], y - p[1])) - s[0]  # from a ball's surface
            if b.shape[world, i] != SPHERE:  # from a footprint's edge (negative inside): out along each side
                out = wp.vec2(0.0, 0.0)
                if b.shape[world, i] == BOX or b.shape[world, i] == WEDGE:
                    local = wp.quat_rotate_inv(b.rotation[world, i], wp.vec3(x - p[0], y - p[1], 0.0))
                    along = local[0] + wp.where(
                        b.shape[world, i] == WEDGE, s[0] / 3.0, 0.0
                    )  # a ramp's box: off its origin
                    out = wp.vec2(wp.abs(along) - s[0], wp.abs(local[1]) - s[1])
                else:  # other shapes: their world-axis box
                    e = shape_extent(b.shape[world, i], s, b.rotation[world, i])
                    out = wp.vec2(wp.abs(p[0] - x) - e[0], wp.abs(p[1] - y) - e[1])
                gap = wp.length(wp.vec2(wp.max(out[0], 0.0), wp.max(out[1], 0.0))) + wp.min(wp.max(out[0], out[1]), 0.0)
            room = wp.min(room, gap - r)
    return room


@wp.func
def grid_spot(lo: wp.vec2, k: int, nx: int, near: wp.vec3, near_radius: float):
    """Cell ``k`` of the placement's grid scan over a region from ``lo``, ``nx`` cells a row: its centre, and whether
    it lies within ``near_radius`` of ``near`` (or ``near_radius`` is 0)."""
    cx = lo[0] + _GRID_STEP * (float(k % nx) + 0.5)
    cy = lo[1] + _GRID_STEP * (float(k / nx) + 0.5)
    d2 = (cx - near[0]) * (cx - near[0]) + (cy - near[1]) * (cy - near[1])
    return cx, cy, near_radius <= 0.0 or d2 <= near_radius * near_radius


@wp.func
def place(
    b: Bodies,
    world: int,
    state: wp.uint32,
    shape: int,
    size: wp.vec3,
    yaw: float,
    lo: wp.vec2,
    hi: wp.vec2,
    clearance: float,
    near: wp.vec3,
    near_radius: float,
):
    """A free spot for a body in the region [lo, hi] (a rectangle of the floor): random tries (within
    ``near_radius`` of ``near`` when it is > 0), then a deterministic grid scan. Returns (x, y, found, rng state)."""
    e = shape_extent(shape, size, yaw_quat(yaw))
    found = bool(False)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
    x = wp.float32(0.0)
    y = wp.float32(0.0)
    for _ in range(_PLACE_TRIES):
        if not found:
            if near_radius > 0.0:
                cx = near[0] + wp.randf(state, -near_radius, near_radius)
                cy = near[1] + wp.randf(state, -near_radius, near_radius)
            else:
                cx = wp.randf(state, lo[0] + e[0], hi[0] - e[0])
                cy = wp.randf(state, lo[1] + e[1], hi[1] - e[1])
            d2 = (cx - near[0]) * (cx - near[0]) + (cy - near[1]) * (cy - near[1])
            if (near_radius <= 0.0 or d2 <= near_radius * near_radius) and fits(
                b, world, cx, cy, e[0], e[1], lo, hi, clearance
            ):
                x = cx
                y = cy
                found = True
    if not found:
        nx = int((hi[0] - lo[0]) / _GRID_STEP)
        ny = int((hi[1] - lo[1]) / _GRID_STEP)
        for k in range(nx * ny):
            if not found:
                cx, cy, near_enough = grid_spot(lo, k, nx, near, near_radius)
                if near_enough and fits(b, world, cx, cy, e[0], e[1], lo, hi, clearance):
                    x = cx
                    y = cy
                    found = True
    if not found and shape == SPHERE:
        # A ball that no world-axis box leaves room for (a crowded floor of turned planks): the scan again, against
        # the bodies' oriented footprints (``ball_room``); where none has room either, the roomiest spot of the region,
        # so an agent starts as little inside a body as the floor allows rather than at the origin, inside whatever is
        # there (such a seeker, let go after the preparation, was thrown out spinning at 134 rad/s).
        nx = int((hi[0] - lo[0]) / _GRID_STEP)
        ny = int((hi[1] - lo[1]) / _GRID_STEP)
        best = wp.float32(-1.0e30)
        for k in range(nx * ny):
            if not found:
                cx, cy, near_enough = grid_spot(lo, k, nx, near, near_radius)
                if near_enough:
                    room = ball_room(b, world, cx, cy, size[0], lo, hi)
                    if room >= clearance:
                        found = True
                    if room > best:
                        best = room
                        x = cx
                        y = cy
    return x, y, found, state


@wp.func
def randi(state: wp.uint32, lo: int, hi: int):
    """Uniform integer in [lo, hi] and the advanced state."""
    v = lo + int(wp.randf(state) * float(hi - lo + 1))
    return wp.min(v, hi), state


@wp.func
def wall_with_door(
    b: Bodies,
    world: int,
    row: int,
    a: wp.vec2,
    c: wp.vec2,
    door_at: float,
    door_width: float,
    thickness: float,
    height: float,
    friction: float,
) -> int:
    """Two wall segments from ``a`` to ``c`` leaving a door of ``door_width`` centred ``door_at`` along it."""
    d = c - a
    length = wp.length(d)
    u = d / length
    lo = door_at - 0.5 * door_width
    hi = door_at + 0.5 * door_width
    r = row
    if lo > 0.5 * thickness:
        e = a + u * (lo - 0.5 * thickness)
        put_wall(b, world, r, WallVec(a[0], a[1], e[0], e[1], thickness, height), friction)
        r += 1
    if hi < length - 0.5 * thickness:
        s = a + u * (hi + 0.5 * thickness)
        put_wall(b, world, r, WallVec(s[0], s[1], c[0], c[1], thickness, height), friction)
        r += 1
    return r


# The resources and config values a reset reads, one parameter (``level``) filled by the engine.
LevelResources = ecs.resource_bundle(
    "LevelResources",
    {
        "floor_size": float,
        "wall_thickness": float,
        "wall_height": float,
        "outside_wall_height": float,
        "door_width": float,
        "outside_walls_prob": float,
        "max_rooms": int,
        "random_room_number": bool,
        "min_hiders": int,
        "max_hiders": int,
        "min_seekers": int,
        "max_seekers": int,
        "min_boxes": int,
        "max_boxes": int,
        "min_elongated_boxes": int,
        "box_size": float,
        "elongated_box_scale": wp.vec3,
        "ramp_size": wp.vec3,
        "agent_radius": float,
        "agent_mass": float,
        "box_mass": float,
        "ramp_mass": float,
        "floor_friction": float,
        "box_friction": float,
        "agent_friction": float,
        "ramp_friction": float,
        "wall_friction": float,
        "objects_turn_only_about_z": bool,
        "move_damping": float,
        "team_spawn_radius": float,
        "placement_clearance": float,
        "first_wall_row": int,
        "first_box_row": int,
        "first_ramp_row": int,
        "first_agent_row": int,
        "fixed_wall_count": int,
        "fixed_box_count": int,
        "fixed_ramp_count": int,
        "fixed_agent_count": int,
        "scenario_kind": int,
        "quadrant_size": float,
        "door_dropout_prob": float,
        "quadrant_hider_uniform_placement": bool,
        "num_ramps": int,
        "elongated_box_cap": int,
    },
)


@wp.func
def put_agent(b: Bodies, world: int, row: int, kind: int, x: float, y: float, yaw: float, level: LevelResources):
    """An agent: a sphere turning about z only, with OpenAI's slide-joint damping as the body's drag in x and y."""
    r = level.agent_radius
    pos = wp.vec3(x, y, r)
    put_body(
        b,
        world,
        row,
        kind,
        SPHERE,
        wp.vec3(r, 0.0, 0.0),
        pos,
        yaw_quat(yaw),
        level.agent_mass,
        DYNAMIC,
        level.agent_friction,
        True,
    )
    b.drag[world, row] = wp.vec3(level.move_damping, level.move_damping, 0.0)


@wp.func
def random_rooms(b: Bodies, world: int, row: int, state: wp.uint32, level: LevelResources, half: float):
    """Rooms of the random-walls scenario: a wall across the floor at a random x, then one across each half at a
    random y, each with a door; 1..``max_rooms`` rooms. Returns (next wall row, rng state)."""
    rooms = level.max_rooms
    if level.random_room_number:
        rooms, state = randi(state, 1, level.max_rooms)
    margin = 1.2  # m: every room at least this wide
    split_x = wp.float32(0.0)
    if rooms >= 2:
        split_x = wp.randf(state, -half + 2.0 * margin, half - 2.0 * margin)
        door = wp.randf(state, 0.5 * level.door_width + 0.3, level.floor_size - 0.5 * level.door_width - 0.3)
        row = wall_with_door(
            b,
            world,
            row,
            wp.vec2(split_x, -half),
            wp.vec2(split_x, half),
            door,
            level.door_width,
            level.wall_thickness,
            level.wall_height,
            level.wall_friction,
        )
    if rooms >= 3:
        y = wp.randf(state, -half + margin, half - margin)
        width = split_x + half
        door = wp.randf(state, 0.5 * level.door_width + 0.2, width - 0.5 * level.door_width - 0.2)
        row = wall_with_door(
            b,
            world,
            row,
            wp.vec2(-half, y),
            wp.vec2(split_x - 0.5 * level.wall_thickness, y),
            door,
            level.door_width,
            level.wall_thickness,
            level.wall_height,
            level.wall_friction,
        )
    if rooms >= 4:
        y = wp.randf(state, -half + margin, half - margin)
        width = half - split_x
        door = wp.randf(state, 0.5 * level.door_width + 0.2, width - 0.5 * level.door_width - 0.2)
        row = wall_with_door(
            b,
            world,
            row,
            wp.vec2(split_x + 0.5 * level.wall_thickness, y),
            wp.vec2(half, y),
            door,
            level.door_width,
            level.wall_thickness,
            level.wall_height,
            level.wall_friction,
        )
    return row, state


@wp.func
def quadrant_walls(b: Bodies, world: int, row: int, state: wp.uint32, level: LevelResources, half: float):
    """The quadrant game's room: two walls closing off the floor's (+x, -y) corner, ``quadrant_size`` of the floor
    on a side, each with a door; with probability ``door_dropout_prob`` one of them (drawn) has none.
    Returns (next wall row, rng state)."""
    q = level.quadrant_size * level.floor_size
    x = half - q
    y = -half + q
    t = level.wall_thickness
    dw = level.door_width
    door_x = bool(True)  # noqa: UP018 (Warp: a variable changed in a branch must be declared dynamic)
    door_y = bool(True)  # noqa: UP018 (as door_x)
    if wp.randf(state) < level.door_dropout_prob:
        keep, state = randi(state, 0, 1)
        door_x = keep == 0
        door_y = keep == 1
    # The wall along x = const from the floor's edge to the corner, then the wall along y = const from the
    # corner to the floor's edge; a door keeps a wall thickness clear of both ends.
    a = wp.vec2(x, -half)
    c = wp.vec2(x, y)
    if door_x:
        at = wp.randf(state, 0.5 * dw + t, q - 0.5 * dw - t)
        row = wall_with_door(b, world, row, a, c, at, dw, t, level.wall_height, level.wall_friction)
    else:
        put_wall(b, world, row, WallVec(a[0], a[1], c[0], c[1], t, level.wall_height), level.wall_friction)
        row += 1
    a = wp.vec2(x, y)
    c = wp.vec2(half, y)
    if door_y:
        at = wp.randf(state, 0.5 * dw + t, q - 0.5 * dw - t)
        row = wall_with_door(b, world, row, a, c, at, dw, t, level.wall_height, level.wall_friction)
    else:
        put_wall(b, world, row, WallVec(a[0], a[1], c[0], c[1], t, level.wall_height), level.wall_friction)
        row += 1
    return row, state


@wp.kernel
def reset_level(
    # Resources:
    level: LevelResources,
    fixed_walls: wp.array[WallVec],
    fixed_boxes: wp.array[BoxVec],
    fixed_ramps: wp.array[wp.vec3],
    fixed_agents: wp.array[wp.vec4],
    # Components in:
    world_reset_in: wp.array[wp.int32],
    # Components out:
    world_rng_out: wp.array[wp.uint32],
    body_out: Bodies,
    joint__alive_out: wp.array2d[wp.int32],
    agent_out: AgentSlotsReset,
):
    """A new level for every world being reset: the fixed layout if one is given, else a procedural one."""
    world = wp.tid()
    if world_reset_in[world] == 0:
        return
    b = body_out
    nb = b.alive.shape[1]
    for i in range(nb):
        b.alive[world, i] = 0
        b.kind[world, i] = 0
        b.sweep_order[world, i] = -1
        b.locker[world, i] = 0  # agent 0, a hider: OpenAI's which_locked of an object nobody has locked
    for j in range(joint__alive_out.shape[1]):
        joint__alive_out[world, j] = 0
    for a in range(agent_out.alive.shape[1]):
        agent_out.alive[world, a] = 0
        agent_out.body_row[world, a] = level.first_agent_row + a
        agent_out.team[world, a] = wp.where(a < _MAX_TEAM, 0, 1)
        agent_out.holding[world, a] = 0
        agent_out.lock_pressed[world, a] = 0
        agent_out.reach_target[world, a] = -1
    put_body(
        b,
        world,
        0,
        FLOOR_KIND,
        PLANE,
        wp.vec3(0.0, 0.0, 0.0),
        wp.vec3(0.0, 0.0, 0.0),
        wp.quat_identity(),
        0.0,
        STATIC,
        level.floor_friction,
        False,
    )
    half = 0.5 * level.floor_size
    state = world_rng_out[world]
    unit = wp.vec3(level.box_size, level.box_size, level.box_size) * 0.5
    if level.fixed_agent_count > 0:
        for i in range(level.fixed_wall_count):
            put_wall(b, world, level.first_wall_row + i, fixed_walls[i], level.wall_friction)
        for i in range(level.fixed_box_count):
            fb = fixed_boxes[i]
            size = wp.vec3(0.5 * fb[3], 0.5 * fb[4], 0.5 * fb[5])
            put_body(
                b,
                world,
                level.first_box_row + i,
                BOX_KIND,
                BOX,
                size,
                wp.vec3(fb[0], fb[1], size[2]),
                yaw_quat(fb[2]),
                level.box_mass,
                DYNAMIC,
                level.box_friction,
                level.objects_turn_only_about_z,
            )
        rs = level.ramp_size * 0.5
        for i in range(level.fixed_ramp_count):
            fr = fixed_ramps[i]
            put_body(
                b,
                world,
                level.first_ramp_row + i,
                RAMP_KIND,
                WEDGE,
                rs,
                wp.vec3(fr[0], fr[1], 2.0 * rs[2] / 3.0),
                yaw_quat(fr[2]),
                level.ramp_mass,
                DYNAMIC,
                level.ramp_friction,
                level.objects_turn_only_about_z,
            )
        hiders = wp.int32(0)
        seekers = wp.int32(0)
        for i in range(level.fixed_agent_count):
            fg = fixed_agents[i]
            slot = wp.int32(0)
            if fg[0] < 0.5:
                slot = hiders
                hiders += 1
            else:
                slot = _MAX_TEAM + seekers
                seekers += 1
            kind = wp.where(slot < _MAX_TEAM, HIDER_KIND, SEEKER_KIND)
            put_agent(b, world, level.first_agent_row + slot, kind, fg[1], fg[2], fg[3], level)
            agent_out.alive[world, slot] = 1
        world_rng_out[world] = state
        return

    # -- procedural level ----------------------------------------------------------------------
    row = level.first_wall_row
    if wp.randf(state) < level.outside_walls_prob:
        t = level.wall_thickness
        e = half - 0.5 * t
        tall = level.outside_wall_height
        put_wall(b, world, row, WallVec(-half, -e, half, -e, t, tall), level.wall_friction)
        put_wall(b, world, row + 1, WallVec(-half, e, half, e, t, tall), level.wall_friction)
        put_wall(b, world, row + 2, WallVec(-e, -half, -e, half, t, tall), level.wall_friction)
        put_wall(b, world, row + 3, WallVec(e, -half, e, half, t, tall), level.wall_friction)
        row += 4
    if level.scenario_kind == QUADRANT_SCENARIO:
        row, state = quadrant_walls(b, world, row, state, level, half)
    else:
        row, state = random_rooms(b, world, row, state, level, half)
    floor_lo = wp.vec2(-half, -half)
    floor_hi = wp.vec2(half, half)
    q = level.quadrant_size * level.floor_size
    quadrant_lo = wp.vec2(half - q, -half)
    quadrant_hi = wp.vec2(half, -half + q)
    box_lo = wp.vec2(floor_lo[0], floor_lo[1])
    box_hi = wp.vec2(floor_hi[0], floor_hi[1])
    if level.scenario_kind == QUADRANT_SCENARIO:
        box_lo = quadrant_lo
        box_hi = quadrant_hi

    none = wp.vec3(0.0, 0.0, 0.0)
    n_boxes, state = randi(state, level.min_boxes, level.max_boxes)
    n_long, state = randi(state, wp.min(level.min_elongated_boxes, n_boxes), wp.min(level.elongated_box_cap, n_boxes))
    for i in range(n_boxes):
        size = unit
        if i < n_long:
            size = wp.cw_mul(unit, level.elongated_box_scale)
        yaw = float(wp.where(wp.randf(state) < 0.5, 0.0, 0.5 * wp.pi))
        x, y, found, state = place(
            b, world, state, BOX, size, yaw, box_lo, box_hi, level.placement_clearance, none, 0.0
        )
        if found:
            put_body(
                b,
                world,
                level.first_box_row + i,
                BOX_KIND,
                BOX,
                size,
                wp.vec3(x, y, size[2]),
                yaw_quat(yaw),
                level.box_mass,
                DYNAMIC,
                level.box_friction,
                level.objects_turn_only_about_z,
            )
    rs = level.ramp_size * 0.5
    for i in range(level.num_ramps):
        yaw = 0.5 * wp.pi * float(int(wp.randf(state) * 4.0) % 4)
        x, y, found, state = place(
            b, world, state, WEDGE, rs, yaw, floor_lo, floor_hi, level.placement_clearance, none, 0.0
        )
        if found:
            put_body(
                b,
                world,
                level.first_ramp_row + i,
                RAMP_KIND,
                WEDGE,
                rs,
                wp.vec3(x, y, 2.0 * rs[2] / 3.0),
                yaw_quat(yaw),
                level.ramp_mass,
                DYNAMIC,
                level.ramp_friction,
                level.objects_turn_only_about_z,
            )
    n_hiders, state = randi(state, level.min_hiders, level.max_hiders)
    n_seekers, state = randi(state, level.min_seekers, level.max_seekers)
    ball = wp.vec3(level.agent_radius, 0.0, 0.0)
    for team in range(2):
        count = wp.where(team == 0, n_hiders, n_seekers)
        done = bool(False)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
        # Teammates start near the team's first agent; a crowded spot gets a new first agent, and
        # the last attempt places the rest anywhere.
        for attempt in range(_TEAM_ATTEMPTS):
            if not done:
                ok = bool(True)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
                first = wp.vec3(0.0, 0.0, 0.0)
                lo = wp.vec2(floor_lo[0], floor_lo[1])
                hi = wp.vec2(floor_hi[0], floor_hi[1])
                if level.scenario_kind == QUADRANT_SCENARIO and team == 0:  # noqa: SIM102
                    if not level.quadrant_hider_uniform_placement:
                        lo = quadrant_lo
                        hi = quadrant_hi
                for k in range(count):
                    slot = team * _MAX_TEAM + k
                    yaw = wp.randf(state, -wp.pi, wp.pi)
                    radius = wp.where(k == 0 or attempt == _TEAM_ATTEMPTS - 1, 0.0, level.team_spawn_radius)
                    if level.scenario_kind == QUADRANT_SCENARIO and team == 1 and (k == 0 or radius <= 0.0):
                        # A seeker starts in one of the three other quadrants, drawn (teammates placed near
                        # their first agent share its quadrant).
                        other, state = randi(state, 0, 2)
                        lo = wp.vec2(wp.where(other == 2, half - q, -half), wp.where(other == 0, -half, -half + q))
                        hi = wp.vec2(wp.where(other == 2, half, half - q), wp.where(other == 0, -half + q, half))
                    x, y, found, state = place(
                        b, world, state, SPHERE, ball, yaw, lo, hi, level.placement_clearance, first, radius
                    )
                    if k == 0:
                        first = wp.vec3(x, y, 0.0)
                    if not found:
                        ok = False
                    kind = wp.where(team == 0, HIDER_KIND, SEEKER_KIND)
                    put_agent(b, world, level.first_agent_row + slot, kind, x, y, yaw, level)
                    agent_out.alive[world, slot] = 1
                if ok or attempt == _TEAM_ATTEMPTS - 1:
                    done = True
                else:
                    for k in range(count):
                        b.alive[world, level.first_agent_row + team * _MAX_TEAM + k] = 0
    world_rng_out[world] = state


@wp.func
def grabbable(target: int, kind: wp.array2d[wp.int32], world: int) -> int:
    """The reach target if it is a box or a ramp (agents cannot be grabbed or locked), else -1."""
    if target < 0:
        return -1
    k = kind[world, target]
    if k == BOX_KIND or k == RAMP_KIND:  # noqa: SIM109 (Warp has no `in`)
        return target
    return -1


# Column bundles of act_agents (whole columns, indexed [world, row]).
AgentSlots = ecs.bundle(
    "AgentSlots",
    ["alive", ("body_row", wp.int32), ("team", wp.int32), ("reach_target", wp.int32), ("visible", wp.int32, 1)],
)
AgentHands = ecs.bundle("AgentHands", [("holding", wp.int32), ("lock_pressed", wp.int32)])
BodyBuild = ecs.bundle(
    "BodyBuild",
    [("kind", wp.int32), ("shape", wp.int32), ("size", wp.vec3), ("mass", wp.float32), ("inv_inertia", wp.mat33)],
)
BodyDrive = ecs.bundle(
    "BodyDrive",
    [
        ("position", wp.vec3),
        ("rotation", wp.quat),
        ("linear_velocity", wp.vec3),
        ("angular_velocity", wp.vec3),
        ("force", wp.vec3),
        ("torque", wp.vec3),
        ("response", wp.int32),
        ("locked_by", wp.int32),
        ("locker", wp.int32),
    ],
)


@wp.func
def inertia_about_z(q: wp.quat, inv_inertia: wp.mat33) -> float:
    """Moment of inertia about the vertical axis through the centre of mass [kg m^2]; 0 for a body that does not
    turn. A body with a locked tilt (only the zz entry of its inverse inertia, and upright) has 1 / that entry."""
    if wp.determinant(inv_inertia) > 0.0:
        r = wp.quat_to_matrix(q)
        return (r * wp.inverse(inv_inertia) * wp.transpose(r))[2, 2]
    if inv_inertia[2, 2] > 0.0:
        return 1.0 / inv_inertia[2, 2]
    return 0.0


@wp.func
def damped_speed(force: float, damping: float, now: float, inertia: float, dt: float) -> float:
    """A speed (linear or angular) ``dt`` after ``now`` under a motor ``force`` (or torque) against a drag
    ``damping * speed``, on ``inertia`` (a mass or a moment of inertia): the exact solution of
    ``inertia * dv/dt = force - damping * v``, which tends to ``force / damping`` and never passes it."""
    if damping <= 0.0:
        return now + force * dt / inertia
    return force / damping + (now - force / damping) * wp.exp(-damping * dt / inertia)


@wp.func
def group_row(
    world: int,
    k: int,
    lead: int,
    held: int,
    prep: bool,
    agent_in: AgentSlots,
    holding: wp.array2d[wp.int32],
    joint_out: GrabJoints,
) -> int:
    """Body row of member ``k`` of agent ``lead``'s group, or -1: ``k`` 0 is the body it holds (``held``, -1 for
    none), ``k`` 1..6 agent slot ``k - 1`` if that is the lead or another agent holding the same body."""
    if k == 0:
        return held
    a = k - 1
    if agent_in.alive[world, a] == 0 or (prep and agent_in.team[world, a] == 1):
        return -1
    if a == lead or (held >= 0 and holding[world, a] != 0 and joint_out.joint_body_b[world, a] == held):
        return agent_in.body_row[world, a]
    return -1


@wp.func
def turn_group(
    world: int,
    lead: int,
    held: int,
    prep: bool,
    physics_dt: float,
    turn_torque: float,
    turn_damping: float,
    world_move_in: wp.array2d[wp.vec3i],
    agent_in: AgentSlots,
    body_in: BodyBuild,
    holding: wp.array2d[wp.int32],
    body_out: BodyDrive,
    joint_out: GrabJoints,
):
    """Turns agent slot ``lead`` and, when it holds body ``held`` (else -1), that body and every other agent
    holding it, as one rigid group about its centre of mass: OpenAI's hinge motors (``turn_torque`` at full
    action) against their damping (``turn_damping``), solved exactly over the step (``damped_speed``) and given
    to the group as its yaw rate for the step. An agent alone settles at ``turn_torque / turn_damping`` within
    about a millisecond (its inertia is 0.009 kg m^2), far too stiff for a torque held over a 0.075 s step,
    which would also keep turning a group that something stops; every member gets the group's turn, so that
    the grab joints need not pass it on."""
    mass = wp.float32(0.0)
    centre = wp.vec3(0.0, 0.0, 0.0)
    for k in range(_NUM_AGENTS + 1):
        row = group_row(world, k, lead, held, prep, agent_in, holding, joint_out)
        if row >= 0:
            mass += body_in.mass[world, row]
            centre += body_out.position[world, row] * body_in.mass[world, row]
    centre = centre / mass
    inertia = wp.float32(0.0)  # about the vertical through the centre of mass
    spin = wp.float32(0.0)  # angular momentum about it
    torque = wp.float32(0.0)
    damping = wp.float32(0.0)
    for k in range(_NUM_AGENTS + 1):
        row = group_row(world, k, lead, held, prep, agent_in, holding, joint_out)
        if row >= 0:
            m = body_in.mass[world, row]
            arm = body_out.position[world, row] - centre
            v = body_out.linear_velocity[world, row]
            own = inertia_about_z(body_out.rotation[world, row], body_in.inv_inertia[world, row])
            inertia += own + m * (arm[0] * arm[0] + arm[1] * arm[1])
            spin += own * body_out.angular_velocity[world, row][2] + m * (arm[0] * v[1] - arm[1] * v[0])
            if k > 0:
                torque += turn_torque * float(world_move_in[world, k - 1][2] - 5) / 5.0
                damping += turn_damping
    if inertia <= 0.0:
        return
    now = spin / inertia
    change = damped_speed(torque, damping, now, inertia, physics_dt) - now
    for k in range(_NUM_AGENTS + 1):
        row = group_row(world, k, lead, held, prep, agent_in, holding, joint_out)
        if row >= 0:
            # Each member turns with the group: its own spin, and its centre swung about the group's.
            arm = body_out.position[world, row] - centre
            body_out.angular_velocity[world, row] = body_out.angular_velocity[world, row] + wp.vec3(0.0, 0.0, change)
            body_out.linear_velocity[world, row] = body_out.linear_velocity[world, row] + wp.vec3(
                -arm[1] * change, arm[0] * change, 0.0
            )


@wp.func
def in_lock_range(
    lock_radius: float, p: wp.vec3, body_in: BodyBuild, body_out: BodyDrive, world: int, row: int
) -> bool:
    """Whether point ``p`` (an agent's centre) lies within ``lock_radius`` of body ``row``'s solid (its box, or a
    ramp's wedge; distance 0 inside)."""
    local = wp.quat_rotate_inv(body_out.rotation[world, row], p - body_out.position[world, row])
    near = closest_on_polyhedron(body_in.shape[world, row], body_in.size[world, row], local)
    return wp.length(near - local) <= lock_radius


@wp.func
def lock_objects(
    world: int,
    state: wp.uint32,
    lock_kind: int,
    lock_radius: float,
    lock_ramps: bool,
    prep: bool,
    first_row: int,
    end_row: int,
    world_lock_in: wp.array2d[wp.int32],
    agent_in: AgentSlots,
    body_in: BodyBuild,
    body_out: BodyDrive,
):
    """OpenAI's lock rules (``lock_kind``, a ``LockType`` other than ``TOGGLE``; ``systems.locking.decide_lock``)
    for every box, and ramp with ``lock_ramps``, of body rows ``first_row..end_row-1``. The agents acting on an
    object are those alive that saw it in their last observation (``visible``, written in SENSE of the last step
    or of the reset) and whose centre lies within ``lock_radius`` of it; one wants it locked when its lock action
    is 1 (a seeker frozen in preparation reads 0). A newly locked object's locker is drawn uniformly among the
    agents that want it locked, from the world's RNG (advanced only when they are several). Returns the RNG state."""
    for o in range(first_row, end_row):
        kind = body_in.kind[world, o]
        if kind == BOX_KIND or (kind == RAMP_KIND and lock_ramps):
            locked = body_out.locked_by[world, o] != 0
            locker = body_out.locker[world, o]
            locker_team = agent_in.team[world, locker]
            wanting = wp.int32(0)  # bit a: agent slot a wants it locked
            not_desired = bool(False)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
            unlock_wanted = bool(False)  # noqa: UP018 (as not_desired)
            for a in range(_NUM_AGENTS):
                if agent_in.alive[world, a] != 0 and agent_in.visible[world, a, o] != 0:
                    me = body_out.position[world, agent_in.body_row[world, a]]
                    if in_lock_range(lock_radius, me, body_in, body_out, world, o):
                        team = agent_in.team[world, a]
                        if world_lock_in[world, a] != 0 and not (prep and team == 1):
                            wanting = wanting | (1 << a)
                        else:
                            not_desired = True
                            if may_unlock(lock_kind, locked, a, team, locker, locker_team):
                                unlock_wanted = True
            outcome = decide_lock(lock_kind, locked, wanting != 0, not_desired, unlock_wanted)
            if outcome == NEW_LOCKER:
                count = wp.int32(0)
                for a in range(_NUM_AGENTS):
                    count += (wanting >> a) & 1
                pick = wp.int32(0)
                if count > 1:
                    pick = wp.randi(state, 0, count)
                for a in range(_NUM_AGENTS):
                    if ((wanting >> a) & 1) != 0:
                        if pick == 0:
                            locker = a
                        pick -= 1
                body_out.locker[world, o] = locker
                body_out.locked_by[world, o] = agent_in.team[world, locker] + 1
                body_out.linear_velocity[world, o] = wp.vec3(0.0, 0.0, 0.0)
                body_out.angular_velocity[world, o] = wp.vec3(0.0, 0.0, 0.0)
            elif outcome == KEEP_UNLOCKED:
                body_out.locked_by[world, o] = 0
    return state


# What act_agents reads of the env's resources and config.
AgentControls = ecs.resource_bundle(
    "AgentControls",
    {
        "prep_steps": int,
        "physics_dt": float,
        "move_force": float,
        "turn_torque": float,
        "turn_damping": float,
        "lock_ramps": bool,
        "lock_kind": int,
        "lock_radius": float,
        "first_box_row": int,
        "first_agent_row": int,
    },
)


@wp.func
def act_agents(
    world: wp.int32,
    # Resources:
    ctl: AgentControls,
    # Components in:
    world_episode_step_in: wp.int32,
    world_move_in: wp.array2d[wp.vec3i],
    world_grab_in: wp.array2d[wp.int32],
    world_lock_in: wp.array2d[wp.int32],
    agent_in: AgentSlots,
    body_in: BodyBuild,
    # Components out:
    world_rng_out: wp.uint32,
    agent_out: AgentHands,
    body_out: BodyDrive,
    joint_out: GrabJoints,
):
    """Locks, grabs and drive forces of every agent, slots in order; seekers are frozen during preparation.

    Locks follow ``lock_kind`` (a ``LockType``): OpenAI's rules for every box and ramp (``lock_objects``), or
    with ``TOGGLE`` a press (0 -> 1) on the agent's reach target. The drive is OpenAI's: slide-joint motors of
    ``move_force`` at full action against the slide damping ``move_damping`` (the agent body's drag, applied by
    the solver in every substep), and a hinge motor of ``turn_torque`` against ``turn_damping``, solved exactly
    over the step for the agent and what it holds (``turn_group``). Returns the world's RNG state.
    """
    prep = world_episode_step_in <= ctl.prep_steps
    state = world_rng_out
    # Locks first, so that a box locked this step can no longer be held.
    if ctl.lock_kind != TOGGLE_LOCK:
        state = lock_objects(
            world,
            state,
            ctl.lock_kind,
            ctl.lock_radius,
            ctl.lock_ramps,
            prep,
            ctl.first_box_row,
            ctl.first_agent_row,
            world_lock_in,
            agent_in,
            body_in,
            body_out,
        )
    # TOGGLE: a press (0 -> 1) locks the reach target for the agent's team, or unlocks it if its team locked it.
    for a in range(_NUM_AGENTS):
        if agent_in.alive[world, a] != 0:
            frozen = prep and agent_in.team[world, a] == 1
            pressed = world_lock_in[world, a] != 0 and not frozen
            target = grabbable(agent_in.reach_target[world, a], body_in.kind, world)
            if target >= 0:  # noqa: SIM102 (Warp does not short-circuit: target may be -1)
                if body_in.kind[world, target] == RAMP_KIND and not ctl.lock_ramps:
                    target = -1
            if ctl.lock_kind == TOGGLE_LOCK and pressed and agent_out.lock_pressed[world, a] == 0 and target >= 0:
                team = agent_in.team[world, a]
                if body_out.locked_by[world, target] == 0:
                    if try_lock(body_out.locked_by, world, target, team):
                        body_out.locker[world, target] = a
                        body_out.linear_velocity[world, target] = wp.vec3(0.0, 0.0, 0.0)
                        body_out.angular_velocity[world, target] = wp.vec3(0.0, 0.0, 0.0)
                else:
                    try_unlock(body_out.locked_by, world, target, team)
            agent_out.lock_pressed[world, a] = wp.where(pressed, 1, 0)
    for a in range(_NUM_AGENTS):
        me = agent_in.body_row[world, a]
        if agent_in.alive[world, a] == 0:
            joint_out.alive[world, a] = 0
            agent_out.holding[world, a] = 0
            continue
        frozen = prep and agent_in.team[world, a] == 1
        want = world_grab_in[world, a] != 0 and not frozen
        holding = agent_out.holding[world, a] != 0
        if holding:  # noqa: SIM102 (Warp does not short-circuit)
            if body_out.locked_by[world, joint_out.joint_body_b[world, a]] != 0:
                holding = False  # a held body that gets locked is let go, and nothing else is grabbed this step
                want = False
        target = grabbable(agent_in.reach_target[world, a], body_in.kind, world)
        if target >= 0:  # noqa: SIM102 (Warp does not short-circuit: target may be -1)
            if body_out.locked_by[world, target] != 0:
                target = -1
        holding = hold(joint_out, world, a, holding, want, me, target, body_out.position, body_out.rotation)
        agent_out.holding[world, a] = wp.where(holding, 1, 0)
        if frozen:
            body_out.response[world, me] = KINEMATIC
            body_out.linear_velocity[world, me] = wp.vec3(0.0, 0.0, 0.0)
            body_out.angular_velocity[world, me] = wp.vec3(0.0, 0.0, 0.0)
            body_out.force[world, me] = wp.vec3(0.0, 0.0, 0.0)
            body_out.torque[world, me] = wp.vec3(0.0, 0.0, 0.0)
        else:
            # The slide motors, in the world frame; their damping is the body's drag (put_agent), which the
            # solver applies in every substep as MuJoCo does.
            body_out.response[world, me] = DYNAMIC
            m = world_move_in[world, a]
            body_out.force[world, me] = wp.vec3(float(m[0] - 5), float(m[1] - 5), 0.0) * (ctl.move_force / 5.0)
            body_out.torque[world, me] = wp.vec3(0.0, 0.0, 0.0)  # the hinge: turn_group
    # The hinge motors once holds are settled: each group (an agent alone, or a held body with every agent
    # holding it) is turned by its lowest slot.
    for a in range(_NUM_AGENTS):
        if agent_in.alive[world, a] != 0 and not (prep and agent_in.team[world, a] == 1):
            held = wp.int32(-1)
            if agent_out.holding[world, a] != 0:
                held = joint_out.joint_body_b[world, a]
            lead = bool(True)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
            for b in range(a):
                if group_row(world, b + 1, a, held, prep, agent_in, agent_out.holding, joint_out) >= 0:
                    lead = False  # a lower slot holds the same body
            if lead:
                turn_group(
                    world,
                    a,
                    held,
                    prep,
                    ctl.physics_dt,
                    ctl.turn_torque,
                    ctl.turn_damping,
                    world_move_in,
                    agent_in,
                    body_in,
                    agent_out.holding,
                    body_out,
                    joint_out,
                )
    return state


# Column bundles of reward_teams (whole columns, indexed [world, row]).
AgentTeams = ecs.bundle("AgentTeams", ["alive", ("body_row", wp.int32), ("team", wp.int32)])
BodyShapes = ecs.bundle(
    "BodyShapes", ["alive", ("shape", wp.int32), ("size", wp.vec3), ("position", wp.vec3), ("rotation", wp.quat)]
)


@wp.func
def outside(p: wp.vec3, lo: wp.vec2, hi: wp.vec2) -> bool:
    """Whether ``p`` lies outside the play area [lo, hi] (in x or y)."""
    return p[0] < lo[0] or p[0] > hi[0] or p[1] < lo[1] or p[1] > hi[1]


@wp.func
def own_reward(team: int, slot: int, hiders_seen: int, seekers_seeing: int) -> float:
    """OpenAI's "selfish" reward of one agent: a hider -1 if some seeker sees it, else +1; a seeker +1 if it sees
    some hider, else -1 (``hiders_seen`` and ``seekers_seeing`` hold one bit per agent slot)."""
    if team == 0:
        return wp.where((hiders_seen >> slot) & 1 != 0, -1.0, 1.0)
    return wp.where((seekers_seeing >> slot) & 1 != 0, 1.0, -1.0)


@wp.func
def reward_teams(
    world: wp.int32,
    # Resources:
    prep_steps: int,
    reward_kind: int,
    play_area_lo: wp.vec2,
    play_area_hi: wp.vec2,
    penalize_objects_outside: bool,
    first_box_row: int,
    first_agent_row: int,
    view_half_angle: float,
    out_of_bounds_reward: float,
    # Components in:
    world_episode_step_in: wp.int32,
    agent_in: AgentTeams,
    body_in: BodyShapes,
    # Components out:
    world_reward_out: wp.array2d[wp.float32],
    world_hiders_seen_out: wp.array[wp.int32],
):
    """The team reward of ``reward_kind`` (a ``RewardType``) from who sees whom; ``out_of_bounds_reward`` for an
    agent outside the play area (for every agent while a box or ramp is outside it, with ``penalize_objects_outside``);
    0 in preparation.

    A per-world function on whole tables (the engine writes its kernel, and can fuse it).
    """
    c = wp.cos(view_half_angle)
    seen = wp.int32(0)
    hiders_seen = wp.int32(0)  # bit h: some seeker sees hider slot h
    seekers_seeing = wp.int32(0)  # bit s: seeker slot s sees some hider
    # Loops with a bound known only at run time: with _NUM_AGENTS Warp unrolls them, and the 36 copies of the ray
    # cast in `sees` left the CUDA build at 255 registers with 1.2 KB of stack and 2.5 KB of spills.
    agents = agent_in.alive.shape[1]
    for s in range(agents):
        if agent_in.alive[world, s] != 0 and agent_in.team[world, s] == 1:
            for h in range(agents):
                if agent_in.alive[world, h] != 0 and agent_in.team[world, h] == 0:
                    t = sees(
                        body_in.alive,
                        body_in.shape,
                        body_in.size,
                        body_in.position,
                        body_in.rotation,
                        world,
                        agent_in.body_row[world, s],
                        agent_in.body_row[world, h],
                        c,
                    )
                    if t >= 0.0:
                        seen = 1
                        hiders_seen = hiders_seen | (1 << h)
                        seekers_seeing = seekers_seeing | (1 << s)
    world_hiders_seen_out[world] = seen
    # Each agent's own ("selfish") reward, and its team's sum and size for "joint_mean".
    sums = wp.vec2(0.0, 0.0)
    sizes = wp.vec2(0.0, 0.0)
    for a in range(_NUM_AGENTS):
        if agent_in.alive[world, a] != 0:
            team = agent_in.team[world, a]
            sums[team] = sums[team] + own_reward(team, a, hiders_seen, seekers_seeing)
            sizes[team] = sizes[team] + 1.0
    objects_out = bool(False)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
    if penalize_objects_outside:
        for row in range(first_box_row, first_agent_row):
            if body_in.alive[world, row] != 0 and outside(body_in.position[world, row], play_area_lo, play_area_hi):
                objects_out = True
    prep = world_episode_step_in <= prep_steps
    for a in range(_NUM_AGENTS):
        r = wp.float32(0.0)
        if agent_in.alive[world, a] != 0 and not prep:
            team = agent_in.team[world, a]
            hider = float(wp.where(seen != 0, -1.0, 1.0))
            r = wp.where(team == 0, hider, -hider)
            if reward_kind == SELFISH_REWARD:
                r = own_reward(team, a, hiders_seen, seekers_seeing)
            elif reward_kind == JOINT_MEAN_REWARD:
                r = sums[team] / sizes[team]
            if objects_out or outside(body_in.position[world, agent_in.body_row[world, a]], play_area_lo, play_area_hi):
                r = out_of_bounds_reward
        world_reward_out[world, a] = r


# -- episode statistics (OpenAI's TrackStatWrapper) --------------------------------------------------

# Column bundles of the statistics systems (whole columns, indexed [world, row]).
AgentGrips = ecs.bundle("AgentGrips", ["alive", ("team", wp.int32), ("holding", wp.int32)])
BodyTravel = ecs.bundle(
    "BodyTravel", ["alive", ("position", wp.vec3), ("start_position", wp.vec3), ("locked_by", wp.int32)]
)
BodyPositions = ecs.bundle("BodyPositions", [("position", wp.vec3)])
BodyStarts = ecs.bundle("BodyStarts", [("start_position", wp.vec3)])


@wp.func
def travel(body_in: BodyTravel, world: int, first: int, end: int):
    """Over the live rows ``first..end-1``: the largest distance from a row's episode-start position [m], and how
    many rows are locked."""
    move = wp.float32(0.0)
    locks = wp.int32(0)
    for r in range(first, end):
        if body_in.alive[world, r] != 0:
            move = wp.max(move, wp.length(body_in.position[world, r] - body_in.start_position[world, r]))
            if body_in.locked_by[world, r] != 0:
                locks += 1
    return move, locks


# The episode statistics of OpenAI's TrackStatWrapper (and grab counts): name, dtype, shape, meaning. Each is a
# per-world singleton describing the current episode, with a ``final_`` twin holding the last ended episode's.
STAT_FIELDS = (
    ("max_box_move_prep", wp.float32, (), "largest distance of a box from its start [m] at the end of preparation"),
    ("max_box_move", wp.float32, (), "largest distance of a box from its start [m] at the end of the episode"),
    ("num_box_lock_prep", wp.int32, (), "boxes locked at the end of preparation"),
    ("num_box_lock", wp.int32, (), "boxes locked at the end of the episode"),
    ("max_ramp_move_prep", wp.float32, (), "largest distance of a ramp from its start [m] at the end of preparation"),
    ("max_ramp_move", wp.float32, (), "largest distance of a ramp from its start [m] at the end of the episode"),
    ("num_ramp_lock_prep", wp.int32, (), "ramps locked at the end of preparation"),
    ("num_ramp_lock", wp.int32, (), "ramps locked at the end of the episode"),
    ("grab_steps_prep", wp.int32, (2,), "agent-steps holding a grab during preparation, [hiders, seekers]"),
    ("grab_steps", wp.int32, (2,), "agent-steps holding a grab over the episode, [hiders, seekers]"),
)
_CURRENT = [(name, dtype, shape) for name, dtype, shape, _ in STAT_FIELDS]
# The running episode's statistics, and those with their ``final_`` twins (bundles of singletons).
EpisodeTally = ecs.bundle("EpisodeTally", _CURRENT, singletons=True)
EpisodeRecord = ecs.bundle(
    "EpisodeRecord", _CURRENT + [(f"final_{name}", dtype, shape) for name, dtype, shape in _CURRENT], singletons=True
)


@wp.func
def track_episode_stats(
    world: wp.int32,
    # Resources:
    prep_steps: int,
    first_box_row: int,
    first_ramp_row: int,
    first_agent_row: int,
    # Components in:
    world_episode_step_in: wp.int32,
    world_terminated_in: wp.bool,
    world_truncated_in: wp.bool,
    agent_in: AgentGrips,
    body_in: BodyTravel,
    # Components out:
    world_out: EpisodeRecord,
):
    """The current episode's statistics after this step: box and ramp travel and locks now, agent-steps holding
    a grab per team; the ``_prep`` ones are taken at the end of the last preparation step (and stay 0 before).
    When the episode ends with this step they are also copied to the ``final_`` singletons, which the same-step
    reset leaves alone (as ``final_obs``)."""
    box_move, box_locks = travel(body_in, world, first_box_row, first_ramp_row)
    ramp_move, ramp_locks = travel(body_in, world, first_ramp_row, first_agent_row)
    s = world_out
    s.max_box_move[world] = box_move
    s.num_box_lock[world] = box_locks
    s.max_ramp_move[world] = ramp_move
    s.num_ramp_lock[world] = ramp_locks
    prep = world_episode_step_in <= prep_steps
    for a in range(_NUM_AGENTS):
        if agent_in.alive[world, a] != 0 and agent_in.holding[world, a] != 0:
            team = agent_in.team[world, a]
            s.grab_steps[world, team] = s.grab_steps[world, team] + 1
            if prep:
                s.grab_steps_prep[world, team] = s.grab_steps_prep[world, team] + 1
    if world_episode_step_in == prep_steps:
        s.max_box_move_prep[world] = box_move
        s.num_box_lock_prep[world] = box_locks
        s.max_ramp_move_prep[world] = ramp_move
        s.num_ramp_lock_prep[world] = ramp_locks
    if world_terminated_in or world_truncated_in:
        s.final_max_box_move[world] = box_move
        s.final_num_box_lock[world] = box_locks
        s.final_max_ramp_move[world] = ramp_move
        s.final_num_ramp_lock[world] = ramp_locks
        s.final_max_box_move_prep[world] = s.max_box_move_prep[world]
        s.final_num_box_lock_prep[world] = s.num_box_lock_prep[world]
        s.final_max_ramp_move_prep[world] = s.max_ramp_move_prep[world]
        s.final_num_ramp_lock_prep[world] = s.num_ramp_lock_prep[world]
        for team in range(2):
            s.final_grab_steps[world, team] = s.grab_steps[world, team]
            s.final_grab_steps_prep[world, team] = s.grab_steps_prep[world, team]


@wp.func
def begin_episode_stats(
    world: wp.int32,
    # Components in:
    body_in: BodyPositions,
    # Components out:
    body_out: BodyStarts,
    world_out: EpisodeTally,
):
    """A new episode (RESET, after the level is built): every body's start position, statistics zeroed."""
    for r in range(body_in.position.shape[1]):
        body_out.start_position[world, r] = body_in.position[world, r]
    s = world_out
    s.max_box_move[world] = 0.0
    s.num_box_lock[world] = 0
    s.max_ramp_move[world] = 0.0
    s.num_ramp_lock[world] = 0
    s.max_box_move_prep[world] = 0.0
    s.num_box_lock_prep[world] = 0
    s.max_ramp_move_prep[world] = 0.0
    s.num_ramp_lock_prep[world] = 0
    for team in range(2):
        s.grab_steps[world, team] = 0
        s.grab_steps_prep[world, team] = 0


@wp.func
def to_frame(yaw_c: float, yaw_s: float, v: wp.vec3) -> wp.vec3:
    """A world vector in an agent's heading frame (x forward, z up)."""
    return wp.vec3(yaw_c * v[0] + yaw_s * v[1], -yaw_s * v[0] + yaw_c * v[1], v[2])


@wp.func
def object_features(
    body__size_in: wp.array2d[wp.vec3],
    body__position_in: wp.array2d[wp.vec3],
    body__rotation_in: wp.array2d[wp.quat],
    body__linear_velocity_in: wp.array2d[wp.vec3],
    body__locked_by_in: wp.array2d[wp.int32],
    world: int,
    row: int,
    origin: wp.vec3,
    yc: float,
    ys: float,
    yaw: float,
    team: int,
) -> ObjectVec:
    p = to_frame(yc, ys, body__position_in[world, row] - origin)
    v = to_frame(yc, ys, body__linear_velocity_in[world, row])
    rel = yaw_of(body__rotation_in[world, row]) - yaw
    s = body__size_in[world, row] * 2.0
    lock = body__locked_by_in[world, row]
    f = ObjectVec()
    f[0] = p[0]
    f[1] = p[1]
    f[2] = p[2]
    f[3] = v[0]
    f[4] = v[1]
    f[5] = v[2]
    f[6] = wp.cos(rel)
    f[7] = wp.sin(rel)
    f[8] = s[0]
    f[9] = s[1]
    f[10] = s[2]
    f[11] = wp.where(lock != 0, 1.0, 0.0)
    f[12] = wp.where(lock == team + 1, 1.0, 0.0)
    return f


@wp.func
def observe_objects(
    first_row: int,
    active: bool,
    world: int,
    a: int,
    origin: wp.vec3,
    yc: float,
    ys: float,
    yaw: float,
    team: int,
    body__alive_in: wp.array2d[wp.int32],
    body__size_in: wp.array2d[wp.vec3],
    body__position_in: wp.array2d[wp.vec3],
    body__rotation_in: wp.array2d[wp.quat],
    body__linear_velocity_in: wp.array2d[wp.vec3],
    body__locked_by_in: wp.array2d[wp.int32],
    agent__visible_in: wp.array3d[wp.int32],
    obs_out: wp.array3d[ObjectVec],
    mask_out: wp.array3d[wp.float32],
):
    """Features and visibility of one kind of object (boxes or ramps: consecutive body rows) for agent ``a``."""
    for i in range(obs_out.shape[2]):
        row = first_row + i
        fo = ObjectVec()
        mask = wp.float32(0.0)
        if active and body__alive_in[world, row] != 0:
            fo = object_features(
                body__size_in,
                body__position_in,
                body__rotation_in,
                body__linear_velocity_in,
                body__locked_by_in,
                world,
                row,
                origin,
                yc,
                ys,
                yaw,
                team,
            )
            mask = float(agent__visible_in[world, a, row])
        obs_out[world, a, i] = fo
        mask_out[world, a, i] = mask


# Column bundles of observe_agents (whole columns, indexed [world, row]).
AgentSenses = ecs.bundle(
    "AgentSenses",
    ["alive", ("body_row", wp.int32), ("team", wp.int32), ("lidar", wp.float32, 1), ("visible", wp.int32, 1)],
)
BodyMotion = ecs.bundle(
    "BodyMotion",
    [
        "alive",
        ("size", wp.vec3),
        ("position", wp.vec3),
        ("rotation", wp.quat),
        ("linear_velocity", wp.vec3),
        ("angular_velocity", wp.vec3),
        ("locked_by", wp.int32),
    ],
)


@wp.func
def observe_agents(
    world: wp.int32,
    # Resources:
    prep_steps: int,
    first_box_row: int,
    first_ramp_row: int,
    # Components in:
    world_episode_step_in: wp.int32,
    agent_in: AgentSenses,
    body_in: BodyMotion,
    # Components out:
    world_self_obs_out: wp.array2d[SelfVec],
    world_agents_obs_out: wp.array3d[AgentVec],
    world_boxes_obs_out: wp.array3d[ObjectVec],
    world_ramps_obs_out: wp.array3d[ObjectVec],
    world_lidar_obs_out: wp.array3d[wp.float32],
    world_agents_mask_out: wp.array3d[wp.float32],
    world_boxes_mask_out: wp.array3d[wp.float32],
    world_ramps_mask_out: wp.array3d[wp.float32],
    world_active_out: wp.array2d[wp.float32],
):
    """Every agent slot's observation, in its heading frame; padded slots and entities read 0 with mask 0."""
    prep_frac = wp.min(float(world_episode_step_in) / float(wp.max(prep_steps, 1)), 1.0)
    for a in range(_NUM_AGENTS):
        active = agent_in.alive[world, a] != 0
        world_active_out[world, a] = wp.where(active, 1.0, 0.0)
        me = agent_in.body_row[world, a]
        team = agent_in.team[world, a]
        x = body_in.position[world, me]
        q = body_in.rotation[world, me]
        yaw = yaw_of(q)
        yc = wp.cos(yaw)
        ys = wp.sin(yaw)
        v = body_in.linear_velocity[world, me]
        sf = SelfVec()
        if active:
            sf[0] = x[0]
            sf[1] = x[1]
            sf[2] = x[2]
            sf[3] = v[0]
            sf[4] = v[1]
            sf[5] = v[2]
            sf[6] = yc
            sf[7] = ys
            sf[8] = body_in.angular_velocity[world, me][2]
            sf[9] = float(team)
            sf[10] = prep_frac
        world_self_obs_out[world, a] = sf
        for k in range(world_lidar_obs_out.shape[2]):
            world_lidar_obs_out[world, a, k] = wp.where(active, agent_in.lidar[world, a, k], 0.0)
        k = wp.int32(0)
        for o in range(_NUM_AGENTS):
            if o != a:
                fa = AgentVec()
                mask = wp.float32(0.0)
                if active and agent_in.alive[world, o] != 0:
                    other = agent_in.body_row[world, o]
                    p = to_frame(yc, ys, body_in.position[world, other] - x)
                    dv = to_frame(yc, ys, body_in.linear_velocity[world, other] - v)
                    fa[0] = p[0]
                    fa[1] = p[1]
                    fa[2] = p[2]
                    fa[3] = dv[0]
                    fa[4] = dv[1]
                    fa[5] = dv[2]
                    fa[6] = float(agent_in.team[world, o])
                    mask = float(agent_in.visible[world, a, other])
                world_agents_obs_out[world, a, k] = fa
                world_agents_mask_out[world, a, k] = mask
                k += 1
        observe_objects(
            first_box_row,
            active,
            world,
            a,
            x,
            yc,
            ys,
            yaw,
            team,
            body_in.alive,
            body_in.size,
            body_in.position,
            body_in.rotation,
            body_in.linear_velocity,
            body_in.locked_by,
            agent_in.visible,
            world_boxes_obs_out,
            world_boxes_mask_out,
        )
        observe_objects(
            first_ramp_row,
            active,
            world,
            a,
            x,
            yc,
            ys,
            yaw,
            team,
            body_in.alive,
            body_in.size,
            body_in.position,
            body_in.rotation,
            body_in.linear_velocity,
            body_in.locked_by,
            agent_in.visible,
            world_ramps_obs_out,
            world_ramps_mask_out,
        )
