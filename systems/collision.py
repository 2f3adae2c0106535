"""Collision: shape components, the per-world broadphase, narrowphase for every shape pair, the contact table.

Broadphase (``find_pairs``, once per step, one thread per world): every body's axis-aligned
box, grown by how far the body can move in the step (``BroadphaseReach``: its own motion, or more
where a faster body whose box overlaps its own may push it along), is tested against the others;
pairs that may touch in this step go to the ``pair`` table. Two methods, picked by ``broadphase``:
``Broadphase.SORT_SWEEP`` (default: sort the boxes along x with an insertion sort that starts
from last step's order, then sweep) and ``Broadphase.ALL_PAIRS`` (test every pair). Planes are
infinite and are paired with every movable body whose box reaches them. A body held by a fixed joint (a grab)
and its holder are a pair like any other, as a weld's two bodies still collide in MuJoCo: without their contacts,
whatever pushed the held body into its holder drove it in unseen (the joint, solved before the contacts, gives way
to them), 28 mm in ``tests/systems/test_held_bodies.py``'s squeeze and 81 mm in a soak, where the overlap then went
to the other bodies once the held plank was locked and let go.

Measured (``examples/benchmarks/bench_physics.py --broadphase``, 4096 worlds of the 30-body room,
2-core CPU, one core per launch, 10 steps x 3): sort-and-sweep 8.0 ms per step (2.0 us per
world), all pairs 9.9 ms (2.4 us per world); either is under 3 % of the step, which the solver
dominates (97 %). A per-world BVH would only pay off at hundreds of bodies per world.

Narrowphase (``collide``, run by the solver at every substep on the candidate pairs, so contacts
always describe the current poses): closest points of segments for sphere and capsule pairs,
sphere / capsule against a polyhedron through the polyhedron's closest point (a capsule also
gets the point its segment is nearest to, found by alternating projections), polyhedron
against polyhedron by the separating-axis test over face normals and edge cross products (against
a static or kinematic polyhedron keeping the face axis along which the pair met while it stays
within ``KEEP_AXIS`` of the least overlap)
(contacts: each vertex of one solid inside the other, or the closest points of the two
supporting edges when an edge-edge axis separates least and lies further than ``EDGE_FACE_COS``
from the best face axis; points closer than ``SAME_POINT``
across the normal, such as a vertex of each of two aligned boxes, are kept once), and any shape
against a plane.

A contact stores both bodies, the unit normal ``n`` from body A into body B, the contact points
in each body's frame and the depth ``(p_a - p_b) . n`` (positive: overlapping). Contacts live in
the ``contact`` archetype (rows ``[0, contact_count)`` alive), one table per world with a fixed
capacity; a contact that finds the table full is counted in the archetype's overflow counter,
which the engine reports as ``ecs.CapacityError`` naming the world and the capacity.
"""

from __future__ import annotations

import enum

import warp as wp

import ecs

from .geometry import (
    BIG,
    CAPSULE,
    PLANE,
    SPHERE,
    WEDGE,
    along_face_normal,
    axis_direction,
    closest_on_polyhedron,
    closest_on_segment,
    core_half_length,
    edge_direction,
    edge_vertex,
    face_normal,
    face_offset,
    is_polyhedron,
    is_round,
    max_face_distance,
    num_axes,
    num_edges,
    num_faces,
    num_vertices,
    segment_segment,
    vertex,
)
from .locking import LockedBy
from .rigid_body import (
    AngularVelocity,
    BodyResponse,
    Force,
    LinearVelocity,
    Mass,
    Position,
    Rotation,
    movable,
)

wp.set_module_options({"enable_backward": False})


class Broadphase(enum.IntEnum):
    """Broadphase method (the ``broadphase`` resource)."""

    NONE = 0
    ALL_PAIRS = 1
    SORT_SWEEP = 2


_ALL_PAIRS = wp.constant(int(Broadphase.ALL_PAIRS))
SAME_POINT = wp.constant(5.0e-4)  # m: polyhedron contacts closer than this across the normal are one contact
# ``exit_depth`` leaves out faces whose normals lie within this cosine of square to the direction: a contact face's
# rim lies on the other solid's side faces (two flush cubes of one size), and the side face a rim vertex lies on
# would give it no depth at all.
EXIT_FACING = wp.constant(0.1)
# A polyhedron keeps the face axis along which it met a static or kinematic one (their contacts' normal in the
# substep before; the solver's ``pair_hint`` gives no hint between two bodies that move) while that axis overlaps
# them by at most this much more than the axis that overlaps them least [m]. A ramp shoved into a wall with its
# slope towards it pokes its sharp low edge past the wall's face; the least overlap is then along the slope's normal
# (0.71 of the edge's reach past the face at 45 degrees), which points down into the floor, so only its level part
# pushed the ramp out: pushed by 6-20 times its weight, a ramp stayed up to 58 mm inside the wall and 94 mm inside the
# floor (``test_a_ramp_driven_slope_first_into_a_wall_stays_out_of_it_and_the_floor``). Between two bodies that
# move, keeping the axis made things worse: a cube pushed onto a ramp's low edge dug into it 2 cm before it rode up
# the slope (the symmetric ramp push drifted 140 mm sideways instead of 34), and the soak's deepest box-on-box
# contacts grew.
KEEP_AXIS = wp.constant(0.02)
# A face axis is the one the hint names where their directions lie within this cosine (11 degrees; faces of a box
# or wedge lie 45 degrees apart or more, and a body turns less than that in a substep). An axis kept must point
# further than that from the least-overlap axis: of two nearly parallel faces (planks side by side turning against
# each other) the one that overlaps least is the one to push along; keeping the other let two planks sink 92 mm
# into each other within four substeps in the soak.
KEEP_AXIS_COS = wp.constant(0.98)
# An edge axis (the cross product of an edge of each solid) that wins but lies within this cosine (8 degrees) of the
# best face axis stays the normal, and the contacts along it are the face axis' kind (the vertices of each inside
# the other and the crossings of their edges) instead of one point where the two edges pass closest: such an axis
# comes of an edge that lies almost flat on a face. Two planks tipped face to face and turning shut (``BOOK`` in
# ``tests/systems/test_physics_scenes.py``), one turned 0.6 degrees out of line with the other, were parted least
# along the cross product of one's length and the other's height, and that one point at the edge where their faces
# met let their open edges, 60 mm apart, pass 59 mm into each other within the next substep (a soak of tumbling
# boxes). The face axis itself is no normal for them: it overlaps by up to 35 mm more where a cube tipped 20 degrees
# is pushed corner first into a slope, and pushed out along it the cube went 17.5 mm into the slope.
EDGE_FACE_COS = wp.constant(0.99)


