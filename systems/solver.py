"""The XPBD rigid-body solver (Mueller et al. 2020, "Detailed Rigid Body Simulation with Extended
Position Based Dynamics"), one thread or one block of lanes per world, ``physics_substeps`` substeps per step.

Each substep of length ``h = physics_dt / physics_substeps``:

1. narrowphase on the step's candidate pairs at the poses the substep starts from, into the
   contact table, with speculative contacts: the margin of a pair grows by how far its bodies
   can move in the substep (speed, spin at the outer radius, gravity and force), so the solve
   below keeps them apart along normals found before they moved and no body passes a thin wall
   within a substep or is pushed out on its far side. A body that another may push along takes
   the pusher's reach less the gap between them (``pass_on_reach``, through chains of bodies):
   a box at rest short of a wall, struck by a faster one, gets a row with the wall. A polyhedron and a static or
   kinematic one keep the face axis their contacts had in the substep before (``pair_hint``,
   ``collision.KEEP_AXIS``), so the axis along which they met stays their normal. With sleeping bodies
   (``sleep_substeps``), a pair of
   bodies held still since the substep before (asleep through it, or static and not moved) copies the rows it
   made then instead (``kept_rows``, ``PhysicsConfig.keep_resting_contacts``): the rows the collision would make;
2. integrate: dynamic bodies get gravity (``gravity`` along world z), external force and torque,
   their own drag (``rigid_body.Drag``, implicit), the gyroscopic term (implicit midpoint in the
   body frame, ``rigid_body.gyroscopic_step``, which keeps the energy and ``|L|`` of a free
   body), damping; then positions advance explicitly and
   orientations by the exact exponential map (the angle ``|w| h`` about ``w``, ``rotate_by``);
   kinematic bodies advance with their own velocities; static and locked bodies stay put;
3. contact position constraints, point by point (after Mueller et al.: each contact point is
   an XPBD constraint with zero compliance; its anchors are the contact points in the two body
   frames). The solve starts warm: each point takes the impulses that the nearest point of its
   pair had in the substep before (``warm_start``; in a step's first substep the step before's last, but for a
   world reset since, which ``forget_contacts`` starts cold), so a body at rest starts where the
   last substep left it and static friction holds from step to step. ``contact_passes`` Gauss-Seidel passes (a
   resource, ``PhysicsConfig.contact_passes``, ``CONTACT_PASSES`` by default) over the world's manifolds, taken from the
   bottom up (by the height of their points, ``order_manifolds``) so that neither the result
   nor a stack's support depends on the order the bodies are listed in; within a
   manifold, a few projected Gauss-Seidel sweeps over its points, linearised about the pair's
   pose, each point's normal correction (accumulated impulse ``lambda_n >= 0``) then its
   friction (the tangential motion of its anchors since the substep began is undone, with an
   accumulated impulse of at most ``mu lambda_n``: static friction holds, sliding is slowed by
   Coulomb friction). The manifolds at one height whose bodies overlap (a level: a cube resting
   on two others, a row of cubes pressed together) are solved by Jacobi steps with mass
   splitting instead, each manifold from the same poses and each body moved by the mean of
   their corrections (``solve_level``), so that the order they are listed in does not push the
   body one way. The last pass propagates shocks: a body resting on another is solved
   against the lower one held still, so a stack ends the substep with every contact satisfied
   and nothing creeps; and (with ``RANKED_PASSES`` passes or more) a level that shares a body goes
   outwards from the bodies it does not move (a wall, a locked box), each manifold solved against
   the body nearer them held still (``rank_level``), so a row pressed into a wall ends the substep
   with every contact satisfied too; a body that a manifold of another level presses against such a
   body, against the push of the level, counts as one of them (``backed``: a box resting against a
   wall, which an agent runs into at a lower height). After the last pass's levels, a body that two
   manifolds push from opposite sides against bodies that do not move (``mark_pinched``: a box between
   a wall's end and a frozen seeker) has those manifolds swept ``PINNED_SWEEPS`` times more, since the
   levels, going by height, gave the last word to one side (``SQUEEZED_SWEEPS`` times where the pushes meet at
   an angle, a wedge it can slide out of: a ramp driven under a wall's edge, which the floor pushes up); and a line of bodies pressed sideways against one that
   does not move, whose contacts lie at different heights, is swept once more outwards from it (``mark_chains``: an
   agent running a plank into a ramp that stands against a plank against a wall); a line pressed from both ends
   (one that bodies which do not move press from each end: a hider squeezed past a frozen seeker into two planks
   against another) has the manifolds of its bodies swept ``SQUEEZED_SWEEPS`` times more, no body held still, as
   further passes would. A ball that two one-point manifolds push from opposite sides against bodies that do not
   move has those two solved together before those sweeps and after them (``solve_pinned_balls``: the least move
   that takes out both overlaps, back at most the way the ball came in the substep), and, jammed so, anchors chains
   against pushes into its wedge: sweeps of one at a time close the overlap of a hider run along a wall into a locked
   box's wedge by only cos^2 of the wedge's angle a sweep. Where no normal impulse can turn
   either body (upright bodies whose tilt is
   locked, resting on a level face), the face's points share its load equally (solved point by
   point, all of it would land on the first, whose friction alone would turn the body). Each
   pass begins with the fixed joints (anchor points together, relative orientation held, zero
   compliance), so the contacts have the last word: a held
   body may lag its holder a little but is never left pressed into a wall or another body,
   whose push-back the next step would turn into speed. A held body pressed from the side against one that does not
   move (a wall, a locked box, a frozen seeker) has its manifolds and its holder's swept ``SQUEEZED_SWEEPS`` times
   more after the last pass's levels, each sweep beginning with its joint (``mark_stopped_holds``): split by inverse
   masses, the joint moved a 0.2 kg ramp five times as far as its 1 kg holder, so each pass pulled the ramp back in
   by most of the holder's lead and two passes left it there (a hider's ramp 72 mm inside a frozen seeker, swung at
   +-50 rad/s substep after substep); the sweeps go on as further passes would, and what stops the ramp stops its
   holder. (Held still in the last pass's joints instead, the ramp's holders moved with no reaction on it, and two
   agents and the cube they held spun up to 69 rad/s.) A body held by a holder that turns about the vertical only
   (an agent) turns about the vertical only while held (``hold_upright``), since the joint leaves it no tilt;
4. velocities from the pose change over the substep, the angular one from the true angle of the
   turn (``rigid_body.rotation_vector``, the inverse of ``rotate_by``; ``substep_angular_velocity``),
   so a spin comes out of the substep at the rate it went in; a body that no constraint turned
   keeps its integrated rate, which float32 rounding of the orientation would otherwise jitter.
   Contact and joint corrections turn bodies with the same map: they are linearised, so the
   first-order map would agree with it to third order in the angle, and one map keeps the turn
   that the velocity recovery inverts the same everywhere;
5. a velocity pass over contacts that pushed: restitution at each manifold's impulse-weighted
   centroid (the normal speed becomes ``-e`` times the approach speed before the solve; zero
   below ``2 |g| h`` to keep resting contacts quiet), and dynamic friction from the part of the
   normal impulse that the position solve's friction has not seen; swept over the manifolds until
   no normal speed changes by more than ``VELOCITY_SETTLED`` (at most ``VELOCITY_SWEEPS`` sweeps), so
   that overlap pushed out in the substep leaves no speed behind along a row of bodies either.

Per substep and contact point the friction impulse is in ``contact_friction``, the normal one in
``contact_impulse``.

Two kernels run this solver, with the same result bit for bit (``PhysicsConfig.solver_layout``):
``step_bodies``, one thread per world, and ``step_bodies_block``, a block of ``SOLVER_LANES`` lanes per
world (a tiled launch). The order of the solve is what lets the lanes share the work without changing
it: within a level, either no body is moved by two manifolds (each manifold is solved on a lane of its
own: hide-and-seek's floor contacts are one such level) or the level is solved by Jacobi steps (each
manifold's corrections on its own lane, from the same poses); the warm start finds every manifold's
impulses on its own; a pair's contacts depend on that pair alone, so the lanes collide a pair each into
stages of their own and copy the rows to where the serial narrowphase puts them (``narrowphase_lanes``);
each manifold's place in the order is the number of manifolds lower than it (``order_manifolds_lanes``);
the velocity pass goes in batches of manifolds that move no body in common (``velocity_batch``), each
manifold of a batch on a lane of its own; the corrections of the warm start and of a Jacobi step are
summed by a lane per body, in the manifolds' order (``apply_warm_lanes``, ``apply_level_lanes``, from the
``ContactMoveA`` ... columns). The lanes also keep and prepare contact rows, integrate bodies and update
velocities side by side, and meet at a block barrier between the stages, after every level and after
every batch. The joints go in batches too (``joint_batch_end``). Lane 0 alone ranks a level's bodies for the last
pass (``rank_level``); its groups of ranks then go like levels of their own. Lane 0 alone finds the pinched bodies,
the chains and the pinned balls after the last pass's levels, and solves a pinned ball's two pushes together. Every
lane walks the levels, and the lanes share each level's check for a body that two of its manifolds move
(``find_levels_lanes``); lane 0 alone ends each batch of the velocity pass. On CPU the lanes run side by side only
with Warp's cooperative CPU blocks (``wp.config.enable_cpu_blocks``, set before the simulation is built), else one
lane per world. Which kernel is faster on a GPU is for measurement (``python -m ecs gpu-report``, stage ``solver``):
the block keeps a world's latency down where few worlds run; a thread per world fills a GPU with worlds.

A staged solver (``PhysicsConfig.solver_staged``) runs either kernel's work as four kernels
every substep (``STAGED``: collide, prepare, solve, velocity; ``step_kernel(stage=...)``, the same source with
the other stages left out) and ``end_substeps``, which marks the contact rows in use once, again with the same
result bit for bit. What one stage leaves to the next is in the tables
and in ``SolverCounts``. A GPU thread of one stage holds only what that stage needs: in the H100 build none
keeps more than 48 B (a block) or 80 B (a thread per world) of local memory where the whole kernels keep 800 B
and 648 B.

With a cache (``PhysicsConfig.solver_cache``, ``step_kernel(cached=True)``), the block's kernels keep a world's
hot columns (``CACHE_COLUMNS``: poses, velocities, the level solve's sums, the contact rows and their impulses) in
a cache of its own while they run: the block's shared memory on CUDA, a heap buffer on CPU. Each launch reads in
every body row and the contact rows in use at its start and writes back, at its end, those and the rows it added,
so the tables hold the same values between launches, and the result is the same bit for bit.
"""

from __future__ import annotations

from typing import Any

import warp as wp

import ecs

from .collision import Contacts, Poses, boxes_apart, boxes_gap, collide, fill_vertices, on_cpu, shape_extent
from .geometry import PLANE, SPHERE, face_normal, is_polyhedron, is_round, num_faces
from .grab import GrabJoints
from .rigid_body import (
    DYNAMIC,
    KINEMATIC,
    STATIC,
    angular_inverse_mass,
    generalized_inverse_mass,
    gyroscopic_step,
    inverse_mass,
    movable,
    rotate_by,
    rotation_vector,
    world_inv_inertia_apply,
)

wp.set_module_options({"enable_backward": False})


# Gauss-Seidel passes over a world's contact manifolds per substep, by default (the ``contact_passes`` resource,
# PhysicsConfig.contact_passes). More passes converge a substep further; in hide-and-seek fewer substeps of more
# passes cost less but leave bodies deeper inside each other (envs/hide_and_seek/README.md, "Substeps and passes").
CONTACT_PASSES = 2
# The step's scalar resources, one parameter of the solver's kernels (``physics.resources`` names each).
StepResources = ecs.resource_bundle(
    "StepResources",
    {
        "physics_dt": float,
        "physics_substeps": int,
        "contact_passes": int,
        "gravity": float,
        "linear_damping": float,
        "angular_damping": float,
        "contact_margin": float,
        "sleep_substeps": int,
        "keep_resting_contacts": int,
    },
)
# Sweeps over one manifold's points in the passes before the last (linearised), every other one in
# reverse order. With two sweeps in one order, what the floor contacts' sweeps left over differed
# between the cubes of a row pressed together from both ends, and 2 or 3 such cubes crept 2-7 mm
# in 2 s; with 8 alternating sweeps they stay within 0.1 mm. 8 sweeps in one order crept an 8-cube
# stack with 2 cm offsets 1.1 mm in 10 s; alternating, offset stacks stay within 0.8 mm. Since the
# solve starts warm (``warm_start``), 4 keep those rows within 0.2 mm and the stacks within 0.15 mm
# (2 or 3 left the 3-cube row 1-10 mm off centre), for a fifth less time per hide-and-seek step than 8.
FIRST_SWEEPS = wp.constant(4)
# Sweeps over one manifold's points in the last (shock-propagation) pass. A box loaded off its
# centre (a stack with offsets) needs about 10 for its points' impulses to balance; with 8 the
# residual turn crept a stack of 8 offset cubes 17 mm in 10 s, with 12 under 0.3 mm.
NORMAL_SWEEPS = wp.constant(12)
MAX_MANIFOLD = wp.constant(16)  # points of a manifold that the solver treats (the narrowphase makes at most 16)
ManifoldRows = wp.types.matrix(shape=(16, 3), dtype=wp.float32)  # a vector per manifold point
ManifoldValues = wp.types.vector(length=16, dtype=wp.float32)  # a number per manifold point
# Jacobi steps over a level whose manifolds share a body (solve_level) in the last pass, one in the passes before; or,
# in any pass, one for each of its manifolds that moves a shared body where there are more (``level_chain``). A Jacobi
# step carries a push one manifold along a row: with 3 steps in the last pass, a row of 5 cubes pressed into a wall at
# 15 g rocked sideways by 18-44 mm.
LEVEL_STEPS = wp.constant(3)
# The last pass solves a level that shares a body outwards from its anchors (``rank_level``): a body's rank is how
# many of the level's manifolds lie between it and a body that the level does not move (a static wall, a locked box,
# the lower body of a stack); the manifolds go in groups by the lower rank of their two bodies, the group touching the
# anchors first, and each holds its lower-ranked body still, as the last pass holds the lower body of a stack. A row
# pressed into a wall then ends the pass with every contact satisfied, where Jacobi steps over the row left it rocking
# (6 boxes pressed by 180 N at hide-and-seek's step flew apart). RANK_FREE: a body that no anchor reaches through the
# level (a row pressed from both ends); such manifolds are solved by Jacobi steps as in the passes before. ALL_MANIFOLDS:
# a level solved whole, not by ranks.
RANK_FREE = wp.constant(1 << 30)
ALL_MANIFOLDS = wp.constant(-1)
# A body that a manifold of another level presses against a body that does not move is an anchor of the level too
# (``backed``), where that manifold's push on it opposes a push of the level on it to within this cosine (60
# degrees): a box resting against a wall, which an agent running into it at a lower height drives towards the wall.
# Levels go by height, so without it the last pass ranked the box above the agent, held the agent still and pushed
# the box into the wall, whose level pushed it back out: the agent ended the substep as deep in the box as it began
# (a wedge of an agent at full speed, a box and two walls ended hide-and-seek steps 2.4 cm deep, the sticky soak
# 2.4 cm too). The same cosine bounds the links of a chain (``mark_chains``) and the opposed pushes of a pinched body
# (``mark_pinched``). At 0.7 (45 degrees) a hider run into the corner of a wall and a plank whose end swung onto it
# pressed the plank into the wall at 56 degrees from its normal, no chain, and ended substeps 44-75 mm inside the
# plank (test_physics_scenes; 63 mm in a soak with 4 substeps), and two soak moments of planks pushed together by
# agents (the quadrant scenario, 0.3 kg boxes) reached 46 and 77 mm where 0.5 holds them to 3.4 and 19 mm.
BACKED_COS = wp.constant(0.5)
# The contact passes a substep needs for its last pass to go by ranks. With one pass, the held-grab stress of
# hide-and-seek (physics_budgets.py, 8 substeps) had 4.4x the contacts deeper than 2 cm with ranks and threw a body
# at 42 m/s: that pass is also the first, and holding bodies still in it leaves their holders' joints and the other
# contacts no pass to share the push in.
RANKED_PASSES = wp.constant(2)
# Sweeps, after the last pass, over the manifolds that hold a pinched body (one that two manifolds push from opposite
# sides against bodies that cannot move, ``mark_pinched``). Levels go by height, so the last pass took the manifolds
# of such a body one level at a time, and the last level's push had the last word: a box that a hider swung into a
# doorway, pinned between the wall's end above and a frozen seeker below, ended steps 4 cm inside the seeker.
PINNED_SWEEPS = wp.constant(4)
# A pinched body whose two opposed pushes meet at more than this cosine's angle from head-on (18 degrees) is wedged:
# it can leave the overlap by sliding out of the wedge, as a ramp that a hider drove into a wall's foot can (its
# slope pushed down by the wall's edge, up by the floor), but Gauss-Seidel sweeps between the two pushes close the
# overlap only by a factor of about the squared cosine of the wedge's angle each; its manifolds are swept
# ``SQUEEZED_SWEEPS`` times (the ramp ended steps 94 mm inside the floor unpinched, 77 mm with ``PINNED_SWEEPS``,
# 40 mm with 16 sweeps, falling to 10 mm a step later), and so are the other manifolds of the wedged body and of the
# bodies it touches (soaked, 9 configs x 3 seeds: 760 world-steps deeper than 20 mm where 858 were). A body pushed
# head-on from both sides is jammed: no motion takes that overlap out, and more sweeps would only pile up its impulses
# (test_physics_analytic's jammed box).
WEDGE_COS = wp.constant(0.95)
# A ball that two single-point manifolds push from opposite sides (within ``BACKED_COS``) against bodies that cannot
# move has those two solved together after the sweeps (``solve_pinned_balls``) where they are this far from head-on
# at least (1 - cos^2 of the angle between the pushes, sin^2 of the wedge's angle: 0.06 degrees): nearer head-on the
# two faces are parallel, and no motion of the ball takes an overlap with both out.
PINNED_PAIR_DET = wp.constant(1.0e-6)
# ``splits.count`` of a ball that ``solve_ball_pair`` found jammed between two bodies that cannot move (scratch once
# ``mark_pinched`` is done), with the direction out of its wedge in ``splits.move``.
JAMMED = wp.constant(-1)
# ``mark_pinched``'s flags in ``splits.count``, above the count of sideways pushes kept (0-2): a support pushes the
# body up, down.
PUSHED_UP = wp.constant(4)
PUSHED_DOWN = wp.constant(8)
# Plain sweeps, after the last pass, over the manifolds of squeezed bodies (``mark_chains``: those of a line pressed
# from both ends), no body held still, as more passes would. Chain sweeps from either end would push such a line's
# bodies into each other's places, and two passes alone left it to converge over steps: a hider squeezed between a
# frozen seeker and the end of two planks resting on another left the planks 68 mm inside each other, the overlap
# growing by 4 mm a substep (a soak with agent_radius 0.3); a held plank levered between a wall's end and a plank
# against a locked one, 71 mm (0.3 kg boxes); a seeker run at 200 N into a plank against a ramp, 138 mm. With these
# sweeps, the same moments (resumed from the same state) reach 0.8, 8.9 and 9.3 mm. test_physics_scenes' squeeze went
# from 35 mm without them to 3.8 mm; pressed dead on along its line, it went from 74 mm to 21 mm with 8 sweeps, 5.6 mm
# with 16 and 5.6 mm with 32.
SQUEEZED_SWEEPS = wp.constant(16)
# Sweeps, after the last pass, along chains of bodies pressed sideways against a body that cannot move (``mark_chains``):
# a sideways manifold's chain rank is how many manifolds lie between it and such a body along the line of its push,
# across levels; where a chain holds two bodies or more that move, sweep ``r`` solves each manifold of rank ``r`` once
# more with the body nearer the anchor held still, so the chain ends the substep with every contact satisfied, as a
# stack does; where other sweeps follow (of pinned, squeezed or stopped bodies), the chains run once more after them.
# Levels go by height, and a line of bodies whose contacts lie at different heights was solved one level at a time,
# the last level's push having the last word: in the soak with ``move_force: 200`` an agent ran a plank it held into a
# ramp standing against a plank against a wall, and the ramp ended the step 84 mm inside that plank (34, 29 and 7 mm
# with 3, 4 and 16 contact passes). Solved in the sweep of its rank alone, a chain was left to the other sweeps after
# it: a seeker's held ramp, stopped from the side, pushed a box on into a hider against a wall in each of those, 56 mm
# deep (a soak with ``floor_size: 3``). Solved in every sweep from its rank on instead, a chain whose far end holds its
# near end (an agent holding a plank against a wall, a box between them) was pushed out by the chain and pulled back
# in by the joint in turn, sweep after sweep, and the plank flew off at 140 m/s. A ball jammed in a wedge between two
# bodies that cannot move (``solve_ball_pair``) anchors a chain too, against a push into the wedge (``pushed_in``).
CHAIN_NONE = wp.constant(1.0e9)  # a rank no chain reaches (``mark_chains``)
# m: manifolds within this height of a level's lowest belong to it: supports at one height, not a
# body touching two things at different heights (a cube at a ramp's foot). At 0.1 mm, the faces of a row of boxes
# pressed into a wall, each box sunk into the floor by a different fraction of a millimetre, fell into levels of one
# manifold each, taken in the order of those depths, which changed from substep to substep: 6 boxes pressed by
# 180 N at hide-and-seek's step flew apart.
LEVEL_GAP = wp.constant(5.0e-3)
# m: a contact point takes the impulses of the point of the substep before whose anchor on either body lies within
# this of its own (``warm_start``): a resting or sliding face keeps its corners, a rolling ball does not.
WARM_RADIUS = wp.constant(2.0e-3)
# m/s^2: a point's warm start is its impulse of the substep before, up to the one that would push its pair apart at
# this acceleration (``warm_start``), and its friction impulse up to the one that would slide the lighter body at it.
# A face's 4 points share a load, so a stack of 30 cubes or a row of cubes pressed into a wall at 30 g stays below it;
# at 72 m/s^2, a row of 5 cubes pressed at 15 g rested 0.16 mm deep instead of touching. Unbounded, the impulses of a
# box jammed between two locked boxes grew every substep (no motion could take the overlap out, so every solve pushed
# anew), and a box unlocked after 3 s of that flew off at 65 m/s.
WARM_LIMIT = wp.constant(150.0)
# Sweeps of the velocity pass over the manifolds at most, and m/s: they stop once one changes no manifold's normal
# speed by more than this. The position solve pushes out overlap that a substep began with, and the speed that gives
# is the velocity pass's to take back; one sweep takes back only part of it along a row of cubes pressed into a wall,
# whose pushes went back and forth from substep to substep (by 11 mm with one contact pass, the solve warm-started
# across steps).
VELOCITY_SWEEPS = wp.constant(8)
VELOCITY_SETTLED = wp.constant(1.0e-4)
# A held body's contact whose normal is this close to horizontal (30 degrees) or closer stops it from the side
# (``stopped_from_the_side``): a wall's, a frozen seeker's; not a ramp's slope, which a held box pushed into it
# climbs, and which, swept, left a tilted cube held by two agents 5.6 mm inside it where it was 2.3.
SIDE_SIN = wp.constant(0.5)
SETTLED = wp.constant(1.0e-7)  # m: a manifold's sweeps stop once the last one moved none of its points more than this
# Last pass: a contact whose normal is this close to vertical (about 32 degrees) holds the lower
# body. At 0.7 a 45-degree ramp's slope fell inside the cone, so a cube pushing up it held the
# ramp still, and the ramp travelled half as far as MuJoCo's.
SHOCK_COS = wp.constant(0.85)
# m: points of a face that no normal impulse turns share its load when they lie within this of its deepest
SHARE_GAP = wp.constant(1.0e-4)
# A ball's contact whose normal lies within acos(FACE_COS) (0.8 degrees) of a face normal of the polyhedron it
# touches presses that face: its normal turns with the polyhedron in the solve (``point_normal``).
FACE_COS = wp.constant(0.9999)
# Sleeping (``sleep_substeps``, PhysicsConfig): a body that has stayed slower than SLEEP_SPEED [m/s] and turned slower
# than SLEEP_SPIN [rad/s] at the end of ``sleep_substeps`` substeps in a row sleeps: the solver holds it still as it
# holds a locked body (its ``motion_lock`` reads SLEEPING), so the contacts between sleeping and static bodies cost
# no solve. It wakes when a body that moves touches it (through a chain of touching sleepers), when a force, torque
# or joint acts on it, or when its pose or velocity is written (``wake_sleepers``).
SLEEPING = wp.constant(-1)
SLEEP_SPEED = wp.constant(0.01)
SLEEP_SPIN = wp.constant(0.05)


@wp.struct
class Bodies:
    """What the solver reads and writes of the body table."""

    alive: wp.array2d[wp.int32]
    mass: wp.array2d[wp.float32]
    inv_inertia: wp.array2d[wp.mat33]
    response: wp.array2d[wp.int32]
    locked_by: wp.array2d[wp.int32]
    friction: wp.array2d[wp.float32]
    restitution: wp.array2d[wp.float32]
    position: wp.array2d[wp.vec3]
    rotation: wp.array2d[wp.quat]
    prev_position: wp.array2d[wp.vec3]
    prev_rotation: wp.array2d[wp.quat]
    linear_velocity: wp.array2d[wp.vec3]
    angular_velocity: wp.array2d[wp.vec3]
    # Whether manifold_corrections keeps each point's arms and turns (the CPU build of step_bodies) or recomputes
    # them (CUDA, where each kept row costs a thread 192 B of local memory; and a struct built outside it).
    keep_rows: bool


@ecs.component
class SplitCount:
    """Solver scratch: how many manifolds of the level being solved move the body (``solve_level``
    splits its mass among them); 0 for a body that no manifold of the level moves."""

    value: wp.int32


@ecs.component
class SplitMove:
    """Solver scratch: the sum of the translations [m], world frame, that the manifolds of the level
    being solved give the body in one Jacobi step (``solve_level``)."""

    value: wp.vec3


@ecs.component
class SplitTurn:
    """Solver scratch: the sum of the rotation vectors [rad], world frame, that the manifolds of the
    level being solved give the body in one Jacobi step (``solve_level``)."""

    value: wp.vec3


@ecs.component(upgrade=ecs.zeros_if_missing)
class SplitRank:
    """Solver scratch: the body's rank in the level being solved by the last pass (``rank_level``): how many of the
    level's manifolds lie between it and an anchor, ``RANK_FREE`` where none is reached. ``rank_level`` writes the
    ranks of a level's bodies before it reads any, so a state saved before the column existed loads it as 0."""

    value: wp.int32


@ecs.component
class SubstepReach:
    """Solver scratch: how far any point of the body can move in the substep [m], for the narrowphase's speculative
    margins: its own motion (``substep_reach``), or more where a body that may push it passes on its reach
    (``pass_on_reach``)."""

    value: wp.float32


