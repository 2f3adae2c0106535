"""Predator-prey systems, every one a ``@wp.func`` (the step fuses). Slot ``k`` is row ``k`` of ``agent``:
predators first (spawned at reset, never despawned), then prey (despawned when caught, respawned)."""

from __future__ import annotations

import warp as wp

import ecs

wp.set_module_options({"enable_backward": False})

OBS_SELF = 6  # velocity (2), position (2), is prey, alive
OBS_OTHER = 5  # relative position (2), relative velocity (2), present


@wp.func
def step_direction(a: wp.int32) -> wp.vec2:
    """Action 0 none, 1 +x, 2 -x, 3 +y, 4 -y."""
    return wp.vec2(
        wp.where(a == 1, 1.0, 0.0) - wp.where(a == 2, 1.0, 0.0), wp.where(a == 3, 1.0, 0.0) - wp.where(a == 4, 1.0, 0.0)
    )


@wp.func
def move_agent(
    # Resources:
    dt: float,
    damping: float,
    predator_accel: float,
    prey_accel: float,
    predator_max_speed: float,
    prey_max_speed: float,
    agent_radius: float,
    landmark_radius: float,
    num_landmarks: int,
    # Components in:
    row: wp.int32,
    world_move_in: wp.array(dtype=wp.int32),
    world_landmarks_in: wp.array(dtype=wp.vec2),
    prey_in: wp.int32,
    # Components out:
    velocity_out: wp.vec2,
    position_out: wp.vec2,
):
    """MPE's point-mass step: damp, accelerate, clamp the speed, move; then out of the landmarks."""
    accel = wp.where(prey_in != 0, prey_accel, predator_accel)
    top = wp.where(prey_in != 0, prey_max_speed, predator_max_speed)
    v = velocity_out * (1.0 - damping) + step_direction(world_move_in[row]) * accel * dt
    speed = wp.length(v)
    if speed > top:
        v = v * (top / speed)
    p = position_out + v * dt
    for k in range(num_landmarks):
        d = p - world_landmarks_in[k]
        gap = wp.length(d)
        reach = landmark_radius + agent_radius
        if gap < reach and gap > 1.0e-6:
            p = world_landmarks_in[k] + d * (reach / gap)
    return v, p


@wp.func
def catch_prey(
    # Resources:
    num_predators: int,
    agent_radius: float,
    catch_reward: float,
    arena_half: float,
    respawn_delay: int,
    # Components in:
    agent__position_in: wp.array(dtype=wp.vec2),
    # Components out:
    agent__alive_out: wp.array(dtype=wp.int32),
    world_reward_out: wp.array(dtype=wp.float32),
    world_respawn_timer_out: wp.int32,
    world_catches_out: wp.int32,
):
    """Each live prey that touches a predator is despawned: +catch_reward to every predator, -catch_reward to it.

    A prey outside the arena square loses 1 per step (MPE's bound penalty, simplified); the respawn
    timer starts when a prey is caught and no timer runs yet.
    """
    timer = world_respawn_timer_out
    catches = world_catches_out
    for a in range(world_reward_out.shape[0]):
        world_reward_out[a] = 0.0
    for r in range(num_predators, agent__alive_out.shape[0]):
        if agent__alive_out[r] != 0:
            p = agent__position_in[r]
            if wp.abs(p[0]) > arena_half or wp.abs(p[1]) > arena_half:
                world_reward_out[r] = world_reward_out[r] - 1.0
            caught = wp.int32(0)
            for h in range(num_predators):
                if wp.length(agent__position_in[h] - p) < 2.0 * agent_radius:
                    caught = 1
            if caught != 0:
                ecs.despawn_view(agent__alive_out, r)
                world_reward_out[r] = world_reward_out[r] - catch_reward
                for h in range(num_predators):
                    world_reward_out[h] = world_reward_out[h] + catch_reward
                catches += 1
                if timer <= 0:
                    timer = respawn_delay
    return timer, catches


@wp.func
def respawn_prey(
    # Resources:
    num_predators: int,
    num_prey: int,
    arena_half: float,
    respawn_delay: int,
    # Components in:
    world: wp.int32,
    # Components out:
    world_rng_out: wp.uint32,
    world_respawn_timer_out: wp.int32,
    agent__alive_out: wp.array(dtype=wp.int32),
    agent__generation_out: wp.array(dtype=wp.int32),
    agent__overflow_out: wp.array(dtype=wp.int32),
    agent__prey_out: wp.array(dtype=wp.int32),
    agent__position_out: wp.array(dtype=wp.vec2),
    agent__velocity_out: wp.array(dtype=wp.vec2),
):
    """When the timer runs out, one prey spawns in the lowest free row at a random point; the timer
    restarts while fewer than ``num_prey`` prey live."""
    state = world_rng_out
    timer = world_respawn_timer_out
    if timer > 0:
        timer -= 1
        if timer == 0:
            row = ecs.spawn_view(agent__alive_out, agent__generation_out, agent__overflow_out, world)
            if row >= num_predators:
                agent__prey_out[row] = 1
                agent__position_out[row] = wp.vec2(
                    wp.randf(state, -arena_half, arena_half), wp.randf(state, -arena_half, arena_half)
                )
                agent__velocity_out[row] = wp.vec2(0.0, 0.0)
            live = wp.int32(0)
            for r in range(num_predators, agent__alive_out.shape[0]):
                if agent__alive_out[r] != 0:
                    live += 1
            if live < num_prey:
                timer = respawn_delay
    return state, timer