# -- components ---------------------------------------------------------------------------------


@ecs.component
class Shape:
    """Collision shape, a ``geometry.ShapeType`` (1 sphere, 2 capsule, 3 box, 4 wedge, 5 plane)."""

    value: wp.int32


@ecs.component
class Size:
    """Shape dimensions in the body frame [m]; meaning per shape in ``systems.geometry`` (radii, half extents)."""

    value: wp.vec3


@ecs.component
class AabbLower:
    """Lower corner of the body's broadphase box in the world frame [m], grown by the step's motion."""

    value: wp.vec3


@ecs.component
class AabbUpper:
    """Upper corner of the body's broadphase box in the world frame [m], grown by the step's motion."""

    value: wp.vec3


@ecs.component(upgrade=ecs.zeros_if_missing)
class BroadphaseReach:
    """How far any point of the body can move in the step [m] as the broadphase grows its box (``find_pairs``):
    its own motion and the contact margin, or the larger reach of a body whose box overlaps its own and may push it
    along. Written before it is read each step, so a state saved before the column existed loads it as 0."""

    value: wp.float32


@ecs.component(index_of="body", nullable=True)
class SweepOrder:
    """Sort-and-sweep order: entry ``k`` of a world is the body row with the k-th lowest box along x."""

    value: wp.int32


@ecs.component(index_of="body")
class PairBodyA:
    """Candidate pair: body row of the first body (``pair`` archetype)."""

    value: wp.int32


@ecs.component(index_of="body")
class PairBodyB:
    """Candidate pair: body row of the second body (``pair`` archetype)."""

    value: wp.int32


@ecs.component(singleton=True, count_of="pair")
class PairCount:
    """Candidate pairs found by the broadphase this step (rows ``[0, count)`` of ``pair`` are alive)."""

    value: wp.int32


@ecs.component(index_of="body")
class ContactBodyA:
    """Body row of contact body A (``contact`` archetype)."""

    value: wp.int32


@ecs.component(index_of="body")
class ContactBodyB:
    """Body row of contact body B."""

    value: wp.int32


@ecs.component
class ContactNormal:
    """Unit contact normal in the world frame, from body A into body B."""

    value: wp.vec3


@ecs.component
class ContactOffsetA:
    """Contact point on body A in A's body frame [m]."""

    value: wp.vec3


@ecs.component
class ContactOffsetB:
    """Contact point on body B in B's body frame [m]."""

    value: wp.vec3


@ecs.component
class ContactDepth:
    """Penetration depth when found [m]: ``(p_a - p_b) . n``, positive when overlapping."""

    value: wp.float32


@ecs.component
class ContactNormalSpeed:
    """Approach speed along the normal before the solve [m/s], ``n . (v_a - v_b)`` at the contact point."""

    value: wp.float32


@ecs.component
class ContactImpulse:
    """Normal position impulse applied in the last substep [kg m] (the XPBD Lagrange multiplier)."""

    value: wp.float32


@ecs.component
class ContactFriction:
    """Friction position impulse on body B in the last substep [kg m], world frame, perpendicular to the normal
    (body A received the opposite). Its length is at most the friction coefficient times ``ContactImpulse``."""

    value: wp.vec3


@ecs.component
class ContactOrder:
    """Solver scratch: row ``k`` holds the first contact of the ``k``-th manifold from the bottom (by
    the mean height of its points along the up axis), the order the solver treats them in."""

    value: wp.int32


@ecs.component
class ContactHeight:
    """Solver scratch: the height [m] (along the up axis) of the manifold in the same row of ``ContactOrder``."""

    value: wp.float32


@ecs.component(singleton=True, count_of="contact")
class ContactCount:
    """Contacts found in the last substep (rows ``[0, count)`` of ``contact`` are alive)."""

    value: wp.int32


SHAPE_COMPONENTS = (Shape, Size, AabbLower, AabbUpper, BroadphaseReach, SweepOrder)
PAIR_COMPONENTS = (PairBodyA, PairBodyB)
CONTACT_COMPONENTS = (
    ContactBodyA,
    ContactBodyB,
    ContactNormal,
    ContactOffsetA,
    ContactOffsetB,
    ContactDepth,
    ContactNormalSpeed,
    ContactImpulse,
    ContactFriction,
    ContactOrder,
    ContactHeight,
)


# -- the contact table as one value ----------------------------------------------------------------


@wp.struct
class Contacts:
    body_a: wp.array2d[wp.int32]
    body_b: wp.array2d[wp.int32]
    normal: wp.array2d[wp.vec3]
    offset_a: wp.array2d[wp.vec3]
    offset_b: wp.array2d[wp.vec3]
    depth: wp.array2d[wp.float32]
    count: wp.array[wp.int32]
    overflow: wp.array[wp.int32]
    # One past the last row the narrowphase may write (the table's capacity, or a solver lane's stage).
    end: wp.int32
    # Whether a contact past ``end`` counts in ``overflow`` (the world's table) or only in the returned row.
    counts_overflow: wp.bool


@wp.struct
class Poses:
    """What the narrowphase reads of the body table."""

    shape: wp.array2d[wp.int32]
    size: wp.array2d[wp.vec3]
    position: wp.array2d[wp.vec3]
    rotation: wp.array2d[wp.quat]
    # Whether the narrowphase keeps a pair's world vertices (a CPU thread) or reads each from ``vertices`` where it
    # needs it (a GPU thread): the same values either way (``corner``, ``pose_vertex``).
    keep_vertices: wp.bool
    # Each body's world vertices, written once a substep for all the pairs it is in (``BodyVertices``,
    # ``fill_vertices``) where the narrowphase does not keep them.
    vertices: wp.array3d[wp.vec3]