@ecs.component
class VelocityBatch:
    """Solver scratch: the first contact row of the velocity pass's batch that last took the body (``velocity_batch``);
    0 when none has yet in the substep."""

    value: wp.int32


@ecs.component(upgrade=ecs.zeros_if_missing)
class SleepCount:
    """Solver state: how many substeps in a row the body has ended slower than ``SLEEP_SPEED`` and ``SLEEP_SPIN``;
    from ``sleep_substeps`` on (PhysicsConfig) it sleeps (``wake_sleepers``), and a substep asleep makes it
    ``sleep_substeps + 1``. A static body's counts the substeps since it was placed or its pose written
    (``place_body`` and ``lock_sleepers`` zero it), up to ``sleep_substeps + 1`` too (``held_still``); 0 for any
    other body that cannot move. A state saved before sleeping loads it as 0: every body starts counting its rest
    then, as one just placed does."""

    value: wp.int32


# What the solver last saw of a body (``BodyBefore``): size x, y, z [m], 4 shape + response, friction.
BodyRecord = wp.types.vector(length=5, dtype=wp.float32)


@ecs.component(upgrade=ecs.zeros_if_missing)
class BodyBefore:
    """Solver state: what holds the body at rest as the solver last saw it at a substep's start (``lock_sleepers``):
    its size [m] (entries 0 to 2), shape and response (entry 3: ``4 shape + response``, a ``geometry.ShapeType``
    and a ``rigid_body.Response``) and friction (entry 4). One written by hand since (not by ``place_body``, which
    starts the count again anyway) starts the body's ``SleepCount`` again: a sleeper wakes, a static body stirs the
    sleepers it touches (a static body made dynamic falls, a cube on a slope made slippery slides), and neither keeps
    the rows of its pairs. Entry 3 below 4 (shape 0) where none was seen yet: a new simulation, or a state saved
    before the column existed, with nothing to compare."""

    value: BodyRecord


@ecs.component(upgrade=ecs.zeros_if_missing)
class MotionLock:
    """Solver scratch: the body's ``locked_by`` as the solver reads it in a substep: ``SLEEPING`` for a sleeping
    body, which the solver then holds still as it holds a locked one (``wake_sleepers``). Written for every body at
    each substep's start before anything reads it, so a state saved before it existed loads it as 0."""

    value: wp.int32


@ecs.component(upgrade=ecs.zeros_if_missing)
class MotionInertia:
    """Solver scratch: the body's inverse inertia (body frame) as the solver reads it in a substep: its own, but for
    a body that a holder which turns about the vertical only (an agent) holds by a fixed joint, which then turns about
    the vertical only too (``hold_upright``). Written for every body at each substep's start before anything
    reads it, so a state saved before it existed loads it as 0."""

    value: wp.mat33


@ecs.component(shape=(8,), upgrade=ecs.zeros_if_missing)
class BodyVertices:
    """Solver scratch: a polyhedron's vertices in the world frame at the substep's start [m] (rows past its
    ``num_vertices`` unused), written once a substep where a GPU thread runs the narrowphase, which reads them for
    every pair the body is in instead of turning each vertex again wherever it needs it (``collision.pose_vertex``;
    the same values). A CPU thread keeps a pair's vertices of its own and leaves this alone. Written before it is
    read, so a state saved before the column existed loads it as 0."""

    value: wp.vec3


@ecs.component(upgrade=ecs.zeros_if_missing)
class PairBefore:
    """Solver scratch: what the pair in this row of the ``pair`` archetype found in the last narrowphase: its two
    bodies (``PairBodyA``, ``PairBodyB``), the first contact row it wrote and how many rows it made (``kept_rows``);
    zeros (bodies 0 and 0, no pair) where it keeps none: a new simulation's, a row the pair list no longer reaches,
    and a state saved before the column existed, which loads with it zeroed and steps on as it would have."""

    value: wp.vec4i


@ecs.component(upgrade=ecs.zeros_if_missing)
class PairMarginBefore:
    """Solver scratch: the speculative margin [m] the pair in this row was collided with in the last narrowphase."""

    value: wp.float32


SCRATCH_COMPONENTS = (
    SplitCount,
    SplitMove,
    SplitTurn,
    SplitRank,
    SubstepReach,
    VelocityBatch,
    BodyVertices,
    MotionLock,
    MotionInertia,
)
# Solver state kept from step to step (checkpointed, compared across layouts).
STATE_COMPONENTS = (SleepCount, BodyBefore)
PAIR_SCRATCH_COMPONENTS = (PairBefore, PairMarginBefore)  # of the ``pair`` archetype

# The stages of a solver substep whose clock cycles a timed solver counts (``step_kernel(timed=True)``), in the
# order of SolverCycles' entries: reach (keeping the substep before's contacts, each body's reach, passed on), narrowphase,
# integrate, order (normal speeds, manifold order, levels), warm_start, joints, levels (the contact passes) and
# velocities (velocity update and velocity pass).
SOLVER_STAGES = ("reach", "narrowphase", "integrate", "order", "warm_start", "joints", "levels", "velocities")
# The kernels of a staged solver, launched in this order every substep: collide
# (reach and narrowphase), prepare (integrate, order, warm start), solve (the contact passes with their joints),
# velocity (velocity update and pass). Each holds one part of the solver, so a GPU thread needs fewer registers
# and spills less than in the whole; the profiler times each launch.
STAGED = ("collide", "prepare", "solve", "velocity")


@ecs.component(singleton=True, shape=(len(SOLVER_STAGES),))
class SolverCycles:
    """Clock cycles a timed solver spent in each of its stages (``SOLVER_STAGES``), summed over the substeps and
    steps since the column was last zeroed, counted by thread (lane) 0 of the world: the GPU's SM clock on CUDA,
    the time-stamp counter on CPU. An untimed solver leaves it alone."""

    value: wp.int64


@ecs.component(singleton=True, shape=(6,), upgrade=ecs.zero_padded)
class SolverCounts:
    """Solver scratch, per world: the contact rows kept from the substep before and the manifolds of this substep,
    which one stage's kernel of a staged solver leaves to the next; and the pairs of the last narrowphase, each of
    whose rows of the ``pair`` archetype holds what it found (``PairBefore``; the rows past them are marked). A
    state saved before the third entry (with none of those records) loads it as 0: no rows to mark. Entries 3 to 5
    serve the ordered solver (``PhysicsConfig.solver_order``, ``order_worlds``), which writes them before it reads
    them: entry 3 of row ``t`` is the world that thread ``t`` steps, entry 4 of row ``w`` world ``w``'s work bucket,
    entry 5 of the first ``ORDER_BUCKETS`` rows the buckets' counts (not per world)."""

    value: wp.int32


# The ordered solver (``PhysicsConfig.solver_order``): the worlds of a thread-per-world kernel sorted by their work, so
# that a warp's 32 threads step worlds of like cost and wait less for their slowest. A world's work is the number of
# its contact rows with a body that moves (not static, locked or asleep), in ORDER_BUCKETS buckets (the last holds
# every count from ORDER_BUCKETS - 1 up), counted before the step: on a CPU thread it correlates 0.90 with the
# solver's cycles in the step, and a warp of 32 worlds in their own order would wait 4.1x the mean world's cycles for
# its slowest, sorted so 1.9x (hide-and-seek, 1,024 worlds, sticky play: examples/benchmarks/world_spread.py). Which
# world a thread steps changes nothing in what it computes.
ORDER_BUCKETS = 64
ORDER_WORLD = 3  # SolverCounts entries: the world a thread steps,
ORDER_BUCKET = 4  # a world's bucket,
ORDER_COUNT = 5  # a bucket's count, then its next free slot


@ecs.component
class ContactLastBodyA:
    """Solver scratch: body A of the contact in this row in the substep before (``warm_start``)."""

    value: wp.int32


@ecs.component
class ContactLastBodyB:
    """Solver scratch: body B of the contact in this row in the substep before."""

    value: wp.int32


@ecs.component
class ContactLastOffsetA:
    """Solver scratch: the contact point on body A, A's frame [m], in the substep before."""

    value: wp.vec3


@ecs.component
class ContactLastOffsetB:
    """Solver scratch: the contact point on body B, B's frame [m], in the substep before."""

    value: wp.vec3


@ecs.component
class ContactLastImpulse:
    """Solver scratch: the contact's normal position impulse [kg m] in the substep before."""

    value: wp.float32


@ecs.component
class ContactLastFriction:
    """Solver scratch: the contact's friction position impulse on body B [kg m], world frame, in the substep before."""

    value: wp.vec3


@ecs.component(upgrade=ecs.zeros_if_missing)
class ContactLastNormal:
    """Solver scratch: the contact's unit normal from body A into body B in the substep before, for the narrowphase
    to keep the axis along which the pair met (``normal_before``); zeros where none is recorded."""

    value: wp.vec3


@ecs.component
class ContactLevel:
    """Solver scratch, by order position like ``ContactOrder``: at the first manifold of a level (``find_levels``),
    twice the order position where the level ends, plus 1 if two of its manifolds move one body."""

    value: wp.int32


@ecs.component
class ContactKey:
    """Solver scratch, at the first row of each manifold: its height (``manifold_height``), from which the lanes of
    ``step_bodies_block`` find its place in ``ContactOrder``."""

    value: wp.float32


@ecs.component
class ContactMoveA:
    """Solver scratch: the translation [m], world frame, that the manifold starting at this row gives body A
    in a Jacobi step of its level or in the warm start, kept until the moves of every manifold are summed
    in their order (so that the lanes of ``step_bodies_block`` can find them side by side)."""

    value: wp.vec3


@ecs.component
class ContactTurnA:
    """Solver scratch: the rotation vector [rad], world frame, that the manifold starting at this row gives
    body A (see ``ContactMoveA``)."""

    value: wp.vec3


@ecs.component
class ContactMoveB:
    """Solver scratch: the translation [m] that the manifold starting at this row gives body B (see ``ContactMoveA``)."""

    value: wp.vec3


@ecs.component
class ContactTurnB:
    """Solver scratch: the rotation vector [rad] that the manifold starting at this row gives body B (see
    ``ContactMoveA``)."""

    value: wp.vec3


CONTACT_SCRATCH_COMPONENTS = (
    ContactLastBodyA,
    ContactLastBodyB,
    ContactLastOffsetA,
    ContactLastOffsetB,
    ContactLastImpulse,
    ContactLastFriction,
    ContactLastNormal,
    ContactLevel,
    ContactKey,
    ContactMoveA,
    ContactTurnA,
    ContactMoveB,
    ContactTurnB,
)


@wp.struct
class Splits:
    """The solver's scratch for moves that are summed before they are applied: per body
    (``SCRATCH_COMPONENTS``) the split count and the sums, per manifold (at its first contact row,
    ``ContactMoveA`` ...) the move it gives each of its bodies."""

    count: wp.array2d[wp.int32]
    move: wp.array2d[wp.vec3]
    turn: wp.array2d[wp.vec3]
    rank: wp.array2d[wp.int32]
    move_a: wp.array2d[wp.vec3]
    turn_a: wp.array2d[wp.vec3]
    move_b: wp.array2d[wp.vec3]
    turn_b: wp.array2d[wp.vec3]


@wp.func
def inv_mass_of(bodies: Bodies, world: int, i: int) -> float:
    return inverse_mass(bodies.mass[world, i], bodies.response[world, i], bodies.locked_by[world, i])


@wp.func
def push(bodies: Bodies, world: int, i: int, inv_m: float, p: wp.vec3, r: wp.vec3):
    """Applies the position impulse ``p`` at offset ``r`` to body ``i``."""
    if inv_m == 0.0:
        return
    q = bodies.rotation[world, i]
    bodies.position[world, i] = bodies.position[world, i] + p * inv_m
    bodies.rotation[world, i] = rotate_by(q, world_inv_inertia_apply(q, bodies.inv_inertia[world, i], wp.cross(r, p)))


@wp.func
def twist(bodies: Bodies, world: int, i: int, inv_m: float, angular: wp.vec3):
    """Applies the angular position impulse ``angular`` to body ``i``."""
    if inv_m == 0.0:
        return
    q = bodies.rotation[world, i]
    bodies.rotation[world, i] = rotate_by(q, world_inv_inertia_apply(q, bodies.inv_inertia[world, i], angular))


@wp.func
def integrate(
    bodies: Bodies,
    world: int,
    i: int,
    h: float,
    gravity: float,
    linear_damping: float,
    angular_damping: float,
    force: wp.vec3,
    torque: wp.vec3,
    drag: wp.vec3,
):
    x = bodies.position[world, i]
    q = bodies.rotation[world, i]
    bodies.prev_position[world, i] = x
    bodies.prev_rotation[world, i] = q
    response = bodies.response[world, i]
    if movable(response, bodies.locked_by[world, i]):
        inv_m = 1.0 / bodies.mass[world, i]
        v = bodies.linear_velocity[world, i] + (wp.vec3(0.0, 0.0, gravity) + force * inv_m) * h
        v = wp.cw_div(v, wp.vec3(1.0, 1.0, 1.0) + drag * (h * inv_m))  # the body's drag, implicit
        v = v * wp.max(0.0, 1.0 - linear_damping * h)
        inv_i = bodies.inv_inertia[world, i]
        w = bodies.angular_velocity[world, i]
        w_body = wp.quat_rotate_inv(q, w)
        w_new = w_body + inv_i * wp.quat_rotate_inv(q, torque) * h
        # A body with a locked axis (singular inverse inertia: agents turn about z only, a held body about the vertical,
        # ``hold_upright``, whose determinant rounding may leave a hair above 0) has no gyroscopic term.
        spread = inv_i[0, 0] + inv_i[1, 1] + inv_i[2, 2]
        if wp.determinant(inv_i) > 1.0e-6 * spread * spread * spread:
            w_new = gyroscopic_step(wp.inverse(inv_i), w_new, h)
        # Only the change goes back to the world frame: quat_rotate scales by |q|^2, which rounding leaves
        # a few 1e-7 off 1, and a free spin would gain that every substep (0.07 % in 10 s at 1/120 s).
        w = (w + wp.quat_rotate(q, w_new - w_body)) * wp.max(0.0, 1.0 - angular_damping * h)
        bodies.linear_velocity[world, i] = v
        bodies.angular_velocity[world, i] = w
        bodies.position[world, i] = x + v * h
        bodies.rotation[world, i] = rotate_by(q, w * h)
    elif response == KINEMATIC and bodies.locked_by[world, i] == 0:
        bodies.position[world, i] = x + bodies.linear_velocity[world, i] * h
        bodies.rotation[world, i] = rotate_by(q, bodies.angular_velocity[world, i] * h)
    else:
        bodies.linear_velocity[world, i] = wp.vec3(0.0, 0.0, 0.0)
        bodies.angular_velocity[world, i] = wp.vec3(0.0, 0.0, 0.0)


@wp.func
def substep_reach(bodies: Bodies, poses: Poses, world: int, i: int, h: float, gravity: float, force: wp.vec3) -> float:
    """How far any point of body ``i`` can move in a substep of ``h``: its speed, its spin at its outer radius, and
    what gravity and its force add (a bound, not the exact path). A ball's spin counts here, though no point of the
    ball moves by it (``collision.spin_arm``, which the step's broadphase uses): the bodies a ball may push take its
    reach on (``pass_on_reach``), and left out, soak moments resumed from one state went deeper, a seeker run into a
    plank 57 mm where it goes 12.5 (4 substeps), a box at 200 N into a wall 82 mm where it goes 69.5."""
    response = bodies.response[world, i]
    locked = bodies.locked_by[world, i]
    if not movable(response, locked) and not (response == KINEMATIC and locked == 0):
        return 0.0
    e = shape_extent(poses.shape[world, i], poses.size[world, i], poses.rotation[world, i])
    speed = wp.length(bodies.linear_velocity[world, i]) + wp.length(bodies.angular_velocity[world, i]) * wp.length(e)
    if movable(response, locked):
        speed += (wp.abs(gravity) + wp.length(force) / bodies.mass[world, i]) * h
    return speed * h


@wp.func
def takes_reach(
    bodies: Bodies,
    force: wp.array2d[wp.vec3],
    torque: wp.array2d[wp.vec3],
    sleep_count: wp.array2d[wp.int32],
    reach: wp.array2d[wp.float32],
    world: int,
    src: int,
    dst: int,
) -> bool:
    """Whether body ``dst`` may take a reach from ``src`` when the two may touch (``pass_on_reach``), ``src``'s being
    the larger: ``dst`` moves in this substep as the solver sees it, or it sleeps and ``src`` would wake it
    (``stirs``, or ``src`` sleeps too and took a reach from a body that wakes it)."""
    if reach[world, src] <= reach[world, dst]:
        return False
    lock = bodies.locked_by[world, dst]
    if movable(bodies.response[world, dst], lock):
        return True
    if lock != SLEEPING:
        return False
    if bodies.locked_by[world, src] == SLEEPING:
        return True
    return stirs(bodies, force, torque, sleep_count, world, src)


@wp.func
def box_gap(poses: Poses, world: int, a: int, b: int) -> float:
    """How far apart the world-axis boxes around bodies ``a`` and ``b`` are at the substep's start poses, along the
    axis that separates them most (negative where they overlap): no point of one is nearer the other than this."""
    ea = shape_extent(poses.shape[world, a], poses.size[world, a], poses.rotation[world, a])
    eb = shape_extent(poses.shape[world, b], poses.size[world, b], poses.rotation[world, b])
    return boxes_gap(poses.position[world, a] - poses.position[world, b], ea, eb)


@wp.func
def moves_now(bodies: Bodies, world: int, i: int) -> bool:
    """Whether body ``i`` moves in this substep as the solver sees it (``bodies.locked_by`` is the motion lock): a
    live dynamic body neither locked nor asleep, or a kinematic one with a velocity."""
    if bodies.alive[world, i] == 0:
        return False
    response = bodies.response[world, i]
    lock = bodies.locked_by[world, i]
    if movable(response, lock):
        return True
    spinning = wp.length_sq(bodies.angular_velocity[world, i]) > 0.0
    return response == KINEMATIC and lock == 0 and (wp.length_sq(bodies.linear_velocity[world, i]) > 0.0 or spinning)


@wp.func
def lock_sleepers(
    bodies: Bodies,
    locked_by: wp.array2d[wp.int32],
    force: wp.array2d[wp.vec3],
    torque: wp.array2d[wp.vec3],
    shape: wp.array2d[wp.int32],
    size: wp.array2d[wp.vec3],
    body_before: wp.array2d[BodyRecord],
    sleep_count: wp.array2d[wp.int32],
    world: int,
    sleep_substeps: int,
    lane: int,
    lanes: int,
):
    """The motion lock of each body of ``lane::lanes`` at a substep's start (``bodies.locked_by``): its
    ``locked_by``, or ``SLEEPING`` where it has been at rest for ``sleep_substeps`` substeps (``SleepCount``) and
    nothing acts on it: no force or torque, and its pose and velocity as the solver left them (a sleeping body
    keeps its pose, its substep's start pose and zero velocity; anything else was written since). A body that
    would sleep but is acted on wakes: its count starts again. A static body's count starts again where its pose was
    written (the solver leaves its substep's start pose equal to its pose): it stirs the sleepers it touches
    (``stirs``). Any body's count starts again where its shape, size, response or friction differs from what the
    solver last saw (``BodyBefore``, updated here)."""
    for i in range(lane, bodies.alive.shape[1], lanes):
        lock = locked_by[world, i]
        counted = sleep_substeps > 0 and bodies.alive[world, i] != 0
        if counted:
            extent = size[world, i]
            seen = BodyRecord(
                extent[0],
                extent[1],
                extent[2],
                float(shape[world, i] * 4 + bodies.response[world, i]),
                bodies.friction[world, i],
            )
            before = body_before[world, i]
            changed = bool(False)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
            for e in range(5):
                if seen[e] != before[e]:
                    changed = True
            if changed:
                if before[3] >= 4.0:  # written since the solver last saw it (below 4: nothing seen yet)
                    sleep_count[world, i] = 0
                body_before[world, i] = seen
        static = counted and bodies.response[world, i] == STATIC
        due = counted and sleep_count[world, i] >= sleep_substeps and movable(bodies.response[world, i], lock)
        if due or static:
            x = bodies.position[world, i]
            x0 = bodies.prev_position[world, i]
            q = bodies.rotation[world, i]
            q0 = bodies.prev_rotation[world, i]
            moved = x[0] != x0[0] or x[1] != x0[1] or x[2] != x0[2]
            turned = q[0] != q0[0] or q[1] != q0[1] or q[2] != q0[2] or q[3] != q0[3]
            acted_on = wp.length_sq(force[world, i]) > 0.0 or wp.length_sq(torque[world, i]) > 0.0
            speed = wp.length_sq(bodies.linear_velocity[world, i]) + wp.length_sq(bodies.angular_velocity[world, i])
            if moved or turned or (due and (acted_on or speed > 0.0)):
                sleep_count[world, i] = 0
            elif due:
                lock = SLEEPING
        bodies.locked_by[world, i] = lock


@wp.func
def turns_about_up_only(inv_inertia: wp.mat33, q: wp.quat) -> bool:
    """Whether a body of body-frame inverse inertia ``inv_inertia`` and rotation ``q`` turns about the vertical (world
    z) only: its world-frame inverse inertia has no entry but the zz one (a hide-and-seek agent's)."""
    r = wp.quat_to_matrix(q)
    w = r * inv_inertia * wp.transpose(r)
    off = wp.float32(0.0)
    for row in range(3):
        for col in range(3):
            if row != 2 or col != 2:
                off = wp.max(off, wp.abs(w[row, col]))
    return w[2, 2] > 0.0 and off <= 1.0e-5 * w[2, 2]


@wp.func
def turns_about_up_at_most(inv_m: float, q: wp.quat, inv_inertia: wp.mat33) -> bool:
    """Whether a body (inverse mass ``inv_m``, rotation ``q``, body-frame inverse inertia ``inv_inertia``) turns about
    the vertical only (``turns_about_up_only``) or not at all."""
    if inv_m == 0.0 or wp.trace(inv_inertia) <= 0.0:  # an inverse inertia is positive semi-definite: 0 then
        return True
    return turns_about_up_only(inv_inertia, q)


@wp.func
def hold_upright(bodies: Bodies, inv_inertia: wp.array2d[wp.mat33], joints: GrabJoints, world: int, i: int):
    """Body ``i``'s inverse inertia (body frame) as the solver reads it this substep (``MotionInertia``): its own
    (``inv_inertia``), but where a fixed joint (a grab) holds it to a holder that turns about the vertical only
    (``turns_about_up_only``: an agent), and it could tilt itself, it turns about the vertical only as well, with its
    moment of inertia about the vertical through its centre, and it keeps only the vertical part of its spin. The
    joint keeps its pose relative to the holder, so it cannot tilt while held: with its own inertia, a contact's
    correction tilted it out of a slope and the joint tilted it back in the next pass, and its contacts, found before
    they moved, never saw the corners that the tilt pushed in (a box held by two hiders against a locked ramp's slope
    stayed 84 mm deep for steps, tumbling boxes allowed)."""
    own = inv_inertia[world, i]
    held = bool(False)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
    if wp.determinant(own) > 0.0:  # it could tilt
        for j in range(joints.alive.shape[1]):
            if joints.alive[world, j] != 0 and joints.joint_body_b[world, j] == i:
                holder = joints.joint_body_a[world, j]
                held = held or turns_about_up_only(inv_inertia[world, holder], bodies.rotation[world, holder])
    if held:
        up = wp.quat_rotate_inv(bodies.rotation[world, i], wp.vec3(0.0, 0.0, 1.0))  # in the body's frame
        own = wp.outer(up, up) / wp.dot(up, wp.inverse(own) * up)
        bodies.angular_velocity[world, i] = wp.vec3(0.0, 0.0, bodies.angular_velocity[world, i][2])
    bodies.inv_inertia[world, i] = own


@wp.func
def held_still(bodies: Bodies, sleep_count: wp.array2d[wp.int32], world: int, i: int, sleep_substeps: int) -> bool:
    """Whether body ``i`` is where it was at the substep before's narrowphase and reaches nothing in this one (its
    ``substep_reach`` 0): asleep through the whole substep before (its count past ``sleep_substeps``, ``count_rest``;
    its pose and velocity not written since, or ``lock_sleepers`` would have woken it), or static and neither
    placed nor moved for as long (``lock_sleepers`` zeroes its count where its pose was written). The narrowphase
    keeps the rows of a pair of such bodies (``kept_rows``)."""
    if sleep_substeps <= 0 or bodies.alive[world, i] == 0 or sleep_count[world, i] <= sleep_substeps:
        return False
    return bodies.locked_by[world, i] == SLEEPING or bodies.response[world, i] == STATIC


@wp.func
def stirs(
    bodies: Bodies,
    force: wp.array2d[wp.vec3],
    torque: wp.array2d[wp.vec3],
    sleep_count: wp.array2d[wp.int32],
    world: int,
    i: int,
) -> bool:
    """Whether body ``i`` wakes the sleepers it touches: it moves in this substep (``moves_now``) and either ended
    the substep before faster than the sleep thresholds (its count is 0), or a force or torque acts on it. An awake
    body at rest does not: a cube resting on a sleeping one then falls asleep in its turn, where waking its support
    every substep would keep the two from ever sleeping together. A static body stirs them in the substep after it
    was placed or its pose written (its count 0: ``place_body``, ``lock_sleepers``): a sleeper resting on a platform
    that was put elsewhere falls."""
    if bodies.response[world, i] == STATIC:
        return bodies.alive[world, i] != 0 and sleep_count[world, i] == 0
    if not moves_now(bodies, world, i):
        return False
    if bodies.response[world, i] == KINEMATIC or sleep_count[world, i] == 0:
        return True
    return wp.length_sq(force[world, i]) > 0.0 or wp.length_sq(torque[world, i]) > 0.0


@wp.func
def wake_sleepers(
    bodies: Bodies,
    locked_by: wp.array2d[wp.int32],
    force: wp.array2d[wp.vec3],
    torque: wp.array2d[wp.vec3],
    sleep_count: wp.array2d[wp.int32],
    c: Contacts,
    last_a: wp.array2d[wp.int32],
    last_b: wp.array2d[wp.int32],
    joints: GrabJoints,
    world: int,
    count: int,
    last_count: int,
    sleep_substeps: int,
):
    """Wakes every sleeping body that a stirring body touches (``stirs``; a contact row of the substep, found with
    the stirring body's reach) or touched in the substep before (rows ``last_a``, ``last_b``: a support moved away
    or removed leaves no row now), that touched a body removed since, or that a joint holds, and so on through
    touching sleepers until none is left to wake: it moves in this substep, its count starts again (so it stirs
    the sleepers it touches in turn). One thread (lane 0 of a block)."""
    if sleep_substeps <= 0:
        return
    woke = bool(True)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
    while woke:
        woke = bool(False)  # noqa: UP018
        for k in range(count + last_count):
            a = wp.int32(0)
            b = wp.int32(0)
            if k < count:
                a = c.body_a[world, k]
                b = c.body_b[world, k]
            else:
                a = last_a[world, k - count]
                b = last_b[world, k - count]
            for side in range(2):
                sleeper = wp.where(side == 0, a, b)
                other = wp.where(side == 0, b, a)
                if bodies.locked_by[world, sleeper] == SLEEPING:  # noqa: SIM102 (stirs reads the other's columns)
                    if bodies.alive[world, other] == 0 or stirs(bodies, force, torque, sleep_count, world, other):
                        bodies.locked_by[world, sleeper] = locked_by[world, sleeper]
                        sleep_count[world, sleeper] = 0
                        woke = True
        for j in range(joints.alive.shape[1]):
            if joints.alive[world, j] != 0:
                for side in range(2):
                    body = wp.where(side == 0, joints.joint_body_a[world, j], joints.joint_body_b[world, j])
                    if bodies.locked_by[world, body] == SLEEPING:
                        bodies.locked_by[world, body] = locked_by[world, body]
                        sleep_count[world, body] = 0
                        woke = True


