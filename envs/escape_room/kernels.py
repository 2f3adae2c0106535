"""Escape-room systems: per-world ``@wp.func`` systems on whole tables (bundles), built on ``systems``:
``place_body`` at reset and ``grab.hold`` for grabbing; physics and sensors are ``systems``' own."""

from __future__ import annotations

import warp as wp

import ecs
from systems.geometry import BOX, PLANE, SPHERE
from systems.grab import GrabJoints, hold
from systems.physics import body_components
from systems.placement import BodyColumns, place_body
from systems.rigid_body import DYNAMIC, STATIC

wp.set_module_options({"enable_backward": False})

NUM_AGENTS = 2
WALL_HEIGHT = 1.0  # m
DOOR_DOWN = -2.0  # m: an open door's centre height, under the floor

# Body rows: 0 floor, 1-3 outer walls, then per door (rooms - 1): wall left of it, wall right of it,
# the door; then one cube per room; then the agents.
Bodies = ecs.bundle("Bodies", ["alive", "generation", *body_components()])
AgentCols = ecs.bundle("AgentCols", ["alive", "generation", ("body_row", wp.int32), ("holding", wp.int32)])
AgentSense = ecs.bundle("AgentSense", [("body_row", wp.int32), ("reach_target", wp.int32)])
AgentHands = ecs.bundle("AgentHands", [("holding", wp.int32)])
Rooms = ecs.resource_bundle(
    "Rooms",
    {
        "num_rooms": int,
        "room_width": float,
        "room_length": float,
        "wall_thickness": float,
        "door_width": float,
        "button_size": float,
        "cube_size": float,
        "agent_radius": float,
        "friction": float,
        "move_force": float,
        "move_damping": float,
    },
)


@wp.func
def door_row(k: int) -> int:
    return 6 + 3 * k


@wp.func
def cube_row(rooms: Rooms, k: int) -> int:
    return 4 + 3 * (rooms.num_rooms - 1) + k


@wp.func
def agent_row(rooms: Rooms, a: int) -> int:
    return 4 + 3 * (rooms.num_rooms - 1) + rooms.num_rooms + a


@wp.func
def put(b: BodyColumns, world: int, row: int, shape: int, half: wp.vec3, at: wp.vec3, response: int, friction: float):
    place_body(b, world, row, shape, half, at, wp.quat_identity(), 1.0, response, friction, 0.0)
    if shape == SPHERE:  # agents never tip or turn: they slide
        b.inv_inertia[world, row] = wp.mat33(0.0)


@wp.func
def wall(b: BodyColumns, world: int, row: int, x0: float, x1: float, y: float, rooms: Rooms):
    """A wall along x from ``x0`` to ``x1`` at ``y``."""
    h = 0.5 * WALL_HEIGHT
    half = wp.vec3(0.5 * (x1 - x0), 0.5 * rooms.wall_thickness, h)
    put(b, world, row, BOX, half, wp.vec3(0.5 * (x0 + x1), y, h), STATIC, rooms.friction)