@wp.func
def emit(
    c: Contacts, poses: Poses, world: int, a: int, b: int, pa: wp.vec3, pb: wp.vec3, n: wp.vec3, depth: float, row: int
) -> int:
    """Writes a contact (points in the world frame) at ``row`` and returns the next row. Rows from ``c.end`` on are
    not written: the contact is counted in ``c.overflow`` where ``c.counts_overflow`` (the world's table; a
    solver lane's stage is redone instead, see ``step_bodies_block``)."""
    if row >= c.end:
        if c.counts_overflow:
            wp.atomic_add(c.overflow, 0, 1)
            wp.atomic_min(c.overflow, 1, world)
        return row + 1
    c.body_a[world, row] = a
    c.body_b[world, row] = b
    c.normal[world, row] = n
    c.offset_a[world, row] = wp.quat_rotate_inv(poses.rotation[world, a], pa - poses.position[world, a])
    c.offset_b[world, row] = wp.quat_rotate_inv(poses.rotation[world, b], pb - poses.position[world, b])
    c.depth[world, row] = depth
    return row + 1


# -- narrowphase ---------------------------------------------------------------------------------


@wp.func
def core_end(poses: Poses, world: int, i: int, end: float) -> wp.vec3:
    """End ``end`` (-1 or +1) of a round shape's core segment in the world frame."""
    hl = core_half_length(poses.shape[world, i], poses.size[world, i])
    return poses.position[world, i] + wp.quat_rotate(poses.rotation[world, i], wp.vec3(0.0, 0.0, end * hl))


@wp.func
def world_vertex(poses: Poses, world: int, i: int, k: int) -> wp.vec3:
    return poses.position[world, i] + wp.quat_rotate(
        poses.rotation[world, i], vertex(poses.shape[world, i], poses.size[world, i], k)
    )


@wp.func
def pose_vertex(poses: Poses, world: int, i: int, k: int) -> wp.vec3:
    """World vertex ``k`` of polyhedron ``i``: found from its pose where the narrowphase keeps vertices, else read
    from the body's vertex table (``fill_vertices``); the same value."""
    if poses.keep_vertices:
        return world_vertex(poses, world, i, k)
    return poses.vertices[world, i, k]


@wp.func
def fill_vertices(poses: Poses, world: int, i: int):
    """Writes polyhedron ``i``'s world vertices into its row of the vertex table (``Poses.vertices``), for the
    narrowphase of every pair it is in; other shapes have none."""
    if is_polyhedron(poses.shape[world, i]):
        for k in range(num_vertices(poses.shape[world, i])):
            poses.vertices[world, i, k] = world_vertex(poses, world, i, k)


@wp.func
def collide_round_round(c: Contacts, poses: Poses, world: int, a: int, b: int, margin: float, row: int) -> int:
    a0 = core_end(poses, world, a, -1.0)
    a1 = core_end(poses, world, a, 1.0)
    b0 = core_end(poses, world, b, -1.0)
    b1 = core_end(poses, world, b, 1.0)
    st = segment_segment(a0, a1, b0, b1)
    ca = a0 + (a1 - a0) * st[0]
    cb = b0 + (b1 - b0) * st[1]
    ra = poses.size[world, a][0]
    rb = poses.size[world, b][0]
    d = wp.length(cb - ca)
    if d > ra + rb + margin:
        return row
    n = wp.vec3(0.0, 0.0, 1.0)
    if d > 1.0e-9:
        n = (cb - ca) / d
    return emit(c, poses, world, a, b, ca + n * ra, cb - n * rb, n, ra + rb - d, row)


@wp.func
def collide_round_plane(c: Contacts, poses: Poses, world: int, a: int, b: int, margin: float, row: int) -> int:
    r = poses.size[world, a][0]
    np_ = wp.quat_rotate(poses.rotation[world, b], wp.vec3(0.0, 0.0, 1.0))
    x0 = poses.position[world, b]
    ends = wp.where(poses.shape[world, a] == CAPSULE, 2, 1)
    for k in range(ends):
        p = core_end(poses, world, a, float(2 * k - 1))
        if ends == 1:
            p = poses.position[world, a]
        dist = wp.dot(p - x0, np_)
        if r - dist > -margin:
            row = emit(c, poses, world, a, b, p - np_ * r, p - np_ * dist, -np_, r - dist, row)
    return row


@wp.func
def sphere_polyhedron(poses: Poses, world: int, b: int, p: wp.vec3, r: float):
    """Contact of a sphere (centre ``p``, radius ``r``) with polyhedron ``b``: (depth, point on sphere, point on b, normal sphere->b)."""
    shape = poses.shape[world, b]
    size = poses.size[world, b]
    qb = poses.rotation[world, b]
    xb = poses.position[world, b]
    pl = wp.quat_rotate_inv(qb, p - xb)
    q = closest_on_polyhedron(shape, size, pl)
    diff = q - pl
    d = wp.length(diff)
    if d > 1.0e-7:
        n = wp.quat_rotate(qb, diff / d)
        return r - d, p + n * r, xb + wp.quat_rotate(qb, q), n
    # The centre is inside: leave through the nearest face.
    md = max_face_distance(shape, size, pl)
    nf = face_normal(shape, size, int(md[1]))
    n = -wp.quat_rotate(qb, nf)
    return r - md[0], p + n * r, xb + wp.quat_rotate(qb, pl - nf * md[0]), n


@wp.func
def collide_round_polyhedron(c: Contacts, poses: Poses, world: int, a: int, b: int, margin: float, row: int) -> int:
    r = poses.size[world, a][0]
    if poses.shape[world, a] == SPHERE:
        depth, pa, pb, n = sphere_polyhedron(poses, world, b, poses.position[world, a], r)
        if depth > -margin:
            row = emit(c, poses, world, a, b, pa, pb, n, depth, row)
        return row
    e0 = core_end(poses, world, a, -1.0)
    e1 = core_end(poses, world, a, 1.0)
    deepest = wp.float32(-BIG)
    ends = wp.int32(2)  # a variable: Warp would unroll range(2), and the kernel would hold two copies of the body
    for k in range(ends):
        e = wp.where(k == 0, e0, e1)
        depth, pa, pb, n = sphere_polyhedron(poses, world, b, e, r)
        deepest = wp.max(deepest, depth)
        if depth > -margin:
            row = emit(c, poses, world, a, b, pa, pb, n, depth, row)
    # The segment point nearest the solid, by alternating projections between the two convex sets.
    shape = poses.shape[world, b]
    size = poses.size[world, b]
    qb = poses.rotation[world, b]
    xb = poses.position[world, b]
    s = (e0 + e1) * 0.5
    projections = wp.int32(6)  # a variable, so that the loop is not unrolled (six copies of closest_on_polyhedron)
    for _ in range(projections):
        q = xb + wp.quat_rotate(qb, closest_on_polyhedron(shape, size, wp.quat_rotate_inv(qb, s - xb)))
        s = closest_on_segment(e0, e1, q)
    depth, pa, pb, n = sphere_polyhedron(poses, world, b, s, r)
    if depth > -margin and depth > deepest + 1.0e-5:
        row = emit(c, poses, world, a, b, pa, pb, n, depth, row)
    return row