@wp.func
def reset_hunt(
    # Resources:
    num_predators: int,
    num_prey: int,
    num_landmarks: int,
    arena_half: float,
    # Components in:
    world: wp.int32,
    # Components out:
    world_rng_out: wp.uint32,
    world_respawn_timer_out: wp.int32,
    world_catches_out: wp.int32,
    world_landmarks_out: wp.array(dtype=wp.vec2),
    agent__alive_out: wp.array(dtype=wp.int32),
    agent__generation_out: wp.array(dtype=wp.int32),
    agent__overflow_out: wp.array(dtype=wp.int32),
    agent__prey_out: wp.array(dtype=wp.int32),
    agent__position_out: wp.array(dtype=wp.vec2),
    agent__velocity_out: wp.array(dtype=wp.vec2),
):
    """Every row despawned, then predators and prey spawned at uniform points; landmarks placed inside 80 % of the arena."""
    state = world_rng_out
    for r in range(agent__alive_out.shape[0]):
        if agent__alive_out[r] != 0:
            ecs.despawn_view(agent__alive_out, r)
    for k in range(num_predators + num_prey):
        row = ecs.spawn_view(agent__alive_out, agent__generation_out, agent__overflow_out, world)
        agent__prey_out[row] = wp.where(k >= num_predators, 1, 0)
        agent__position_out[row] = wp.vec2(
            wp.randf(state, -arena_half, arena_half), wp.randf(state, -arena_half, arena_half)
        )
        agent__velocity_out[row] = wp.vec2(0.0, 0.0)
    for k in range(world_landmarks_out.shape[0]):
        inner = 0.8 * arena_half
        world_landmarks_out[k] = wp.vec2(0.0, 0.0)
        if k < num_landmarks:
            world_landmarks_out[k] = wp.vec2(wp.randf(state, -inner, inner), wp.randf(state, -inner, inner))
    return state, 0, 0


@wp.func
def observe_hunt(
    # Resources:
    num_landmarks: int,
    # Components in:
    agent__alive_in: wp.array(dtype=wp.int32),
    agent__prey_in: wp.array(dtype=wp.int32),
    agent__position_in: wp.array(dtype=wp.vec2),
    agent__velocity_in: wp.array(dtype=wp.vec2),
    world_landmarks_in: wp.array(dtype=wp.vec2),
    # Components out:
    world_self_obs_out: wp.array(dtype=wp.float32, ndim=2),
    world_landmark_obs_out: wp.array(dtype=wp.float32, ndim=3),
    world_others_obs_out: wp.array(dtype=wp.float32, ndim=3),
    world_active_out: wp.array(dtype=wp.float32),
):
    """Each slot's view: itself, the landmarks and every other slot relative to it; dead slots read 0."""
    n = agent__alive_in.shape[0]
    for a in range(n):
        live = agent__alive_in[a] != 0
        p = agent__position_in[a]
        v = agent__velocity_in[a]
        world_active_out[a] = wp.where(live, 1.0, 0.0)
        own = wp.vector(v[0], v[1], p[0], p[1], float(agent__prey_in[a]), 1.0, length=OBS_SELF)
        for i in range(OBS_SELF):
            world_self_obs_out[a, i] = wp.where(live, own[i], 0.0)
        for k in range(world_landmark_obs_out.shape[1]):
            world_landmark_obs_out[a, k, 0] = 0.0
            world_landmark_obs_out[a, k, 1] = 0.0
            if live and k < num_landmarks:
                d = world_landmarks_in[k] - p
                world_landmark_obs_out[a, k, 0] = d[0]
                world_landmark_obs_out[a, k, 1] = d[1]
        slot = wp.int32(0)
        for b in range(n):
            if b != a:
                for i in range(OBS_OTHER):
                    world_others_obs_out[a, slot, i] = 0.0
                if live and agent__alive_in[b] != 0:
                    d = agent__position_in[b] - p
                    dv = agent__velocity_in[b] - v
                    world_others_obs_out[a, slot, 0] = d[0]
                    world_others_obs_out[a, slot, 1] = d[1]
                    world_others_obs_out[a, slot, 2] = dv[0]
                    world_others_obs_out[a, slot, 3] = dv[1]
                    world_others_obs_out[a, slot, 4] = 1.0
                slot += 1