@wp.func
def reset_rooms(
    world: wp.int32,
    rooms: Rooms,
    world_rng_out: wp.uint32,
    world_door_x_out: wp.array2d[wp.float32],
    world_button_out: wp.array2d[wp.vec2],
    world_best_y_out: wp.array2d[wp.float32],
    body_out: BodyColumns,
    agent_out: AgentCols,
    joint__alive_out: wp.array2d[wp.int32],
):
    """Walls, closed doors at random x, a button and a cube at random in each room, both agents in the first."""
    state = world_rng_out
    t, w, length = rooms.wall_thickness, rooms.room_width, rooms.room_length
    depth = float(rooms.num_rooms) * length
    for row in range(body_out.alive.shape[1]):
        body_out.alive[world, row] = 0
    for j in range(joint__alive_out.shape[1]):
        joint__alive_out[world, j] = 0
    put(body_out, world, 0, PLANE, wp.vec3(0.0), wp.vec3(0.0), STATIC, rooms.friction)
    side = wp.vec3(0.5 * t, 0.5 * depth, 0.5 * WALL_HEIGHT)
    put(body_out, world, 1, BOX, side, wp.vec3(-0.5 * (w + t), 0.5 * depth, 0.5 * WALL_HEIGHT), STATIC, rooms.friction)
    put(body_out, world, 2, BOX, side, wp.vec3(0.5 * (w + t), 0.5 * depth, 0.5 * WALL_HEIGHT), STATIC, rooms.friction)
    wall(body_out, world, 3, -0.5 * w - t, 0.5 * w + t, -0.5 * t, rooms)
    margin = 0.5 * rooms.door_width + 0.3
    for k in range(rooms.num_rooms - 1):
        y = float(k + 1) * length
        dx = wp.randf(state, -0.5 * w + margin, 0.5 * w - margin)
        world_door_x_out[world, k] = dx
        wall(body_out, world, 4 + 3 * k, -0.5 * w, dx - 0.5 * rooms.door_width, y, rooms)
        wall(body_out, world, 5 + 3 * k, dx + 0.5 * rooms.door_width, 0.5 * w, y, rooms)
        wall(body_out, world, door_row(k), dx - 0.5 * rooms.door_width, dx + 0.5 * rooms.door_width, y, rooms)
        # The button lies in the room's near half, the cube in its far half: apart from each other and the agents.
        bx = wp.randf(state, -0.5 * w + rooms.button_size, 0.5 * w - rooms.button_size)
        world_button_out[world, k] = wp.vec2(bx, float(k) * length + 0.25 * length)
    for k in range(rooms.num_rooms):
        half = 0.5 * rooms.cube_size
        cx = wp.randf(state, -0.5 * w + half + 0.2, 0.5 * w - half - 0.2)
        cy = wp.randf(state, float(k) * length + 0.5 * length, float(k + 1) * length - half - 0.3)
        put(body_out, world, cube_row(rooms, k), BOX, wp.vec3(half), wp.vec3(cx, cy, half), DYNAMIC, rooms.friction)
    for a in range(NUM_AGENTS):
        row = agent_row(rooms, a)
        r = rooms.agent_radius
        at = wp.vec3(0.25 * w * (2.0 * float(a) - 1.0), wp.randf(state, r + 0.1, 0.15 * length), r)
        put(body_out, world, row, SPHERE, wp.vec3(r, 0.0, 0.0), at, DYNAMIC, 0.05)
        if agent_out.alive[world, a] == 0:
            agent_out.alive[world, a] = 1
            agent_out.generation[world, a] = agent_out.generation[world, a] + 1
        agent_out.body_row[world, a] = row
        agent_out.holding[world, a] = 0
        world_best_y_out[world, a] = at[1]
    return state


@wp.func
def pressed(body: Bodies, world: int, rooms: Rooms, button: wp.vec2) -> bool:
    """A button is pressed while the centre of an agent or a cube lies on its square."""
    on = wp.int32(0)
    first = cube_row(rooms, 0)
    for row in range(first, first + rooms.num_rooms + NUM_AGENTS):
        p = body.position[world, row]
        if wp.abs(p[0] - button[0]) <= 0.5 * rooms.button_size and wp.abs(p[1] - button[1]) <= 0.5 * rooms.button_size:
            on = 1
    return on != 0