@wp.func
def count_rest(
    bodies: Bodies,
    locked_by: wp.array2d[wp.int32],
    sleep_count: wp.array2d[wp.int32],
    world: int,
    sleep_substeps: int,
    lane: int,
    lanes: int,
):
    """At a substep's end, for each body of ``lane::lanes`` that moved in it: one more substep at rest where it
    ended slower than ``SLEEP_SPEED`` and ``SLEEP_SPIN``, else none; at ``sleep_substeps`` it falls asleep, its
    velocity zero and its substep's start pose its pose (``lock_sleepers``). A sleeper and a static body count on to
    ``sleep_substeps + 1`` (``held_still``); any other body that cannot move has no count."""
    if sleep_substeps <= 0:
        return
    for i in range(lane, bodies.alive.shape[1], lanes):
        n = wp.int32(0)
        alive = bodies.alive[world, i] != 0
        if alive and (bodies.locked_by[world, i] == SLEEPING or bodies.response[world, i] == STATIC):
            n = wp.min(sleep_count[world, i] + 1, sleep_substeps + 1)
        elif alive and movable(bodies.response[world, i], locked_by[world, i]):
            slow = wp.length(bodies.linear_velocity[world, i]) < SLEEP_SPEED
            if slow and wp.length(bodies.angular_velocity[world, i]) < SLEEP_SPIN:
                n = sleep_count[world, i] + 1
            if n >= sleep_substeps:
                bodies.linear_velocity[world, i] = wp.vec3(0.0, 0.0, 0.0)
                bodies.angular_velocity[world, i] = wp.vec3(0.0, 0.0, 0.0)
                bodies.prev_position[world, i] = bodies.position[world, i]
                bodies.prev_rotation[world, i] = bodies.rotation[world, i]
        sleep_count[world, i] = n


@wp.func
def round_radius(poses: Poses, world: int, i: int) -> float:
    """Radius of a sphere or capsule about its core; 0 for other shapes."""
    return wp.where(is_round(poses.shape[world, i]), poses.size[world, i][0], 0.0)


@wp.func
def substep_angular_velocity(q_prev: wp.quat, q: wp.quat, w_integrated: wp.vec3, h: float) -> wp.vec3:
    """World-frame angular velocity of a body that a substep of ``h`` turned from ``q_prev`` to ``q``.

    The rotation vector of the turn (its true angle, the short way round) over ``h``. A body that no
    constraint turned keeps the rate ``integrate`` gave it: read back from the float32 orientation,
    the rate would pick up the rounding of the turn, about 1e-7 rad a substep, and a slow spin would
    random-walk (0.5 rad/s loses or gains a few % of its energy in 10 s at 16 substeps).
    """
    # Bit for bit what integrate wrote (should a compiler round the two differently, the turn is read back).
    q_free = rotate_by(q_prev, w_integrated * h)
    if wp.length_sq(q - q_free) == 0.0:
        return w_integrated
    return rotation_vector(q * wp.quat_inverse(q_prev)) / h


@wp.func
def point_velocity(bodies: Bodies, world: int, i: int, r: wp.vec3) -> wp.vec3:
    return bodies.linear_velocity[world, i] + wp.cross(bodies.angular_velocity[world, i], r)


@wp.func
def manifold_end(c: Contacts, world: int, start: int, count: int) -> int:
    """End of the run of contacts that share the bodies of contact ``start`` (one pair's manifold)."""
    a = c.body_a[world, start]
    b = c.body_b[world, start]
    e = start + 1
    while e < count and c.body_a[world, e] == a and c.body_b[world, e] == b:
        e += 1
    return e


@wp.func
def same_pair(c: Contacts, world: int, j: int, k: int) -> bool:
    """Whether contact rows ``j`` and ``k`` belong to one pair."""
    return c.body_a[world, j] == c.body_a[world, k] and c.body_b[world, j] == c.body_b[world, k]


@wp.func
def velocity_batch(bodies: Bodies, c: Contacts, batch: wp.array2d[wp.int32], world: int, start: int, count: int) -> int:
    """End of the velocity pass's batch of manifolds from contact row ``start``: the manifolds that follow it while
    none moves a body that an earlier one of the batch moves (static, kinematic and locked bodies are not moved).
    Solved side by side, they give what solving them in row order gives. Marks each body the batch moves in
    ``batch`` (``start + 1``)."""
    tag = start + 1
    k = start
    while k < count:
        a = c.body_a[world, k]
        b = c.body_b[world, k]
        moves_a = inv_mass_of(bodies, world, a) > 0.0
        moves_b = inv_mass_of(bodies, world, b) > 0.0
        if (moves_a and batch[world, a] == tag) or (moves_b and batch[world, b] == tag):
            return k
        if moves_a:
            batch[world, a] = tag
        if moves_b:
            batch[world, b] = tag
        k = manifold_end(c, world, k, count)
    return count


@wp.func
def manifold_height(bodies: Bodies, c: Contacts, world: int, start: int, end: int, gravity: float) -> float:
    """Where ``order_manifolds`` puts the manifold of rows ``start`` to ``end``: the middle of its points' heights
    along the up axis."""
    up = wp.where(gravity > 0.0, -1.0, 1.0)
    a = c.body_a[world, start]
    xa = bodies.position[world, a]
    qa = bodies.rotation[world, a]
    lowest = up * (xa + wp.quat_rotate(qa, c.offset_a[world, start]))[2]
    highest = lowest
    for p in range(start + 1, end):
        z = up * (xa + wp.quat_rotate(qa, c.offset_a[world, p]))[2]
        lowest = wp.min(lowest, z)
        highest = wp.max(highest, z)
    return 0.5 * (lowest + highest)


@wp.func
def lower(key_j: float, j: int, key_k: float, k: int) -> bool:
    """Whether manifold ``j`` (its height and first row) comes before manifold ``k`` in ``order_manifolds``'s order:
    the lower first, at one height the first found. A NaN height (a world gone wrong) comes after every number, so
    the order is still a permutation."""
    nan_j = wp.isnan(key_j)
    nan_k = wp.isnan(key_k)
    if nan_j or nan_k:
        return (nan_k and not nan_j) or (nan_j and nan_k and j < k)
    return key_j < key_k or (key_j == key_k and j < k)


@wp.func
def order_manifolds_lanes(
    bodies: Bodies,
    c: Contacts,
    order: wp.array2d[wp.int32],
    height: wp.array2d[wp.float32],
    key: wp.array2d[wp.float32],
    first_row: wp.array2d[wp.int32],
    world: int,
    count: int,
    gravity: float,
    lane: int,
    lanes: int,
) -> int:
    """``order_manifolds`` on the block's lanes, with the same order bit for bit (NaN heights aside): each lane finds
    the heights of the manifolds that start in its rows (``key``, ``first_row`` marks the first rows), then the place
    of each among all (how many come before it, ``lower``). Returns how many manifolds there are, on every lane."""
    for k in range(lane, count, lanes):
        starts = k == 0 or not same_pair(c, world, k - 1, k)
        first_row[world, k] = wp.where(starts, 1, 0)
        if starts:
            key[world, k] = manifold_height(bodies, c, world, k, manifold_end(c, world, k, count), gravity)
    block_sync(lanes)
    manifolds = wp.int32(0)
    for k in range(lane, count, lanes):
        if first_row[world, k] != 0:
            key_k = key[world, k]
            place = wp.int32(0)
            manifolds = wp.int32(0)
            for j in range(count):
                if first_row[world, j] != 0:
                    manifolds += 1
                    if lower(key[world, j], j, key_k, k):
                        place += 1
            order[world, place] = k
            height[world, place] = key_k
    return block_share(manifolds, lanes)  # lane 0 holds row 0, the first manifold's


@wp.func
def order_manifolds(
    bodies: Bodies,
    c: Contacts,
    order: wp.array2d[wp.int32],
    height: wp.array2d[wp.float32],
    world: int,
    count: int,
    gravity: float,
) -> int:
    """Lists the world's manifolds from the bottom up (by the middle of the heights of their points
    along the up axis, ``-sign(gravity)`` z; z without gravity) in ``order``; returns how many there are.

    The contact passes treat them in this order, whatever order the bodies are listed in: a stack
    is solved from the ground up, so the last pass's shock propagation (the lower body held) fixes
    each level on a level already fixed. Manifolds at the same height keep the narrowphase order
    (insertion sort is stable). The middle of the range, not the mean: the faces of a row of cubes
    pressed together touch over the same heights, but their manifolds have 4 to 8 points as the
    faces turn a little, and the means of such manifolds would fall in different levels.
    """
    m = wp.int32(0)
    k = wp.int32(0)
    while k < count:
        e = manifold_end(c, world, k, count)
        key = manifold_height(bodies, c, world, k, e, gravity)
        j = m
        while j > 0:
            if height[world, j - 1] <= key:
                break
            order[world, j] = order[world, j - 1]
            height[world, j] = height[world, j - 1]
            j -= 1
        order[world, j] = k
        height[world, j] = key
        m += 1
        k = e
    return m


@wp.func
def level_shares_a_body(
    bodies: Bodies, c: Contacts, order: wp.array2d[wp.int32], world: int, first: int, last: int, lane: int, lanes: int
) -> bool:
    """Whether a manifold of ``order[first + lane:last:lanes]`` moves a body (static and locked ones do not move) that
    a manifold after it in ``order[:last]`` moves: over the block's lanes, whether two manifolds of the level do."""
    for m in range(first + lane, last, lanes):
        k = order[world, m]
        for other in range(m + 1, last):
            j = order[world, other]
            for side in range(2):
                body = wp.where(side == 0, c.body_a[world, k], c.body_b[world, k])
                shared = body == c.body_a[world, j] or body == c.body_b[world, j]
                if shared and inv_mass_of(bodies, world, body) > 0.0:
                    return True
    return False


@wp.func
def next_level(
    bodies: Bodies,
    c: Contacts,
    order: wp.array2d[wp.int32],
    height: wp.array2d[wp.float32],
    world: int,
    first: int,
    manifolds: int,
    lane: int,
    lanes: int,
):
    """The level that starts at ``order[first]``: the end of the manifolds within ``LEVEL_GAP`` of its
    height, and whether two of them move one body (it is then solved by Jacobi steps, ``solve_level``; on lane
    ``lane`` of ``lanes``, whether its share of the manifolds does, ``level_shares_a_body``)."""
    end = first + 1
    while end < manifolds:
        if height[world, end] - height[world, first] > LEVEL_GAP:
            break
        end += 1
    shared = bool(False)  # noqa: UP018 (Warp: a variable changed in a branch must be declared dynamic)
    if end - first > 1:
        shared = level_shares_a_body(bodies, c, order, world, first, end, lane, lanes)
    return end, shared


@wp.func
def find_levels(
    bodies: Bodies,
    c: Contacts,
    order: wp.array2d[wp.int32],
    height: wp.array2d[wp.float32],
    levels: wp.array2d[wp.int32],
    world: int,
    manifolds: int,
):
    """Writes each level of the ordered manifolds (``next_level``) at its first order position, for ``level_at``:
    found once per substep for the warm start and every pass."""
    first = wp.int32(0)
    while first < manifolds:
        end, shared = next_level(bodies, c, order, height, world, first, manifolds, 0, 1)
        levels[world, first] = end * 2 + wp.where(shared, 1, 0)
        first = end


@wp.func
def block_any(flag: bool, lanes: int) -> bool:
    """Whether ``flag`` holds on any of the world's ``lanes`` lanes, on every one of them (a tile reduction; a warp
    vote within the world's lanes where a CUDA block holds several worlds, ``group_any``)."""
    if grouped(lanes) != 0:
        return group_any(wp.where(flag, 1, 0), lanes) != 0
    return wp.tile_max(wp.tile(wp.where(flag, 1, 0)))[0] > 0


@wp.func
def find_levels_lanes(
    bodies: Bodies,
    c: Contacts,
    order: wp.array2d[wp.int32],
    height: wp.array2d[wp.float32],
    levels: wp.array2d[wp.int32],
    world: int,
    manifolds: int,
    lane: int,
    lanes: int,
):
    """``find_levels`` on the block's lanes: every lane walks the levels, the lanes share each level's check for a
    body moved by two of its manifolds, and lane 0 writes the level."""
    first = wp.int32(0)
    while first < manifolds:
        end, mine = next_level(bodies, c, order, height, world, first, manifolds, lane, lanes)
        shared = block_any(mine, lanes)
        if lane == 0:
            levels[world, first] = end * 2 + wp.where(shared, 1, 0)
        first = end


@wp.func
def level_at(levels: wp.array2d[wp.int32], world: int, first: int):
    """The level that starts at order position ``first`` (``find_levels``): its end, and whether two of its
    manifolds move one body."""
    value = levels[world, first]
    return value / 2, value % 2 == 1


@wp.func
def solve_joint(
    bodies: Bodies,
    world: int,
    a: int,
    b: int,
    anchor_a: wp.vec3,
    anchor_b: wp.vec3,
    rel: wp.quat,
):
    ima = inv_mass_of(bodies, world, a)
    imb = inv_mass_of(bodies, world, b)
    qa = bodies.rotation[world, a]
    qb = bodies.rotation[world, b]
    # Orientation first: B turns towards q_a * rel, A the other way, by their angular inverse masses.
    dq = (qa * rel) * wp.quat_inverse(qb)
    if dq[3] < 0.0:
        dq = -dq
    dtheta = wp.vec3(dq[0], dq[1], dq[2]) * 2.0
    if turns_about_up_at_most(ima, qa, bodies.inv_inertia[world, a]) and turns_about_up_at_most(
        imb, qb, bodies.inv_inertia[world, b]
    ):
        # Neither can tilt (an agent and the body it holds, ``hold_upright``): only the turn about the vertical can
        # be undone, and the part of the error along it, divided by their inverse masses along the error's axis
        # (small where the error is mostly a tilt), would turn them both far past it.
        dtheta = wp.vec3(0.0, 0.0, dtheta[2])
    theta = wp.length(dtheta)
    if theta > 1.0e-9:
        axis = dtheta / theta
        wa = angular_inverse_mass(ima, qa, bodies.inv_inertia[world, a], axis)
        wb = angular_inverse_mass(imb, qb, bodies.inv_inertia[world, b], axis)
        if wa + wb > 0.0:
            dl = theta / (wa + wb)
            twist(bodies, world, a, ima, -dl * axis)
            twist(bodies, world, b, imb, dl * axis)
    qa = bodies.rotation[world, a]
    qb = bodies.rotation[world, b]
    ra = wp.quat_rotate(qa, anchor_a)
    rb = wp.quat_rotate(qb, anchor_b)
    gap = (bodies.position[world, b] + rb) - (bodies.position[world, a] + ra)
    dist = wp.length(gap)
    if dist > 1.0e-9:
        n = gap / dist
        wa = generalized_inverse_mass(ima, qa, bodies.inv_inertia[world, a], ra, n)
        wb = generalized_inverse_mass(imb, qb, bodies.inv_inertia[world, b], rb, n)
        if wa + wb > 0.0:
            dl = dist / (wa + wb)
            push(bodies, world, a, ima, dl * n, ra)
            push(bodies, world, b, imb, -dl * n, rb)


@wp.func
def solve_joint_row(bodies: Bodies, joints: GrabJoints, world: int, j: int):
    """``solve_joint`` for the fixed joint in row ``j`` of the world's joint table."""
    solve_joint(
        bodies,
        world,
        joints.joint_body_a[world, j],
        joints.joint_body_b[world, j],
        joints.joint_anchor_a[world, j],
        joints.joint_anchor_b[world, j],
        joints.joint_rotation[world, j],
    )


@wp.func
def stopped_from_the_side(
    bodies: Bodies, c: Contacts, impulse: wp.array2d[wp.float32], world: int, count: int, i: int
) -> bool:
    """Whether body ``i`` is pressed from the side against a body that does not move (a wall, a locked box, a frozen
    seeker): one of its contact rows has pushed in this substep (its impulse so far, warm start included), against
    such a body, along a normal within 30 degrees of the horizontal (``SIDE_SIN``)."""
    for k in range(count):
        a = c.body_a[world, k]
        b = c.body_b[world, k]
        if (a == i or b == i) and impulse[world, k] > 0.0:  # noqa: SIM102 (Warp's `and` reads both sides)
            if inv_mass_of(bodies, world, wp.where(a == i, b, a)) == 0.0 and wp.abs(c.normal[world, k][2]) <= SIDE_SIN:
                return True
    return False


@wp.func
def mark_stopped_holds(
    bodies: Bodies,
    splits: Splits,
    c: Contacts,
    order: wp.array2d[wp.int32],
    impulse: wp.array2d[wp.float32],
    joints: GrabJoints,
    world: int,
    manifolds: int,
    count: int,
) -> int:
    """Flags for ``SQUEEZED_SWEEPS`` sweeps of their own (as ``mark_pinched`` flags a squeezed body's) the manifolds of
    each held body stopped from the side (``stopped_from_the_side``) and of its holder, in ``order[0:manifolds]``;
    returns how many such joints there are. Each of those sweeps begins with their joints (``solve_joint``)."""
    found = wp.int32(0)
    for j in range(joints.alive.shape[1]):
        if joints.alive[world, j] != 0:
            held = joints.joint_body_b[world, j]
            if stopped_from_the_side(bodies, c, impulse, world, count, held):
                found += 1
                holder = joints.joint_body_a[world, j]
                for m in range(manifolds):
                    k = order[world, m]
                    a = c.body_a[world, k]
                    b = c.body_b[world, k]
                    if a == held or b == held or a == holder or b == holder:  # noqa: SIM109 (Warp has no `in`)
                        flag = splits.move_a[world, k]
                        splits.move_a[world, k] = wp.vec3(wp.max(flag[0], 2.0), flag[1], flag[2])
    return found


@wp.func
def joints_share_a_body(bodies: Bodies, joints: GrabJoints, world: int, j: int, k: int) -> bool:
    """Whether fixed joints ``j`` and ``k`` move one body (static and locked ones do not move)."""
    for side in range(2):
        body = wp.where(side == 0, joints.joint_body_a[world, j], joints.joint_body_b[world, j])
        shared = body == joints.joint_body_a[world, k] or body == joints.joint_body_b[world, k]
        if shared and inv_mass_of(bodies, world, body) > 0.0:
            return True
    return False


@wp.func
def joint_batch_end(bodies: Bodies, joints: GrabJoints, world: int, start: int, lanes: int) -> int:
    """End of the batch of fixed joints from row ``start`` that the block's lanes solve side by side: the rows that
    follow while no live one moves a body that a live joint before it in the batch moves, at most ``lanes`` of them.
    Solved side by side they give what solving them one after another gives; with one lane, each is a batch."""
    n = joints.alive.shape[1]
    e = start + 1
    while e < n and e - start < lanes:
        if joints.alive[world, e] != 0:
            for j in range(start, e):
                if joints.alive[world, j] != 0:  # noqa: SIM102 (Warp's `and` would read a free row's bodies)
                    if joints_share_a_body(bodies, joints, world, j, e):
                        return e
        e += 1
    return e


@wp.func
def world_inv_inertia(inv_m: float, q: wp.quat, inv_inertia: wp.mat33) -> wp.mat33:
    """World-frame inverse inertia ``R I^-1 R^T``; zero for a body that does not move."""
    if inv_m == 0.0:
        return wp.mat33(0.0)
    r = wp.quat_to_matrix(q)
    return r * inv_inertia * wp.transpose(r)


@wp.func
def tangent(n: wp.vec3) -> wp.vec3:
    """A unit vector perpendicular to unit ``n`` (the first friction axis; the second is ``n x t``)."""
    t = wp.where(wp.abs(n[0]) < 0.9, wp.cross(n, wp.vec3(1.0, 0.0, 0.0)), wp.cross(n, wp.vec3(0.0, 1.0, 0.0)))
    return wp.normalize(t)


@wp.func
def effective_inverse_mass(
    ima: float, ia: wp.mat33, ra: wp.vec3, imb: float, ib: wp.mat33, rb: wp.vec3, d: wp.vec3
) -> float:
    """Inverse mass that a pair of equal and opposite impulses along unit ``d`` at ``ra`` and ``rb`` sees."""
    ca = wp.cross(ra, d)
    cb = wp.cross(rb, d)
    return ima + wp.dot(ca, ia * ca) + imb + wp.dot(cb, ib * cb)


@wp.func
def facing_arm(arm: wp.vec3, rot: wp.mat33, q_start: wp.quat, radius_out: wp.vec3) -> wp.vec3:
    """The arm of the surface point facing the other body: ``arm`` (a material point) turned back
    by the body's rotation since the substep began, for the radius part ``radius_out`` of a round
    body (its core point stays material, its surface point stays along the normal)."""
    if wp.length_sq(radius_out) == 0.0:
        return arm
    return arm - rot * (wp.transpose(wp.quat_to_matrix(q_start)) * radius_out) + radius_out


@wp.func
def manifold_inverse_masses(bodies: Bodies, c: Contacts, world: int, start: int, up: wp.vec3):
    """Inverse masses of the bodies of the manifold at ``start`` in its solve: 0 for a static or locked
    body, and for the lower one where ``up`` is non-zero and one rests on the other (see ``level_manifold``)."""
    a = c.body_a[world, start]
    b = c.body_b[world, start]
    ima = inv_mass_of(bodies, world, a)
    imb = inv_mass_of(bodies, world, b)
    if ima > 0.0 and imb > 0.0:
        lean = wp.dot(c.normal[world, start], up)
        if lean > SHOCK_COS:
            ima = 0.0
        elif lean < -SHOCK_COS:
            imb = 0.0
    return ima, imb


@wp.func
def move_body(bodies: Bodies, world: int, i: int, dx: wp.vec3, dq: wp.vec3):
    """Moves body ``i`` by the translation ``dx`` and turns it by the rotation vector ``dq`` (world frame)."""
    bodies.position[world, i] = bodies.position[world, i] + dx
    bodies.rotation[world, i] = rotate_by(bodies.rotation[world, i], dq)


@wp.func
def clear_splits(splits: Splits, world: int, nb: int):
    for i in range(nb):
        splits.count[world, i] = 0
        splits.move[world, i] = wp.vec3(0.0, 0.0, 0.0)
        splits.turn[world, i] = wp.vec3(0.0, 0.0, 0.0)


@wp.func
def count_level_splits(
    bodies: Bodies,
    splits: Splits,
    c: Contacts,
    order: wp.array2d[wp.int32],
    world: int,
    first: int,
    last: int,
    up: wp.vec3,
    group: int,
):
    """Clears the body scratch and counts, per body, the manifolds of ``order[first:last]`` in ``group``
    (``manifold_moves``) that move it (its split count)."""
    clear_splits(splits, world, bodies.alive.shape[1])
    for m in range(first, last):
        k = order[world, m]
        moves_a, moves_b = manifold_moves(bodies, splits, c, world, k, up, group)
        if moves_a:
            splits.count[world, c.body_a[world, k]] += 1
        if moves_b:
            splits.count[world, c.body_b[world, k]] += 1


@wp.func
def count_level_splits_lanes(
    bodies: Bodies,
    splits: Splits,
    c: Contacts,
    order: wp.array2d[wp.int32],
    world: int,
    first: int,
    last: int,
    up: wp.vec3,
    group: int,
    lane: int,
    lanes: int,
):
    """``count_level_splits`` with a lane per body."""
    for i in range(lane, bodies.alive.shape[1], lanes):
        parts = wp.int32(0)
        for m in range(first, last):
            k = order[world, m]
            a = c.body_a[world, k]
            b = c.body_b[world, k]
            if a == i or b == i:
                moves_a, moves_b = manifold_moves(bodies, splits, c, world, k, up, group)
                if (a == i and moves_a) or (b == i and moves_b):
                    parts += 1
        splits.count[world, i] = parts
        splits.move[world, i] = wp.vec3(0.0, 0.0, 0.0)
        splits.turn[world, i] = wp.vec3(0.0, 0.0, 0.0)


@wp.func
def level_chain(
    bodies: Bodies,
    splits: Splits,
    c: Contacts,
    order: wp.array2d[wp.int32],
    world: int,
    first: int,
    last: int,
    up: wp.vec3,
    group: int,
) -> int:
    """The manifolds of ``order[first:last]`` in ``group`` that move a body another of them moves (split count two or
    more, from ``count_level_splits``): at most as many as a push may have to cross in the level (a row pressed
    together from both ends, every one of its manifolds; cubes on the floor that one agent touches, two)."""
    n = wp.int32(0)
    for m in range(first, last):
        k = order[world, m]
        moves_a, moves_b = manifold_moves(bodies, splits, c, world, k, up, group)
        shared_a = moves_a and splits.count[world, c.body_a[world, k]] > 1
        shared_b = moves_b and splits.count[world, c.body_b[world, k]] > 1
        if shared_a or shared_b:
            n += 1
    return n


@wp.func
def level_steps(up: wp.vec3, chain: int, group: int) -> int:
    """Jacobi steps over a level that shares a body, ``chain`` of whose manifolds in ``group`` move a shared body
    (``level_chain``): ``LEVEL_STEPS`` in the last pass (``up`` non-zero), one before, or one a manifold of the chain
    where that is more; one for a group of ranks (``rank_level``, ``RANK_FREE`` too) none of whose bodies two of its
    manifolds move (each manifold then moves its bodies alone, which one solve satisfies)."""
    if group >= 0 and chain == 0:
        return 1
    return wp.max(wp.where(wp.length_sq(up) > 0.0, LEVEL_STEPS, 1), chain)


@wp.func
def manifold_moves(bodies: Bodies, splits: Splits, c: Contacts, world: int, k: int, up: wp.vec3, group: int):
    """Whether the manifold at row ``k`` moves each of its bodies in the solve of ``group`` of its level: one whose
    inverse mass is not 0 (``manifold_inverse_masses``) and, for a group of ranks (``rank_level``), not the one of
    lower rank; neither where the manifold is not in the group (the lower rank of its bodies)."""
    ima, imb = manifold_inverse_masses(bodies, c, world, k, up)
    moves_a = ima > 0.0
    moves_b = imb > 0.0
    if group != ALL_MANIFOLDS:
        rank_a = splits.rank[world, c.body_a[world, k]]
        rank_b = splits.rank[world, c.body_b[world, k]]
        if wp.min(rank_a, rank_b) != group:
            moves_a = False
            moves_b = False
        elif rank_a < rank_b:
            moves_a = False
        elif rank_b < rank_a:
            moves_b = False
    return moves_a, moves_b


