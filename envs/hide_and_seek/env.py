"""Hide-and-seek: hiders and seekers with boxes, ramps and walls in a physics world (OpenAI's hide-and-seek,
as ported to a batch simulator by Madrona). Numbers from ``SPEC-hide-and-seek.md``; differences in the README.

Six agent slots per world: hiders first (slots 0..2), then seekers (3..5); a level uses 1..3 of each
and the unused slots are padded (``active`` 0, observations 0, reward 0).

| Action | shape | values |
|---|---|---|
| ``move`` | ``[num_worlds, 6, 3]`` int32 | bins 0..10 for force along world x, force along world y, torque about z; 5 = none; full scale ``move_force`` [N], ``turn_torque`` [N m] against ``move_damping``, ``turn_damping`` (OpenAI's: 8 m/s top speed, 0.6 m per step, 9 rad/s) |
| ``grab`` | ``[num_worlds, 6]`` int32 | 1: hold the reach target (nearest visible box or ramp within ``reach_distance``) with a fixed joint while 1; 0 releases |
| ``lock`` | ``[num_worlds, 6]`` int32 | held: 1 wants locked, 0 unlocked, each box and ramp (ramps only with ``lock_ramps``) the agent saw in its last observation within ``lock_radius`` of its centre; ``lock_type`` decides (OpenAI's, default ``all_lock_team_specific``: locked when some agent wants it and no agent of its locker's team does not, unlocked when one of them does not; a box nobody locked counts as locked by agent 0, a hider; ``toggle``: a 0 -> 1 press on the reach target) |

| Observation | shape | meaning |
|---|---|---|
| ``self`` | ``[num_worlds, 6, 11]`` float32 | position (3) [m], velocity (3) [m/s], cos yaw, sin yaw, yaw rate [rad/s], team (0 hider, 1 seeker), preparation fraction in [0, 1] |
| ``agents`` | ``[num_worlds, 6, 5, 7]`` float32 | the other 5 slots in slot order: position and velocity relative to the agent in its heading frame (3 + 3), team |
| ``boxes`` | ``[num_worlds, 6, max_boxes, 13]`` float32 | relative position (3), velocity (3) in the heading frame, cos and sin of the relative yaw, full size (3) [m], locked, locked by my team |
| ``ramps`` | ``[num_worlds, 6, 2, 13]`` float32 | as ``boxes`` |
| ``lidar`` | ``[num_worlds, 6, lidar_rays]`` float32 | distance to the first hit per ray [m], a miss reads ``lidar_range``; ray k at 2 pi k / n from the heading |
| ``agents_mask``, ``boxes_mask``, ``ramps_mask`` | ``[num_worlds, 6, 5 / max_boxes / 2]`` float32 | 1 where that entity exists, lies in the 135 degree view cone and is not occluded |
| ``active`` | ``[num_worlds, 6]`` float32 | 1 for the slots in use |

| Reward | shape | value |
|---|---|---|
| ``sim.rewards`` | ``[num_worlds, 6]`` float32 | by ``reward_type``: ``joint_zero_sum`` (default) hiders +1 if no seeker sees any hider, else -1, seekers the negation; ``selfish`` a hider -1 if some seeker sees it, else +1, a seeker +1 if it sees some hider, else -1; ``joint_mean`` each agent its team's mean of the selfish rewards. Then ``out_of_bounds_reward`` (-10) for an agent outside the play area (``play_area``, default OpenAI's, 6 m beyond the floor's edges), and for every agent while a box or ramp is outside it with ``penalize_objects_outside``; 0 during preparation and for unused slots |

| Reset | |
|---|---|
| level | the fixed layout (``fixed_*`` fields) when ``fixed_agents`` is not empty, else a procedural level drawn on the device from the world's RNG: outside walls (``outside_wall_height``, 4 m) with probability ``outside_walls_prob``; inner walls (``wall_height``, 0.5 m) by ``scenario``: ``randomwalls`` 1..``max_rooms`` rooms split by walls with doors, ``quadrant`` one room in the (+x, -y) corner whose two walls have a door each, or with probability ``door_dropout_prob`` only one; ``min_boxes``..``max_boxes`` boxes (3..9; ``min_elongated_boxes``..``max_elongated_boxes`` of them elongated; in the quadrant room for ``quadrant``), ``num_ramps`` ramps (2), upright and turning about z only with ``objects_turn_only_about_z``, 1..3 hiders and 1..3 seekers (``quadrant``: seekers outside the room, hiders in it unless ``quadrant_hider_uniform_placement``), teammates within ``team_spawn_radius``, nothing overlapping |
| state | velocities, forces, locks and grabs cleared, every ``locker`` slot 0; episode statistics zeroed, every body's ``start_position`` recorded |

| Termination | |
|---|---|
| terminated | never |
| truncated | ``max_episode_steps`` (240; ``quadrant.yaml`` 80) steps |

| Statistics | shape | value (OpenAI's TrackStatWrapper, computed on the device) |
|---|---|---|
| ``max_box_move``, ``max_ramp_move`` | ``[num_worlds]`` float32 | largest distance of a box (ramp) from where it stood when the episode began [m], at the end of the episode |
| ``num_box_lock``, ``num_ramp_lock`` | ``[num_worlds]`` int32 | boxes (ramps) locked at the end of the episode |
| ``grab_steps`` | ``[num_worlds, 2]`` int32 | agent-steps holding a grab, hiders and seekers |
| the same with ``_prep`` | as above | at the end of the last preparation step (grabs: during preparation) |

Each is a singleton for the running episode (``sim.tensor("world", name)``, 0 after a reset) and a ``final_<name>``
copy written in the step an episode ends, kept through the same-step reset (as ``final_obs``);
``episode_stats(sim)`` returns them, ``ecs.EpisodeStats(sim, extra=FINAL_STATS)`` averages them over episodes.

One step, in phase order: ACT ``act_agents`` (locks, grabs as fixed joints, drive forces and turns; seekers frozen
during preparation; it acts on the visibility and reach targets sensed with the last observation, and draws a new
locker from the world's RNG when several agents lock an object at once); PHYSICS ``find_pairs``;
COLLIDE ``step_bodies``; REWARD ``reward_teams``, ``track_episode_stats``; RESET ``forget_contacts``, ``reset_level``,
``begin_episode_stats``; SENSE ``cast_lidar_rays``,
``observe_visibility_targets``, ``measure_reach``, ``pick_reach_targets``; OBSERVE ``observe_agents``. (With
``wide_sensors`` False, lidar, visibility and reach run as ``cast_lidar``, ``observe_visibility`` and
``find_reach_targets``, a thread per agent; with
``solver_layout`` "block", and on CUDA with the default "auto" below 262,144 worlds, the solver runs as
``step_bodies_block``, 32 lanes per world; with ``solver_staged``, as four kernels a substep,
``solver_<stage>_<substep>``, and ``end_substeps``;
``solver_cache`` keeps what the solver rewrites in a block's shared memory.)
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import warp as wp

import ecs
from systems import physics, raycast, solver
from systems.locking import LockType, Team

from . import kernels
from .kernels import MAX_TEAM, NUM_AGENTS, NUM_RAMPS, RewardType, Scenario

DEFAULT_YAML = os.path.join(os.path.dirname(__file__), "hide_and_seek.yaml")
QUADRANT_YAML = os.path.join(os.path.dirname(__file__), "quadrant.yaml")

# Config strings (OpenAI's names) and the enums the kernels read.
SCENARIOS = {"randomwalls": Scenario.RANDOM_WALLS, "quadrant": Scenario.QUADRANT}
REWARD_TYPES = {
    "joint_zero_sum": RewardType.JOINT_ZERO_SUM,
    "selfish": RewardType.SELFISH,
    "joint_mean": RewardType.JOINT_MEAN,
}
LOCK_TYPES = {
    "toggle": LockType.TOGGLE,
    "any_lock": LockType.ANY_LOCK,
    "all_lock": LockType.ALL_LOCK,
    "any_lock_specific": LockType.ANY_LOCK_SPECIFIC,
    "all_lock_team_specific": LockType.ALL_LOCK_TEAM_SPECIFIC,
}


def pairs_bound(max_walls: int, max_boxes: int) -> int:
    """The most broadphase pairs a world of these rows can have: every two moving bodies (boxes, ramps and
    agents) and every moving body with the floor or a wall (static ones never pair with each other)."""
    moving = max_boxes + NUM_RAMPS + NUM_AGENTS
    return moving * (moving - 1) // 2 + moving * (1 + max_walls)


DEFAULT_ROWS = 256  # pair and contact rows per world of the default config (at most 162 pairs and 124 contacts
# used under sticky play, on a floor of half the side too)
DEFAULT_PAIRS_BOUND = pairs_bound(12, 9)  # 357


# How a user raises the tables' capacities (ecs.Archetype.grow): named by ecs.CapacityError when one fills up.
GROW = {
    "pair": "raise max_pairs in hide-and-seek's config (broadphase pair rows per world)",
    "contact": "raise max_contacts in hide-and-seek's config (contact rows per world)",
}


def _rows_for(max_walls: int, max_boxes: int) -> int:
    """Default pair and contact rows per world (``HideAndSeekConfig.pair_rows``): DEFAULT_ROWS, scaled by the pairs
    that the rows allow (``pairs_bound``) where they allow more than the default's, rounded up to 32."""
    bound = pairs_bound(max_walls, max_boxes)
    if bound <= DEFAULT_PAIRS_BOUND:
        return DEFAULT_ROWS
    return -(-DEFAULT_ROWS * bound // (32 * DEFAULT_PAIRS_BOUND)) * 32


@dataclass(frozen=True)
class HideAndSeekConfig:
    """Hide-and-seek parameters; defaults follow OpenAI's full environment except where the README says."""

    floor_size: float = 6.0  # m, side of the square floor centred on the origin (the play area)
    wall_thickness: float = 0.1  # m (OpenAI's walls: half a cell of its 0.2 m grid)
    wall_height: float = 0.5  # m, inner walls (OpenAI's ``Wall`` default): an agent on a ramp gets over them
    outside_wall_height: float = 4.0  # m, walls around the floor (OpenAI's): nothing gets over them
    door_width: float = 0.7  # m, opening left in each inner wall (OpenAI's 2-cell doors after its walls are trimmed)
    outside_walls_prob: float = 0.5  # probability that a procedural level has walls around the floor
    scenario: str = "randomwalls"  # procedural walls: "randomwalls" (rooms) or "quadrant" (OpenAI's quadrant game)
    max_rooms: int = 4  # rooms of a procedural level, 1..4 ("randomwalls")
    random_room_number: bool = True  # draw 1..max_rooms rooms per reset, else always max_rooms ("randomwalls")
    quadrant_size: float = 0.5  # side of the quadrant room / floor_size, in (0, 1) ("quadrant")
    door_dropout_prob: float = 0.0  # probability that one of the quadrant room's two walls has no door ("quadrant")
    quadrant_hider_uniform_placement: bool = False  # hiders start anywhere, else in the quadrant room ("quadrant")
    min_hiders: int = 1  # 1..3
    max_hiders: int = 3  # min_hiders..3
    min_seekers: int = 1  # 1..3
    max_seekers: int = 3  # min_seekers..3
    min_boxes: int = 3  # boxes per procedural level, >= 0
    max_boxes: int = 9  # also the box capacity (rows and observation slots), >= 1
    min_elongated_boxes: int = 3  # at least this many of the boxes are elongated
    max_elongated_boxes: int | None = None  # at most this many (None: up to all of them)
    num_ramps: int = 2  # ramps of a procedural level, 0..2 (the observation keeps 2 slots)
    lock_ramps: bool = True  # whether agents can lock ramps (boxes always can)
    lock_type: str = "all_lock_team_specific"  # OpenAI's lock rules (held lock action, see the README):
    # "all_lock_team_specific", "all_lock", "any_lock", "any_lock_specific"; or "toggle": a press locks the reach
    # target for the agent's team, or unlocks it if its team locked it
    lock_radius: float = 0.25  # m from an agent's centre to a box or ramp that it can lock (OpenAI's
    # lock_grab_radius); not used by "toggle", which locks the reach target (reach_distance)
    box_size: float = 0.5  # m, edge of a cube box
    elongated_box_scale: tuple[float, float, float] = (3.3, 0.3, 1.0)  # elongated box = box_size * scale
    ramp_size: tuple[float, float, float] = (0.5, 0.5, 0.5)  # m, full extents of a ramp's bounding box (45 degrees)
    agent_radius: float = 0.15  # m
    agent_mass: float = 1.0  # kg
    box_mass: float = 1.0  # kg
    ramp_mass: float = 1.0  # kg
    floor_friction: float = 0.2
    box_friction: float = 0.2
    agent_friction: float = 0.01
    ramp_friction: float = 0.01
    wall_friction: float = 0.01
    objects_turn_only_about_z: bool = True  # boxes and ramps stay upright and turn about z only (OpenAI's
    # box_only_z_rot; its ramps have a z hinge too); False: they tumble freely (agents always turn about z only)
    team_spawn_radius: float = field(default=0.5, metadata=ecs.config_range(low=0.0))  # m, teammates start
    # within this distance of their team's first agent
    placement_clearance: float = 0.05  # m, free gap around every placed object
    max_walls: int = 12  # wall rows per world
    # Rows per world of the broadphase's candidate pairs and of the contact points; None: 256 each up to the default
    # walls and boxes, more in proportion to the pairs that more of them allow (``pair_rows``, ``contact_rows``). A
    # table that fills up stops the step with ecs.CapacityError naming the field
    max_pairs: int | None = None
    max_contacts: int | None = None
    move_force: float = 90.0  # N at bin 0 or 10 (OpenAI's slide motors: gear 100 x action limit 0.9)
    turn_torque: float = 90.0  # N m at bin 0 or 10 (its hinge motor, likewise)
    move_damping: float = 10.0  # N s/m, an agent's drag in x and y (OpenAI's slide-joint damping): top speed
    # (move_force - floor friction) / move_damping, 8 m/s at the defaults (0.6 m per step)
    turn_damping: float = 10.0  # N m s/rad, drag on an agent's yaw rate (its hinge's damping): 9 rad/s at most
    lidar_rays: int = 30
    lidar_range: float = 6.0  # m
    view_cone_degrees: float = 135.0  # full angle of the view cone
    reach_distance: float = 0.25  # m between surfaces, for grab (and lock with lock_type "toggle")
    prep_fraction: float = 0.4  # share of the horizon that is preparation
    reward_type: str = "joint_zero_sum"  # "joint_zero_sum", "selfish" or "joint_mean" (OpenAI's rew_type)
    out_of_bounds_reward: float = -10.0  # an agent's reward for a step it ends outside the play area
    play_area: tuple[float, ...] = (-9.0, -9.0, 9.0, 9.0)  # (x_min, y_min, x_max, y_max) [m]; OpenAI's
    # restrict_rect [-6, -6, 12, 12] on its [0, 6] m floor: 6 m beyond every edge. Empty: the floor square
    penalize_objects_outside: bool = False  # every agent gets out_of_bounds_reward while a box or ramp is outside it
    max_episode_steps: int = 240
    physics_dt: float = 0.075  # s per step (OpenAI's: 15 MuJoCo steps of 5 ms)
    physics_substeps: int = 8  # XPBD substeps per step (0.0094 s each); 4 left held boxes up to 7 cm deep in others
    # Gauss-Seidel passes over the contacts per substep; fewer substeps of more passes cost less but leave bodies
    # deeper inside each other (README, "Substeps and passes": 4 of 4 ran 1.25x as fast as 8 of 2 on CPU)
    contact_passes: int = 2
    # Substeps a box, ramp or agent must end at rest before it sleeps (physics.PhysicsConfig.sleep_substeps: two
    # steps): the solver then holds it still, and its contacts with the floor and walls cost no solve, until
    # something moving touches it or it is pushed, grabbed, unlocked or placed; 0: nothing sleeps
    sleep_substeps: int = 16
    # A pair of sleeping or static bodies keeps its contact rows from the substep before rather than being collided
    # again (physics.PhysicsConfig.keep_resting_contacts): the same rows, the same results; false to compare
    keep_resting_contacts: bool = True
    gravity: float = -50.0  # m/s^2 (OpenAI's)
    wide_sensors: bool = (
        True  # lidar a thread per ray, visibility and reach per target (same results; see raycast.sensor_systems)
    )
    # The solver a thread per world ("world"), 32 lanes per world ("block"), or "auto": "world" on CPU and "block"
    # on CUDA, "world" staged on CUDA from physics.AUTO_WORLD_FROM (262,144) worlds (the same results)
    solver_layout: str = "auto"
    # With solver_layout "auto" on CUDA: a thread per world, staged, from this many worlds on (a block per world below)
    solver_world_from: int = physics.AUTO_WORLD_FROM
    solver_registers: int | None = None  # CUDA: the solver's registers per thread capped (32..255; same results)
    solver_timing: bool = False  # count each solver stage's clock cycles in world.solver_cycles (same results)
    # The solver as four kernels a substep (PhysicsConfig.solver_staged; the same results): true, false or "auto",
    # staged on CUDA and whole on CPU, each where it is faster
    solver_staged: bool | str = "auto"
    # A world's hot solver columns in a block's shared memory (PhysicsConfig.solver_cache): true, false or "auto",
    # on CUDA, wherever the layout is a block's and the bodies fit
    solver_cache: bool | str = "auto"
    solver_fma: bool = True  # false: the solver without fused multiply-adds, every layout bit-identical on CUDA too
    solver_lanes: int = 32  # a block's lanes per world (4, 8, 16, 32); below 32 a CUDA warp holds several worlds
    solver_order: bool = False  # a thread per world's staged solver steps the worlds sorted by work (same results)
    # A fixed layout, used at every reset when fixed_agents is not empty (all in metres and radians):
    fixed_walls: tuple[tuple[float, ...], ...] = ()  # (x0, y0, x1, y1, thickness, height) segments
    fixed_boxes: tuple[tuple[float, ...], ...] = ()  # (x, y, yaw) cubes or (x, y, yaw, size_x, size_y, size_z)
    fixed_ramps: tuple[tuple[float, ...], ...] = ()  # (x, y, yaw); the slope rises towards the ramp's +x
    fixed_agents: tuple[tuple[float, ...], ...] = ()  # (team, x, y, yaw), team 0 hider, 1 seeker

    def __post_init__(self) -> None:
        positive = ("floor_size", "wall_thickness", "wall_height", "outside_wall_height", "door_width", "box_size")
        positive += ("agent_radius",)
        positive += ("agent_mass", "box_mass", "ramp_mass", "lidar_range", "physics_dt", "reach_distance")
        for name in positive:
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {v}")
        for name in ("move_force", "turn_torque", "move_damping", "turn_damping", "placement_clearance", "lock_radius"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v}")
        for name in ("floor_friction", "box_friction", "agent_friction", "ramp_friction", "wall_friction"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v}")
        for lo, hi in (("min_hiders", "max_hiders"), ("min_seekers", "max_seekers")):
            a, b = getattr(self, lo), getattr(self, hi)
            if not 1 <= a <= b <= MAX_TEAM:
                raise ValueError(f"team sizes need 1 <= {lo} <= {hi} <= {MAX_TEAM}, got {lo}={a}, {hi}={b}")
        if not 0 <= self.min_boxes <= self.max_boxes or self.max_boxes < 1:
            raise ValueError(
                f"boxes need 0 <= min_boxes <= max_boxes, max_boxes >= 1; got {self.min_boxes}, {self.max_boxes}"
            )
        if not 1 <= self.max_rooms <= 4:
            raise ValueError(f"max_rooms must be in 1..4, got {self.max_rooms}")
        if not 0.0 <= self.outside_walls_prob <= 1.0 or not 0.0 <= self.prep_fraction < 1.0:
            raise ValueError("outside_walls_prob must be in [0, 1] and prep_fraction in [0, 1)")
        if self.max_walls < 10:
            raise ValueError(
                f"max_walls must be >= 10 (4 outside walls and 3 inner walls with doors), got {self.max_walls}"
            )
        if min(self.lidar_rays, self.physics_substeps, self.contact_passes, self.max_episode_steps) < 1:
            raise ValueError("lidar_rays, physics_substeps, contact_passes and max_episode_steps must be >= 1")
        if isinstance(self.sleep_substeps, bool) or not isinstance(self.sleep_substeps, int) or self.sleep_substeps < 0:
            raise ValueError(f"sleep_substeps must be an int >= 0 (0: nothing sleeps), got {self.sleep_substeps!r}")
        if not isinstance(self.keep_resting_contacts, bool):
            raise ValueError(f"keep_resting_contacts must be true or false, got {self.keep_resting_contacts!r}")
        if self.solver_layout not in physics.SOLVER_LAYOUTS:
            raise ValueError(f"solver_layout must be one of {list(physics.SOLVER_LAYOUTS)}, got {self.solver_layout!r}")
        if physics.solver_registers_problem(self.solver_registers):
            raise ValueError(f"solver_registers {physics.solver_registers_problem(self.solver_registers)}")
        for name in ("solver_timing", "solver_fma", "solver_order"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("solver_staged", "solver_cache"):
            if not (isinstance(getattr(self, name), bool) or getattr(self, name) == "auto"):
                raise ValueError(f"{name} must be true, false or auto, got {getattr(self, name)!r}")
        for name in ("max_pairs", "max_contacts"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(
                    f"{name} must be null (sized from max_walls and max_boxes) or an int >= 1, got {value!r}"
                )
        bodies = self.body_rows
        if self.solver_cache is True and (self.solver_layout == "world" or bodies > solver.CACHE_BODIES):
            raise ValueError(
                f"solver_cache keeps a world's bodies in its block's shared memory: it needs solver_layout 'auto' or "
                f"'block' and at most {solver.CACHE_BODIES} bodies (the floor, max_walls, max_boxes, {NUM_RAMPS} ramps "
                f"and {NUM_AGENTS} agents: {bodies}); got solver_layout={self.solver_layout!r}"
            )
        world_from = self.solver_world_from
        if isinstance(world_from, bool) or not isinstance(world_from, int) or world_from < 1:
            raise ValueError(f"solver_world_from must be an int >= 1 (worlds), got {self.solver_world_from!r}")
        if isinstance(self.solver_lanes, bool) or self.solver_lanes not in solver.LANE_CHOICES:
            raise ValueError(f"solver_lanes must be one of {list(solver.LANE_CHOICES)}, got {self.solver_lanes!r}")
        if self.solver_lanes != solver.SOLVER_LANES and self.solver_cache is True:
            raise ValueError(
                f"solver_cache keeps one world per block: it needs solver_lanes 32, got {self.solver_lanes}"
            )
        if self.solver_timing and self.solver_staged is True:
            raise ValueError("solver_timing counts the stages of one solver kernel: set it or solver_staged, not both")
        if not 0 < self.view_cone_degrees <= 360:
            raise ValueError(f"view_cone_degrees must be in (0, 360], got {self.view_cone_degrees}")
        if any(not (math.isfinite(v) and v > 0) for v in (*self.elongated_box_scale, *self.ramp_size)):
            raise ValueError("elongated_box_scale and ramp_size entries must be finite and > 0")
        self._check_scenario()
        check_layout(self)

    def _check_scenario(self) -> None:
        """The scenario, reward type, play area and the counts that go with them."""
        for name, allowed in (("scenario", SCENARIOS), ("reward_type", REWARD_TYPES), ("lock_type", LOCK_TYPES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {sorted(allowed)}, got {getattr(self, name)!r}")
        if not 0.0 < self.quadrant_size < 1.0:
            raise ValueError(f"quadrant_size must be in (0, 1) (a fraction of floor_size), got {self.quadrant_size}")
        side = self.quadrant_size * self.floor_size
        if self.scenario == "quadrant" and side <= self.door_width + 2 * self.wall_thickness:
            raise ValueError(
                f"the quadrant room's side ({side:g} m = quadrant_size x floor_size) must exceed door_width + 2 x "
                f"wall_thickness ({self.door_width + 2 * self.wall_thickness:g} m) to hold a door"
            )
        if not 0.0 <= self.door_dropout_prob <= 1.0:
            raise ValueError(f"door_dropout_prob must be in [0, 1], got {self.door_dropout_prob}")
        if not 0 <= self.num_ramps <= NUM_RAMPS:
            raise ValueError(f"num_ramps must be in 0..{NUM_RAMPS}, got {self.num_ramps}")
        if self.max_elongated_boxes is not None and not 0 <= self.min_elongated_boxes <= self.max_elongated_boxes:
            raise ValueError(
                "max_elongated_boxes must be None or >= min_elongated_boxes >= 0, got "
                f"{self.min_elongated_boxes}, {self.max_elongated_boxes}"
            )
        if self.play_area:
            if len(self.play_area) != 4 or not all(math.isfinite(v) for v in self.play_area):
                raise ValueError(
                    f"play_area must be empty or 4 finite numbers (x_min, y_min, x_max, y_max), got {self.play_area}"
                )
            x0, y0, x1, y1 = self.play_area
            if not (x0 < x1 and y0 < y1):
                raise ValueError(f"play_area needs x_min < x_max and y_min < y_max, got {self.play_area}")

    @property
    def body_rows(self) -> int:
        """Body rows per world: the floor, the walls, the boxes, the ramps and the agents."""
        return 1 + self.max_walls + self.max_boxes + NUM_RAMPS + NUM_AGENTS

    @property
    def pair_rows(self) -> int:
        """Broadphase pair rows per world: ``max_pairs``, or by default 256 for up to the default's walls and boxes,
        and as many more as the pairs they allow for more (``_rows_for``)."""
        return self.max_pairs if self.max_pairs is not None else _rows_for(self.max_walls, self.max_boxes)

    @property
    def contact_rows(self) -> int:
        """Contact rows per world: ``max_contacts``, or by default as many as the default pair rows."""
        return self.max_contacts if self.max_contacts is not None else _rows_for(self.max_walls, self.max_boxes)

    @property
    def fixed(self) -> bool:
        """Whether every reset uses the fixed layout."""
        return bool(self.fixed_agents)

    @property
    def prep_steps(self) -> int:
        """Steps of the preparation phase (episode steps 1..prep_steps)."""
        return round(self.prep_fraction * self.max_episode_steps)

    @property
    def play_area_bounds(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """((x_min, y_min), (x_max, y_max)) of the play area [m]: ``play_area``, or the floor square."""
        if self.play_area:
            x0, y0, x1, y1 = self.play_area
            return (x0, y0), (x1, y1)
        half = 0.5 * self.floor_size
        return (-half, -half), (half, half)


# -- fixed layouts -----------------------------------------------------------------------------


def _footprints(cfg: HideAndSeekConfig) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, xy corners...) of every fixed object as a convex polygon (its footprint)."""

    def rect(x: float, y: float, yaw: float, hx: float, hy: float) -> np.ndarray:
        c, s = math.cos(yaw), math.sin(yaw)
        local = np.array([[-hx, -hy], [hx, -hy], [hx, hy], [-hx, hy]])
        return local @ np.array([[c, s], [-s, c]]) + np.array([x, y])

    out = []
    for i, w in enumerate(cfg.fixed_walls):
        x0, y0, x1, y1, t, _h = w
        length = math.hypot(x1 - x0, y1 - y0)
        out.append(
            (
                f"fixed_walls[{i}]",
                "wall",
                rect((x0 + x1) / 2, (y0 + y1) / 2, math.atan2(y1 - y0, x1 - x0), length / 2 + t / 2, t / 2),
            )
        )
    for i, b in enumerate(cfg.fixed_boxes):
        sx, sy = (b[3], b[4]) if len(b) == 6 else (cfg.box_size, cfg.box_size)
        out.append((f"fixed_boxes[{i}]", "box", rect(b[0], b[1], b[2], sx / 2, sy / 2)))
    for i, r in enumerate(cfg.fixed_ramps):
        hx, hy = cfg.ramp_size[0] / 2, cfg.ramp_size[1] / 2
        # The wedge's origin is its centroid: the footprint runs from -4/3 hx to 2/3 hx along its x.
        c, s = math.cos(r[2]), math.sin(r[2])
        cx, cy = r[0] - c * hx / 3, r[1] - s * hx / 3
        out.append((f"fixed_ramps[{i}]", "ramp", rect(cx, cy, r[2], hx, hy)))
    for i, a in enumerate(cfg.fixed_agents):
        rr = cfg.agent_radius
        out.append((f"fixed_agents[{i}]", "agent", rect(a[1], a[2], 0.0, rr, rr)))
    return out


def _overlap(p: np.ndarray, q: np.ndarray) -> bool:
    """Separating-axis test of two convex polygons (touching does not count)."""
    for poly in (p, q):
        for k in range(len(poly)):
            e = poly[(k + 1) % len(poly)] - poly[k]
            n = np.array([-e[1], e[0]])
            a, b = p @ n, q @ n
            if a.max() <= b.min() + 1e-9 or b.max() <= a.min() + 1e-9:
                return False
    return True


def check_layout(cfg: HideAndSeekConfig) -> None:
    """Raises ``ValueError`` naming the offending entry of a fixed layout (shape, count, bounds, overlap)."""
    sizes = {"fixed_walls": (6,), "fixed_boxes": (3, 6), "fixed_ramps": (3,), "fixed_agents": (4,)}
    for name, allowed in sizes.items():
        for i, entry in enumerate(getattr(cfg, name)):
            if len(entry) not in allowed or not all(math.isfinite(v) for v in entry):
                raise ValueError(f"{name}[{i}] = {entry}: needs {' or '.join(map(str, allowed))} finite numbers")
    if not cfg.fixed:
        if cfg.fixed_walls or cfg.fixed_boxes or cfg.fixed_ramps:
            raise ValueError("a fixed layout needs fixed_agents (at least one hider and one seeker)")
        return
    if len(cfg.fixed_walls) > cfg.max_walls:
        raise ValueError(f"fixed_walls has {len(cfg.fixed_walls)} walls; the capacity is max_walls = {cfg.max_walls}")
    if len(cfg.fixed_boxes) > cfg.max_boxes:
        raise ValueError(f"fixed_boxes has {len(cfg.fixed_boxes)} boxes; the capacity is max_boxes = {cfg.max_boxes}")
    if len(cfg.fixed_ramps) > NUM_RAMPS:
        raise ValueError(f"fixed_ramps has {len(cfg.fixed_ramps)} ramps; the capacity is {NUM_RAMPS}")
    for i, w in enumerate(cfg.fixed_walls):
        if not (w[4] > 0 and w[5] > 0 and math.hypot(w[2] - w[0], w[3] - w[1]) > 0):
            raise ValueError(f"fixed_walls[{i}] = {w}: needs a length, thickness and height > 0")
    for i, b in enumerate(cfg.fixed_boxes):
        if len(b) == 6 and not min(b[3:]) > 0:
            raise ValueError(f"fixed_boxes[{i}] = {b}: sizes must be > 0")
    for i, a in enumerate(cfg.fixed_agents):
        if a[0] not in (0, 1):
            raise ValueError(f"fixed_agents[{i}] = {a}: team must be 0 (hider) or 1 (seeker)")
    for team, label in ((0, "hiders"), (1, "seekers")):
        n = sum(1 for a in cfg.fixed_agents if a[0] == team)
        if not 1 <= n <= MAX_TEAM:
            raise ValueError(f"fixed_agents has {n} {label}; a team needs 1..{MAX_TEAM} agents")
    feet = _footprints(cfg)
    half = cfg.floor_size / 2
    for name, kind, poly in feet:
        if kind != "wall" and (np.abs(poly) > half + 1e-9).any():
            raise ValueError(f"{name} lies (partly) outside the floor square [-{half}, {half}]^2")
    for i, (name_a, kind_a, pa) in enumerate(feet):
        for name_b, kind_b, pb in feet[i + 1 :]:
            if kind_a == "wall" and kind_b == "wall":
                continue  # walls may meet and cross
            if _overlap(pa, pb):
                raise ValueError(f"{name_a} overlaps {name_b}")


def _layout_params(cfg: HideAndSeekConfig) -> list[ecs.Param]:
    """The fixed layout as per-world parameters read whole by ``reset_level`` (one padding row each)."""
    walls = np.zeros((max(1, len(cfg.fixed_walls)), 6), np.float32)
    for i, w in enumerate(cfg.fixed_walls):
        walls[i] = w
    boxes = np.zeros((max(1, len(cfg.fixed_boxes)), 6), np.float32)
    for i, b in enumerate(cfg.fixed_boxes):
        boxes[i] = b if len(b) == 6 else (*b, cfg.box_size, cfg.box_size, cfg.box_size)
    ramps = np.zeros((max(1, len(cfg.fixed_ramps)), 3), np.float32)
    for i, r in enumerate(cfg.fixed_ramps):
        ramps[i] = r
    agents = np.zeros((max(1, len(cfg.fixed_agents)), 4), np.float32)
    for i, a in enumerate(cfg.fixed_agents):
        agents[i] = a
    return [
        ecs.Param("fixed_walls", kernels.WallVec, walls),
        ecs.Param("fixed_boxes", kernels.BoxVec, boxes),
        ecs.Param("fixed_ramps", wp.vec3, ramps),
        ecs.Param("fixed_agents", wp.vec4, agents),
    ]


# -- components ----------------------------------------------------------------------------------


BodyKind = ecs.Component(
    "kind",
    wp.int32,
    doc="What a body row is: a ``Kind`` (1 floor, 2 wall, 3 box, 4 ramp, 5 hider, 6 seeker; 0 unused).",
)


Locker = ecs.Component(
    "locker",
    wp.int32,
    index_of="agent",
    doc="Agent slot that locked the body last (OpenAI's ``which_locked``): drawn among the agents that lock it, kept "
    "when it is unlocked, 0 (a hider) from every reset, as OpenAI's agent 0 (see ``lock_type`` in the README).",
)


StartPosition = ecs.Component(
    "start_position",
    wp.vec3,
    doc="Where the body was when the episode began [m], written at every reset (the origin of the travel statistics).",
)

_STATS = kernels.STAT_FIELDS
STATS = tuple(name for name, *_ in _STATS)
"""Names of the episode statistics, in ``episode_stats`` order."""
FINAL_STATS = {name: f"final_{name}" for name in STATS}
"""Statistic name -> the singleton holding its value for the last ended episode (``ecs.EpisodeStats(extra=...)``)."""


def _stat_components() -> list[ecs.Component]:
    out = []
    for name, dtype, shape, doc in _STATS:
        out.append(
            ecs.Component(
                name,
                dtype,
                shape=shape,
                singleton=True,
                doc=f"Statistic of the current episode: {doc} (0 until then; while the episode runs, as of the "
                "last step).",
            )
        )
        out.append(
            ecs.Component(
                f"final_{name}",
                dtype,
                shape=shape,
                singleton=True,
                doc=f"Statistic of the last ended episode: {doc}; written in the step the episode ends.",
            )
        )
    return out


def episode_stats(sim: ecs.BatchSim, *, final: bool = True) -> dict[str, Any]:
    """Zero-copy torch views of the episode statistics, computed on the device (no host sync).

    Args:
        sim: a hide-and-seek simulation.
        final: the statistics of each world's last ended episode (written in the step it ended, kept through
            the same-step reset, as ``sim.final_obs``); False: those of the running episode.

    Returns:
        ``{name: tensor}`` for every name in ``STATS``: ``[num_worlds]`` float32 (``max_*_move*``, metres) or int32
        (``num_*_lock*``), ``[num_worlds, 2]`` int32 for ``grab_steps*`` (hiders, seekers). Persistent views: the
        next step overwrites them. 0 in a world that has not ended an episode yet.
    """
    prefix = "final_" if final else ""
    return {name: sim.tensor("world", prefix + name) for name in STATS}


@ecs.component
class Holding:
    """1 while the agent holds its grab joint (joint row = agent slot), else 0."""

    value: wp.int32


@ecs.component
class LockPressed:
    """The agent's lock action of the last step, 0 for a frozen seeker (``lock_type`` "toggle" acts on a 0 -> 1 press)."""

    value: wp.int32


@ecs.component(singleton=True, shape=(NUM_AGENTS,))
class Move:
    """Action: bins 0..10 (5 = none) for force x, force y, torque z per agent slot. Exported ``[num_worlds, 6, 3]`` int32."""

    value: wp.vec3i


@ecs.component(singleton=True, shape=(NUM_AGENTS,))
class Grab:
    """Action: 1 holds the reach target, 0 releases. Exported ``[num_worlds, 6]`` int32."""

    value: wp.int32


@ecs.component(singleton=True, shape=(NUM_AGENTS,))
class Lock:
    """Action: 1 wants the boxes and ramps in lock range locked, 0 unlocked (by ``lock_type``; "toggle": a 0 -> 1
    press locks or unlocks the reach target). Exported ``[num_worlds, 6]`` int32."""

    value: wp.int32


@ecs.component(singleton=True, shape=(NUM_AGENTS,))
class Active:
    """Observation: 1 for agent slots in use. Exported ``[num_worlds, 6]`` float32."""

    value: wp.float32


@ecs.component(singleton=True)
class HidersSeen:
    """1 when some seeker saw some hider on the last step (the reward's test), else 0."""

    value: wp.int32


@ecs.component(singleton=True, shape=(NUM_AGENTS,))
class SelfObs:
    """Observation ``self``: 11 features per agent slot. Exported ``[num_worlds, 6, 11]`` float32."""

    value: kernels.SelfVec


def _obs(name: str, dtype: Any, shape: tuple[int, ...], doc: str) -> ecs.Component:
    return ecs.Component(name, dtype, shape=shape, singleton=True, doc=doc)


def make(config: str | os.PathLike | None = None, **overrides: Any) -> ecs.EnvSpec:
    """The hide-and-seek spec from ``hide_and_seek.yaml`` (or ``config``) and keyword overrides."""
    cfg = ecs.load_config(HideAndSeekConfig, config if config is not None else DEFAULT_YAML, **overrides)
    first_wall_row = 1
    first_box_row = first_wall_row + cfg.max_walls
    first_ramp_row = first_box_row + cfg.max_boxes
    first_agent_row = first_ramp_row + NUM_RAMPS
    max_bodies = cfg.body_rows  # first_agent_row + NUM_AGENTS
    phys = physics.PhysicsConfig(
        physics_dt=cfg.physics_dt,
        physics_substeps=cfg.physics_substeps,
        contact_passes=cfg.contact_passes,
        sleep_substeps=cfg.sleep_substeps,
        keep_resting_contacts=cfg.keep_resting_contacts,
        gravity=cfg.gravity,
        max_bodies=max_bodies,
        max_pairs=cfg.pair_rows,
        max_contacts=cfg.contact_rows,
        max_joints=NUM_AGENTS,
        solver_layout=cfg.solver_layout,
        solver_world_from=cfg.solver_world_from,
        solver_registers=cfg.solver_registers,
        solver_timing=cfg.solver_timing,
        solver_staged=cfg.solver_staged,
        solver_cache=cfg.solver_cache,
        solver_fma=cfg.solver_fma,
        solver_lanes=cfg.solver_lanes,
        solver_order=cfg.solver_order,
    )
    agent = ecs.Archetype(
        "agent",
        (
            raycast.BodyRow,
            Team,
            raycast.ReachTarget,
            Holding,
            LockPressed,
            *raycast.lidar_components(cfg.lidar_rays),
            raycast.visible_component(max_bodies),
            raycast.reach_gap_component(max_bodies),
        ),
        capacity=NUM_AGENTS,
        doc="agent slots: hiders 0..2, seekers 3..5; alive = the slot is in use",
    )
    n, nb = NUM_AGENTS, cfg.max_boxes
    agents_obs = _obs(
        "agents_obs", kernels.AgentVec, (n, n - 1), "Observation ``agents``: the other slots, 7 features."
    )
    boxes_obs = _obs("boxes_obs", kernels.ObjectVec, (n, nb), "Observation ``boxes``: 13 features per box slot.")
    ramps_obs = _obs("ramps_obs", kernels.ObjectVec, (n, NUM_RAMPS), "Observation ``ramps``: 13 features per ramp.")
    lidar_obs = _obs("lidar_obs", wp.float32, (n, cfg.lidar_rays), "Observation ``lidar``: distances [m].")
    agents_mask = _obs("agents_mask", wp.float32, (n, n - 1), "Observation: 1 where the other slot is seen.")
    boxes_mask = _obs("boxes_mask", wp.float32, (n, nb), "Observation: 1 where the box is seen.")
    ramps_mask = _obs("ramps_mask", wp.float32, (n, NUM_RAMPS), "Observation: 1 where the ramp is seen.")
    # Nominal bounds of positions and distances: the play area's farthest corner coordinate, or the lidar's range.
    (x0, y0), (x1, y1) = cfg.play_area_bounds
    span = max(cfg.floor_size, cfg.lidar_range, *(abs(v) for v in (x0, y0, x1, y1))) * 2
    resources = {
        **physics.resources(phys),
        **raycast.default_resources(
            lidar_range=cfg.lidar_range,
            lidar_height=0.0,
            view_half_angle=math.radians(cfg.view_cone_degrees / 2),
            reach_distance=cfg.reach_distance,
        ),
        "prep_steps": cfg.prep_steps,
        "elongated_box_scale": wp.vec3(*cfg.elongated_box_scale),
        "ramp_size": wp.vec3(*cfg.ramp_size),
        "first_wall_row": first_wall_row,
        "first_box_row": first_box_row,
        "first_ramp_row": first_ramp_row,
        "first_agent_row": first_agent_row,
        "fixed_wall_count": len(cfg.fixed_walls),
        "fixed_box_count": len(cfg.fixed_boxes),
        "fixed_ramp_count": len(cfg.fixed_ramps),
        "fixed_agent_count": len(cfg.fixed_agents),
        "scenario_kind": int(SCENARIOS[cfg.scenario]),
        "reward_kind": int(REWARD_TYPES[cfg.reward_type]),
        "lock_kind": int(LOCK_TYPES[cfg.lock_type]),
        "elongated_box_cap": cfg.max_boxes if cfg.max_elongated_boxes is None else cfg.max_elongated_boxes,
        "play_area_lo": wp.vec2(*cfg.play_area_bounds[0]),
        "play_area_hi": wp.vec2(*cfg.play_area_bounds[1]),
    }
    return ecs.EnvSpec(
        name="hide_and_seek",
        config=cfg,
        archetypes=[*physics.archetypes(phys, body_extra=[BodyKind, StartPosition, Locker], grow=GROW), agent],
        singletons=[
            *physics.singletons(),
            Move,
            Grab,
            Lock,
            HidersSeen,
            SelfObs,
            agents_obs,
            boxes_obs,
            ramps_obs,
            lidar_obs,
            agents_mask,
            boxes_mask,
            ramps_mask,
            Active,
            *_stat_components(),
        ],
        systems=[
            ecs.System(kernels.act_agents, ecs.Phase.ACT),
            *physics.systems(phys),
            ecs.System(kernels.reward_teams, ecs.Phase.REWARD),
            ecs.System(kernels.track_episode_stats, ecs.Phase.REWARD),
            # World-local but for the fixed layout, which it reads whole: a chunk of worlds gets a parameter of one
            # row whole (a procedural level's padding), but one of num_worlds rows sliced to its worlds.
            ecs.System(kernels.reset_level, ecs.Phase.RESET, dim="world", world_local=not cfg.fixed),
            ecs.System(kernels.begin_episode_stats, ecs.Phase.RESET),
            *raycast.sensor_systems(wide=cfg.wide_sensors),
            ecs.System(kernels.observe_agents, ecs.Phase.OBSERVE),
        ],
        actions={
            "move": ecs.Action(Move, low=0, high=10),
            "grab": ecs.Action(Grab, low=0, high=1),
            "lock": ecs.Action(Lock, low=0, high=1),
        },
        observations={
            "self": ecs.Observation(SelfObs, low=-span, high=span),
            "agents": ecs.Observation(agents_obs, low=-span, high=span),
            "boxes": ecs.Observation(boxes_obs, low=-span, high=span),
            "ramps": ecs.Observation(ramps_obs, low=-span, high=span),
            "lidar": ecs.Observation(lidar_obs, low=0.0, high=cfg.lidar_range),
            "agents_mask": ecs.Observation(agents_mask, low=0.0, high=1.0),
            "boxes_mask": ecs.Observation(boxes_mask, low=0.0, high=1.0),
            "ramps_mask": ecs.Observation(ramps_mask, low=0.0, high=1.0),
            "active": ecs.Observation(Active, low=0.0, high=1.0),
        },
        num_agents=NUM_AGENTS,
        max_episode_steps=cfg.max_episode_steps,
        params=_layout_params(cfg),
        resources=resources,
    )


def make_quadrant(config: str | os.PathLike | None = None, **overrides: Any) -> ecs.EnvSpec:
    """OpenAI's quadrant game: ``make`` with ``quadrant.yaml`` (or ``config``) and keyword overrides.

    Register it under a name of your own with ``envs.register("hide_and_seek_quadrant",
    "envs.hide_and_seek:make_quadrant")``, or name it directly: ``python -m ecs bench envs.hide_and_seek:make_quadrant``.
    """
    return make(config if config is not None else QUADRANT_YAML, **overrides)
