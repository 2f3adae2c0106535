"""Foraging systems: per-world functions (whole tables indexed by ``world``) for everything that
spawns, despawns or reads other archetypes, per-entity functions for the rest. All are
``@wp.func`` systems, so the engine generates their kernels and fuses the step into one."""

import enum

import warp as wp

import ecs

wp.set_module_options({"enable_backward": False})


class Direction(enum.IntEnum):
    """Values of the ``move`` action. UP is +y, RIGHT is +x."""

    NONE = 0
    UP = 1
    DOWN = 2
    LEFT = 3
    RIGHT = 4


_UP = wp.constant(int(Direction.UP))
_DOWN = wp.constant(int(Direction.DOWN))
_LEFT = wp.constant(int(Direction.LEFT))
_RIGHT = wp.constant(int(Direction.RIGHT))

# Third entry of an ``items`` observation slot: which kind of item it holds (0 pads).
FOOD_FLAG = wp.constant(1.0)
POISON_FLAG = wp.constant(-1.0)


@wp.func
def move_forager(
    world: wp.int32,
    # Resources:
    arena_size: float,
    agent_speed: float,
    # Components in:
    world_move_in: wp.int32,
    forager__alive_in: wp.array2d[wp.int32],
    # Components out:
    forager__position_out: wp.array2d[wp.vec2],
):
    """One step of ``agent_speed`` in the chosen direction; the arena's walls stop the agent."""
    if forager__alive_in[world, 0] == 0:
        return
    p = forager__position_out[world, 0]
    x = p[0]
    y = p[1]
    move = world_move_in
    # Additions only (no multiply), so every backend rounds the same way.
    if move == _UP:
        y = y + agent_speed
    elif move == _DOWN:
        y = y - agent_speed
    elif move == _LEFT:
        x = x - agent_speed
    elif move == _RIGHT:
        x = x + agent_speed
    forager__position_out[world, 0] = wp.vec2(wp.clamp(x, 0.0, arena_size), wp.clamp(y, 0.0, arena_size))


@wp.func
def has_free_row(alive: wp.array2d[wp.int32], world: wp.int32) -> bool:
    for row in range(alive.shape[1]):  # noqa: SIM110 (Warp has no generator expressions)
        if alive[world, row] == 0:
            return True
    return False


# An item archetype's columns that spawning writes (food and poison share them).
Items = ecs.bundle("Items", ["alive", "generation", ("position", wp.vec2), ("age", wp.int32), ("lifetime", wp.int32)])


@wp.func
def place_item(
    strict_capacity: bool,
    at: wp.vec2,
    lifetime: wp.int32,
    world: wp.int32,
    items: Items,
    overflow: wp.array[wp.int32],
):
    # A full table skips the spawn; strict mode spawns anyway so the engine reports the overflow.
    free = has_free_row(items.alive, world)
    if free or strict_capacity:
        row = ecs.spawn(items.alive, items.generation, overflow, world)
        if row >= 0:
            items.position[world, row] = at
            items.age[world, row] = 0
            items.lifetime[world, row] = lifetime


@wp.func
def spawn_items(
    world: wp.int32,
    # Resources:
    arena_size: float,
    food_spawn_prob: float,
    poison_spawn_prob: float,
    food_lifetime: int,
    poison_lifetime: int,
    strict_capacity: bool,
    # Components out:
    world_rng_out: wp.uint32,
    food_out: Items,
    food__overflow_out: wp.array[wp.int32],
    poison_out: Items,
    poison__overflow_out: wp.array[wp.int32],
):
    """At most one food and one poison item per step, at uniform positions in the lowest free rows."""
    state = world_rng_out
    # Six draws every step, whatever is spawned, so the stream never depends on the tables.
    food_roll = wp.randf(state)
    food_at = wp.vec2(wp.randf(state, 0.0, arena_size), wp.randf(state, 0.0, arena_size))
    poison_roll = wp.randf(state)
    poison_at = wp.vec2(wp.randf(state, 0.0, arena_size), wp.randf(state, 0.0, arena_size))
    if food_roll < food_spawn_prob:
        place_item(strict_capacity, food_at, food_lifetime, world, food_out, food__overflow_out)
    if poison_roll < poison_spawn_prob:
        place_item(strict_capacity, poison_at, poison_lifetime, world, poison_out, poison__overflow_out)
    return state


@wp.func
def age_items(
    # Components out:
    age_out: wp.int32,
):
    """Every live item of every archetype holding ``age`` (food and poison) grows one step older."""
    return age_out + 1


@wp.func
def burn_energy(
    # Resources:
    energy_per_step: float,
    # Components out:
    energy_out: float,
):
    """Metabolism: the forager (the only archetype with ``energy``) burns energy every step."""
    return wp.max(energy_out - energy_per_step, 0.0)


@wp.func
def expire_items(
    # Components in:
    age_in: wp.int32,
    lifetime_in: wp.int32,
    # Components out:
    alive_out: wp.int32,
):
    """Despawns items whose age reached their lifetime; runs once per item archetype, per live row."""
    return wp.where(age_in >= lifetime_in, 0, alive_out)


@wp.func
def eat_within_reach(
    alive: wp.array2d[wp.int32],
    position: wp.array2d[wp.vec2],
    agent: wp.vec2,
    reach: float,
    world: wp.int32,
) -> wp.int32:
    eaten = wp.int32(0)
    for row in range(alive.shape[1]):
        if alive[world, row] != 0:
            d = position[world, row] - agent
            if wp.dot(d, d) <= reach * reach:
                ecs.despawn(alive, world, row)
                eaten += 1
    return eaten