@wp.func
def backed(
    bodies: Bodies,
    c: Contacts,
    order: wp.array2d[wp.int32],
    world: int,
    first: int,
    last: int,
    manifolds: int,
    body: int,
    push: wp.vec3,
) -> bool:
    """Whether a manifold outside the level ``order[first:last]`` (of ``order[0:manifolds]``) presses ``body`` against
    a body that cannot move (static, locked or asleep: ``inv_mass_of`` 0) in a direction within ``BACKED_COS`` of
    ``-push``: the body cannot give way to a push along ``push`` (``rank_level``)."""
    for m in range(manifolds):
        if m < first or m >= last:
            k = order[world, m]
            a = c.body_a[world, k]
            b = c.body_b[world, k]
            if a == body or b == body:
                # the other body cannot move (static, locked or asleep); the manifold pushes B along its normal
                # (from A to B) and A against it
                along = wp.dot(c.normal[world, k], push)
                if wp.where(a == body, along, -along) > BACKED_COS and inv_mass_of(bodies, world, a + b - body) <= 0.0:
                    return True
    return False


@wp.func
def pinned_body(bodies: Bodies, c: Contacts, world: int, k: int) -> int:
    """The body of the manifold at row ``k`` that the solver moves where the other cannot (``inv_mass_of`` 0),
    or -1."""
    a = c.body_a[world, k]
    b = c.body_b[world, k]
    fixed_a = inv_mass_of(bodies, world, a) <= 0.0
    fixed_b = inv_mass_of(bodies, world, b) <= 0.0
    if fixed_a and not fixed_b:
        return b
    if fixed_b and not fixed_a:
        return a
    return -1


@wp.func
def sideways(c: Contacts, world: int, k: int, up: wp.vec3) -> bool:
    """Whether the manifold at row ``k`` pushes its bodies apart sideways: its normal more than ``acos(SHOCK_COS)``
    from ``up`` (not a support, which the last pass solves from the bottom up)."""
    return wp.abs(wp.dot(c.normal[world, k], up)) < SHOCK_COS


@wp.func
def pinning_push(c: Contacts, world: int, k: int, body: int, up: wp.vec3) -> wp.vec3:
    """The push of the manifold at row ``k`` on ``body`` (one of its two bodies), as ``mark_pinched`` compares it: its
    normal, pointing into ``body``; a support's (a normal within ``acos(SHOCK_COS)`` of ``up``) taken as ``up`` or
    ``-up``, so that whether a body is pinched between a support and another push does not depend on the order they
    are listed in."""
    push = wp.where(c.body_a[world, k] == body, -1.0, 1.0) * c.normal[world, k]
    along = wp.dot(push, up)
    if wp.abs(along) >= SHOCK_COS:
        push = wp.where(along > 0.0, 1.0, -1.0) * up
    return push


@wp.func
def mark_pinched(
    bodies: Bodies, splits: Splits, c: Contacts, order: wp.array2d[wp.int32], world: int, manifolds: int, up: wp.vec3
) -> int:
    """Marks each body that two manifolds push from opposite sides (within ``BACKED_COS``, ``pinning_push``) against
    bodies that cannot move as ``splits.rank`` -1 (pinched; -2 where it is wedged, ``opposed_push``, and -3 for the
    bodies that touch a wedged one), then each manifold that pins one so (``splits.move_a`` x: 1, or 2 where it wedges
    the body) and, where a body is wedged, each manifold that moves a body marked -2 or -3 (x: 2), and returns the
    most of those flags (0 where no body is pinched). Compares each sideways push with the first two sideways ones
    kept for its body in ``splits.move`` and ``splits.turn`` and with its supports; each support (pushing along
    ``up`` or against it) with those two and with the supports pushing the other way. ``splits.count`` (cleared
    before) holds how many sideways pushes are kept, plus ``PUSHED_UP`` and ``PUSHED_DOWN`` where a support pushes
    the body so: a floor's supports, which come first in the manifolds' order, then take no place that a wall's push
    needs. One thread. The marks are scratch: the levels of the next pass write the body scratch before they read
    it."""
    found = wp.int32(0)
    for m in range(manifolds):
        k = order[world, m]
        body = pinned_body(bodies, c, world, k)
        if body >= 0:
            push = pinning_push(c, world, k, body, up)
            along = wp.dot(push, up)
            count = splits.count[world, body]
            held = count % PUSHED_UP
            opposed = bool(False)  # noqa: UP018 (Warp: a variable changed in a branch must be declared dynamic)
            if held > 0 and wp.dot(push, splits.move[world, body]) < -BACKED_COS:
                opposed = True
            if held > 1 and wp.dot(push, splits.turn[world, body]) < -BACKED_COS:
                opposed = True
            if (count / PUSHED_UP) % 2 == 1 and along < -BACKED_COS:  # against a support pushing up
                opposed = True
            if count / PUSHED_DOWN == 1 and along > BACKED_COS:  # against a support pushing down
                opposed = True
            if opposed:
                splits.rank[world, body] = -1
                found = 1
            if wp.abs(along) >= SHOCK_COS:  # a support: its direction in the flags, no place taken
                flag = wp.where(along > 0.0, PUSHED_UP, PUSHED_DOWN)
                if (count / flag) % 2 == 0:
                    splits.count[world, body] = count + flag
            elif held == 0:
                splits.move[world, body] = push
                splits.count[world, body] = count + 1
            elif held == 1:
                splits.turn[world, body] = push
                splits.count[world, body] = count + 1
    if found != 0:
        # Each manifold that pins such a body against a push from the opposite side: ``splits.move_a`` x 1 (2 where it
        # wedges it) at its first row (free once the levels are done), else 0.
        for m in range(manifolds):
            k = order[world, m]
            body = pinned_body(bodies, c, world, k)
            pins = wp.int32(0)
            if body >= 0:  # noqa: SIM102 (Warp evaluates both sides of `and`: no row -1)
                if splits.rank[world, body] < 0:
                    pins = opposed_push(bodies, c, order, world, manifolds, k, body, up)
                    if pins == 2:
                        splits.rank[world, body] = -2  # wedged
            splits.move_a[world, k] = wp.vec3(float(pins), 0.0, 0.0)
            found = wp.max(found, pins)
        if found > 1:
            # Every manifold that moves a wedged body or a body that touches one is swept as the wedge's are: swept
            # alone, the wedge's had the last word over the body's other contacts (a hider wedged between a ramp and
            # the floor pressed a seeker 72 mm into a wall), and the wedged body's alone, over its neighbours' (a hider
            # pinned in the seeker's place pushed the seeker 53 mm into the corner's other wall for a step).
            for m in range(manifolds):
                k = order[world, m]
                a = c.body_a[world, k]
                b = c.body_b[world, k]
                if splits.rank[world, a] == -2 and splits.rank[world, b] != -2:
                    splits.rank[world, b] = -3
                if splits.rank[world, b] == -2 and splits.rank[world, a] != -2:
                    splits.rank[world, a] = -3
            for m in range(manifolds):
                k = order[world, m]
                ra = splits.rank[world, c.body_a[world, k]]
                rb = splits.rank[world, c.body_b[world, k]]
                if (ra <= -2 and inv_mass_of(bodies, world, c.body_a[world, k]) > 0.0) or (
                    rb <= -2 and inv_mass_of(bodies, world, c.body_b[world, k]) > 0.0
                ):
                    splits.move_a[world, k] = wp.vec3(2.0, 0.0, 0.0)
    return found


@wp.func
def opposed_push(
    bodies: Bodies, c: Contacts, order: wp.array2d[wp.int32], world: int, manifolds: int, k: int, body: int, up: wp.vec3
) -> int:
    """Whether another manifold than the one at row ``k`` pushes ``body`` against a body that cannot move, the opposite
    way to ``k``'s push on it (within ``BACKED_COS``, ``pinning_push``): 0 where none does, 2 where one of those pushes
    meets ``k``'s at more than ``acos(WEDGE_COS)`` from head-on (a wedge), else 1."""
    push = pinning_push(c, world, k, body, up)
    opposed = wp.int32(0)
    for m in range(manifolds):
        j = order[world, m]
        if j != k and pinned_body(bodies, c, world, j) == body:
            cos = wp.dot(push, pinning_push(c, world, j, body, up))
            if cos < -BACKED_COS:
                opposed = wp.max(opposed, wp.where(cos > -WEDGE_COS, 2, 1))
    return opposed


@wp.func
def pinned_ball(bodies: Bodies, poses: Poses, c: Contacts, world: int, k: int, count: int) -> int:
    """The ball (a sphere) of the manifold at row ``k`` where it is one point and its other body cannot move
    (``pinned_body``), else -1."""
    body = pinned_body(bodies, c, world, k)
    if body >= 0:  # noqa: SIM102 (Warp evaluates both sides of `and`: no row -1)
        if poses.shape[world, body] == SPHERE and manifold_end(c, world, k, count) == k + 1:
            return body
    return -1


@wp.func
def ball_push(bodies: Bodies, poses: Poses, c: Contacts, world: int, k: int, ball: int):
    """The one-point manifold at row ``k`` on ``ball``: the direction that moving the ball along takes the overlap out
    (its normal as ``level_manifold`` solves it, ``point_normal``, pointing away from the other body) and its depth
    at the poses now (> 0: overlapping)."""
    a = c.body_a[world, k]
    b = c.body_b[world, k]
    pair = pair_poses(
        bodies,
        c,
        world,
        k,
        round_radius(poses, world, a),
        round_radius(poses, world, b),
        ball_on_face(poses, bodies, c, world, k),
    )
    n = point_normal(c, world, k, pair)
    return wp.where(a == ball, -n, n), point_depth(c, world, k, pair)


@wp.func
def solve_ball_pair(
    bodies: Bodies,
    splits: Splits,
    poses: Poses,
    c: Contacts,
    impulse: wp.array2d[wp.float32],
    order: wp.array2d[wp.int32],
    world: int,
    manifolds: int,
    count: int,
    ball: int,
    j: int,
    k: int,
):
    """Moves ``ball`` the least distance that takes out the overlap of both its one-point manifolds at rows ``j`` and
    ``k``, whose other bodies cannot move (``solve_pinned_balls``): along ``u1`` and ``u2`` (``ball_push``) by ``a``
    and ``b`` >= 0 with ``u1 . d >= e1`` and ``u2 . d >= e2`` (their depths), the two pushes solved together as a
    2x2 system where neither alone takes out both overlaps, which is a projection onto the two half-spaces (a ball
    does not turn under a push through its centre). Where both push, the motion is at most how far the ball came
    from that way since the substep began (its travel's part against the motion): nearly opposed, the pushes move it
    along the wedge by about the overlap over the wedge's angle (1 m for 1 mm at 0.06 degrees), a body that cannot
    move made no overlap of its own, and a ball moved back no further than it came gains no speed. Capped at its
    travel whichever way instead, a hider jammed in a slot a hair narrower than itself and 0.1 degrees off parallel
    was moved along the slot further every substep (a soak with 4 substeps: 14 m/s in a step, into another hider
    187 mm deep; ``test_a_hider_jammed_in_a_slot_a_hair_narrower_than_itself_is_not_shot_along_it``). Nor does the
    move take the ball further into another body that cannot move than it is (the ball's other one-point manifolds,
    ``order[0:manifolds]``): a hider of 0.3 m jammed in a wedge that a third wall closed was moved out of the wedge
    into that wall every substep, 291 mm deep (a soak with ``agent_radius: 0.3``). Their impulses take the motion."""
    u1, e1 = ball_push(bodies, poses, c, world, j, ball)
    u2, e2 = ball_push(bodies, poses, c, world, k, ball)
    cos = wp.dot(u1, u2)
    a = wp.max(e1, 0.0)
    b = wp.float32(0.0)
    if a * cos < e2:  # the first push alone leaves the second overlap
        a = 0.0
        b = wp.max(e2, 0.0)
        if b * cos < e1:  # and the second alone the first: both push
            det = 1.0 - cos * cos
            if det < PINNED_PAIR_DET:
                return
            a = wp.max((e1 - cos * e2) / det, 0.0)
            b = wp.max((e2 - cos * e1) / det, 0.0)
            # Jammed: a push into the wedge (against the sum of the two pushes) moves the ball no further in.
            splits.count[world, ball] = JAMMED
            splits.move[world, ball] = wp.normalize(u1 + u2)
            d = u1 * a + u2 * b
            size = wp.length(d)
            travel = bodies.position[world, ball] - bodies.prev_position[world, ball]
            back = wp.max(-wp.dot(travel, d) / wp.max(size, 1.0e-12), 0.0)  # how far it came from along d
            if size > back:
                a = a * back / size
                b = b * back / size
    if a + b > 0.0:
        # No further into the ball's other bodies that cannot move than it is (a third wall closing the wedge).
        d = u1 * a + u2 * b
        scale = wp.float32(1.0)
        for m in range(manifolds):
            i = order[world, m]
            if i != j and i != k and pinned_ball(bodies, poses, c, world, i, count) == ball:
                u, e = ball_push(bodies, poses, c, world, i, ball)
                towards = -wp.dot(u, d)
                if towards > 0.0:
                    scale = wp.min(scale, wp.max(-e, 0.0) / towards)
        a = a * scale
        b = b * scale
    if a + b > 0.0:
        im = inv_mass_of(bodies, world, ball)
        bodies.position[world, ball] = bodies.position[world, ball] + u1 * a + u2 * b
        impulse[world, j] = impulse[world, j] + a / im
        impulse[world, k] = impulse[world, k] + b / im


@wp.func
def solve_pinned_balls(
    bodies: Bodies,
    splits: Splits,
    poses: Poses,
    c: Contacts,
    impulse: wp.array2d[wp.float32],
    order: wp.array2d[wp.int32],
    world: int,
    manifolds: int,
    count: int,
):
    """Solves together the two most nearly opposed one-point manifolds that push a ball from opposite sides (within
    ``BACKED_COS``) against bodies that cannot move (``solve_ball_pair``), for each ball so pinned: once the last
    pass's levels are done, before the sweeps (where a ball found jammed anchors chains, ``mark_chains``, so the sweeps
    push back what pushed it in), and after them. Sweeps of one manifold at a time close such an overlap by about
    cos^2 of the angle between the pushes a sweep: a hider run along a wall into the wedge between it and a locked box
    3 degrees off it ended steps 22 mm inside the wall
    (``test_a_hider_run_along_a_wall_into_the_wedge_of_a_locked_box_jams_there_out_of_both``). Solved after the
    sweeps alone, a jammed hider's two pushes had the last word and moved it back the way another hider had pushed it
    in, into that one (47 mm, a soak with 4 substeps; ``test_a_hider_run_along_a_wall_into_one_jammed_in_a_wedge_``
    ``stops_against_it``). One thread."""
    for m in range(manifolds):
        j = order[world, m]
        ball = pinned_ball(bodies, poses, c, world, j, count)
        if ball >= 0:
            u1, _e1 = ball_push(bodies, poses, c, world, j, ball)
            most = wp.float32(-BACKED_COS)
            k = wp.int32(-1)
            for other in range(m + 1, manifolds):
                i = order[world, other]
                if pinned_ball(bodies, poses, c, world, i, count) == ball:
                    u2, _e2 = ball_push(bodies, poses, c, world, i, ball)
                    if wp.dot(u1, u2) < most:
                        most = wp.dot(u1, u2)
                        k = i
            if k >= 0:
                solve_ball_pair(bodies, splits, poses, c, impulse, order, world, manifolds, count, ball, j, k)


@wp.func
def mark_chains(
    bodies: Bodies,
    splits: Splits,
    c: Contacts,
    order: wp.array2d[wp.int32],
    world: int,
    manifolds: int,
    up: wp.vec3,
    pinched: int,
):
    """Ranks each sideways manifold (``sideways``) of the substep by how many manifolds stand between it and a body
    that cannot move (``inv_mass_of`` 0, or a ball jammed in a wedge against a push into it, ``pushed_in``), along a
    line, across levels: pushing its body B away from A (along its normal), rank 0 where A cannot move, else one more than the least rank of another sideways manifold that pushes A
    back along the normal (within ``BACKED_COS``: A is backed that way); pushing A away from B, the same the other way.
    The ranks go in ``splits.turn_a`` (B's, A's; free once the levels are done) by shortest paths (Bellman-Ford), which
    bodies move in ``splits.rank`` (free once ``mark_pinched`` is done). A manifold ranked both ways lies on a line
    pressed from both ends (a hider wedged between a locked plank and a row of planks against a wall): sweeps from
    each end would push its bodies into each other's places (the row's planks ended steps 77 mm inside each other),
    so its bodies are marked squeezed (``splits.rank`` 2) and no chain sweep moves them: every manifold of a squeezed
    body is swept ``SQUEEZED_SWEEPS`` times plainly instead. Returns the chain sweeps to run after the last pass (one
    more than the deepest rank of a manifold that a chain sweep solves where a chain holds two bodies that move or
    more, or a jammed ball anchors one, else 0), whether a body is squeezed, and how many sweeps the chains flagged
    take (0 where none is flagged). Each manifold's ``splits.move_a`` then reads (2 where
    it moves a squeezed body, else 1 where ``mark_pinched`` found it pins a body and ``pinched`` is set, else 0; with
    chain sweeps, its least rank plus one where its sweep moves no squeezed body, else 0; the body held still in its
    sweep, 1 for A, 2 for B). One thread."""
    for m in range(manifolds):  # which bodies move, in ``splits.rank`` (free once ``mark_pinched`` is done)
        k = order[world, m]
        for side in range(2):
            body = wp.where(side == 0, c.body_a[world, k], c.body_b[world, k])
            splits.rank[world, body] = wp.where(inv_mass_of(bodies, world, body) > 0.0, 1, 0)
    jammed = wp.int32(0)  # a manifold pushes a jammed ball into its wedge
    for m in range(manifolds):
        k = order[world, m]
        a = c.body_a[world, k]
        b = c.body_b[world, k]
        moves_a = splits.rank[world, a] != 0
        moves_b = splits.rank[world, b] != 0
        rank = wp.vec3(CHAIN_NONE, CHAIN_NONE, 0.0)
        if sideways(c, world, k, up):
            # A ball jammed in a wedge (``solve_ball_pair``) holds like a body that cannot move against a push into it.
            held_a = pushed_in(splits, world, a, -c.normal[world, k])
            held_b = pushed_in(splits, world, b, c.normal[world, k])
            if (held_a and moves_b) or (held_b and moves_a):
                jammed = 1
            rank = wp.vec3(
                wp.where(moves_b and (held_a or not moves_a), 0.0, CHAIN_NONE),
                wp.where(moves_a and (held_b or not moves_b), 0.0, CHAIN_NONE),
                0.0,
            )
        splits.turn_a[world, k] = rank
    for _round in range(manifolds):
        changed = wp.int32(0)
        for m in range(manifolds):
            k = order[world, m]
            for side in range(2):
                # ``side`` 0: k pushes B away from A, which must be held back along k's normal; 1: the other way.
                body = wp.where(side == 0, c.body_a[world, k], c.body_b[world, k])
                pushed = wp.where(side == 0, c.body_b[world, k], c.body_a[world, k])
                if splits.rank[world, body] != 0 and splits.rank[world, pushed] != 0 and sideways(c, world, k, up):
                    back = c.normal[world, k] * wp.where(side == 0, 1.0, -1.0)
                    ranks = splits.turn_a[world, k]
                    best = wp.where(side == 0, ranks[0], ranks[1])
                    for other in range(manifolds):
                        j = order[world, other]
                        bj = c.body_b[world, j]
                        if j != k and (c.body_a[world, j] == body or bj == body):  # noqa: SIM102
                            if sideways(c, world, j, up):
                                on_b = bj == body
                                push = c.normal[world, j] * wp.where(on_b, 1.0, -1.0)  # j's push on ``body``
                                theirs = splits.turn_a[world, j]
                                held = wp.where(on_b, theirs[0], theirs[1])
                                if wp.dot(push, back) > BACKED_COS and held + 1.0 < best:
                                    best = held + 1.0
                    if best < wp.where(side == 0, ranks[0], ranks[1]):
                        ranks = wp.vec3(wp.where(side == 0, best, ranks[0]), wp.where(side == 0, ranks[1], best), 0.0)
                        splits.turn_a[world, k] = ranks
                        changed = 1
        if changed == 0:
            break
    squeezed = wp.int32(0)
    for m in range(manifolds):  # the squeezed bodies: those of a manifold ranked both ways
        k = order[world, m]
        rank = splits.turn_a[world, k]
        if wp.max(rank[0], rank[1]) < CHAIN_NONE:
            splits.rank[world, c.body_a[world, k]] = 2
            splits.rank[world, c.body_b[world, k]] = 2
            squeezed = 1
    deepest = wp.float32(0.0)  # the deepest rank a sweep solves
    for m in range(manifolds):
        k = order[world, m]
        rank = splits.turn_a[world, k]
        if chain_moves(splits, c, world, k, rank):
            deepest = wp.max(deepest, wp.min(rank[0], rank[1]))
    sweeps = wp.where(deepest >= 1.0 or jammed != 0, int(deepest) + 1, 0)
    if squeezed != 0:
        sweeps = wp.max(sweeps, SQUEEZED_SWEEPS)
    chained = wp.int32(0)  # the chain sweeps flagged
    if sweeps > 0 or pinched != 0:
        for m in range(manifolds):
            k = order[world, m]
            flag = wp.vec3(0.0, 0.0, 0.0)
            if pinched != 0:
                flag = wp.vec3(splits.move_a[world, k][0], 0.0, 0.0)
            if splits.rank[world, c.body_a[world, k]] == 2 or splits.rank[world, c.body_b[world, k]] == 2:
                flag = wp.vec3(2.0, 0.0, 0.0)  # a manifold of a squeezed body: swept plainly
            rank = splits.turn_a[world, k]
            if sweeps > 0 and chain_moves(splits, c, world, k, rank):
                chained = int(deepest) + 1
                if rank[0] <= rank[1]:
                    flag = wp.vec3(flag[0], rank[0] + 1.0, 1.0)  # B pushed away from A, A held still
                else:
                    flag = wp.vec3(flag[0], rank[1] + 1.0, 2.0)
            splits.move_a[world, k] = flag
    return wp.where(deepest >= 1.0 or jammed != 0, int(deepest) + 1, 0), squeezed, chained


@wp.func
def pushed_in(splits: Splits, world: int, body: int, push: wp.vec3) -> bool:
    """Whether ``body`` is a ball jammed in a wedge (``JAMMED``) and ``push`` on it drives it into the wedge."""
    return splits.count[world, body] == JAMMED and wp.dot(push, splits.move[world, body]) < 0.0


@wp.func
def chain_moves(splits: Splits, c: Contacts, world: int, k: int, rank: wp.vec3) -> bool:
    """Whether a chain sweep solves the manifold at row ``k`` of chain ranks ``rank`` (``mark_chains``): it is ranked,
    and the body its sweep moves (B where B's rank is the lesser, else A) is not squeezed (``splits.rank`` 2)."""
    moved = wp.where(rank[0] <= rank[1], c.body_b[world, k], c.body_a[world, k])
    return wp.min(rank[0], rank[1]) < CHAIN_NONE and splits.rank[world, moved] != 2


@wp.func
def rank_level(
    bodies: Bodies,
    splits: Splits,
    c: Contacts,
    order: wp.array2d[wp.int32],
    world: int,
    first: int,
    last: int,
    manifolds: int,
    up: wp.vec3,
) -> int:
    """Ranks the bodies of the level ``order[first:last]`` (of the substep's ``order[0:manifolds]``) for its solve
    outwards from its anchors (``RANK_FREE``): 0 for a body that one of its manifolds does not move
    (``manifold_inverse_masses``) or that a manifold of another level holds against a push of one of its manifolds here
    (``backed``), else one more than the lowest rank among the bodies it touches through the level, ``RANK_FREE`` where
    none is ranked. Returns twice the number of groups of ranks (the manifolds whose lower rank is 0, 1, ...), plus one
    where some manifold's bodies are both ``RANK_FREE``; 0 or 1 where no body is an anchor."""
    for m in range(first, last):
        k = order[world, m]
        splits.rank[world, c.body_a[world, k]] = RANK_FREE
        splits.rank[world, c.body_b[world, k]] = RANK_FREE
    for m in range(first, last):
        k = order[world, m]
        ima, imb = manifold_inverse_masses(bodies, c, world, k, up)
        if ima <= 0.0:
            splits.rank[world, c.body_a[world, k]] = 0
        if imb <= 0.0:
            splits.rank[world, c.body_b[world, k]] = 0
    for m in range(first, last):
        k = order[world, m]
        a = c.body_a[world, k]
        b = c.body_b[world, k]
        n = c.normal[world, k]
        if splits.rank[world, a] != 0 and backed(bodies, c, order, world, first, last, manifolds, a, -n):
            splits.rank[world, a] = 0
        if splits.rank[world, b] != 0 and backed(bodies, c, order, world, first, last, manifolds, b, n):
            splits.rank[world, b] = 0
    for _round in range(last - first):  # shortest paths (Bellman-Ford): at most as many rounds as manifolds
        changed = wp.int32(0)
        for m in range(first, last):
            k = order[world, m]
            a = c.body_a[world, k]
            b = c.body_b[world, k]
            rank_a = splits.rank[world, a]
            rank_b = splits.rank[world, b]
            if rank_a + 1 < rank_b:
                splits.rank[world, b] = rank_a + 1
                changed = 1
            elif rank_b + 1 < rank_a:
                splits.rank[world, a] = rank_b + 1
                changed = 1
        if changed == 0:
            break
    groups = wp.int32(0)
    free = wp.int32(0)
    for m in range(first, last):
        k = order[world, m]
        lower = wp.min(splits.rank[world, c.body_a[world, k]], splits.rank[world, c.body_b[world, k]])
        if lower == RANK_FREE:
            free = 1
        else:
            groups = wp.max(groups, lower + 1)
    return groups * 2 + free