@wp.func
def collide_polyhedron_plane(c: Contacts, poses: Poses, world: int, a: int, b: int, margin: float, row: int) -> int:
    np_ = wp.quat_rotate(poses.rotation[world, b], wp.vec3(0.0, 0.0, 1.0))
    x0 = poses.position[world, b]
    for k in range(num_vertices(poses.shape[world, a])):
        v = pose_vertex(poses, world, a, k)
        dist = wp.dot(v - x0, np_)
        if dist < margin:
            row = emit(c, poses, world, a, b, v, v - np_ * dist, -np_, -dist, row)
    return row


@wp.func_native("#if defined(__CUDA_ARCH__)\nreturn false;\n#else\nreturn true;\n#endif\n")
def on_cpu() -> bool:
    """Whether this code runs on the CPU (a constant of each build: the compiler drops the other branch)."""
    ...


# The world-frame vertices of a polyhedron (rows past ``num_vertices`` unused), found once per pair on a CPU: the
# separating-axis tests project them on up to 15 axes, and the contact faces' edges reuse them. A GPU thread
# reads each from the body's vertex table where it needs it (``corner``, ``pose_vertex``: the same value), which
# the solver writes once a substep (``fill_vertices``): kept per pair, the two solids' vertices took a solver
# thread hundreds of bytes of local memory, and turned again at each use, a box pair's separating-axis tests
# turned some 240 vertices.
Vertices = wp.types.matrix(shape=(8, 3), dtype=wp.float32)


@wp.func
def world_vertices(poses: Poses, world: int, i: int) -> Vertices:
    """Body ``i``'s world vertices where ``poses.keep_vertices`` (else zeros: ``corner`` finds them again)."""
    out = Vertices()
    if poses.keep_vertices:
        for k in range(num_vertices(poses.shape[world, i])):
            out[k] = world_vertex(poses, world, i, k)
    return out


@wp.func
def corner(vertices: Vertices, poses: Poses, world: int, i: int, k: int) -> wp.vec3:
    """World vertex ``k`` of body ``i``: from ``vertices`` (``world_vertices``) where ``poses.keep_vertices``, else
    from the body's vertex table (``pose_vertex``)."""
    if poses.keep_vertices:
        return vertices[k]
    return pose_vertex(poses, world, i, k)


@wp.func
def project(vertices: Vertices, poses: Poses, world: int, i: int, n: wp.vec3) -> wp.vec2:
    """(min, max) of polyhedron ``i``'s world vertices (``world_vertices``) projected on ``n``."""
    lo = wp.float32(BIG)
    hi = wp.float32(-BIG)
    for k in range(num_vertices(poses.shape[world, i])):
        p = wp.dot(corner(vertices, poses, world, i, k), n)
        lo = wp.min(lo, p)
        hi = wp.max(hi, p)
    return wp.vec2(lo, hi)


@wp.func
def axis_overlap(va: Vertices, vb: Vertices, poses: Poses, world: int, a: int, b: int, n: wp.vec3) -> wp.vec2:
    """(overlap of polyhedra a and b (their world vertices) along n, +1 if b lies on the +n side of a else -1)."""
    pa = project(va, poses, world, a, n)
    pb = project(vb, poses, world, b, n)
    forward = pa[1] - pb[0]
    backward = pb[1] - pa[0]
    if forward <= backward:
        return wp.vec2(forward, 1.0)
    return wp.vec2(backward, -1.0)


@wp.func
def inside_with_margin(poses: Poses, world: int, i: int, p: wp.vec3, margin: float) -> bool:
    pl = wp.quat_rotate_inv(poses.rotation[world, i], p - poses.position[world, i])
    return max_face_distance(poses.shape[world, i], poses.size[world, i], pl)[0] <= margin


@wp.func
def exit_depth(poses: Poses, world: int, i: int, p: wp.vec3, d: wp.vec3, flat: float) -> float:
    """How far world point ``p`` lies inside solid ``i`` along unit direction ``d``: the distance along ``d`` to the
    first face plane of ``i`` that faces ``d``, at most ``flat`` (the depth below the plane through ``i``'s furthest
    vertex along ``d``, which it equals where that face is square to ``d``; negative where ``p`` is outside). A
    vertex pressed into a face turned against the contact normal gets the depth of that face where it is, not of the
    face's furthest corner: a flat plane there would hold the two faces flush, so neither would right the other."""
    q = poses.rotation[world, i]
    shape = poses.shape[world, i]
    size = poses.size[world, i]
    pl = wp.quat_rotate_inv(q, p - poses.position[world, i])
    dl = wp.quat_rotate_inv(q, d)
    depth = flat
    for f in range(num_faces(shape)):
        facing = along_face_normal(shape, size, f, dl)
        if facing > EXIT_FACING:
            depth = wp.min(depth, (face_offset(shape, size, f) - along_face_normal(shape, size, f, pl)) / facing)
    return depth


@wp.func
def supporting_edge(poses: Poses, world: int, i: int, direction: wp.vec3, n: wp.vec3, sign: float) -> wp.int32:
    """The edge of ``i`` parallel to ``direction`` (world frame) that reaches furthest along ``sign * n``."""
    shape = poses.shape[world, i]
    size = poses.size[world, i]
    qi = poses.rotation[world, i]
    best = wp.int32(-1)
    best_p = wp.float32(-BIG)
    for e in range(num_edges(shape)):
        v0 = vertex(shape, size, edge_vertex(shape, e, 0))
        v1 = vertex(shape, size, edge_vertex(shape, e, 1))
        d = wp.quat_rotate(qi, v1 - v0)
        if wp.abs(wp.dot(wp.normalize(d), direction)) > 0.999:
            p = sign * wp.dot(wp.quat_rotate(qi, (v0 + v1) * 0.5), n)
            if p > best_p:
                best_p = p
                best = e
    return best