# What eating an item does: the forager's reach [m], and the reward and energy of food and poison.
Diet = ecs.resource_bundle(
    "Diet",
    {
        "reach": float,
        "food_reward": float,
        "poison_reward": float,
        "food_energy": float,
        "poison_energy": float,
        "max_energy": float,
    },
)


@wp.func
def eat_items(
    world: wp.int32,
    # Resources:
    diet: Diet,
    # Components in:
    forager__alive_in: wp.array2d[wp.int32],
    forager__position_in: wp.array2d[wp.vec2],
    food__position_in: wp.array2d[wp.vec2],
    poison__position_in: wp.array2d[wp.vec2],
    # Components out:
    food__alive_out: wp.array2d[wp.int32],
    poison__alive_out: wp.array2d[wp.int32],
    forager__energy_out: wp.array2d[wp.float32],
    world_reward_out: wp.float32,
    world_score_out: wp.float32,
    world_items_eaten_out: wp.int32,
):
    """The forager eats every item within ``reach``: food first, then poison, one item at a time."""
    if forager__alive_in[world, 0] == 0:
        return world_reward_out, world_score_out, world_items_eaten_out
    agent = forager__position_in[world, 0]
    food = eat_within_reach(food__alive_out, food__position_in, agent, diet.reach, world)
    poison = eat_within_reach(poison__alive_out, poison__position_in, agent, diet.reach, world)
    energy = forager__energy_out[world, 0]
    reward = wp.float32(0.0)  # typed, so that the loops below may change it
    # One addition per item (no count * value product), so every backend rounds the same way.
    for _ in range(food):
        energy = wp.min(energy + diet.food_energy, diet.max_energy)
        reward = reward + diet.food_reward
    for _ in range(poison):
        energy = wp.max(energy - diet.poison_energy, 0.0)
        reward = reward + diet.poison_reward
    forager__energy_out[world, 0] = energy
    return reward, world_score_out + reward, world_items_eaten_out + food + poison


@wp.func
def judge_forager(
    world: wp.int32,
    # Components in:
    forager__alive_in: wp.array2d[wp.int32],
    forager__energy_in: wp.array2d[wp.float32],
    # Components out:
    world_terminated_out: wp.bool,
):
    """The episode ends when the forager has no energy left."""
    return forager__alive_in[world, 0] != 0 and forager__energy_in[world, 0] <= 0.0


@wp.func
def reset_foraging(
    world: wp.int32,
    # Resources:
    arena_size: float,
    max_energy: float,
    # Components out:
    world_rng_out: wp.uint32,
    world_score_out: wp.float32,
    world_items_eaten_out: wp.int32,
    food__alive_out: wp.array2d[wp.int32],
    poison__alive_out: wp.array2d[wp.int32],
    forager__alive_out: wp.array2d[wp.int32],
    forager__generation_out: wp.array2d[wp.int32],
    forager__overflow_out: wp.array[wp.int32],
    forager__position_out: wp.array2d[wp.vec2],
    forager__energy_out: wp.array2d[wp.float32],
):
    """Empties the item tables and puts the forager, full of energy, at a uniform position (worlds being reset)."""
    for row in range(food__alive_out.shape[1]):
        ecs.despawn(food__alive_out, world, row)
    for row in range(poison__alive_out.shape[1]):
        ecs.despawn(poison__alive_out, world, row)
    state = world_rng_out
    at = wp.vec2(wp.randf(state, 0.0, arena_size), wp.randf(state, 0.0, arena_size))
    row = wp.int32(0)
    # The forager table starts empty; the first reset spawns the forager, which then lives on.
    if forager__alive_out[world, 0] == 0:
        row = ecs.spawn(forager__alive_out, forager__generation_out, forager__overflow_out, world)
    if row >= 0:
        forager__position_out[world, row] = at
        forager__energy_out[world, row] = max_energy
    return state, wp.float32(0.0), wp.int32(0)


@wp.func
def observe_forager(
    world: wp.int32,
    # Components in:
    forager__position_in: wp.array2d[wp.vec2],
    forager__energy_in: wp.array2d[wp.float32],
    # Components out:
    world_agent_out: wp.vec3,
):
    p = forager__position_in[world, 0]
    return wp.vec3(p[0], p[1], forager__energy_in[world, 0])


@wp.func
def list_items(
    items: wp.array2d[wp.vec3],
    alive: wp.array2d[wp.int32],
    position: wp.array2d[wp.vec2],
    agent: wp.vec2,
    flag: float,
    world: wp.int32,
    slot: wp.int32,
) -> wp.int32:
    next_slot = slot
    for row in range(alive.shape[1]):
        if alive[world, row] != 0:
            d = position[world, row] - agent
            items[world, next_slot] = wp.vec3(d[0], d[1], flag)
            next_slot += 1
    return next_slot


@wp.func
def observe_items(
    world: wp.int32,
    # Components in:
    forager__position_in: wp.array2d[wp.vec2],
    food__alive_in: wp.array2d[wp.int32],
    food__position_in: wp.array2d[wp.vec2],
    poison__alive_in: wp.array2d[wp.int32],
    poison__position_in: wp.array2d[wp.vec2],
    # Components out:
    world_items_out: wp.array2d[wp.vec3],
):
    """Live items relative to the forager: food rows, then poison rows, in row order; zeros pad."""
    agent = forager__position_in[world, 0]
    slot = list_items(world_items_out, food__alive_in, food__position_in, agent, FOOD_FLAG, world, 0)
    slot = list_items(world_items_out, poison__alive_in, poison__position_in, agent, POISON_FLAG, world, slot)
    for i in range(slot, world_items_out.shape[1]):
        world_items_out[world, i] = wp.vec3(0.0, 0.0, 0.0)