@wp.func
def level_manifold(
    bodies: Bodies,
    splits: Splits,
    poses: Poses,
    c: Contacts,
    impulse: wp.array2d[wp.float32],
    friction: wp.array2d[wp.vec3],
    world: int,
    k: int,
    count: int,
    up: wp.vec3,
    jacobi: bool,
    group: int,
):
    """The manifold that starts at row ``k`` in its level's solve: on its own (``jacobi`` false), solved and its motion
    applied to the bodies at once (Gauss-Seidel); in a Jacobi step, its corrections from the present poses with its
    bodies' masses split, kept at its first row, not applied (``level_corrections``), where it is in ``group``
    (``manifold_moves``; a body that it holds still has its mass split to infinity). One call of
    ``manifold_corrections`` serves both, so a solver kernel holds one copy of it.

    The constraints are the normal and friction position constraints of the pair's contacts. Every point is its own
    constraint: the normal one pushes the anchors apart along ``n`` until they
    no longer overlap (accumulated impulse ``lambda_n >= 0``), the friction one undoes the tangential
    motion of the anchors since the substep began, with an accumulated impulse of at most
    ``mu lambda_n`` (Coulomb's cone: static friction holds, a sliding contact is slowed by ``mu``
    times its normal impulse). The points are solved together by projected Gauss-Seidel over
    ``FIRST_SWEEPS`` (every other one backwards; ``NORMAL_SWEEPS`` in the last pass) sweeps, each
    point's normal then its friction, linearised about the pose the pair has when its turn comes,
    stopping early once a sweep moves the pair less than ``SETTLED``; the motion of each body is
    applied once at the end. The sweeps converge to the point impulses that balance force and torque together, so a
    resting contact patch neither tilts nor creeps. Impulses accumulate over the passes.

    ``up`` non-zero (the last pass, shock propagation): when one body rests on the other (the
    normal within ``acos(SHOCK_COS)`` of ``up``), the lower body is held still, so that fixing
    a contact higher up a stack does not undo the ones below it.

    The contacts were found at the poses the substep started from. Friction acts on the material
    points that touched then; the normal constraint on the points of the surfaces that face each
    other now: the same material points for flat faces, but for a round body (radius
    ``round_radius``; 0 for others) the point of its surface along the normal, so that a
    rolling ball keeps pressing on the slope instead of lifting the point it touched. A ball's contact with a face
    of a polyhedron meets the face's plane as it turns with the polyhedron (``point_normal``).
    """
    a = c.body_a[world, k]
    b = c.body_b[world, k]
    ima, imb = manifold_inverse_masses(bodies, c, world, k, up)
    member = bool(True)  # noqa: UP018 (Warp: a variable changed in a branch must be declared dynamic)
    split_a = wp.float32(1.0)
    split_b = wp.float32(1.0)
    if jacobi:
        split_a = float(wp.max(splits.count[world, a], 1))
        split_b = float(wp.max(splits.count[world, b], 1))
        if group != ALL_MANIFOLDS:
            moves_a, moves_b = manifold_moves(bodies, splits, c, world, k, up, group)
            member = moves_a or moves_b
            split_a = wp.where(moves_a, split_a, 0.0)
            split_b = wp.where(moves_b, split_b, 0.0)
    if member and (jacobi or ima + imb > 0.0):
        dxa, dqa, dxb, dqb = manifold_corrections(
            bodies,
            c,
            impulse,
            friction,
            world,
            k,
            manifold_end(c, world, k, count),
            up,
            round_radius(poses, world, a),
            round_radius(poses, world, b),
            split_a,
            split_b,
            ball_on_face(poses, bodies, c, world, k),
        )
        if jacobi:
            splits.move_a[world, k] = dxa
            splits.turn_a[world, k] = dqa
            splits.move_b[world, k] = dxb
            splits.turn_b[world, k] = dqb
        else:
            if ima > 0.0:
                move_body(bodies, world, a, dxa, dqa)
            if imb > 0.0:
                move_body(bodies, world, b, dxb, dqb)


@wp.func
def level_corrections(
    bodies: Bodies,
    splits: Splits,
    poses: Poses,
    c: Contacts,
    impulse: wp.array2d[wp.float32],
    friction: wp.array2d[wp.vec3],
    order: wp.array2d[wp.int32],
    world: int,
    first: int,
    last: int,
    count: int,
    up: wp.vec3,
    lane: int,
    lanes: int,
):
    """One Jacobi step's corrections of the manifolds ``order[first + lane : last : lanes]``, each from the present
    poses with its bodies' masses split (``solve_level``), kept at the manifold's first row, not applied."""
    for m in range(first + lane, last, lanes):
        level_manifold(
            bodies, splits, poses, c, impulse, friction, world, order[world, m], count, up, True, ALL_MANIFOLDS
        )


@wp.func
def apply_level(
    bodies: Bodies,
    splits: Splits,
    c: Contacts,
    order: wp.array2d[wp.int32],
    world: int,
    first: int,
    last: int,
    up: wp.vec3,
    group: int,
):
    """Moves each body of the level by the mean of the corrections its manifolds in ``group`` found
    (``level_corrections``), summed in the level's order."""
    for m in range(first, last):
        k = order[world, m]
        a = c.body_a[world, k]
        b = c.body_b[world, k]
        moves_a, moves_b = manifold_moves(bodies, splits, c, world, k, up, group)
        if not (moves_a or moves_b):
            continue
        # A body that the manifold does not move got zero corrections.
        splits.move[world, a] = splits.move[world, a] + splits.move_a[world, k]
        splits.turn[world, a] = splits.turn[world, a] + splits.turn_a[world, k]
        splits.move[world, b] = splits.move[world, b] + splits.move_b[world, k]
        splits.turn[world, b] = splits.turn[world, b] + splits.turn_b[world, k]
    for i in range(bodies.alive.shape[1]):
        parts = splits.count[world, i]
        if parts > 0:
            move_body(bodies, world, i, splits.move[world, i] / float(parts), splits.turn[world, i] / float(parts))
            splits.move[world, i] = wp.vec3(0.0, 0.0, 0.0)
            splits.turn[world, i] = wp.vec3(0.0, 0.0, 0.0)


@wp.func
def apply_level_lanes(
    bodies: Bodies,
    splits: Splits,
    c: Contacts,
    order: wp.array2d[wp.int32],
    world: int,
    first: int,
    last: int,
    up: wp.vec3,
    group: int,
    lane: int,
    lanes: int,
):
    """``apply_level`` with a lane per body: each sums its body's corrections in the level's order, as ``apply_level``
    does, so the move is the same bit for bit."""
    for i in range(lane, bodies.alive.shape[1], lanes):
        parts = splits.count[world, i]
        if parts > 0:
            move = wp.vec3(0.0, 0.0, 0.0)
            turn = wp.vec3(0.0, 0.0, 0.0)
            for m in range(first, last):
                k = order[world, m]
                a = c.body_a[world, k]
                b = c.body_b[world, k]
                if a == i or b == i:
                    moves_a, moves_b = manifold_moves(bodies, splits, c, world, k, up, group)
                    if moves_a or moves_b:
                        if a == i:
                            move = move + splits.move_a[world, k]
                            turn = turn + splits.turn_a[world, k]
                        else:
                            move = move + splits.move_b[world, k]
                            turn = turn + splits.turn_b[world, k]
            move_body(bodies, world, i, move / float(parts), turn / float(parts))


@wp.func
def solve_level(
    bodies: Bodies,
    splits: Splits,
    poses: Poses,
    c: Contacts,
    impulse: wp.array2d[wp.float32],
    friction: wp.array2d[wp.vec3],
    order: wp.array2d[wp.int32],
    world: int,
    first: int,
    last: int,
    count: int,
    up: wp.vec3,
):
    """The manifolds ``order[first:last]`` (a level whose manifolds share a body) by Jacobi steps with
    mass splitting (Tonge, Benevolenski and Voroshilov 2012, "Mass splitting for jitter-free
    parallel rigid body simulation"): ``level_steps`` of them, more in the last pass (``up`` non-zero) than before.

    In a step every manifold is solved from the same poses, as if each body were split into as many
    parts as manifolds of the level move it (its split count): each part has the body's inverse
    mass and inverse inertia times that count. The parts' motions are then averaged: each body
    moves by the mean of what its manifolds give it, so it takes the sum of their impulses at its
    own mass. The order of the manifolds does not change the result (but for the rounding of sums
    of three or more corrections), and each manifold of a step runs on its own lane in
    ``step_bodies_block``, which calls the three parts with a barrier between them; here they run on one thread.
    """
    count_level_splits(bodies, splits, c, order, world, first, last, up, ALL_MANIFOLDS)
    chain = level_chain(bodies, splits, c, order, world, first, last, up, ALL_MANIFOLDS)
    for _step in range(level_steps(up, chain, ALL_MANIFOLDS)):
        level_corrections(bodies, splits, poses, c, impulse, friction, order, world, first, last, count, up, 0, 1)
        apply_level(bodies, splits, c, order, world, first, last, up, ALL_MANIFOLDS)


@wp.func_native(
    "#if defined(__CUDA_ARCH__)\nreturn clock64();\n#else\nreturn (long long)__builtin_readcyclecounter();\n#endif\n"
)
def cycle_counter() -> wp.int64:
    """A clock-cycle count: the SM's clock on CUDA, the time-stamp counter on CPU (for ``SolverCycles``)."""
    ...


@wp.func
def lap(cycles: wp.array2d[wp.int64], world: int, lane: int, stage: int, since: wp.int64) -> wp.int64:
    """On lane 0: adds the cycles since ``since`` to ``stage`` of ``world``'s ``SolverCycles`` and returns the
    count now. Other lanes count nothing (``since`` back)."""
    if lane != 0:
        return since
    now = cycle_counter()
    cycles[world, stage] = cycles[world, stage] + (now - since)
    return now


@wp.struct
class PairStart:
    """What ``manifold_corrections`` knows of a manifold's two bodies when its solve starts: their poses now and at
    the substep's start, the radii of round ones (0 for others), and their (split) inverse masses and world inverse
    inertias."""

    xa: wp.vec3
    xb: wp.vec3
    xa_prev: wp.vec3
    xb_prev: wp.vec3
    rot_a: wp.mat33
    rot_b: wp.mat33
    q_a_prev: wp.quat
    q_b_prev: wp.quat
    round_a: wp.float32
    round_b: wp.float32
    # Whether the manifold is a ball's point on a face of polyhedron B (``ball_on_face``), and the face's normal now.
    on_face: wp.bool
    face_normal: wp.vec3
    ia: wp.mat33
    ib: wp.mat33
    ima: wp.float32
    imb: wp.float32


@wp.func
def pair_poses(
    bodies: Bodies, c: Contacts, world: int, start: int, round_a: float, round_b: float, on_face: bool
) -> PairStart:
    """The poses of the manifold at row ``start`` (its bodies now and at the substep's start, the radii of round ones,
    and the face's normal now where ``on_face``, ``point_normal``), in a ``PairStart`` whose masses are left 0."""
    a = c.body_a[world, start]
    b = c.body_b[world, start]
    pair = PairStart()
    pair.xa = bodies.position[world, a]
    pair.xb = bodies.position[world, b]
    pair.xa_prev = bodies.prev_position[world, a]
    pair.xb_prev = bodies.prev_position[world, b]
    pair.rot_a = wp.quat_to_matrix(bodies.rotation[world, a])
    pair.rot_b = wp.quat_to_matrix(bodies.rotation[world, b])
    pair.q_a_prev = bodies.prev_rotation[world, a]
    pair.q_b_prev = bodies.prev_rotation[world, b]
    pair.round_a = round_a
    pair.round_b = round_b
    pair.on_face = on_face
    if on_face:
        pair.face_normal = pair.rot_b * wp.quat_rotate_inv(pair.q_b_prev, c.normal[world, start])
    return pair


@wp.func
def point_slip(c: Contacts, world: int, k: int, pair: PairStart) -> wp.vec3:
    """How far contact ``k``'s anchor on A moved against B's since the substep began (``manifold_corrections``)."""
    oa = c.offset_a[world, k]
    ob = c.offset_b[world, k]
    return ((pair.xa + pair.rot_a * oa) - (pair.xa_prev + wp.quat_to_matrix(pair.q_a_prev) * oa)) - (
        (pair.xb + pair.rot_b * ob) - (pair.xb_prev + wp.quat_to_matrix(pair.q_b_prev) * ob)
    )


@wp.func
def on_face(shape: wp.int32, size: wp.vec3, n: wp.vec3) -> bool:
    """Whether ``n`` (body frame, pointing into the solid) lies within ``acos(FACE_COS)`` of a face's inward normal.
    A wedge has no face towards -x or +z: a normal along those meets its low or high edge."""
    for i in range(num_faces(shape)):  # noqa: SIM110 (Warp has no generator expressions)
        if wp.dot(n, face_normal(shape, size, i)) < -FACE_COS:
            return True
    return False


@wp.func
def ball_on_face(poses: Poses, bodies: Bodies, c: Contacts, world: int, start: int) -> bool:
    """Whether the manifold at row ``start`` is a ball's (A a sphere: one point) on a face of a polyhedron B: its
    normal, found at the substep's start, is a face normal of B then (``point_normal``)."""
    b = c.body_b[world, start]
    if poses.shape[world, c.body_a[world, start]] != SPHERE or not is_polyhedron(poses.shape[world, b]):
        return False
    n = wp.quat_rotate_inv(bodies.prev_rotation[world, b], c.normal[world, start])
    return on_face(poses.shape[world, b], poses.size[world, b], n)


@wp.func
def point_normal(c: Contacts, world: int, k: int, pair: PairStart) -> wp.vec3:
    """Contact ``k``'s normal at the poses the manifold's solve starts from. A ball pressing a face of a polyhedron
    (A a sphere, B a box or wedge, ``ball_on_face``) meets the face's plane, which turns with B: so does the normal,
    since the substep began (``pair.face_normal``). Kept as found, a ball run along the face of a box spinning at 25
    rad/s slid 86 mm along it in a substep of hide-and-seek's while the face turned 13 degrees off the normal, and
    ended substeps up to 27.6 mm inside (``test_a_ball_run_at_a_spinning_box_stays_out_of_it``). An edge's or
    corner's normal stays as found: turned with B, the plane through the edge sweeps round with it, and struck balls
    that would have passed the edge 44 mm off. (A capsule's points keep theirs.)"""
    if pair.on_face:
        return pair.face_normal
    return c.normal[world, k]


@wp.func
def point_arms(c: Contacts, world: int, k: int, pair: PairStart):
    """The arms of contact ``k``'s points that face each other now (``facing_arm``), from each body's centre. For a
    ball on a face (``point_normal``), the ball's surface point along the face's normal now and B's point under it
    on the face's plane through the anchor (the point the ball presses now, wherever it slid), so that B's turn moves
    the depth by what it does to the plane."""
    if pair.on_face:
        n = pair.face_normal
        ra = n * pair.round_a
        pa = pair.xa + ra - pair.xb
        return ra, pa - n * wp.dot(pa - pair.rot_b * c.offset_b[world, k], n)
    n = c.normal[world, k]
    ra = facing_arm(pair.rot_a * c.offset_a[world, k], pair.rot_a, pair.q_a_prev, n * pair.round_a)
    rb = facing_arm(pair.rot_b * c.offset_b[world, k], pair.rot_b, pair.q_b_prev, -n * pair.round_b)
    return ra, rb


@wp.func
def point_depth(c: Contacts, world: int, k: int, pair: PairStart) -> float:
    """Contact ``k``'s depth at the poses the manifold's solve starts from (``manifold_corrections``)."""
    ra, rb = point_arms(c, world, k, pair)
    return wp.dot((pair.xa + ra) - (pair.xb + rb), point_normal(c, world, k, pair))


@wp.func
def point_rows(c: Contacts, world: int, k: int, pair: PairStart):
    """What ``manifold_corrections`` reads of contact ``k`` in its sweeps, from the poses its solve starts from: the
    arms' cross products with the normal (``r x n``), the depth, the inverse of the point's effective mass, the
    anchors' slip since the substep began, and the turning part of the effective inverse mass. A CPU thread keeps
    them per point; a GPU thread finds them again where it needs them (the same values)."""
    n = point_normal(c, world, k, pair)
    ra, rb = point_arms(c, world, k, pair)
    ca = wp.cross(ra, n)
    cb = wp.cross(rb, n)
    turning = wp.dot(ca, pair.ia * ca) + wp.dot(cb, pair.ib * cb)
    depth = wp.dot((pair.xa + ra) - (pair.xb + rb), n)
    return ca, cb, depth, 1.0 / (pair.ima + turning + pair.imb), point_slip(c, world, k, pair), turning


@wp.func
def manifold_corrections(
    bodies: Bodies,
    c: Contacts,
    impulse: wp.array2d[wp.float32],
    friction: wp.array2d[wp.vec3],
    world: int,
    start: int,
    end: int,
    up: wp.vec3,
    round_a: float,
    round_b: float,
    split_a: float,
    split_b: float,
    on_face: bool,
):
    """The motion ``level_manifold`` gives the two bodies of one manifold from their present poses:
    translations ``dxa``, ``dxb`` [m] and rotation vectors ``dqa``, ``dqb`` [rad], world frame, not
    applied; the manifold's impulses accumulate as they are found.

    ``split_a``, ``split_b``: each body's inverse mass and inverse inertia are multiplied by these
    (1 for a body solved alone; its split count in a Jacobi step of a level, see ``solve_level``).
    ``on_face``: the manifold is a ball's on a face of a polyhedron (``ball_on_face``).
    """
    a = c.body_a[world, start]
    b = c.body_b[world, start]
    ima, imb = manifold_inverse_masses(bodies, c, world, start, up)
    dxa = wp.vec3(0.0, 0.0, 0.0)
    dqa = wp.vec3(0.0, 0.0, 0.0)
    dxb = wp.vec3(0.0, 0.0, 0.0)
    dqb = wp.vec3(0.0, 0.0, 0.0)
    if ima + imb <= 0.0:
        return dxa, dqa, dxb, dqb
    qa = bodies.rotation[world, a]
    qb = bodies.rotation[world, b]
    ia = world_inv_inertia(ima, qa, bodies.inv_inertia[world, a]) * split_a
    ib = world_inv_inertia(imb, qb, bodies.inv_inertia[world, b]) * split_b
    ima = ima * split_a
    imb = imb * split_b
    mu = wp.max(bodies.friction[world, a], bodies.friction[world, b])
    pair = pair_poses(bodies, c, world, start, round_a, round_b, on_face)
    rot_a = pair.rot_a
    rot_b = pair.rot_b
    pair.ia = ia
    pair.ib = ib
    pair.ima = ima
    pair.imb = imb
    # Per point (the first MAX_MANIFOLD): normal, depth, inverse mass, and the turn of each body per unit impulse.
    count = wp.min(end - start, MAX_MANIFOLD)  # points past the first MAX_MANIFOLD are left out
    # What the sweeps read of a point but can find again from its contact row (``point_rows``: its arms, the turn
    # per unit impulse ``I^-1 (r x n)``, its depth, effective mass and slip at the start) a GPU thread recomputes
    # there rather than keeps: each kept row is 64 to 192 bytes of its local memory per thread (768 in all, which
    # the H100 build of the solver held in local memory with its spills). A CPU thread, alone on its core's cache,
    # keeps them (the same values either way).
    keep = bodies.keep_rows
    arm_a = ManifoldRows()
    arm_b = ManifoldRows()
    pos_a = ManifoldRows()
    pos_b = ManifoldRows()
    turn_a = ManifoldRows()
    turn_b = ManifoldRows()
    slip0 = ManifoldRows()
    depth0 = ManifoldValues()
    inv_w = ManifoldValues()
    translating = bool(True)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
    reach_a = wp.float32(0.0)  # the longest arm of each body to a point of the manifold
    reach_b = wp.float32(0.0)
    deepest = wp.float32(0.0)  # the deepest point's depth at the start
    for i in range(count):
        k = start + i
        n = c.normal[world, k]
        ra = rot_a * c.offset_a[world, k]
        rb = rot_b * c.offset_b[world, k]
        reach_a = wp.max(reach_a, wp.length(ra))
        reach_b = wp.max(reach_b, wp.length(rb))
        ca, cb, depth, w, slip, turning = point_rows(c, world, k, pair)
        deepest = wp.where(i == 0, depth, wp.max(deepest, depth))
        if keep:
            pos_a[i] = ra
            pos_b[i] = rb
            arm_a[i] = ca
            arm_b[i] = cb
            turn_a[i] = ia * ca
            turn_b[i] = ib * cb
            slip0[i] = slip
            depth0[i] = depth
            inv_w[i] = w
        if turning > 0.0 or wp.dot(n, c.normal[world, start]) < 1.0 - 1.0e-6:
            translating = False
    # A pair that no normal impulse can turn (bodies that turn only about the normal, such as upright
    # bodies with a locked tilt resting on a level face): every point of the face moves
    # alike, so how the load splits among them is not determined by the constraints, and the sweep
    # would leave all of it on the point solved first, whose friction alone would then turn the body.
    # Such a face shares its normal impulse equally among its deepest points (the flat face's points,
    # all of them), as soft contacts would with equal penetrations, before friction is solved. They are found once:
    # bit i of ``bearers`` is point i's, and each takes ``share`` of the load.
    bearers = wp.int32(0)
    share = wp.float32(0.0)
    if translating:
        bearing = wp.float32(0.0)
        for i in range(count):
            depth = wp.float32(0.0)
            if keep:
                depth = depth0[i]
            else:
                depth = point_depth(c, world, start + i, pair)
            if depth >= deepest - SHARE_GAP:
                bearing += 1.0
                bearers = bearers | (1 << i)
        share = 1.0 / wp.max(bearing, 1.0)  # bearing >= 1: the deepest point bears
    # The motion the solve gives each body (translation and small rotation vector), linearised.
    linearised = wp.length_sq(up) == 0.0  # a pass before the last
    sweeps = wp.where(linearised, FIRST_SWEEPS, NORMAL_SWEEPS)
    # Points are solved in blocks, normal then friction: one point at a time, or all of them at once where
    # they share their load (``translating``).
    block = wp.where(translating, count, 1)
    for sweep in range(sweeps):
        # The pair's motion before the sweep: the sweeps stop once one moves no point of the manifold by
        # more than SETTLED. Impulses that only shift load between the points of a face (a square face
        # has four points for three degrees of freedom) move nothing and need no more sweeps.
        sweep_xa = dxa
        sweep_qa = dqa
        sweep_xb = dxb
        sweep_qb = dqb
        # Every other sweep of the passes before the last goes backwards (FIRST_SWEEPS).
        backwards = linearised and block == 1 and sweep % 2 == 1
        lo = wp.int32(0)
        while lo < count:
            hi = lo + block
            for slot in range(lo, hi):
                i = wp.where(backwards, count - 1 - slot, slot)
                n = point_normal(c, world, start + i, pair)
                ca = wp.vec3(0.0, 0.0, 0.0)
                cb = wp.vec3(0.0, 0.0, 0.0)
                depth_at_start = wp.float32(0.0)
                w = wp.float32(0.0)
                ta = wp.vec3(0.0, 0.0, 0.0)
                tb = wp.vec3(0.0, 0.0, 0.0)
                if keep:
                    ca = arm_a[i]
                    cb = arm_b[i]
                    depth_at_start = depth0[i]
                    w = inv_w[i]
                    ta = turn_a[i]
                    tb = turn_b[i]
                else:
                    ca, cb, depth_at_start, w, _slip, _turning = point_rows(c, world, start + i, pair)
                    ta = ia * ca
                    tb = ib * cb
                depth = depth_at_start + wp.dot(n, dxa - dxb) + wp.dot(dqa, ca) - wp.dot(dqb, cb)
                l_old = impulse[world, start + i]
                if depth > 0.0 or l_old > 0.0:
                    l_new = wp.max(l_old + depth * w, 0.0)
                    dl = l_new - l_old
                    impulse[world, start + i] = l_new
                    # The impulse dl n acts on B at rb and -dl n on A at ra.
                    dxa -= n * (dl * ima)
                    dqa -= ta * dl
                    dxb += n * (dl * imb)
                    dqb += tb * dl
            if translating:
                # The normal impulses moved the pair along the common normal only: their sum is what counts,
                # shared equally among the deepest points.
                total = wp.float32(0.0)
                for i in range(count):
                    total += impulse[world, start + i]
                for i in range(count):
                    impulse[world, start + i] = total * wp.where(((bearers >> i) & 1) != 0, share, 0.0)
            for slot in range(lo, hi):
                i = wp.where(backwards, count - 1 - slot, slot)
                k = start + i
                f_old = friction[world, k]
                lam = impulse[world, k]
                if lam > 0.0 or wp.length_sq(f_old) > 0.0:
                    n = point_normal(c, world, k, pair)
                    ra = wp.vec3(0.0, 0.0, 0.0)
                    rb = wp.vec3(0.0, 0.0, 0.0)
                    slip_at_start = wp.vec3(0.0, 0.0, 0.0)
                    if keep:
                        ra = pos_a[i]
                        rb = pos_b[i]
                        slip_at_start = slip0[i]
                    else:
                        ra = rot_a * c.offset_a[world, k]
                        rb = rot_b * c.offset_b[world, k]
                        slip_at_start = point_slip(c, world, k, pair)
                    slip = slip_at_start + (dxa + wp.cross(dqa, ra)) - (dxb + wp.cross(dqb, rb))
                    slip = slip - n * wp.dot(slip, n)
                    size = wp.length(slip)
                    f_new = f_old
                    if size > 1.0e-12:
                        f_new = f_old + slip / effective_inverse_mass(ima, ia, ra, imb, ib, rb, slip / size)
                    limit = mu * lam
                    f = wp.length(f_new)
                    if f > limit:
                        f_new = f_new * wp.where(f > 0.0, limit / f, 0.0)
                    friction[world, k] = f_new
                    p = f_new - f_old
                    dxa -= p * ima
                    dqa -= ia * wp.cross(ra, p)
                    dxb += p * imb
                    dqb += ib * wp.cross(rb, p)
            lo = hi
        moved = wp.length(dxa - sweep_xa) + wp.length(dqa - sweep_qa) * reach_a
        moved += wp.length(dxb - sweep_xb) + wp.length(dqb - sweep_qb) * reach_b
        if moved <= SETTLED:
            break
    return dxa, dqa, dxb, dqb