@wp.func
def touching_row(c: Contacts, poses: Poses, world: int, b: int, first: int, row: int, pb: wp.vec3, n: wp.vec3) -> int:
    """The first contact of this pair in the rows it wrote, ``first`` up to ``row``, that touches B within
    ``SAME_POINT`` of ``pb`` across the normal (a vertex of each solid at the same spot, a crossing at a corner, or
    two vertices of A on one line along the normal), or -1."""
    xb = poses.position[world, b]
    qb = poses.rotation[world, b]
    for k in range(first, wp.min(row, c.end)):
        d = xb + wp.quat_rotate(qb, c.offset_b[world, k]) - pb
        if wp.length_sq(d - n * wp.dot(d, n)) < SAME_POINT * SAME_POINT:
            return k
    return -1


@wp.func
def already_touching(
    c: Contacts, poses: Poses, world: int, b: int, first: int, row: int, pb: wp.vec3, n: wp.vec3
) -> bool:
    """Whether a contact of this pair in the rows it wrote touches B at ``pb`` (``touching_row``)."""
    return touching_row(c, poses, world, b, first, row, pb, n) >= 0


@wp.func
def face_edge_crossings(
    c: Contacts,
    poses: Poses,
    world: int,
    a: int,
    b: int,
    va: Vertices,
    vb: Vertices,
    n: wp.vec3,
    top_a: float,
    low_b: float,
    margin: float,
    first: int,
    row: int,
) -> int:
    """Where an edge of A's contact face crosses an edge of B's, seen along ``n``: the corners of the
    contact polygon that are vertices of neither solid (two offset boxes resting on each other).
    ``va``, ``vb``: the world vertices of A and B."""
    sa = poses.shape[world, a]
    sb = poses.shape[world, b]
    # Edges within this distance of the contact plane belong to the contact faces.
    near = margin + 0.01
    u = wp.normalize(
        wp.where(wp.abs(n[0]) < 0.9, wp.cross(n, wp.vec3(1.0, 0.0, 0.0)), wp.cross(n, wp.vec3(0.0, 1.0, 0.0)))
    )
    v = wp.cross(n, u)
    for i in range(num_edges(sa)):
        a0 = corner(va, poses, world, a, edge_vertex(sa, i, 0))
        a1 = corner(va, poses, world, a, edge_vertex(sa, i, 1))
        if top_a - wp.dot(a0, n) <= near and top_a - wp.dot(a1, n) <= near:
            for j in range(num_edges(sb)):
                b0 = corner(vb, poses, world, b, edge_vertex(sb, j, 0))
                b1 = corner(vb, poses, world, b, edge_vertex(sb, j, 1))
                if wp.dot(b0, n) - low_b <= near and wp.dot(b1, n) - low_b <= near:
                    da = a1 - a0
                    db = b1 - b0
                    w0 = b0 - a0
                    dax = wp.dot(da, u)
                    day = wp.dot(da, v)
                    dbx = wp.dot(db, u)
                    dby = wp.dot(db, v)
                    wx = wp.dot(w0, u)
                    wy = wp.dot(w0, v)
                    denom = dax * dby - day * dbx
                    # Edges so nearly parallel that they stay within SAME_POINT of each other along the longer one
                    # cross at a corner of almost 180 degrees, no further than that off the polygon the other corners
                    # span, and where along them is ill-conditioned: two cubes side by side, turned 2e-7 rad apart,
                    # got a fifth point 0.8 mm from a corner, which took a share of that corner's push.
                    if wp.abs(denom) > SAME_POINT * wp.min(wp.length(da), wp.length(db)):
                        s = (wx * dby - wy * dbx) / denom
                        t = (wx * day - wy * dax) / denom
                        if s > 1.0e-4 and s < 1.0 - 1.0e-4 and t > 1.0e-4 and t < 1.0 - 1.0e-4:
                            pa = a0 + da * s
                            pb = b0 + db * t
                            depth = wp.dot(pa - pb, n)
                            if depth > -margin and not already_touching(c, poses, world, b, first, row, pb, n):
                                row = emit(c, poses, world, a, b, pa, pb, n, depth, row)
    return row