@wp.func
def act_agents(
    world: wp.int32,
    rooms: Rooms,
    world_move_in: wp.array2d[wp.vec2i],
    world_grab_in: wp.array2d[wp.int32],
    world_button_in: wp.array2d[wp.vec2],
    agent_in: AgentSense,
    agent_out: AgentHands,
    body_out: Bodies,
    joint_out: GrabJoints,
    world_door_open_out: wp.array2d[wp.int32],
):
    """Drive forces (bins 0..10 along world x and y, 5 none, with drag), grabs, and doors that follow their buttons."""
    for a in range(NUM_AGENTS):
        me = agent_in.body_row[world, a]
        target = agent_in.reach_target[world, a]
        first = cube_row(rooms, 0)
        if target < first or target >= first + rooms.num_rooms:
            target = -1  # only cubes can be held
        held = agent_out.holding[world, a] != 0
        holding = hold(
            joint_out, world, a, held, world_grab_in[world, a] != 0, me, target, body_out.position, body_out.rotation
        )
        agent_out.holding[world, a] = wp.where(holding, 1, 0)
        m = world_move_in[world, a]
        v = body_out.linear_velocity[world, me]
        f = wp.vec2(float(m[0] - 5), float(m[1] - 5)) * (rooms.move_force / 5.0)
        body_out.force[world, me] = wp.vec3(f[0] - rooms.move_damping * v[0], f[1] - rooms.move_damping * v[1], 0.0)
    for k in range(rooms.num_rooms - 1):
        is_open = pressed(body_out, world, rooms, world_button_in[world, k])
        world_door_open_out[world, k] = wp.where(is_open, 1, 0)
        row = door_row(k)
        p = body_out.position[world, row]
        z = wp.where(is_open, DOOR_DOWN, 0.5 * WALL_HEIGHT)
        body_out.position[world, row] = wp.vec3(p[0], p[1], z)
        body_out.prev_position[world, row] = wp.vec3(p[0], p[1], z)


@wp.func
def reward_progress(
    world: wp.int32,
    rooms: Rooms,
    exit_reward: float,
    agent__body_row_in: wp.array2d[wp.int32],
    body__position_in: wp.array2d[wp.vec3],
    world_best_y_out: wp.array2d[wp.float32],
    world_reward_out: wp.array2d[wp.float32],
    world_terminated_out: wp.bool,
):
    """Each agent earns the metres it reaches beyond its best y so far; leaving the last room ends the episode."""
    out = wp.int32(0)
    depth = float(rooms.num_rooms) * rooms.room_length
    for a in range(NUM_AGENTS):
        y = body__position_in[world, agent__body_row_in[world, a]][1]
        best = world_best_y_out[world, a]
        world_reward_out[world, a] = wp.max(y - best, 0.0)
        world_best_y_out[world, a] = wp.max(y, best)
        if y > depth:
            out = 1
    if out != 0:
        for a in range(NUM_AGENTS):
            world_reward_out[world, a] = world_reward_out[world, a] + exit_reward
    return out != 0


@wp.func
def observe_room(
    world: wp.int32,
    agent__body_row_in: wp.array2d[wp.int32],
    agent__holding_in: wp.array2d[wp.int32],
    agent__lidar_in: wp.array3d[wp.float32],
    body__position_in: wp.array2d[wp.vec3],
    body__linear_velocity_in: wp.array2d[wp.vec3],
    world_door_x_in: wp.array2d[wp.float32],
    world_door_open_in: wp.array2d[wp.int32],
    world_button_in: wp.array2d[wp.vec2],
    room_length: float,
    world_self_obs_out: wp.array3d[wp.float32],
    world_doors_obs_out: wp.array4d[wp.float32],
    world_lidar_obs_out: wp.array3d[wp.float32],
):
    """Per agent: itself, the other agent, every door and button relative to it, and its lidar."""
    for a in range(NUM_AGENTS):
        me = agent__body_row_in[world, a]
        p = body__position_in[world, me]
        v = body__linear_velocity_in[world, me]
        other = body__position_in[world, agent__body_row_in[world, 1 - a]] - p
        own = wp.vector(p[0], p[1], v[0], v[1], float(agent__holding_in[world, a]), other[0], other[1], length=7)
        for i in range(7):
            world_self_obs_out[world, a, i] = own[i]
        for k in range(world_doors_obs_out.shape[2]):
            door = wp.vec2(world_door_x_in[world, k], float(k + 1) * room_length)
            button = world_button_in[world, k]
            row = wp.vector(
                door[0] - p[0],
                door[1] - p[1],
                float(world_door_open_in[world, k]),
                button[0] - p[0],
                button[1] - p[1],
                length=5,
            )
            for i in range(5):
                world_doors_obs_out[world, a, k, i] = row[i]
        for i in range(world_lidar_obs_out.shape[2]):
            world_lidar_obs_out[world, a, i] = agent__lidar_in[world, a, i]