@wp.func
def solve_manifold_velocity(
    bodies: Bodies,
    c: Contacts,
    impulse: wp.array2d[wp.float32],
    normal_speed: wp.array2d[wp.float32],
    world: int,
    start: int,
    end: int,
    h: float,
    gravity: float,
    round_a: float,
    round_b: float,
) -> float:
    """Restitution and dynamic friction of one pair's contacts that pushed; returns how much the normal speed at
    the manifold's centroid changed [m/s] (0 where none pushed), which ends the velocity pass's sweeps.

    Restitution acts once for the manifold at its impulse-weighted centroid: the normal speed
    there becomes ``-e`` times the approach speed before the solve (zero below ``2 |g| h``, which
    keeps resting contacts quiet). Its impulse is shared among the points like the position
    impulse; where it pushes, each point's tangential velocity is opposed with at most ``mu``
    times its share (the position solve's friction has already spent ``mu lambda_n``).
    """
    a = c.body_a[world, start]
    b = c.body_b[world, start]
    ima = inv_mass_of(bodies, world, a)
    imb = inv_mass_of(bodies, world, b)
    if ima + imb <= 0.0:
        return 0.0
    qa = bodies.rotation[world, a]
    qb = bodies.rotation[world, b]
    rot_a = wp.quat_to_matrix(qa)
    rot_b = wp.quat_to_matrix(qb)
    q_a_prev = bodies.prev_rotation[world, a]
    q_b_prev = bodies.prev_rotation[world, b]
    total = wp.float32(0.0)
    ra_sum = wp.vec3(0.0, 0.0, 0.0)
    rb_sum = wp.vec3(0.0, 0.0, 0.0)
    n_sum = wp.vec3(0.0, 0.0, 0.0)
    approach = wp.float32(0.0)
    for k in range(start, end):
        lam = impulse[world, k]
        if lam > 0.0:
            nk = c.normal[world, k]
            total += lam
            # The normal speed at the points that face each other now (see level_manifold).
            ra_sum += facing_arm(rot_a * c.offset_a[world, k], rot_a, q_a_prev, nk * round_a) * lam
            rb_sum += facing_arm(rot_b * c.offset_b[world, k], rot_b, q_b_prev, -nk * round_b) * lam
            n_sum += nk * lam
            approach += normal_speed[world, k] * lam
    if total <= 0.0:
        return 0.0
    ia = world_inv_inertia(ima, qa, bodies.inv_inertia[world, a])
    ib = world_inv_inertia(imb, qb, bodies.inv_inertia[world, b])
    va = bodies.linear_velocity[world, a]
    wa = bodies.angular_velocity[world, a]
    vb = bodies.linear_velocity[world, b]
    wb = bodies.angular_velocity[world, b]
    n = wp.normalize(n_sum)
    ra = ra_sum / total
    rb = rb_sum / total
    approach = approach / total
    vn = wp.dot(n, (va + wp.cross(wa, ra)) - (vb + wp.cross(wb, rb)))
    e = wp.max(bodies.restitution[world, a], bodies.restitution[world, b])
    if approach <= 2.0 * wp.abs(gravity) * h:
        e = 0.0
    target = wp.min(-e * approach, 0.0)
    # Normal impulse on B (A gets the opposite); > 0 pushes the bodies apart.
    push_back = (vn - target) / effective_inverse_mass(ima, ia, ra, imb, ib, rb, n)
    p = n * push_back
    va -= p * ima
    wa -= ia * wp.cross(ra, p)
    vb += p * imb
    wb += ib * wp.cross(rb, p)
    mu = wp.max(bodies.friction[world, a], bodies.friction[world, b])
    if push_back > 0.0 and mu > 0.0:
        for k in range(start, end):
            lam = impulse[world, k]
            if lam > 0.0:
                nk = c.normal[world, k]
                rak = rot_a * c.offset_a[world, k]
                rbk = rot_b * c.offset_b[world, k]
                v = (va + wp.cross(wa, rak)) - (vb + wp.cross(wb, rbk))
                vt = v - nk * wp.dot(nk, v)
                speed_t = wp.length(vt)
                if speed_t > 1.0e-9:
                    t = vt / speed_t
                    # Coulomb: at most mu times the point's share, and never more than stops the slip.
                    f = wp.min(
                        mu * push_back * lam / total, speed_t / effective_inverse_mass(ima, ia, rak, imb, ib, rbk, t)
                    )
                    p = t * f
                    va -= p * ima
                    wa -= ia * wp.cross(rak, p)
                    vb += p * imb
                    wb += ib * wp.cross(rbk, p)
    if ima > 0.0:
        bodies.linear_velocity[world, a] = va
        bodies.angular_velocity[world, a] = wa
    if imb > 0.0:
        bodies.linear_velocity[world, b] = vb
        bodies.angular_velocity[world, b] = wb
    return wp.abs(vn - target)


# Column bundles of step_bodies (whole columns, indexed [world, row]).
SolverBodies = ecs.bundle(
    "SolverBodies",
    [
        "alive",
        ("shape", wp.int32),
        ("size", wp.vec3),
        ("mass", wp.float32),
        ("inv_inertia", wp.mat33),
        ("response", wp.int32),
        ("locked_by", wp.int32),
        ("friction", wp.float32),
        ("restitution", wp.float32),
        ("force", wp.vec3),
        ("torque", wp.vec3),
        ("drag", wp.vec3),
    ],
)
SolverMotion = ecs.bundle(
    "SolverMotion",
    [
        ("position", wp.vec3),
        ("rotation", wp.quat),
        ("linear_velocity", wp.vec3),
        ("angular_velocity", wp.vec3),
        ("prev_position", wp.vec3),
        ("prev_rotation", wp.quat),
        # Scratch of the level solve (solve_level).
        ("split_count", wp.int32),
        ("split_move", wp.vec3),
        ("split_turn", wp.vec3),
        ("split_rank", wp.int32),
        ("substep_reach", wp.float32),
        ("velocity_batch", wp.int32),
        ("body_vertices", wp.vec3, (8,)),
        ("motion_lock", wp.int32),
        ("motion_inertia", wp.mat33),
        ("sleep_count", wp.int32),
        ("body_before", BodyRecord),
    ],
)
SolverPairs = ecs.bundle("SolverPairs", [("pair_body_a", wp.int32), ("pair_body_b", wp.int32)])
SolverPairsBefore = ecs.bundle("SolverPairsBefore", [("pair_before", wp.vec4i), ("pair_margin_before", wp.float32)])
SolverContacts = ecs.bundle(
    "SolverContacts",
    [
        "alive",
        ("contact_body_a", wp.int32),
        ("contact_body_b", wp.int32),
        ("contact_normal", wp.vec3),
        ("contact_offset_a", wp.vec3),
        ("contact_offset_b", wp.vec3),
        ("contact_depth", wp.float32),
        ("contact_normal_speed", wp.float32),
        ("contact_impulse", wp.float32),
        ("contact_friction", wp.vec3),
        ("contact_order", wp.int32),
        ("contact_height", wp.float32),
        ("contact_last_body_a", wp.int32),
        ("contact_last_body_b", wp.int32),
        ("contact_last_offset_a", wp.vec3),
        ("contact_last_offset_b", wp.vec3),
        ("contact_last_impulse", wp.float32),
        ("contact_last_friction", wp.vec3),
        ("contact_last_normal", wp.vec3),
        ("contact_level", wp.int32),
        ("contact_key", wp.float32),
        ("contact_move_a", wp.vec3),
        ("contact_turn_a", wp.vec3),
        ("contact_move_b", wp.vec3),
        ("contact_turn_b", wp.vec3),
    ],
)


@wp.struct
class LastContacts:
    """The contacts of the substep before (``CONTACT_SCRATCH_COMPONENTS``)."""

    body_a: wp.array2d[wp.int32]
    body_b: wp.array2d[wp.int32]
    offset_a: wp.array2d[wp.vec3]
    offset_b: wp.array2d[wp.vec3]
    impulse: wp.array2d[wp.float32]
    friction: wp.array2d[wp.vec3]
    normal: wp.array2d[wp.vec3]


@wp.func
def keep_contact(
    c: Contacts,
    last: LastContacts,
    impulse: wp.array2d[wp.float32],
    friction: wp.array2d[wp.vec3],
    world: int,
    k: int,
):
    """Copies contact row ``k`` and its impulses into ``last`` before the narrowphase overwrites them."""
    last.body_a[world, k] = c.body_a[world, k]
    last.body_b[world, k] = c.body_b[world, k]
    last.offset_a[world, k] = c.offset_a[world, k]
    last.offset_b[world, k] = c.offset_b[world, k]
    last.impulse[world, k] = impulse[world, k]
    last.friction[world, k] = friction[world, k]
    last.normal[world, k] = c.normal[world, k]


@wp.func
def warmed_point(impulse: wp.array2d[wp.float32], friction: wp.array2d[wp.vec3], world: int, k: int) -> bool:
    """Whether contact row ``k`` starts with an impulse (``warm_corrections``)."""
    return impulse[world, k] > 0.0 or wp.length_sq(friction[world, k]) > 0.0


@wp.func
def warm_corrections(
    bodies: Bodies,
    splits: Splits,
    c: Contacts,
    last: LastContacts,
    impulse: wp.array2d[wp.float32],
    friction: wp.array2d[wp.vec3],
    order: wp.array2d[wp.int32],
    world: int,
    count: int,
    manifolds: int,
    last_count: int,
    h: float,
    lane: int,
    lanes: int,
):
    """The warm start of the manifolds ``order[lane::lanes]``: their points' impulses from the substep before,
    and the move those give each body, kept at the manifold's first row (``warm_start``, substeps of ``h`` s), not
    applied."""
    for m in range(lane, manifolds, lanes):
        k = order[world, m]
        e = manifold_end(c, world, k, count)
        a = c.body_a[world, k]
        b = c.body_b[world, k]
        # The pair's manifold of the substep before: where the pair's rows start now, most often (the
        # narrowphase finds the same pairs in the same order), else found by a scan.
        j = wp.int32(0)
        je = wp.int32(0)
        if k < last_count and last.body_a[world, k] == a and last.body_b[world, k] == b:
            if k == 0:  # noqa: SIM114 (Warp evaluates every operand of `or`: row k - 1 must exist)
                j = k
            elif last.body_a[world, k - 1] != a or last.body_b[world, k - 1] != b:
                j = k
        while j < last_count:
            je = j + 1
            while (
                je < last_count
                and last.body_a[world, je] == last.body_a[world, j]
                and last.body_b[world, je] == last.body_b[world, j]
            ):
                je += 1
            if last.body_a[world, j] == a and last.body_b[world, j] == b:
                break
            j = je
        ima = inv_mass_of(bodies, world, a)
        imb = inv_mass_of(bodies, world, b)
        qa = bodies.rotation[world, a]
        qb = bodies.rotation[world, b]
        dxa = wp.vec3(0.0, 0.0, 0.0)
        dqa = wp.vec3(0.0, 0.0, 0.0)
        dxb = wp.vec3(0.0, 0.0, 0.0)
        dqb = wp.vec3(0.0, 0.0, 0.0)
        for i in range(k, e):
            lam = wp.float32(0.0)
            f = wp.vec3(0.0, 0.0, 0.0)
            best = wp.float32(WARM_RADIUS)
            for p in range(j, je):  # empty where the pair had no manifold
                d = wp.min(
                    wp.length(c.offset_a[world, i] - last.offset_a[world, p]),
                    wp.length(c.offset_b[world, i] - last.offset_b[world, p]),
                )
                if d < best:
                    best = d
                    lam = last.impulse[world, p]
                    f = last.friction[world, p]
            # The friction impulse, up to the one that would slide the lighter body at WARM_LIMIT: a cube struck by
            # one 1000 times its mass took the friction of the full load on its points, was turned 150 degrees by
            # it in the warm start alone, and left through a wall at 290 m/s.
            lam = wp.min(lam, WARM_LIMIT * h * h / wp.max(ima + imb, 1.0e-12))
            slide = WARM_LIMIT * h * h / wp.max(wp.max(ima, imb), 1.0e-12)
            f_len = wp.length(f)
            if f_len > slide:
                f = f * (slide / f_len)
            impulse[world, i] = lam
            friction[world, i] = f
            # A manifold that moves neither body (static, locked or sleeping ones: apply_warm moves none) keeps its
            # impulses for when one moves again, and skips the moves.
            if ima + imb > 0.0 and warmed_point(impulse, friction, world, i):
                # lam n + f acts on B at its anchor, the opposite on A.
                total = c.normal[world, i] * lam + f
                ra = wp.quat_rotate(qa, c.offset_a[world, i])
                rb = wp.quat_rotate(qb, c.offset_b[world, i])
                # (A body that does not move gets these, but they are applied only to one that does.)
                dxa -= total * ima
                dqa -= world_inv_inertia_apply(qa, bodies.inv_inertia[world, a], wp.cross(ra, total))
                dxb += total * imb
                dqb += world_inv_inertia_apply(qb, bodies.inv_inertia[world, b], wp.cross(rb, total))
        splits.move_a[world, k] = dxa
        splits.turn_a[world, k] = dqa
        splits.move_b[world, k] = dxb
        splits.turn_b[world, k] = dqb


@wp.func
def apply_warm(
    bodies: Bodies,
    splits: Splits,
    c: Contacts,
    impulse: wp.array2d[wp.float32],
    friction: wp.array2d[wp.vec3],
    order: wp.array2d[wp.int32],
    world: int,
    count: int,
    manifolds: int,
):
    """Moves each body by the sum of what the warm start of its manifolds gives it (``warm_corrections``), summed
    in the manifolds' order."""
    nb = bodies.alive.shape[1]
    clear_splits(splits, world, nb)
    for m in range(manifolds):
        k = order[world, m]
        if manifold_warmed(impulse, friction, world, k, manifold_end(c, world, k, count)):
            a = c.body_a[world, k]
            b = c.body_b[world, k]
            if inv_mass_of(bodies, world, a) > 0.0:
                splits.count[world, a] += 1
                splits.move[world, a] = splits.move[world, a] + splits.move_a[world, k]
                splits.turn[world, a] = splits.turn[world, a] + splits.turn_a[world, k]
            if inv_mass_of(bodies, world, b) > 0.0:
                splits.count[world, b] += 1
                splits.move[world, b] = splits.move[world, b] + splits.move_b[world, k]
                splits.turn[world, b] = splits.turn[world, b] + splits.turn_b[world, k]
    for i in range(nb):
        if splits.count[world, i] > 0:
            move_body(bodies, world, i, splits.move[world, i], splits.turn[world, i])
            splits.count[world, i] = 0
            splits.move[world, i] = wp.vec3(0.0, 0.0, 0.0)
            splits.turn[world, i] = wp.vec3(0.0, 0.0, 0.0)


@wp.func
def manifold_warmed(impulse: wp.array2d[wp.float32], friction: wp.array2d[wp.vec3], world: int, start: int, end: int):
    """Whether a point of the manifold of rows ``start`` to ``end`` starts with an impulse (``warmed_point``)."""
    warmed = bool(False)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
    for i in range(start, end):
        if warmed_point(impulse, friction, world, i):
            warmed = True
    return warmed


@wp.func
def apply_warm_lanes(
    bodies: Bodies,
    splits: Splits,
    c: Contacts,
    impulse: wp.array2d[wp.float32],
    friction: wp.array2d[wp.vec3],
    order: wp.array2d[wp.int32],
    world: int,
    count: int,
    manifolds: int,
    lane: int,
    lanes: int,
):
    """``apply_warm`` with a lane per body: each sums what the warmed manifolds give its body, in the manifolds'
    order as ``apply_warm`` does, so the move is the same bit for bit; leaves the body scratch cleared as it does."""
    for i in range(lane, bodies.alive.shape[1], lanes):
        parts = wp.int32(0)
        move = wp.vec3(0.0, 0.0, 0.0)
        turn = wp.vec3(0.0, 0.0, 0.0)
        if inv_mass_of(bodies, world, i) > 0.0:
            for m in range(manifolds):
                k = order[world, m]
                a = c.body_a[world, k]
                b = c.body_b[world, k]
                if a == i or b == i:  # noqa: SIM102 (Warp's `and` would scan every manifold's points)
                    if manifold_warmed(impulse, friction, world, k, manifold_end(c, world, k, count)):
                        parts += 1
                        if a == i:
                            move = move + splits.move_a[world, k]
                            turn = turn + splits.turn_a[world, k]
                        else:
                            move = move + splits.move_b[world, k]
                            turn = turn + splits.turn_b[world, k]
        if parts > 0:
            move_body(bodies, world, i, move, turn)
        splits.count[world, i] = 0
        splits.move[world, i] = wp.vec3(0.0, 0.0, 0.0)
        splits.turn[world, i] = wp.vec3(0.0, 0.0, 0.0)


@wp.func
def warm_start(
    bodies: Bodies,
    splits: Splits,
    c: Contacts,
    last: LastContacts,
    impulse: wp.array2d[wp.float32],
    friction: wp.array2d[wp.vec3],
    order: wp.array2d[wp.int32],
    world: int,
    count: int,
    manifolds: int,
    last_count: int,
    h: float,
):
    """Starts each contact from the impulses its point had in the substep before, and applies them.

    A point of the new manifold of a pair takes the normal and friction impulses of the nearest point
    of the pair's manifold in the substep before, when the anchors of the two lie within
    ``WARM_RADIUS`` of each other on either body; others start from zero. The normal impulse is at most the one
    that would push the pair apart at ``WARM_LIMIT`` over the substep (``h`` s), so that a body that cannot get out
    of an overlap does not pile up impulse substep after substep. The impulses are applied to
    the bodies as the solve would (equal and opposite, at the anchors), each body moved by the sum of
    what its manifolds give it, so the order of the manifolds does not matter. A body at rest then
    starts the solve where the substep before left it, and the sweeps stop after one or two instead
    of converging from nothing every substep; where the contacts changed, the sweeps take back what
    no longer holds (accumulated impulses go down to zero).
    """
    warm_corrections(bodies, splits, c, last, impulse, friction, order, world, count, manifolds, last_count, h, 0, 1)
    apply_warm(bodies, splits, c, impulse, friction, order, world, count, manifolds)


# Lanes per world of step_bodies_block: one warp, which the widest level of hide-and-seek (its floor manifolds) fits.
SOLVER_LANES = 32
# Lanes per world a block may have (PhysicsConfig.solver_lanes): a power of two, so that on CUDA a warp of 32 threads
# holds 32 // lanes worlds, each on lanes that start at a multiple of lanes.
LANE_CHOICES = (4, 8, 16, 32)
_GROUP_MASK = (
    "unsigned mask = (lanes >= 32 ? 0xffffffffu : ((1u << lanes) - 1u)) << (threadIdx.x & ~(unsigned)(lanes - 1));\n"
)


@wp.func_native("#if defined(__CUDA_ARCH__)\nreturn lanes < (int)blockDim.x ? 1 : 0;\n#else\nreturn 0;\n#endif\n")
def grouped(lanes: int) -> int:
    """1 on CUDA where a block (one warp) holds several worlds of ``lanes`` lanes each, 0 where it holds one world
    (and always on CPU, where a block is one world's): whether the block's lanes meet by warp-level operations over
    the world's lanes (``group_sync``, ``group_share``, ``group_any``) rather than the block's tile operations."""
    ...


@wp.func_native("#if defined(__CUDA_ARCH__)\n" + _GROUP_MASK + "__syncwarp(mask);\n#endif\n")
def group_sync(lanes: int):
    """``block_sync`` over the world's ``lanes`` lanes of a warp (``__syncwarp`` with their mask, which orders their
    memory accesses too); CUDA only."""
    ...


@wp.func_native(
    "#if defined(__CUDA_ARCH__)\n" + _GROUP_MASK + "__syncwarp(mask);\nreturn __shfl_sync(mask, value, "
    "threadIdx.x & ~(unsigned)(lanes - 1));\n#else\nreturn value;\n#endif\n"
)
def group_share(value: int, lanes: int) -> int:
    """``block_share`` over the world's ``lanes`` lanes of a warp: its first lane's ``value``; CUDA only."""
    ...


@wp.func_native(
    "#if defined(__CUDA_ARCH__)\n" + _GROUP_MASK + "__syncwarp(mask);\nreturn __any_sync(mask, flag) ? 1 : 0;\n"
    "#else\nreturn flag;\n#endif\n"
)
def group_any(flag: int, lanes: int) -> int:
    """``block_any`` over the world's ``lanes`` lanes of a warp; CUDA only."""
    ...


@wp.func
def block_sync(lanes: int):
    """Waits until every one of the world's ``lanes`` lanes gets here; what any of them wrote before, every one
    then sees (a tile broadcast: ``__syncthreads`` on CUDA, a barrier of the block's fibers on CPU; ``group_sync``
    where a CUDA block holds several worlds)."""
    if grouped(lanes) != 0:
        group_sync(lanes)
    else:
        wp.tile_from_thread(shape=(1,), value=0, thread_idx=0)


@wp.func
def block_share(value: int, lanes: int) -> int:
    """The world's first lane's ``value``, on every one of its ``lanes`` lanes, once every one gets here."""
    if grouped(lanes) != 0:
        return group_share(value, lanes)
    return wp.tile_from_thread(shape=(1,), value=value, thread_idx=0)[0]


# A world's cache (``PhysicsConfig.solver_cache``): the body and contact columns that the solver rewrites over
# and over, kept where a block reaches them fastest while a kernel runs (shared memory on CUDA, a buffer of the
# world's own on CPU), read in at the kernel's start and written back at its end. It holds CACHE_BODIES bodies and
# CACHE_CONTACTS contact rows; physics.solver_systems refuses larger tables for it.
CACHE_BODIES = 64
CACHE_CONTACTS = 256
# (column, element type, rows: "bodies" or "contacts"); the columns of one element type lie side by side.
CACHE_COLUMNS = (
    ("position", "vec3", "bodies"),
    ("rotation", "quat", "bodies"),
    ("prev_position", "vec3", "bodies"),
    ("prev_rotation", "quat", "bodies"),
    ("linear_velocity", "vec3", "bodies"),
    ("angular_velocity", "vec3", "bodies"),
    ("split_count", "int", "bodies"),
    ("split_move", "vec3", "bodies"),
    ("split_turn", "vec3", "bodies"),
    ("contact_impulse", "float", "contacts"),
    ("contact_friction", "vec3", "contacts"),
    ("contact_body_a", "int", "contacts"),
    ("contact_body_b", "int", "contacts"),
    ("contact_normal", "vec3", "contacts"),
    ("contact_offset_a", "vec3", "contacts"),
    ("contact_offset_b", "vec3", "contacts"),
    ("contact_depth", "float", "contacts"),
)
_CACHE_TYPES = {"vec3": ("wp::vec3", 12), "quat": ("wp::quat", 16), "float": ("float", 4), "int": ("int", 4)}


def _cache_layout() -> tuple[dict[str, int], dict[str, tuple[int, int]], int]:
    """Each column's byte offset within its element type's part of the cache, each part's (start, bytes), and the
    cache's bytes (each part starts 16-byte aligned)."""
    at: dict[str, int] = {}
    parts: dict[str, tuple[int, int]] = {}
    start = 0
    for kind, (_ctype, size) in _CACHE_TYPES.items():
        used = 0
        for name, column_kind, rows in CACHE_COLUMNS:
            if column_kind == kind:
                at[name] = used
                used += size * (CACHE_BODIES if rows == "bodies" else CACHE_CONTACTS)
        parts[kind] = (start, used)
        start += (used + 15) // 16 * 16
    return at, parts, start


CACHE_AT, _CACHE_PARTS, CACHE_BYTES = _cache_layout()


@wp.func_native(
    "#if defined(__CUDA_ARCH__)\nreturn 0;\n#else\nif (lane != 0) return 0;\n"
    f"void* p = malloc({CACHE_BYTES});\nmemset(p, 0xff, {CACHE_BYTES});\nreturn (uint64_t)p;\n#endif\n"
)
def cache_open(lane: int) -> wp.uint64:
    """A world's cache on CPU: a buffer of ``CACHE_BYTES`` that lane 0 takes from the heap, every byte 0xff (NaN, -1:
    a row written back that was neither read in nor written shows up), 0 on other lanes (``block_share_address``
    hands it to them), given back by ``cache_close``. 0 on CUDA, where each element type has a shared-memory array
    of the block's own (``cached_vec3`` ...)."""
    ...


@wp.func_native("#if !defined(__CUDA_ARCH__)\nif (lane == 0) free((void*)cache);\n#endif\n")
def cache_close(cache: wp.uint64, lane: int):
    """Gives back what ``cache_open`` took (on CPU, by lane 0, once every lane is done with it)."""
    ...


@wp.func
def block_share_address(value: wp.uint64) -> wp.uint64:
    """Lane 0's ``value`` (an address), on every lane of the block."""
    return wp.tile_from_thread(shape=(1,), value=value, thread_idx=0)[0]


@wp.func
def exchange(cache: wp.array2d(dtype=Any), table: wp.array2d(dtype=Any), world: int, i: int, back: bool):
    """Row ``i`` of ``world`` from the table into the cache, or ``back`` from the cache into the table."""
    if back:
        table[world, i] = cache[world, i]
    else:
        cache[world, i] = table[world, i]


@wp.func
def exchange_cache(
    bodies: Bodies,
    splits: Splits,
    c: Contacts,
    impulse: wp.array2d[wp.float32],
    friction: wp.array2d[wp.vec3],
    motion: SolverMotion,
    contacts: SolverContacts,
    world: int,
    nb: int,
    rows: int,
    impulse_rows: int,
    lane: int,
    lanes: int,
    back: bool,
):
    """Reads the world's ``CACHE_COLUMNS`` from the tables into its cache (``bodies``, ``splits``, ``c``, ``impulse``
    and ``friction`` viewing the cache), or ``back``, writes them out, on the block's lanes side by side: every body
    row, the first ``rows`` contact rows and the first ``impulse_rows`` rows of the impulses (those in use)."""
    for i in range(lane, nb, lanes):
        exchange(bodies.position, motion.position, world, i, back)
        exchange(bodies.rotation, motion.rotation, world, i, back)
        exchange(bodies.prev_position, motion.prev_position, world, i, back)
        exchange(bodies.prev_rotation, motion.prev_rotation, world, i, back)
        exchange(bodies.linear_velocity, motion.linear_velocity, world, i, back)
        exchange(bodies.angular_velocity, motion.angular_velocity, world, i, back)
        exchange(splits.count, motion.split_count, world, i, back)
        exchange(splits.move, motion.split_move, world, i, back)
        exchange(splits.turn, motion.split_turn, world, i, back)
    for k in range(lane, rows, lanes):
        exchange(c.body_a, contacts.contact_body_a, world, k, back)
        exchange(c.body_b, contacts.contact_body_b, world, k, back)
        exchange(c.normal, contacts.contact_normal, world, k, back)
        exchange(c.offset_a, contacts.contact_offset_a, world, k, back)
        exchange(c.offset_b, contacts.contact_offset_b, world, k, back)
        exchange(c.depth, contacts.contact_depth, world, k, back)
    for k in range(lane, impulse_rows, lanes):
        exchange(impulse, contacts.contact_impulse, world, k, back)
        exchange(friction, contacts.contact_friction, world, k, back)


def _cache_view_snippet(kind: str) -> str:
    """A cache column as a ``[worlds, rows]`` array whose rows are the same for every world (a stride of 0 between
    worlds), so a world's kernel indexes it ``[world, i]`` as it does the table's column. On CUDA the element
    type's shared-memory array is named directly, so the compiler addresses it as shared memory."""
    ctype, _size = _CACHE_TYPES[kind]
    start, used = _CACHE_PARTS[kind]
    return (
        "#if defined(__CUDA_ARCH__)\n"
        f"__shared__ __align__(16) unsigned char part[{max(used, 16)}];\n"
        f"wp::array_t<{ctype}> a(({ctype}*)(part + at), worlds, rows);\n"
        "#else\n"
        f"wp::array_t<{ctype}> a(({ctype}*)(cache + {start} + at), worlds, rows);\n"
        "#endif\n"
        "a.strides[0] = 0;\n"
        "return a;\n"
    )