@wp.func
def collide_polyhedra(
    c: Contacts, poses: Poses, world: int, a: int, b: int, margin: float, row: int, hint: wp.vec3
) -> int:
    """Contacts of two polyhedra along the axis that separates them most or overlaps them least (separating-axis
    test), or along the face axis that ``hint`` (the pair's normal in the substep before) names where that overlaps
    them by at most ``KEEP_AXIS`` more and points another way (``KEEP_AXIS_COS``): the axis along which the solids
    met, which a sharp edge pressed past a face would otherwise give up for a shallower one at a slant. An edge axis
    gives one contact where the edges pass closest, or a face axis' contacts where it lies near the best face axis
    (``EDGE_FACE_COS``)."""
    sa = poses.shape[world, a]
    sb = poses.shape[world, b]
    qa = poses.rotation[world, a]
    qb = poses.rotation[world, b]
    va = world_vertices(poses, world, a)
    vb = world_vertices(poses, world, b)
    count_a = num_vertices(sa)
    count_b = num_vertices(sb)
    best = wp.float32(BIG)
    best_n = wp.vec3(0.0, 0.0, 1.0)
    best_ea = wp.int32(-1)
    best_eb = wp.int32(-1)
    # An axis that separates the solids by more than the margin ends the test: no contact, whichever axis
    # would have separated them most.
    kept = wp.float32(BIG)  # the overlap along the face axis that ``hint`` names, that axis and its cosine to it
    kept_n = wp.vec3(0.0, 0.0, 0.0)
    kept_cos = wp.float32(KEEP_AXIS_COS)
    for i in range(num_axes(sa)):
        n = wp.quat_rotate(qa, axis_direction(sa, poses.size[world, a], i))
        ov = axis_overlap(va, vb, poses, world, a, b, n)
        if ov[0] < -margin:
            return row
        if ov[0] < best:
            best = ov[0]
            best_n = n * ov[1]
        if wp.dot(n * ov[1], hint) > kept_cos:
            kept = ov[0]
            kept_n = n * ov[1]
            kept_cos = wp.dot(kept_n, hint)
    for i in range(num_axes(sb)):
        n = wp.quat_rotate(qb, axis_direction(sb, poses.size[world, b], i))
        ov = axis_overlap(va, vb, poses, world, a, b, n)
        if ov[0] < -margin:
            return row
        if ov[0] < best:
            best = ov[0]
            best_n = n * ov[1]
        if wp.dot(n * ov[1], hint) > kept_cos:
            kept = ov[0]
            kept_n = n * ov[1]
            kept_cos = wp.dot(kept_n, hint)
    best_face = best
    best_face_n = best_n
    for i in range(num_axes(sa)):
        ea = wp.quat_rotate(qa, edge_direction(sa, poses.size[world, a], i))
        for j in range(num_axes(sb)):
            eb = wp.quat_rotate(qb, edge_direction(sb, poses.size[world, b], j))
            n = wp.cross(ea, eb)
            ln = wp.length(n)
            if ln > 1.0e-4:
                n = n / ln
                ov = axis_overlap(va, vb, poses, world, a, b, n)
                # Faces win ties: edge axes often repeat a face axis and give fewer contacts.
                if ov[0] < best and ov[0] < best_face - 1.0e-4:
                    if ov[0] < -margin:
                        return row
                    best = ov[0]
                    best_n = n * ov[1]
                    best_ea = i
                    best_eb = j
    if kept < best + KEEP_AXIS and wp.dot(kept_n, best_n) < KEEP_AXIS_COS:
        best_n = kept_n
        best_ea = -1
    if best_ea >= 0 and wp.abs(wp.dot(best_n, best_face_n)) > EDGE_FACE_COS:
        best_ea = -1
    n = best_n
    if best_ea < 0:
        first = row
        top_a = project(va, poses, world, a, n)[1]
        low_b = project(vb, poses, world, b, n)[0]
        for k in range(count_b):
            v = corner(vb, poses, world, b, k)
            if inside_with_margin(poses, world, a, v, margin):
                depth = exit_depth(poses, world, a, v, n, top_a - wp.dot(v, n))
                if depth > -margin:
                    row = emit(c, poses, world, a, b, v + n * depth, v, n, depth, row)
        for k in range(count_a):
            v = corner(va, poses, world, a, k)
            if inside_with_margin(poses, world, b, v, margin):
                depth = exit_depth(poses, world, b, v, -n, wp.dot(v, n) - low_b)
                if depth > -margin:
                    # One contact where two points meet B at one spot: the deeper. Where A's edge lies along the
                    # normal and the margin spans it (thin planks in a fast substep), its far vertex may come first,
                    # and keeping that one left the near vertex free to pass into B within the substep.
                    same = touching_row(c, poses, world, b, first, row, v - n * depth, n)
                    if same < 0:
                        row = emit(c, poses, world, a, b, v, v - n * depth, n, depth, row)
                    elif depth > c.depth[world, same]:
                        emit(c, poses, world, a, b, v, v - n * depth, n, depth, same)
        return face_edge_crossings(c, poses, world, a, b, va, vb, n, top_a, low_b, margin, first, row)
    ea = wp.quat_rotate(qa, edge_direction(sa, poses.size[world, a], best_ea))
    eb = wp.quat_rotate(qb, edge_direction(sb, poses.size[world, b], best_eb))
    ia = supporting_edge(poses, world, a, ea, n, 1.0)
    ib = supporting_edge(poses, world, b, eb, n, -1.0)
    if ia < 0 or ib < 0:
        return row
    a0 = corner(va, poses, world, a, edge_vertex(sa, ia, 0))
    a1 = corner(va, poses, world, a, edge_vertex(sa, ia, 1))
    b0 = corner(vb, poses, world, b, edge_vertex(sb, ib, 0))
    b1 = corner(vb, poses, world, b, edge_vertex(sb, ib, 1))
    st = segment_segment(a0, a1, b0, b1)
    pa = a0 + (a1 - a0) * st[0]
    pb = b0 + (b1 - b0) * st[1]
    depth = wp.dot(pa - pb, n)
    if depth > -margin:
        row = emit(c, poses, world, a, b, pa, pb, n, depth, row)
    return row


@wp.func
def boxes_apart(poses: Poses, world: int, i: int, j: int) -> float:
    """How far apart the world-axis boxes around solids ``i`` and ``j`` are along the axis that parts them most
    (negative where they overlap): a lower bound of the solids' distance."""
    ei = shape_extent(poses.shape[world, i], poses.size[world, i], poses.rotation[world, i])
    ej = shape_extent(poses.shape[world, j], poses.size[world, j], poses.rotation[world, j])
    d = poses.position[world, j] - poses.position[world, i]
    gap = wp.max(wp.abs(d[0]) - ei[0] - ej[0], wp.abs(d[1]) - ei[1] - ej[1])
    return wp.max(gap, wp.abs(d[2]) - ei[2] - ej[2])


@wp.func
def collide(c: Contacts, poses: Poses, world: int, i: int, j: int, margin: float, row: int, hint: wp.vec3) -> int:
    """Writes the contacts of bodies ``i`` and ``j`` (any order; body A is the lower ``ShapeType``) from ``row`` on
    and returns the row after them (see ``emit``). Two solids whose world-axis boxes lie more than ``margin`` apart
    make none: most candidate pairs of a step are that far apart in a substep, and the test costs a fraction of a
    polyhedron pair's separating-axis tests (which could otherwise leave a speculative contact whose depth
    understates the gap: their best axis is not always the one that parts the solids most). ``hint``: the normal
    the pair's contacts had in the substep before, or zeros (``collide_polyhedra``)."""
    si = poses.shape[world, i]
    sj = poses.shape[world, j]
    a = wp.where(si <= sj, i, j)
    b = wp.where(si <= sj, j, i)
    sa = wp.min(si, sj)
    sb = wp.max(si, sj)
    if sb != PLANE and boxes_apart(poses, world, i, j) > margin:
        return row
    if sb == PLANE:
        if sa == PLANE:
            return row
        if is_round(sa):
            return collide_round_plane(c, poses, world, a, b, margin, row)
        if is_polyhedron(sa):
            return collide_polyhedron_plane(c, poses, world, a, b, margin, row)
        return row
    if is_round(sb):
        return collide_round_round(c, poses, world, a, b, margin, row)
    if is_round(sa):
        return collide_round_polyhedron(c, poses, world, a, b, margin, row)
    if is_polyhedron(sa):
        return collide_polyhedra(c, poses, world, a, b, margin, row, hint)
    return row


# -- broadphase ----------------------------------------------------------------------------------


@wp.func
def shape_extent(shape: wp.int32, size: wp.vec3, q: wp.quat) -> wp.vec3:
    """Half extents of the world-axis box around a shape, about its body origin."""
    if shape == SPHERE:
        return wp.vec3(size[0], size[0], size[0])
    if shape == CAPSULE:
        axis = wp.quat_rotate(q, wp.vec3(0.0, 0.0, size[1]))
        return wp.vec3(wp.abs(axis[0]), wp.abs(axis[1]), wp.abs(axis[2])) + wp.vec3(size[0], size[0], size[0])
    if shape == WEDGE:
        e = wp.vec3(0.0, 0.0, 0.0)
        for k in range(6):
            v = wp.quat_rotate(q, vertex(shape, size, k))
            e = wp.vec3(wp.max(e[0], wp.abs(v[0])), wp.max(e[1], wp.abs(v[1])), wp.max(e[2], wp.abs(v[2])))
        return e
    r = wp.quat_to_matrix(q)
    return wp.vec3(
        wp.abs(r[0, 0]) * size[0] + wp.abs(r[0, 1]) * size[1] + wp.abs(r[0, 2]) * size[2],
        wp.abs(r[1, 0]) * size[0] + wp.abs(r[1, 1]) * size[1] + wp.abs(r[1, 2]) * size[2],
        wp.abs(r[2, 0]) * size[0] + wp.abs(r[2, 1]) * size[1] + wp.abs(r[2, 2]) * size[2],
    )


@wp.func
def spin_arm(shape: wp.int32, size: wp.vec3, e: wp.vec3) -> float:
    """How far a point of the shape moves per radian of the body's turn about its origin, as far as its contacts can
    tell: 0 for a sphere (it fills the same ball however it turns), the core's half length for a capsule (the ends of
    the segment its radius is around), and the corner of its box ``e`` for the rest (a bound). The step's broadphase
    grows a box by it (``find_pairs``); a substep's reach keeps a ball's spin (``solver.substep_reach``)."""
    if shape == SPHERE:
        return 0.0
    if shape == CAPSULE:
        return size[1]
    return wp.length(e)


@wp.func
def boxes_gap(d: wp.vec3, ea: wp.vec3, eb: wp.vec3) -> float:
    """How far apart two world-axis boxes of half extents ``ea`` and ``eb``, whose centres are ``d`` apart, are along
    the axis that separates them most (negative where they overlap): no point of one is nearer the other than this."""
    return wp.max(wp.max(wp.abs(d[0]) - ea[0] - eb[0], wp.abs(d[1]) - ea[1] - eb[1]), wp.abs(d[2]) - ea[2] - eb[2])


@wp.func
def boxes_overlap(lo_a: wp.vec3, hi_a: wp.vec3, lo_b: wp.vec3, hi_b: wp.vec3) -> bool:
    return (
        lo_a[0] <= hi_b[0]
        and lo_b[0] <= hi_a[0]
        and lo_a[1] <= hi_b[1]
        and lo_b[1] <= hi_a[1]
        and lo_a[2] <= hi_b[2]
        and lo_b[2] <= hi_a[2]
    )


@wp.func
def add_pair(
    pair_a: wp.array2d[wp.int32],
    pair_b: wp.array2d[wp.int32],
    overflow: wp.array[wp.int32],
    world: int,
    count: int,
    i: int,
    j: int,
) -> int:
    if count >= pair_a.shape[1]:
        wp.atomic_add(overflow, 0, 1)
        wp.atomic_min(overflow, 1, world)
        return count
    pair_a[world, count] = wp.min(i, j)
    pair_b[world, count] = wp.max(i, j)
    return count + 1


# Column bundles of the broadphase (one kernel parameter each; the engine binds every column).
BroadphaseBodies = ecs.bundle(
    "BroadphaseBodies",
    ["alive", Shape, Size, Position, Rotation, LinearVelocity, AngularVelocity, BodyResponse, LockedBy, Mass, Force],
)


@wp.func
def core_gap(body_in: BroadphaseBodies, world: int, i: int, j: int, ei: wp.vec3) -> float:
    """How far apart the world-axis boxes around bodies ``i`` (half extents ``ei``) and ``j`` are before the
    broadphase grows them, along the axis that separates them most (negative where they overlap)."""
    ej = shape_extent(body_in.shape[world, j], body_in.size[world, j], body_in.rotation[world, j])
    return boxes_gap(body_in.position[world, i] - body_in.position[world, j], ei, ej)


BroadphaseBoxes = ecs.bundle("BroadphaseBoxes", [AabbLower, AabbUpper, BroadphaseReach, SweepOrder])
PairRows = ecs.bundle("PairRows", ["alive", PairBodyA, PairBodyB])