@wp.func_native(_cache_view_snippet("vec3"))
def cached_vec3(cache: wp.uint64, at: int, worlds: int, rows: int) -> wp.array2d[wp.vec3]:
    """The vec3 column at byte ``at`` of the cache's vec3 part, as the ``[worlds, rows]`` array that every world
    indexes (``_cache_view_snippet``)."""
    ...


@wp.func_native(_cache_view_snippet("quat"))
def cached_quat(cache: wp.uint64, at: int, worlds: int, rows: int) -> wp.array2d[wp.quat]:
    """The quat column at byte ``at`` of the cache's quat part (see ``cached_vec3``)."""
    ...


@wp.func_native(_cache_view_snippet("float"))
def cached_float(cache: wp.uint64, at: int, worlds: int, rows: int) -> wp.array2d[wp.float32]:
    """The float32 column at byte ``at`` of the cache's float part (see ``cached_vec3``)."""
    ...


@wp.func_native(_cache_view_snippet("int"))
def cached_int(cache: wp.uint64, at: int, worlds: int, rows: int) -> wp.array2d[wp.int32]:
    """The int32 column at byte ``at`` of the cache's int part (see ``cached_vec3``)."""
    ...


@wp.func
def kept_rows(
    bodies: Bodies,
    sleep_count: wp.array2d[wp.int32],
    kept: SolverPairsBefore,
    world: int,
    k: int,
    a: int,
    b: int,
    margin: float,
    rest_substeps: int,
    first_free: int,
    last_count: int,
) -> int:
    """Where the rows that pair ``k`` (bodies ``a``, ``b``) made in the substep before begin, for the narrowphase to
    copy instead of colliding the pair again, or -1. They are the rows it would make: both bodies are where they
    were then (``held_still``; ``rest_substeps`` is ``sleep_substeps``, or 0 where ``keep_resting_contacts`` is
    off), with the same margin, and ``collide`` reads nothing else. They must still be in the table (the world's
    ``last_count`` rows, none cut off at its capacity) and not yet overwritten (from ``first_free`` on, the rows
    this narrowphase has not written; a pair that made none has none to keep). Row ``k`` of the ``pair`` archetype
    must have held this pair then (``PairBefore``): the broadphase may list other pairs in another step."""
    before = kept.pair_before[world, k]
    if before[0] != a or before[1] != b or kept.pair_margin_before[world, k] != margin:
        return -1
    start = before[2]
    if before[3] > 0 and (start < first_free or start + before[3] > last_count):
        return -1
    if not held_still(bodies, sleep_count, world, a, rest_substeps):
        return -1
    if not held_still(bodies, sleep_count, world, b, rest_substeps):
        return -1
    return start


@wp.func
def copy_row(c: Contacts, world: int, src: int, dst: int):
    c.body_a[world, dst] = c.body_a[world, src]
    c.body_b[world, dst] = c.body_b[world, src]
    c.normal[world, dst] = c.normal[world, src]
    c.offset_a[world, dst] = c.offset_a[world, src]
    c.offset_b[world, dst] = c.offset_b[world, src]
    c.depth[world, dst] = c.depth[world, src]


@wp.func
def pass_on_reach(
    bodies: Bodies,
    poses: Poses,
    force: wp.array2d[wp.vec3],
    torque: wp.array2d[wp.vec3],
    sleep_count: wp.array2d[wp.int32],
    pairs: SolverPairs,
    reach: wp.array2d[wp.float32],
    world: int,
    pair_count: int,
    contact_margin: float,
    lane: int,
    lanes: int,
) -> bool:
    """One sweep of ``lane::lanes`` of the world's candidate pairs: where two bodies may touch in the substep (their
    ``box_gap`` within ``contact_margin`` and both reaches), the one that the other can push along (``takes_reach``)
    takes the other's reach less that gap, if larger. Returns whether any reach grew. A body pushed by a faster one
    moves as far as its pusher has left to go once they touch, so the margins of its own pairs must allow for that:
    a box at rest 7 cm from a wall, struck by a held box at 10 m/s, made no row with the wall and was driven 5 cm
    into it within one substep. Sweeps until none grows give every body the largest reach that a chain of bodies
    that may touch passes on to it: the least fixed point, whatever the order of the sweeps and lanes (a reach only
    grows, to another body's less a gap between the poses the substep starts from)."""
    grew = bool(False)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
    for k in range(lane, pair_count, lanes):
        a = pairs.pair_body_a[world, k]
        b = pairs.pair_body_b[world, k]
        # Only the body of the larger reach can pass one on.
        src = wp.where(reach[world, a] > reach[world, b], a, b)
        dst = wp.where(src == a, b, a)
        solid = poses.shape[world, a] != PLANE and poses.shape[world, b] != PLANE
        if solid and takes_reach(bodies, force, torque, sleep_count, reach, world, src, dst):
            gap = box_gap(poses, world, a, b)
            far = reach[world, src] - wp.max(gap, 0.0)
            if gap <= contact_margin + reach[world, a] + reach[world, b] and far > reach[world, dst]:  # noqa: SIM102
                if wp.atomic_max(reach, world, dst, far) < far:
                    grew = True
    return grew


@wp.func
def normal_before(
    before: LastContacts, kept: SolverPairsBefore, world: int, k: int, a: int, b: int, last_count: int
) -> wp.vec3:
    """The normal of the first contact that pair ``k`` (bodies ``a``, ``b``) made in the substep before, from the
    lower ``ShapeType`` into the other as ``collide`` orders them, or zeros where it made none. Where row ``k`` of the
    ``pair`` archetype held this pair then (``PairBefore``), its rows start where that records; else (the broadphase
    listed the pairs anew in this step's first substep) they are looked up."""
    before_k = kept.pair_before[world, k]
    if before_k[0] == a and before_k[1] == b:
        start = before_k[2]
        if before_k[3] > 0 and start < last_count:
            return before.normal[world, start]
        return wp.vec3(0.0, 0.0, 0.0)
    for r in range(last_count):
        ra = before.body_a[world, r]
        rb = before.body_b[world, r]
        if (ra == a and rb == b) or (ra == b and rb == a):
            return before.normal[world, r]
    return wp.vec3(0.0, 0.0, 0.0)


@wp.func
def never_pushed(bodies: Bodies, world: int, i: int) -> bool:
    """Whether body ``i`` is static or kinematic: no contact moves it, whatever its lock or sleep."""
    return bodies.response[world, i] != DYNAMIC


@wp.func
def pair_hint(
    before: LastContacts,
    kept: SolverPairsBefore,
    bodies: Bodies,
    poses: Poses,
    world: int,
    k: int,
    a: int,
    b: int,
    margin: float,
    last_count: int,
) -> wp.vec3:
    """The axis ``collide`` should keep for pair ``k`` (``normal_before``): for two polyhedra that may touch (the only
    pairs that choose an axis), one of them static or kinematic, which no push moves off the axis along which they
    met (a ramp shoved slope first into a wall). Between two bodies that move, the least overlap decides as before: a
    cube pushed onto a ramp's low edge rides up the slope rather than digging into the edge, and two planks turning
    against each other are pushed apart across the nearer face."""
    if is_polyhedron(poses.shape[world, a]) and is_polyhedron(poses.shape[world, b]):  # noqa: SIM102
        # (Warp evaluates every operand of `and`: the boxes' test only for two polyhedra.)
        if never_pushed(bodies, world, a) or never_pushed(bodies, world, b):  # noqa: SIM102
            if boxes_apart(poses, world, a, b) <= margin:
                return normal_before(before, kept, world, k, a, b, last_count)
    return wp.vec3(0.0, 0.0, 0.0)


@wp.func
def narrowphase(
    c: Contacts,
    poses: Poses,
    pairs: SolverPairs,
    kept: SolverPairsBefore,
    before: LastContacts,
    bodies: Bodies,
    sleep_count: wp.array2d[wp.int32],
    reach: wp.array2d[wp.float32],
    world: int,
    pair_count: int,
    contact_margin: float,
    rest_substeps: int,
    last_count: int,
) -> int:
    """Collides the world's candidate pairs in order into the contact table, each with the speculative margin of
    its two bodies' reach, or copies the rows a pair of bodies held still made in the substep before
    (``kept_rows``; from later rows, so each is read before it is overwritten); returns the world's contact count
    (at most the table's capacity; the contacts past it are counted in ``c.overflow``). Records what each pair
    made in ``kept``."""
    row = wp.int32(0)
    for k in range(pair_count):
        a = pairs.pair_body_a[world, k]
        b = pairs.pair_body_b[world, k]
        margin = contact_margin + reach[world, a] + reach[world, b]
        first = row
        start = kept_rows(bodies, sleep_count, kept, world, k, a, b, margin, rest_substeps, first, last_count)
        kept.pair_margin_before[world, k] = margin
        if start >= 0:
            n = kept.pair_before[world, k][3]
            for i in range(n):
                copy_row(c, world, start + i, first + i)
            row = first + n
        else:
            hint = pair_hint(before, kept, bodies, poses, world, k, a, b, margin, last_count)
            row = collide(c, poses, world, a, b, margin, first, hint)
        kept.pair_before[world, k] = wp.vec4i(a, b, first, row - first)
    return wp.min(row, c.end)


@wp.func
def narrowphase_lanes(
    c: Contacts,
    poses: Poses,
    pairs: SolverPairs,
    kept: SolverPairsBefore,
    before: LastContacts,
    bodies: Bodies,
    sleep_count: wp.array2d[wp.int32],
    contacts: SolverContacts,
    reach: wp.array2d[wp.float32],
    world: int,
    pair_count: int,
    contact_margin: float,
    rest_substeps: int,
    last_count: int,
    lane: int,
    lanes: int,
):
    """``narrowphase`` over the world's pairs on the block's lanes, with the same table bit for bit.

    Rounds of one pair per lane: each lane collides its pair into a stage of its own (``span`` rows from
    ``lane * span`` of contact columns that are free until the narrowphase ends: ``ContactMoveA`` for the normal,
    ``ContactTurnA`` and ``ContactMoveB`` for the offsets, ``ContactNormalSpeed`` for the depth) and writes how
    many rows its pair made in ``ContactOrder[lane]``; each lane then sums the counts of the lanes before its own
    and copies its rows to that place in the table. They are the rows the serial narrowphase writes, since a pair
    only looks back at its own rows (``already_touching``). A round in which a pair makes more rows than its stage
    holds is done again one pair at a time, each with the whole stage. Past the table's capacity each row counts
    in ``c.overflow`` as ``emit`` counts it (a pair that straddles the end may count a few fewer: its stage keeps
    every row, so it drops duplicates that the serial pass no longer sees). A pair of bodies held still copies its
    rows of the substep before into its stage instead (``kept_rows``: rows from the round's first on are not yet
    overwritten), the rows ``collide`` would make."""
    stage = Contacts()
    stage.body_a = contacts.contact_level  # written by emit, never read back: the pair gives both bodies
    stage.body_b = contacts.contact_level
    stage.normal = contacts.contact_move_a
    stage.offset_a = contacts.contact_turn_a
    stage.offset_b = contacts.contact_move_b
    stage.depth = contacts.contact_normal_speed
    stage.counts_overflow = False
    capacity = c.end
    base = wp.int32(0)  # the table's rows so far
    r0 = wp.int32(0)  # the round's first pair
    alone_until = wp.int32(0)  # the pairs before this one are collided one per round
    while r0 < pair_count:
        size = wp.where(r0 < alone_until, 1, wp.min(lanes, pair_count - r0))
        span = capacity / size  # rows of each lane's stage
        k = r0 + lane
        if span > 0 and lane < size:
            a = pairs.pair_body_a[world, k]
            b = pairs.pair_body_b[world, k]
            stage.end = (lane + 1) * span
            margin = contact_margin + reach[world, a] + reach[world, b]
            start = kept_rows(bodies, sleep_count, kept, world, k, a, b, margin, rest_substeps, base, last_count)
            if start >= 0:
                n = kept.pair_before[world, k][3]
                for i in range(wp.min(n, span)):
                    dst = lane * span + i
                    stage.normal[world, dst] = c.normal[world, start + i]
                    stage.offset_a[world, dst] = c.offset_a[world, start + i]
                    stage.offset_b[world, dst] = c.offset_b[world, start + i]
                    stage.depth[world, dst] = c.depth[world, start + i]
                contacts.contact_order[world, lane] = n
            else:
                hint = pair_hint(before, kept, bodies, poses, world, k, a, b, margin, last_count)
                row = collide(stage, poses, world, a, b, margin, lane * span, hint)
                contacts.contact_order[world, lane] = row - lane * span
        block_sync(lanes)
        offset = wp.int32(base)
        total = wp.int32(0)
        again = bool(span == 0)
        if span > 0:
            for j in range(size):
                n = contacts.contact_order[world, j]
                if j < lane:
                    offset += n
                total += n
                if n > span and size > 1:
                    again = True
        if again:
            alone_until = r0 + size
        else:
            if lane < size:
                i0 = pairs.pair_body_a[world, k]
                j0 = pairs.pair_body_b[world, k]
                first_is_a = poses.shape[world, i0] <= poses.shape[world, j0]  # as collide orders them
                a = wp.where(first_is_a, i0, j0)
                b = wp.where(first_is_a, j0, i0)
                for i in range(contacts.contact_order[world, lane]):
                    row = offset + i
                    src = lane * span + i
                    if row < capacity and i < span:
                        c.body_a[world, row] = a
                        c.body_b[world, row] = b
                        c.normal[world, row] = stage.normal[world, src]
                        c.offset_a[world, row] = stage.offset_a[world, src]
                        c.offset_b[world, row] = stage.offset_b[world, src]
                        c.depth[world, row] = stage.depth[world, src]
                    else:
                        wp.atomic_add(c.overflow, 0, 1)
                        wp.atomic_min(c.overflow, 1, world)
                kept.pair_before[world, k] = wp.vec4i(i0, j0, offset, contacts.contact_order[world, lane])
                kept.pair_margin_before[world, k] = contact_margin + reach[world, i0] + reach[world, j0]
            base = wp.min(base + total, capacity)
            r0 += size
        block_sync(lanes)
    if lane == 0:
        c.count[world] = base
    block_sync(lanes)