@wp.kernel
def find_pairs(
    # Resources:
    physics_dt: float,
    gravity: float,
    contact_margin: float,
    broadphase: int,
    # Components in:
    body_in: BroadphaseBodies,
    # Components out:
    body_out: BroadphaseBoxes,
    pair_out: PairRows,
    pair__overflow_out: wp.array[wp.int32],
    world_pair_count_out: wp.array[wp.int32],
):
    """Candidate pairs of the step: boxes grown by the step's motion that overlap (one thread per world)."""
    world = wp.tid()
    nb = body_in.alive.shape[1]
    for i in range(nb):
        lo = wp.vec3(BIG, BIG, BIG)
        hi = wp.vec3(-BIG, -BIG, -BIG)
        reach = wp.float32(0.0)
        shape = body_in.shape[world, i]
        if body_in.alive[world, i] != 0 and shape != PLANE:
            e = shape_extent(shape, body_in.size[world, i], body_in.rotation[world, i])
            # Anything the body can reach during the step: its speed, its spin at its outer radius (none for a
            # sphere: a ball spun out of an overlap at 134 rad/s gave its world 304 contacts through the reach of its
            # spin), what gravity and its force add, and the margin the narrowphase keeps.
            speed = wp.length(body_in.linear_velocity[world, i]) + wp.length(
                body_in.angular_velocity[world, i]
            ) * spin_arm(shape, body_in.size[world, i], e)
            if movable(body_in.response[world, i], body_in.locked_by[world, i]):
                pull = wp.abs(gravity) + wp.length(body_in.force[world, i]) / body_in.mass[world, i]
                speed += pull * physics_dt
            reach = speed * physics_dt + contact_margin
            grow = wp.vec3(reach, reach, reach)
            lo = body_in.position[world, i] - e - grow
            hi = body_in.position[world, i] + e + grow
        body_out.aabb_lower[world, i] = lo
        body_out.aabb_upper[world, i] = hi
        body_out.broadphase_reach[world, i] = reach
    # A body that a faster one may push moves as far as its pusher has left to go once they touch, so its box must
    # allow for that: a box at rest 0.4 m from a wall, struck by a heavy box at 15 m/s, made no pair with the wall
    # and was driven through it. Each movable body whose box overlaps a body's of larger reach takes that reach less
    # the gap between their boxes before growing (``core_gap``), through chains of them, until none grows (the least
    # fixed point: the same whatever the row order).
    grew = bool(True)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
    while grew:
        grew = bool(False)  # noqa: UP018
        for i in range(nb):
            if body_out.aabb_lower[world, i][0] < BIG and movable(
                body_in.response[world, i], body_in.locked_by[world, i]
            ):
                for j in range(nb):
                    if body_out.broadphase_reach[world, j] > body_out.broadphase_reach[world, i]:  # noqa: SIM102
                        if boxes_overlap(
                            body_out.aabb_lower[world, i],
                            body_out.aabb_upper[world, i],
                            body_out.aabb_lower[world, j],
                            body_out.aabb_upper[world, j],
                        ):
                            e = shape_extent(
                                body_in.shape[world, i], body_in.size[world, i], body_in.rotation[world, i]
                            )
                            gap = core_gap(body_in, world, i, j, e)
                            far = body_out.broadphase_reach[world, j] - wp.max(gap, 0.0)
                            if far > body_out.broadphase_reach[world, i]:
                                grow = wp.vec3(far, far, far)
                                body_out.aabb_lower[world, i] = body_in.position[world, i] - e - grow
                                body_out.aabb_upper[world, i] = body_in.position[world, i] + e + grow
                                body_out.broadphase_reach[world, i] = far
                                grew = True
    count = wp.int32(0)
    # Planes pair with every movable body whose box reaches below them.
    for p in range(nb):
        if body_in.alive[world, p] != 0 and body_in.shape[world, p] == PLANE:
            n = wp.quat_rotate(body_in.rotation[world, p], wp.vec3(0.0, 0.0, 1.0))
            x0 = body_in.position[world, p]
            for i in range(nb):
                if body_in.alive[world, i] != 0 and movable(body_in.response[world, i], body_in.locked_by[world, i]):
                    lo = body_out.aabb_lower[world, i]
                    hi = body_out.aabb_upper[world, i]
                    centre = (lo + hi) * 0.5
                    half = (hi - lo) * 0.5
                    reach = wp.abs(n[0]) * half[0] + wp.abs(n[1]) * half[1] + wp.abs(n[2]) * half[2]
                    if wp.dot(centre - x0, n) - reach <= 0.0 and body_in.shape[world, i] != PLANE:
                        count = add_pair(
                            pair_out.pair_body_a, pair_out.pair_body_b, pair__overflow_out, world, count, i, p
                        )
    if broadphase == _ALL_PAIRS:
        for i in range(nb):
            if body_out.aabb_lower[world, i][0] < BIG:
                for j in range(i + 1, nb):
                    if (
                        movable(body_in.response[world, i], body_in.locked_by[world, i])
                        or movable(body_in.response[world, j], body_in.locked_by[world, j])
                    ) and boxes_overlap(
                        body_out.aabb_lower[world, i],
                        body_out.aabb_upper[world, i],
                        body_out.aabb_lower[world, j],
                        body_out.aabb_upper[world, j],
                    ):
                        count = add_pair(
                            pair_out.pair_body_a, pair_out.pair_body_b, pair__overflow_out, world, count, i, j
                        )
    else:
        # Keep last step's order when it is still a permutation (bodies move little per step, so
        # the insertion sort below is then close to linear); otherwise start from row order.
        valid = bool(nb <= 64)
        seen = wp.uint64(0)
        if valid:
            for k in range(nb):
                r = body_out.sweep_order[world, k]
                if r < 0 or r >= nb:
                    valid = False
                else:
                    seen = seen | (wp.uint64(1) << wp.uint64(r))
            if nb == 64:
                valid = valid and seen == ~wp.uint64(0)
            else:
                valid = valid and seen == (wp.uint64(1) << wp.uint64(nb)) - wp.uint64(1)
        if not valid:
            for k in range(nb):
                body_out.sweep_order[world, k] = k
        for k in range(1, nb):
            r = body_out.sweep_order[world, k]
            key = body_out.aabb_lower[world, r][0]
            m = k - 1
            while m >= 0 and body_out.aabb_lower[world, body_out.sweep_order[world, m]][0] > key:
                body_out.sweep_order[world, m + 1] = body_out.sweep_order[world, m]
                m -= 1
            body_out.sweep_order[world, m + 1] = r
        for k in range(nb):
            i = body_out.sweep_order[world, k]
            lo_i = body_out.aabb_lower[world, i]
            if lo_i[0] >= BIG:
                break
            hi_i = body_out.aabb_upper[world, i]
            for m in range(k + 1, nb):
                j = body_out.sweep_order[world, m]
                lo_j = body_out.aabb_lower[world, j]
                if lo_j[0] > hi_i[0]:
                    break
                if (
                    movable(body_in.response[world, i], body_in.locked_by[world, i])
                    or movable(body_in.response[world, j], body_in.locked_by[world, j])
                ) and boxes_overlap(lo_i, hi_i, lo_j, body_out.aabb_upper[world, j]):
                    count = add_pair(pair_out.pair_body_a, pair_out.pair_body_b, pair__overflow_out, world, count, i, j)
    world_pair_count_out[world] = count
    for k in range(pair_out.alive.shape[1]):
        pair_out.alive[world, k] = wp.where(k < count, 1, 0)