def _step_kernel(
    block: bool,
    registers: int | None = None,
    recompute: bool = False,
    timed: bool = False,
    stage: str | None = None,
    cached: bool = False,
    fma: bool = True,
    width: int = SOLVER_LANES,
    group: int = 1,
    ordered: bool = False,
) -> wp.Kernel:
    """``step_bodies`` (one thread per world) or, with ``block``, ``step_bodies_block`` (a block of lanes per
    world), from one source. The block's lanes keep and prepare contact rows, collide pairs
    (``narrowphase_lanes``), order manifolds (``order_manifolds_lanes``), integrate bodies, warm-start manifolds,
    solve the manifolds of a level (each its own, or its Jacobi corrections), update velocities and run the
    velocity pass (batches of manifolds that share no moving body, ``velocity_batch``) side by side, and meet at a
    block barrier between these stages, after every level and after every batch; a lane per body sums the
    corrections of the warm start and of the Jacobi steps in the manifolds' order; the joints go in batches
    that move no body in common (``joint_batch_end``); the lanes share each level's check for a body moved by two
    of its manifolds (``find_levels_lanes``); lane 0 alone ends the velocity pass's batches. Every body,
    contact row and manifold gets the same arithmetic on the same values as on one thread, so both kernels
    give the same result bit for bit.

    With ``stage`` (one of ``STAGED``), the kernel runs that stage of one substep only (``step_bodies_<stage>``, a
    staged solver, ``PhysicsConfig.solver_staged``): the stages launched in turn, every substep, give
    the same result again. Between them, ``solver_counts`` keeps what a stage leaves to
    the next (the rows kept from the substep before, the manifolds).

    ``ordered`` (a thread per world, or a warp of several worlds): thread ``t`` (the ``t``-th world of the launch)
    steps the world that ``order_worlds`` placed in slot ``t`` (``SolverCounts`` entry ``ORDER_WORLD``) rather than
    world ``t``, the same result bit for bit."""
    whole = stage is None
    if ordered and block and group == 1:
        raise ValueError("an ordered solver kernel is a thread per world's or a warp of several worlds' (group > 1)")

    def step_bodies(
        # Resources (StepResources: physics_dt, physics_substeps, contact_passes, gravity, damping, contact_margin):
        physics: StepResources,
        # Components in:
        body_in: SolverBodies,
        pair_in: SolverPairs,
        world_pair_count_in: wp.array[wp.int32],
        joint_in: GrabJoints,
        # Components out:
        pair_out: SolverPairsBefore,
        body_out: SolverMotion,
        contact_out: SolverContacts,
        contact__overflow_out: wp.array[wp.int32],
        world_contact_count_out: wp.array[wp.int32],
        world_solver_cycles_out: wp.array2d[wp.int64],
        world_solver_counts_out: wp.array2d[wp.int32],
    ):
        """One physics step of every body of a world: substeps of integrate, collide, solve, update."""
        physics_dt = physics.physics_dt
        physics_substeps = physics.physics_substeps
        contact_passes = physics.contact_passes
        gravity = physics.gravity
        linear_damping = physics.linear_damping
        angular_damping = physics.angular_damping
        contact_margin = physics.contact_margin
        sleep_substeps = physics.sleep_substeps
        # Substeps asleep before a pair's rows are kept (``held_still``), 0 for never.
        rest_substeps = wp.where(physics.keep_resting_contacts != 0, sleep_substeps, 0)
        if wp.static(block and group == 1):
            world, lane = wp.tid()
            lanes = wp.block_dim()
        elif wp.static(block):
            # A CUDA block (one warp) of ``group`` worlds, each on ``width`` lanes that start at a multiple of width.
            tile, thread = wp.tid()
            world = tile * wp.static(group) + thread // wp.static(width)
            lane = thread - (thread // wp.static(width)) * wp.static(width)
            lanes = wp.static(width)
            if world >= body_in.alive.shape[0]:
                return
            if wp.static(ordered):
                world = world_solver_counts_out[world, ORDER_WORLD]  # the world in this slot (``order_worlds``)
        elif wp.static(ordered):
            world = world_solver_counts_out[wp.tid(), ORDER_WORLD]  # the worlds sorted by work (``order_worlds``)
            lane = 0
            lanes = 1
        else:
            world = wp.tid()
            lane = 0
            lanes = 1
        bodies = Bodies()
        bodies.alive = body_in.alive
        bodies.mass = body_in.mass
        bodies.inv_inertia = body_out.motion_inertia  # inv_inertia, or about the vertical only (hold_upright)
        bodies.response = body_in.response
        bodies.locked_by = body_out.motion_lock  # locked_by, or SLEEPING for a sleeping body (lock_sleepers)
        bodies.friction = body_in.friction
        bodies.restitution = body_in.restitution
        bodies.position = body_out.position
        bodies.rotation = body_out.rotation
        bodies.prev_position = body_out.prev_position
        bodies.prev_rotation = body_out.prev_rotation
        bodies.linear_velocity = body_out.linear_velocity
        bodies.angular_velocity = body_out.angular_velocity
        bodies.keep_rows = on_cpu()
        if wp.static(recompute):
            bodies.keep_rows = False
        splits = Splits()
        splits.count = body_out.split_count
        splits.move = body_out.split_move
        splits.turn = body_out.split_turn
        splits.rank = body_out.split_rank
        splits.move_a = contact_out.contact_move_a
        splits.turn_a = contact_out.contact_turn_a
        splits.move_b = contact_out.contact_move_b
        splits.turn_b = contact_out.contact_turn_b
        poses = Poses()
        poses.shape = body_in.shape
        poses.size = body_in.size
        poses.position = body_out.position
        poses.rotation = body_out.rotation
        poses.keep_vertices = on_cpu()
        if wp.static(recompute):
            poses.keep_vertices = False
        poses.vertices = body_out.body_vertices
        c = Contacts()
        c.body_a = contact_out.contact_body_a
        c.body_b = contact_out.contact_body_b
        c.normal = contact_out.contact_normal
        c.offset_a = contact_out.contact_offset_a
        c.offset_b = contact_out.contact_offset_b
        c.depth = contact_out.contact_depth
        c.count = world_contact_count_out
        c.overflow = contact__overflow_out
        c.end = contact_out.alive.shape[1]
        c.counts_overflow = True
        before = LastContacts()
        before.body_a = contact_out.contact_last_body_a
        before.body_b = contact_out.contact_last_body_b
        before.offset_a = contact_out.contact_last_offset_a
        before.offset_b = contact_out.contact_last_offset_b
        before.impulse = contact_out.contact_last_impulse
        before.friction = contact_out.contact_last_friction
        before.normal = contact_out.contact_last_normal
        impulse = contact_out.contact_impulse
        friction = contact_out.contact_friction
        order = contact_out.contact_order

        nb = body_in.alive.shape[1]
        cache = wp.uint64(0)
        rows_out = wp.int32(0)  # the cache's contact rows to write back (``cached``)
        impulse_rows_out = wp.int32(0)
        if wp.static(cached):
            # Always the cache, never the tables where it is too small (a merge of the two would address both as
            # generic memory): physics.solver_systems(cached=True) refuses such tables, and this guard keeps a
            # world from writing past its cache should one get here anyway.
            if nb > CACHE_BODIES or c.end > CACHE_CONTACTS:
                return
            cache = cache_open(lane)
            if wp.static(block):
                cache = block_share_address(cache)
            worlds = body_in.alive.shape[0]
            rows = c.end
            bodies.position = cached_vec3(cache, wp.static(CACHE_AT["position"]), worlds, nb)
            bodies.rotation = cached_quat(cache, wp.static(CACHE_AT["rotation"]), worlds, nb)
            bodies.prev_position = cached_vec3(cache, wp.static(CACHE_AT["prev_position"]), worlds, nb)
            bodies.prev_rotation = cached_quat(cache, wp.static(CACHE_AT["prev_rotation"]), worlds, nb)
            bodies.linear_velocity = cached_vec3(cache, wp.static(CACHE_AT["linear_velocity"]), worlds, nb)
            bodies.angular_velocity = cached_vec3(cache, wp.static(CACHE_AT["angular_velocity"]), worlds, nb)
            splits.count = cached_int(cache, wp.static(CACHE_AT["split_count"]), worlds, nb)
            splits.move = cached_vec3(cache, wp.static(CACHE_AT["split_move"]), worlds, nb)
            splits.turn = cached_vec3(cache, wp.static(CACHE_AT["split_turn"]), worlds, nb)
            impulse = cached_float(cache, wp.static(CACHE_AT["contact_impulse"]), worlds, rows)
            friction = cached_vec3(cache, wp.static(CACHE_AT["contact_friction"]), worlds, rows)
            c.body_a = cached_int(cache, wp.static(CACHE_AT["contact_body_a"]), worlds, rows)
            c.body_b = cached_int(cache, wp.static(CACHE_AT["contact_body_b"]), worlds, rows)
            c.normal = cached_vec3(cache, wp.static(CACHE_AT["contact_normal"]), worlds, rows)
            c.offset_a = cached_vec3(cache, wp.static(CACHE_AT["contact_offset_a"]), worlds, rows)
            c.offset_b = cached_vec3(cache, wp.static(CACHE_AT["contact_offset_b"]), worlds, rows)
            c.depth = cached_float(cache, wp.static(CACHE_AT["contact_depth"]), worlds, rows)
            poses.position = bodies.position
            poses.rotation = bodies.rotation
            # The rows in use: read in now, written back as far as the narrowphase (contacts) and the warm start
            # (impulses) wrote rows since.
            rows_in = wp.min(world_contact_count_out[world], rows)
            rows_out = rows_in
            impulse_rows_out = rows_in
            exchange_cache(
                bodies,
                splits,
                c,
                impulse,
                friction,
                body_out,
                contact_out,
                world,
                nb,
                rows_in,
                rows_in,
                lane,
                lanes,
                False,
            )
            if wp.static(block):
                block_sync(lanes)
        h = physics_dt / float(physics_substeps)
        clock = wp.int64(0)  # the cycle count where the stage being timed began (``timed``)
        if wp.static(timed):
            clock = cycle_counter()
        substeps = physics_substeps
        if wp.static(not whole):
            substeps = 1  # the staged kernels run one stage of one substep
        for _sub in range(substeps):
            # Speculative contacts: the narrowphase runs at the poses the substep starts from, with a
            # margin as wide as the pair can close during it, and the solve keeps the contact anchors
            # from overlapping along those normals after the bodies moved. A body can then never be
            # pushed out on the far side of a thin wall it crossed within one substep.
            # The contacts of the substep before, the step before's last one in a step's first substep (none where
            # the world was reset since: ``forget_contacts``).
            last_count = wp.int32(0)
            if wp.static(whole or stage == "collide"):
                last_count = world_contact_count_out[world]
                if wp.static(not whole):  # noqa: SIM102 (a static branch: compiled only into the staged kernels)
                    if lane == 0:
                        world_solver_counts_out[world, 0] = last_count
            else:
                last_count = world_solver_counts_out[world, 0]
            if wp.static(whole or stage == "collide"):
                lock_sleepers(
                    bodies,
                    body_in.locked_by,
                    body_in.force,
                    body_in.torque,
                    body_in.shape,
                    body_in.size,
                    body_out.body_before,
                    body_out.sleep_count,
                    world,
                    sleep_substeps,
                    lane,
                    lanes,
                )
                for i in range(lane, nb, lanes):
                    hold_upright(bodies, body_in.inv_inertia, joint_in, world, i)
                for k in range(lane, last_count, lanes):
                    keep_contact(c, before, impulse, friction, world, k)
                for i in range(lane, nb, lanes):
                    body_out.substep_reach[world, i] = substep_reach(
                        bodies, poses, world, i, h, gravity, body_in.force[world, i]
                    )
                    if not poses.keep_vertices and body_in.alive[world, i] != 0:
                        fill_vertices(poses, world, i)
                if wp.static(block):
                    block_sync(lanes)
                pair_count = world_pair_count_in[world]
                # Each body's reach grown to the largest that bodies which may push it pass on (``pass_on_reach``).
                again = bool(True)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
                while again:
                    again = pass_on_reach(
                        bodies,
                        poses,
                        body_in.force,
                        body_in.torque,
                        body_out.sleep_count,
                        pair_in,
                        body_out.substep_reach,
                        world,
                        pair_count,
                        contact_margin,
                        lane,
                        lanes,
                    )
                    if wp.static(block):
                        block_sync(lanes)
                        again = block_any(again, lanes)
                if wp.static(timed):
                    clock = lap(world_solver_cycles_out, world, lane, 0, clock)
                # The pairs the last narrowphase found but this one does not list found their rows at other poses:
                # their records go back to zeros (no pair), as a new simulation's and a loaded state's that lacked them.
                for k in range(pair_count + lane, world_solver_counts_out[world, 2], lanes):
                    pair_out.pair_before[world, k] = wp.vec4i(0, 0, 0, 0)
                    pair_out.pair_margin_before[world, k] = 0.0
                if wp.static(block):
                    narrowphase_lanes(
                        c,
                        poses,
                        pair_in,
                        pair_out,
                        before,
                        bodies,
                        body_out.sleep_count,
                        contact_out,
                        body_out.substep_reach,
                        world,
                        pair_count,
                        contact_margin,
                        rest_substeps,
                        last_count,
                        lane,
                        lanes,
                    )
                else:
                    world_contact_count_out[world] = narrowphase(
                        c,
                        poses,
                        pair_in,
                        pair_out,
                        before,
                        bodies,
                        body_out.sleep_count,
                        body_out.substep_reach,
                        world,
                        pair_count,
                        contact_margin,
                        rest_substeps,
                        last_count,
                    )
                if wp.static(block):
                    block_sync(lanes)
                if lane == 0:
                    world_solver_counts_out[world, 2] = pair_count
                if sleep_substeps > 0:
                    if lane == 0:
                        wake_sleepers(
                            bodies,
                            body_in.locked_by,
                            body_in.force,
                            body_in.torque,
                            body_out.sleep_count,
                            c,
                            before.body_a,
                            before.body_b,
                            joint_in,
                            world,
                            world_contact_count_out[world],
                            last_count,
                            sleep_substeps,
                        )
                    if wp.static(block):
                        block_sync(lanes)
                if wp.static(cached):
                    rows_out = wp.max(rows_out, world_contact_count_out[world])
                if wp.static(timed):
                    clock = lap(world_solver_cycles_out, world, lane, 1, clock)
            if wp.static(whole or stage == "prepare"):
                for i in range(lane, nb, lanes):
                    if body_in.alive[world, i] != 0:
                        integrate(
                            bodies,
                            world,
                            i,
                            h,
                            gravity,
                            linear_damping,
                            angular_damping,
                            body_in.force[world, i],
                            body_in.torque[world, i],
                            body_in.drag[world, i],
                        )
                if wp.static(block):
                    block_sync(lanes)
                if wp.static(timed):
                    clock = lap(world_solver_cycles_out, world, lane, 2, clock)
                count = world_contact_count_out[world]
                for k in range(lane, count, lanes):
                    a = c.body_a[world, k]
                    b = c.body_b[world, k]
                    if inv_mass_of(bodies, world, a) + inv_mass_of(bodies, world, b) <= 0.0:
                        # The velocity pass, the speed's one reader, skips a manifold that moves neither body.
                        contact_out.contact_normal_speed[world, k] = 0.0
                        continue
                    qa = bodies.rotation[world, a]
                    qb = bodies.rotation[world, b]
                    n = c.normal[world, k]
                    rot_a = wp.quat_to_matrix(qa)
                    rot_b = wp.quat_to_matrix(qb)
                    start_a = bodies.prev_rotation[world, a]
                    start_b = bodies.prev_rotation[world, b]
                    ra = facing_arm(
                        rot_a * c.offset_a[world, k],
                        rot_a,
                        start_a,
                        n * round_radius(poses, world, a),
                    )
                    rb = facing_arm(
                        rot_b * c.offset_b[world, k],
                        rot_b,
                        start_b,
                        -n * round_radius(poses, world, b),
                    )
                    v = point_velocity(bodies, world, a, ra) - point_velocity(bodies, world, b, rb)
                    contact_out.contact_normal_speed[world, k] = wp.dot(n, v)
                manifolds = wp.int32(0)
                if wp.static(block):
                    manifolds = order_manifolds_lanes(
                        bodies,
                        c,
                        order,
                        contact_out.contact_height,
                        contact_out.contact_key,
                        contact_out.contact_level,
                        world,
                        count,
                        gravity,
                        lane,
                        lanes,
                    )
                    find_levels_lanes(
                        bodies,
                        c,
                        order,
                        contact_out.contact_height,
                        contact_out.contact_level,
                        world,
                        manifolds,
                        lane,
                        lanes,
                    )
                    block_sync(lanes)
                else:
                    manifolds = order_manifolds(bodies, c, order, contact_out.contact_height, world, count, gravity)
                    find_levels(
                        bodies, c, order, contact_out.contact_height, contact_out.contact_level, world, manifolds
                    )
                if wp.static(timed):
                    clock = lap(world_solver_cycles_out, world, lane, 3, clock)
                warm_corrections(
                    bodies,
                    splits,
                    c,
                    before,
                    impulse,
                    friction,
                    order,
                    world,
                    count,
                    manifolds,
                    last_count,
                    h,
                    lane,
                    lanes,
                )
                if wp.static(block):
                    block_sync(lanes)
                    apply_warm_lanes(bodies, splits, c, impulse, friction, order, world, count, manifolds, lane, lanes)
                    block_sync(lanes)
                else:
                    apply_warm(bodies, splits, c, impulse, friction, order, world, count, manifolds)
                if wp.static(cached):
                    impulse_rows_out = wp.max(impulse_rows_out, count)
                if wp.static(timed):
                    clock = lap(world_solver_cycles_out, world, lane, 4, clock)
                if wp.static(not whole):  # noqa: SIM102 (a static branch: compiled only into the staged kernels)
                    if lane == 0:
                        world_solver_counts_out[world, 1] = manifolds
            if wp.static(whole or stage == "solve"):
                count = world_contact_count_out[world]
                if wp.static(not whole):
                    manifolds = world_solver_counts_out[world, 1]
                # A loop, not unrolled (Warp unrolls a constant range that holds static branches): one copy of the
                # pass in the kernel's code, which a GPU's instruction cache holds more easily.
                passes = wp.max(contact_passes, 1)
                for it in range(passes):
                    # Joints first in every pass, contacts after: a held body may lag its holder a little,
                    # but is never left driven into another body (whose push-back would become speed).
                    # In batches of joints that move no body in common, a joint per lane (one at a time on one thread).
                    s = wp.int32(0)
                    while s < joint_in.alive.shape[1]:
                        e = joint_batch_end(bodies, joint_in, world, s, lanes)
                        for j in range(s + lane, e, lanes):
                            if joint_in.alive[world, j] != 0:
                                solve_joint_row(bodies, joint_in, world, j)
                        if wp.static(block):
                            block_sync(lanes)
                        s = e
                    if wp.static(timed):
                        clock = lap(world_solver_cycles_out, world, lane, 5, clock)
                    up = wp.vec3(0.0, 0.0, 0.0)
                    if it == passes - 1:
                        up = wp.vec3(0.0, 0.0, -wp.sign(gravity))
                    # ``first`` walks the levels in ``order[0:manifolds]``, then, where ``mark_pinched`` finds a pinched
                    # body or ``mark_chains`` a chain, on past ``manifolds`` through sweeps of every manifold again, one
                    # at a time (``first - manifolds`` modulo ``manifolds``), to ``end``.
                    first = wp.int32(0)
                    end = manifolds
                    stopped = wp.int32(0)  # joints whose held body is stopped from the side (``mark_stopped_holds``)
                    pinched = wp.int32(0)  # on lane 0: a body is pinned (``mark_pinched``)
                    tail = wp.int32(0)  # on lane 0: the sweep that the chains' second run starts (``mark_chains``)
                    # Once through the levels and, in the last pass, once through the sweeps after them (``end``
                    # grows): a phase count the compiler does not know, so that neither the loop over the levels
                    # nor the pinned balls' pair solve (``solve_pinned_balls``) is compiled twice.
                    phases = wp.where(it == passes - 1 and manifolds > 0, 2, 1)
                    for phase in range(phases):
                        while first < end:
                            if (
                                stopped > 0
                                and first >= manifolds
                                and (first - manifolds) % manifolds == 0
                                and (first - manifolds) / manifolds < SQUEEZED_SWEEPS
                                and lane == 0
                            ):
                                # A sweep begins: the joints of held bodies stopped from the side first, then (flagged)
                                # their manifolds and their holders', as further passes would, with no body held still.
                                for j in range(joint_in.alive.shape[1]):
                                    if joint_in.alive[world, j] != 0:  # noqa: SIM102 (Warp's `and` reads both sides)
                                        if stopped_from_the_side(
                                            bodies, c, impulse, world, count, joint_in.joint_body_b[world, j]
                                        ):
                                            solve_joint_row(bodies, joint_in, world, j)
                            # A level: the manifolds at one height. When two of them move the same body (a cube
                            # resting on two others, a row pressed together), the level is solved by Jacobi
                            # steps, so the body settles on both supports whichever is listed first, and a
                            # pressed row stays where it is. Otherwise no body is moved by two of its manifolds,
                            # and each is solved on its own (on a lane of its own in step_bodies_block).
                            # After the last pass's levels, sweeps over every manifold that holds a pinched body
                            # (``mark_pinched``) and, in the sweep of its rank, every manifold of a chain (``mark_chains``),
                            # each on its own, as a level of one manifold (on lane 0), in the order of the levels.
                            last = first + 1
                            jacobi = bool(False)  # noqa: UP018 (Warp: a variable changed in a branch must be declared dynamic)
                            if first < manifolds:
                                last, jacobi = level_at(contact_out.contact_level, world, first)
                            # In the last of RANKED_PASSES passes or more, such a level goes outwards from its anchors, a
                            # group of ranks at a time (``rank_level``), then the manifolds that no anchor reaches;
                            # otherwise whole.
                            ranked = wp.int32(0)
                            if jacobi and it == passes - 1 and passes >= RANKED_PASSES:
                                if lane == 0:
                                    ranked = rank_level(bodies, splits, c, order, world, first, last, manifolds, up)
                                if wp.static(block):
                                    ranked = block_share(ranked, lanes)
                            groups = wp.max(ranked / 2 + ranked % 2, 1)
                            for g in range(groups):
                                rank_group = wp.where(ranked < 2, ALL_MANIFOLDS, wp.where(g < ranked / 2, g, RANK_FREE))
                                steps = wp.int32(1)
                                if jacobi:
                                    if wp.static(block):
                                        count_level_splits_lanes(
                                            bodies, splits, c, order, world, first, last, up, rank_group, lane, lanes
                                        )
                                        block_sync(lanes)
                                    else:
                                        count_level_splits(bodies, splits, c, order, world, first, last, up, rank_group)
                                    chain = level_chain(bodies, splits, c, order, world, first, last, up, rank_group)
                                    steps = level_steps(up, chain, rank_group)
                                for _step in range(steps):
                                    if wp.static(block):  # noqa: SIM102 (a static branch: compiled only into the block's kernels)
                                        if jacobi:  # the same on every lane of the world
                                            block_sync(lanes)
                                    for m in range(first + lane, last, lanes):
                                        k = order[world, wp.where(m < manifolds, m, (m - manifolds) % manifolds)]
                                        along = up
                                        solve = m < manifolds
                                        if not solve:  # a sweep after the levels (``mark_pinched``, ``mark_chains``)
                                            sweep = (m - manifolds) / manifolds
                                            flag = splits.move_a[world, k]
                                            solve = flag[0] > 0.0 and sweep < wp.where(
                                                flag[0] > 1.0, SQUEEZED_SWEEPS, PINNED_SWEEPS
                                            )
                                            if flag[1] == float(sweep + 1) or (
                                                tail > 0 and flag[1] == float(sweep + 1 - tail)
                                            ):
                                                # A chain's manifold, in the sweep of its rank and again that far into
                                                # the chains' run after the other sweeps: the body nearer the anchor
                                                # held still, as the lower body of a support is along ``up``
                                                # (``manifold_inverse_masses``).
                                                solve = True
                                                along = c.normal[world, k] * wp.where(flag[2] == 1.0, 1.0, -1.0)
                                        if solve:
                                            level_manifold(
                                                bodies,
                                                splits,
                                                poses,
                                                c,
                                                impulse,
                                                friction,
                                                world,
                                                k,
                                                count,
                                                along,
                                                jacobi,
                                                rank_group,
                                            )
                                    if jacobi:
                                        if wp.static(block):
                                            block_sync(lanes)
                                            apply_level_lanes(
                                                bodies,
                                                splits,
                                                c,
                                                order,
                                                world,
                                                first,
                                                last,
                                                up,
                                                rank_group,
                                                lane,
                                                lanes,
                                            )
                                        else:
                                            apply_level(bodies, splits, c, order, world, first, last, up, rank_group)
                            if wp.static(block):
                                block_sync(lanes)
                            first = last
                        levels_done = phase == 0 and phases == 2
                        sweeps = wp.int32(0)
                        if levels_done:
                            # The levels are done: find the pinched bodies in the scratch they leave free.
                            for i in range(lane, nb, lanes):
                                splits.count[world, i] = 0
                                splits.rank[world, i] = 0
                            if wp.static(block):
                                block_sync(lanes)
                            if lane == 0:
                                pinched = mark_pinched(bodies, splits, c, order, world, manifolds, up)
                        if pinched != 0:  # the two pushes on a pinned ball together, before the sweeps and after
                            solve_pinned_balls(bodies, splits, poses, c, impulse, order, world, manifolds, count)
                        if levels_done:
                            if lane == 0:
                                chains, squeezed, chained = mark_chains(
                                    bodies, splits, c, order, world, manifolds, up, pinched
                                )
                                others = wp.where(
                                    pinched > 1, SQUEEZED_SWEEPS, wp.where(pinched != 0, PINNED_SWEEPS, 0)
                                )
                                if squeezed != 0:
                                    others = SQUEEZED_SWEEPS
                                stopped = mark_stopped_holds(
                                    bodies, splits, c, order, impulse, joint_in, world, manifolds, count
                                )
                                if stopped > 0:
                                    others = SQUEEZED_SWEEPS
                                sweeps = wp.max(others, chains)
                                if chained > 0 and others > 0:
                                    # The chains once more after the other sweeps, which moved their bodies again.
                                    sweeps = others + chained
                                    tail = others
                            if wp.static(block):
                                sweeps = block_share(sweeps, lanes)
                                stopped = block_share(stopped, lanes)
                            end = manifolds * (sweeps + 1)
                    if wp.static(block):  # noqa: SIM102 (a static branch: compiled only into the block's kernels)
                        if it == passes - 1:
                            block_sync(lanes)
                    if wp.static(timed):
                        clock = lap(world_solver_cycles_out, world, lane, 6, clock)
            if wp.static(whole or stage == "velocity"):
                count = world_contact_count_out[world]
                for i in range(lane, nb, lanes):
                    body_out.velocity_batch[world, i] = 0
                    if body_in.alive[world, i] != 0 and movable(body_in.response[world, i], bodies.locked_by[world, i]):
                        bodies.linear_velocity[world, i] = (
                            bodies.position[world, i] - bodies.prev_position[world, i]
                        ) / h
                        bodies.angular_velocity[world, i] = substep_angular_velocity(
                            bodies.prev_rotation[world, i],
                            bodies.rotation[world, i],
                            bodies.angular_velocity[world, i],
                            h,
                        )
                # Sweeps of the velocity pass over the manifolds, until one changes no normal speed by more than
                # VELOCITY_SETTLED (each sweep starts its batches afresh).
                for sweep in range(VELOCITY_SWEEPS):
                    if wp.static(block):  # the batches' body tags (a thread per world solves in row order)
                        if sweep > 0:
                            for i in range(lane, nb, lanes):
                                body_out.velocity_batch[world, i] = 0
                        block_sync(lanes)
                    change = wp.float32(0.0)  # the largest change of a manifold's normal speed in this sweep
                    k = wp.int32(0)
                    while k < count:
                        # A batch of manifolds that share no body the pass moves: solved side by side, as in one order.
                        e = count
                        if wp.static(block):
                            if lane == 0:
                                e = velocity_batch(bodies, c, body_out.velocity_batch, world, k, count)
                            e = block_share(e, lanes)
                        for r in range(k + lane, e, lanes):
                            if r == k or not same_pair(c, world, r - 1, r):
                                change = wp.max(
                                    change,
                                    solve_manifold_velocity(
                                        bodies,
                                        c,
                                        impulse,
                                        contact_out.contact_normal_speed,
                                        world,
                                        r,
                                        manifold_end(c, world, r, e),
                                        h,
                                        gravity,
                                        round_radius(poses, world, c.body_a[world, r]),
                                        round_radius(poses, world, c.body_b[world, r]),
                                    ),
                                )
                        if wp.static(block):
                            block_sync(lanes)
                        k = e
                    unsettled = change > VELOCITY_SETTLED
                    if wp.static(block):
                        unsettled = block_any(unsettled, lanes)
                    if not unsettled:
                        break
                count_rest(bodies, body_in.locked_by, body_out.sleep_count, world, sleep_substeps, lane, lanes)
                if wp.static(timed):
                    clock = lap(world_solver_cycles_out, world, lane, 7, clock)
        if wp.static(whole):  # a staged solver marks the rows in use once, after its last substep (end_substeps)
            count = world_contact_count_out[world]
            for k in range(lane, contact_out.alive.shape[1], lanes):
                contact_out.alive[world, k] = wp.where(k < count, 1, 0)
        if wp.static(cached):
            if wp.static(block):
                block_sync(lanes)
            exchange_cache(
                bodies,
                splits,
                c,
                impulse,
                friction,
                body_out,
                contact_out,
                world,
                nb,
                rows_out,
                impulse_rows_out,
                lane,
                lanes,
                True,
            )
            if wp.static(block):
                block_sync(lanes)
            cache_close(cache, lane)

    if timed and not whole:
        raise ValueError("a staged solver is timed by the profiler, per stage and substep; it takes no timed=")
    if cached and not block:
        raise ValueError("the cache is a block's shared memory, one world's: cached=True needs block=True")
    if width not in LANE_CHOICES or group not in (1, SOLVER_LANES // width):
        raise ValueError(
            f"width must be one of {list(LANE_CHOICES)} (lanes a world) and group 1 or {SOLVER_LANES} // width "
            f"(worlds a block), got width={width}, group={group}"
        )
    if (width != SOLVER_LANES or group != 1) and (not block or cached):
        raise ValueError("fewer lanes a world are for the block's kernels without the cache (block=True, cached=False)")
    if stage is not None and stage not in STAGED:
        raise ValueError(f"stage must be one of {list(STAGED)} or None, got {stage!r}")
    if block or registers is not None or recompute or timed or not whole or cached or not fma or ordered:
        # A module of its own, built for blocks of SOLVER_LANES where lanes are asked for (what ahead-of-time and
        # register reports compile), and only where an env asks for this kernel.
        name = "step_bodies" + ("" if whole else f"_{stage}") + ("_block" if block else "")
        name += "" if registers is None else f"_r{registers}"
        name += "_recompute" if recompute else ""
        name += "_timed" if timed else ""
        name += "_cached" if cached else ""
        name += "" if fma else "_nofma"
        name += "" if width == SOLVER_LANES else f"_l{width}"
        name += "" if group == 1 else f"_g{group}"
        name += "_ordered" if ordered else ""
        options = {"block_dim": width * group, "enable_backward": False} if block else {"enable_backward": False}
        if not fma:
            options["fuse_fp"] = False
        return wp.kernel(step_bodies, name=name, module="unique", module_options=options, cuda_max_registers=registers)
    return wp.kernel(step_bodies, name="step_bodies")


step_bodies = _step_kernel(block=False)
step_bodies_block = _step_kernel(block=True)
_STEP_KERNELS: dict[tuple[bool, int | None, bool, bool, str | None, bool, bool, int, int, bool], wp.Kernel] = {
    (False, None, False, False, None, False, True, SOLVER_LANES, 1, False): step_bodies,
    (True, None, False, False, None, False, True, SOLVER_LANES, 1, False): step_bodies_block,
}


@wp.func
def world_work(
    response: wp.array2d[wp.int32],
    motion_lock: wp.array2d[wp.int32],
    body_a: wp.array2d[wp.int32],
    body_b: wp.array2d[wp.int32],
    count: int,
    world: int,
) -> int:
    """The number of the world's first ``count`` contact rows (its last substep's) with a body that moves (dynamic,
    not locked, not asleep: ``MotionLock`` 0)."""
    work = wp.int32(0)
    for k in range(count):
        a = body_a[world, k]
        b = body_b[world, k]
        if movable(response[world, a], motion_lock[world, a]) or movable(response[world, b], motion_lock[world, b]):
            work += 1
    return work


@wp.kernel(module="unique")
def bucket_worlds(
    body__response_in: wp.array2d[wp.int32],
    body__motion_lock_in: wp.array2d[wp.int32],
    contact__contact_body_a_in: wp.array2d[wp.int32],
    contact__contact_body_b_in: wp.array2d[wp.int32],
    world_contact_count_in: wp.array[wp.int32],
    world_solver_counts_out: wp.array2d[wp.int32],
):
    """``order_worlds``, first launch: each world's work bucket (``world_work``, at most ``ORDER_BUCKETS - 1``), the
    buckets' counts zeroed; with fewer worlds than buckets, the worlds in their own order."""
    world = wp.tid()
    n = world_solver_counts_out.shape[0]
    if n < ORDER_BUCKETS:
        world_solver_counts_out[world, ORDER_WORLD] = world
        return
    count = wp.min(world_contact_count_in[world], contact__contact_body_a_in.shape[1])
    work = world_work(
        body__response_in, body__motion_lock_in, contact__contact_body_a_in, contact__contact_body_b_in, count, world
    )
    world_solver_counts_out[world, ORDER_BUCKET] = wp.min(work, ORDER_BUCKETS - 1)
    if world < ORDER_BUCKETS:
        world_solver_counts_out[world, ORDER_COUNT] = 0


@wp.kernel(module="unique")
def count_buckets(world_solver_counts_out: wp.array2d[wp.int32]):
    """``order_worlds``, second launch: each world counts itself in its bucket."""
    world = wp.tid()
    if world_solver_counts_out.shape[0] >= ORDER_BUCKETS:
        wp.atomic_add(world_solver_counts_out, world_solver_counts_out[world, ORDER_BUCKET], ORDER_COUNT, 1)


@wp.kernel(module="unique")
def start_buckets(world_solver_counts_out: wp.array2d[wp.int32]):
    """``order_worlds``, third launch (one thread): each bucket's count becomes its first slot (the counts before it
    summed)."""
    if world_solver_counts_out.shape[0] >= ORDER_BUCKETS:
        first = wp.int32(0)
        for bucket in range(ORDER_BUCKETS):
            n = world_solver_counts_out[bucket, ORDER_COUNT]
            world_solver_counts_out[bucket, ORDER_COUNT] = first
            first += n


@wp.kernel(module="unique")
def place_worlds(world_solver_counts_out: wp.array2d[wp.int32]):
    """``order_worlds``, last launch: each world takes the next free slot of its bucket, and the thread of that slot
    steps it. The worlds of one bucket may take its slots in any order (the atomic adds of a GPU race), which changes
    only which thread steps which world."""
    world = wp.tid()
    if world_solver_counts_out.shape[0] >= ORDER_BUCKETS:
        bucket = world_solver_counts_out[world, ORDER_BUCKET]
        slot = wp.atomic_add(world_solver_counts_out, bucket, ORDER_COUNT, 1)
        world_solver_counts_out[slot, ORDER_WORLD] = world


@wp.kernel(module="unique")
def forget_contacts(
    world_reset_in: wp.array[wp.int32],
    world_contact_count_out: wp.array[wp.int32],
    contact__alive_out: wp.array2d[wp.int32],
    sleep_count_out: wp.array2d[wp.int32],
):
    """RESET: a world that begins an episode keeps no contacts (its bodies may be placed anywhere), so the first
    substep of its next step starts cold; every other world's solve starts from its last substep's impulses. No
    body of it sleeps (``SleepCount``)."""
    world = wp.tid()
    if world_reset_in[world] == 0:
        return
    world_contact_count_out[world] = 0
    for k in range(contact__alive_out.shape[1]):
        contact__alive_out[world, k] = 0
    for i in range(sleep_count_out.shape[1]):
        sleep_count_out[world, i] = 0


@wp.kernel(module="unique")
def end_substeps(world_contact_count_in: wp.array[wp.int32], contact__alive_out: wp.array2d[wp.int32]):
    """The staged solver's last launch of a step, a thread per contact row: the rows of the last substep's contacts
    are alive, as the whole kernel leaves them."""
    world, k = wp.tid()
    contact__alive_out[world, k] = wp.where(k < world_contact_count_in[world], 1, 0)


def step_kernel(
    block: bool,
    registers: int | None = None,
    recompute: bool = False,
    timed: bool = False,
    stage: str | None = None,
    cached: bool = False,
    fma: bool = True,
    width: int = SOLVER_LANES,
    group: int = 1,
    ordered: bool = False,
) -> wp.Kernel:
    """The solver's kernel: a block of ``SOLVER_LANES`` lanes per world or a thread per world, with at most
    ``registers`` registers per thread on CUDA (``__maxnreg__``; None: as many as the compiler takes, up to 255).
    The same result bit for bit on CPU; on CUDA a cap trades registers for local memory, so more threads fit
    on an SM: which is faster is for measurement (``python -m ecs gpu-report``, stage ``solver``). Built once
    per choice, each capped one in a module of its own. ``recompute`` (for tests): the CPU build recomputes what a
    GPU thread recomputes rather than keeps (see ``manifold_corrections``), so that path runs on CPU too.
    ``timed``: lane 0 of each world also counts the clock cycles of each stage into ``SolverCycles``, with the
    same result otherwise. ``stage``: the kernel of that stage of a staged solver (``STAGED``). ``cached``: with the
    cache of ``CACHE_COLUMNS`` (a block's only). ``fma=False``: compiled without contracting a multiply and an add
    into one fused multiply-add (Warp's ``fuse_fp``), which CUDA does wherever it can by default, differently in
    each kernel: then every layout, staged or whole, cached or not, leaves the same state bit for bit on a GPU too
    (with it, they agree to rounding, and a step's chaos amplifies the difference). ``width``: a block's lanes per
    world (``LANE_CHOICES``); ``group``: worlds per block, 1 or, on CUDA, ``SOLVER_LANES // width`` (a warp of
    several worlds, whose lanes meet by warp-level operations over each world's lanes: ``grouped``), launched
    over ``ceil(num_worlds / group)`` blocks; the same result bit for bit as 32 lanes a world. ``ordered`` (a thread
    per world, or ``group`` above 1): the threads (the groups of lanes) step the worlds in the order ``order_worlds``
    leaves, the same result bit for bit."""
    key = (
        bool(block),
        registers,
        bool(recompute),
        bool(timed),
        stage,
        bool(cached),
        bool(fma),
        width,
        group,
        bool(ordered),
    )
    if key not in _STEP_KERNELS:
        _STEP_KERNELS[key] = _step_kernel(*key)
    return _STEP_KERNELS[key]


# The launches that sort the worlds by work for an ordered solver, in turn (``physics.order_worlds``)
ORDER_KERNELS = (bucket_worlds, count_buckets, start_buckets, place_worlds)


def is_step_kernel(fn: object) -> bool:
    """Whether ``fn`` is one of the solver's kernels (``step_kernel``, ``end_substeps``, ``ORDER_KERNELS``)."""
    return any(fn is k for k in (end_substeps, *ORDER_KERNELS, *_STEP_KERNELS.values()))
