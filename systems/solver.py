"""The XPBD rigid-body solver (Mueller et al. 2020, "Detailed Rigid Body Simulation with Extended
Position Based Dynamics"), one thread per world, ``physics_substeps`` substeps per step.

Each substep of length ``h = physics_dt / physics_substeps``:

1. integrate: dynamic bodies get gravity (``gravity`` along world z), external force and torque
   (with the gyroscopic term), damping; then positions and orientations advance explicitly;
   kinematic bodies advance with their own velocities; static and locked bodies stay put;
2. narrowphase on the step's candidate pairs at the new poses, into the contact table;
3. one Gauss-Seidel pass of position constraints: for each contact the normal correction,
   then static friction (the tangential slip since the substep began is undone while its
   impulse stays below ``mu`` times the normal impulse); then each fixed joint (anchor points
   together, relative orientation held), all with zero compliance;
4. velocities from the position change over the substep;
5. one velocity pass over contacts that pushed: dynamic Coulomb friction (an impulse of at most
   ``h mu f_n``, ``f_n = lambda_n / h^2``, against the slip, never reversing it) and restitution (the normal speed becomes ``-e`` times the
   approach speed before the solve; zero below ``2 |g| h`` to keep resting contacts quiet).
"""

from __future__ import annotations

import warp as wp

from .collision import Contacts, Poses, collide
from .rigid_body import (
    KINEMATIC,
    angular_inverse_mass,
    generalized_inverse_mass,
    inverse_mass,
    movable,
    rotate_by,
    world_inv_inertia_apply,
)

wp.set_module_options({"enable_backward": False})


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
def kick(bodies: Bodies, world: int, i: int, inv_m: float, p: wp.vec3, r: wp.vec3):
    """Applies the velocity impulse ``p`` at offset ``r`` to body ``i``."""
    if inv_m == 0.0:
        return
    q = bodies.rotation[world, i]
    bodies.linear_velocity[world, i] = bodies.linear_velocity[world, i] + p * inv_m
    bodies.angular_velocity[world, i] = bodies.angular_velocity[world, i] + world_inv_inertia_apply(
        q, bodies.inv_inertia[world, i], wp.cross(r, p)
    )


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
):
    x = bodies.position[world, i]
    q = bodies.rotation[world, i]
    bodies.prev_position[world, i] = x
    bodies.prev_rotation[world, i] = q
    response = bodies.response[world, i]
    if movable(response, bodies.locked_by[world, i]):
        inv_m = 1.0 / bodies.mass[world, i]
        v = bodies.linear_velocity[world, i] + (wp.vec3(0.0, 0.0, gravity) + force * inv_m) * h
        v = v * wp.max(0.0, 1.0 - linear_damping * h)
        inv_i = bodies.inv_inertia[world, i]
        w_body = wp.quat_rotate_inv(q, bodies.angular_velocity[world, i])
        tau_body = wp.quat_rotate_inv(q, torque)
        inertia = wp.inverse(inv_i)
        w_body = w_body + inv_i * (tau_body - wp.cross(w_body, inertia * w_body)) * h
        w = wp.quat_rotate(q, w_body) * wp.max(0.0, 1.0 - angular_damping * h)
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
def static_friction(
    bodies: Bodies, c: Contacts, world: int, k: int, a: int, b: int, ima: float, imb: float, limit: float
):
    """Undoes the tangential slip of contact ``k``'s points since the substep began, if that takes less than ``limit``."""
    n = c.normal[world, k]
    qa = bodies.rotation[world, a]
    qb = bodies.rotation[world, b]
    ra = wp.quat_rotate(qa, c.offset_a[world, k])
    rb = wp.quat_rotate(qb, c.offset_b[world, k])
    pa_prev = bodies.prev_position[world, a] + wp.quat_rotate(bodies.prev_rotation[world, a], c.offset_a[world, k])
    pb_prev = bodies.prev_position[world, b] + wp.quat_rotate(bodies.prev_rotation[world, b], c.offset_b[world, k])
    dp = (bodies.position[world, a] + ra - pa_prev) - (bodies.position[world, b] + rb - pb_prev)
    slip_vec = dp - n * wp.dot(dp, n)
    slip = wp.length(slip_vec)
    if slip <= 1.0e-9:
        return
    t = slip_vec / slip
    wa = generalized_inverse_mass(ima, qa, bodies.inv_inertia[world, a], ra, t)
    wb = generalized_inverse_mass(imb, qb, bodies.inv_inertia[world, b], rb, t)
    if wa + wb <= 0.0:
        return
    dlt = slip / (wa + wb)
    if dlt < limit:
        push(bodies, world, a, ima, -dlt * t, ra)
        push(bodies, world, b, imb, dlt * t, rb)


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
def solve_manifold(bodies: Bodies, c: Contacts, impulse: wp.array2d[wp.float32], world: int, start: int, end: int):
    """Normal and static-friction position constraints of one pair's contacts.

    The normal constraint is solved once for the whole manifold, at the depth-weighted centroid of
    its overlapping points with their depth-weighted mean depth: a box resting flat is lifted
    without a spurious tilt (point-by-point Gauss-Seidel over coplanar corners leaves a rocking
    residue that friction then turns into creep). The impulse is shared among the points in
    proportion to their depth; static friction then acts point by point, so spin is resisted.
    """
    a = c.body_a[world, start]
    b = c.body_b[world, start]
    qa = bodies.rotation[world, a]
    qb = bodies.rotation[world, b]
    xa = bodies.position[world, a]
    xb = bodies.position[world, b]
    total = wp.float32(0.0)
    square = wp.float32(0.0)
    ra_sum = wp.vec3(0.0, 0.0, 0.0)
    rb_sum = wp.vec3(0.0, 0.0, 0.0)
    n_sum = wp.vec3(0.0, 0.0, 0.0)
    for k in range(start, end):
        n = c.normal[world, k]
        ra = wp.quat_rotate(qa, c.offset_a[world, k])
        rb = wp.quat_rotate(qb, c.offset_b[world, k])
        d = wp.dot((xa + ra) - (xb + rb), n)
        impulse[world, k] = 0.0
        if d > 0.0:
            impulse[world, k] = d
            total += d
            square += d * d
            ra_sum += ra * d
            rb_sum += rb * d
            n_sum += n * d
    if total <= 0.0:
        return
    n = wp.normalize(n_sum)
    ra = ra_sum / total
    rb = rb_sum / total
    depth = square / total
    ima = inv_mass_of(bodies, world, a)
    imb = inv_mass_of(bodies, world, b)
    wa = generalized_inverse_mass(ima, qa, bodies.inv_inertia[world, a], ra, n)
    wb = generalized_inverse_mass(imb, qb, bodies.inv_inertia[world, b], rb, n)
    if wa + wb <= 0.0:
        for k in range(start, end):
            impulse[world, k] = 0.0
        return
    dl = depth / (wa + wb)
    push(bodies, world, a, ima, -dl * n, ra)
    push(bodies, world, b, imb, dl * n, rb)
    mu = wp.max(bodies.friction[world, a], bodies.friction[world, b])
    for k in range(start, end):
        share = dl * impulse[world, k] / total
        impulse[world, k] = share
        if share > 0.0:
            static_friction(bodies, c, world, k, a, b, ima, imb, mu * share)


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
):
    """Restitution once for the manifold at its impulse-weighted centroid, then dynamic friction point by point.

    The friction budget of a point is ``mu`` times its whole normal impulse of the substep: its share
    of the position impulse (``lambda / h``) plus its share of the restitution impulse, so that the
    normal impulses that friction sees add up to the ones the body actually received.
    """
    a = c.body_a[world, start]
    b = c.body_b[world, start]
    ima = inv_mass_of(bodies, world, a)
    imb = inv_mass_of(bodies, world, b)
    qa = bodies.rotation[world, a]
    qb = bodies.rotation[world, b]
    total = wp.float32(0.0)
    ra_sum = wp.vec3(0.0, 0.0, 0.0)
    rb_sum = wp.vec3(0.0, 0.0, 0.0)
    n_sum = wp.vec3(0.0, 0.0, 0.0)
    approach = wp.float32(0.0)
    for k in range(start, end):
        lam = impulse[world, k]
        if lam > 0.0:
            total += lam
            ra_sum += wp.quat_rotate(qa, c.offset_a[world, k]) * lam
            rb_sum += wp.quat_rotate(qb, c.offset_b[world, k]) * lam
            n_sum += c.normal[world, k] * lam
            approach += normal_speed[world, k] * lam
    if total <= 0.0:
        return
    n = wp.normalize(n_sum)
    ra = ra_sum / total
    rb = rb_sum / total
    approach = approach / total
    vn = wp.dot(n, point_velocity(bodies, world, a, ra) - point_velocity(bodies, world, b, rb))
    e = wp.max(bodies.restitution[world, a], bodies.restitution[world, b])
    if approach <= 2.0 * wp.abs(gravity) * h:
        e = 0.0
    target = wp.min(-e * approach, 0.0)
    wa = generalized_inverse_mass(ima, qa, bodies.inv_inertia[world, a], ra, n)
    wb = generalized_inverse_mass(imb, qb, bodies.inv_inertia[world, b], rb, n)
    push_back = wp.float32(0.0)  # normal impulse of the restitution step, > 0 when it pushes the bodies apart
    if wa + wb > 0.0:
        push_back = (vn - target) / (wa + wb)
        kick(bodies, world, a, ima, -push_back * n, ra)
        kick(bodies, world, b, imb, push_back * n, rb)
    mu = wp.max(bodies.friction[world, a], bodies.friction[world, b])
    for k in range(start, end):
        lam = impulse[world, k]
        if lam > 0.0:
            nk = c.normal[world, k]
            qa = bodies.rotation[world, a]
            qb = bodies.rotation[world, b]
            rak = wp.quat_rotate(qa, c.offset_a[world, k])
            rbk = wp.quat_rotate(qb, c.offset_b[world, k])
            budget = mu * wp.max(lam / h + push_back * lam / total, 0.0)
            v = point_velocity(bodies, world, a, rak) - point_velocity(bodies, world, b, rbk)
            vt = v - nk * wp.dot(nk, v)
            speed_t = wp.length(vt)
            if speed_t > 1.0e-9:
                t = vt / speed_t
                wat = generalized_inverse_mass(ima, qa, bodies.inv_inertia[world, a], rak, t)
                wbt = generalized_inverse_mass(imb, qb, bodies.inv_inertia[world, b], rbk, t)
                if wat + wbt > 0.0:
                    # Coulomb: at most mu times the normal impulse, and never more than stops the slip.
                    p = -wp.min(budget, speed_t / (wat + wbt)) * t
                    kick(bodies, world, a, ima, p, rak)
                    kick(bodies, world, b, imb, -p, rbk)


@wp.kernel
def step_bodies(
    # Resources:
    physics_dt: float,
    physics_substeps: int,
    gravity: float,
    linear_damping: float,
    angular_damping: float,
    contact_margin: float,
    # Components in:
    body__alive_in: wp.array2d[wp.int32],
    body__shape_in: wp.array2d[wp.int32],
    body__size_in: wp.array2d[wp.vec3],
    body__mass_in: wp.array2d[wp.float32],
    body__inv_inertia_in: wp.array2d[wp.mat33],
    body__response_in: wp.array2d[wp.int32],
    body__locked_by_in: wp.array2d[wp.int32],
    body__friction_in: wp.array2d[wp.float32],
    body__restitution_in: wp.array2d[wp.float32],
    body__force_in: wp.array2d[wp.vec3],
    body__torque_in: wp.array2d[wp.vec3],
    pair__pair_body_a_in: wp.array2d[wp.int32],
    pair__pair_body_b_in: wp.array2d[wp.int32],
    world_pair_count_in: wp.array[wp.int32],
    joint__alive_in: wp.array2d[wp.int32],
    joint__joint_body_a_in: wp.array2d[wp.int32],
    joint__joint_body_b_in: wp.array2d[wp.int32],
    joint__joint_anchor_a_in: wp.array2d[wp.vec3],
    joint__joint_anchor_b_in: wp.array2d[wp.vec3],
    joint__joint_rotation_in: wp.array2d[wp.quat],
    # Components out:
    body__position_out: wp.array2d[wp.vec3],
    body__rotation_out: wp.array2d[wp.quat],
    body__linear_velocity_out: wp.array2d[wp.vec3],
    body__angular_velocity_out: wp.array2d[wp.vec3],
    body__prev_position_out: wp.array2d[wp.vec3],
    body__prev_rotation_out: wp.array2d[wp.quat],
    contact__alive_out: wp.array2d[wp.int32],
    contact__contact_body_a_out: wp.array2d[wp.int32],
    contact__contact_body_b_out: wp.array2d[wp.int32],
    contact__contact_normal_out: wp.array2d[wp.vec3],
    contact__contact_offset_a_out: wp.array2d[wp.vec3],
    contact__contact_offset_b_out: wp.array2d[wp.vec3],
    contact__contact_depth_out: wp.array2d[wp.float32],
    contact__contact_normal_speed_out: wp.array2d[wp.float32],
    contact__contact_impulse_out: wp.array2d[wp.float32],
    contact__overflow_out: wp.array[wp.int32],
    world_contact_count_out: wp.array[wp.int32],
):
    """One physics step of every body of a world: substeps of integrate, collide, solve, update."""
    world = wp.tid()
    bodies = Bodies()
    bodies.alive = body__alive_in
    bodies.mass = body__mass_in
    bodies.inv_inertia = body__inv_inertia_in
    bodies.response = body__response_in
    bodies.locked_by = body__locked_by_in
    bodies.friction = body__friction_in
    bodies.restitution = body__restitution_in
    bodies.position = body__position_out
    bodies.rotation = body__rotation_out
    bodies.prev_position = body__prev_position_out
    bodies.prev_rotation = body__prev_rotation_out
    bodies.linear_velocity = body__linear_velocity_out
    bodies.angular_velocity = body__angular_velocity_out
    poses = Poses()
    poses.shape = body__shape_in
    poses.size = body__size_in
    poses.position = body__position_out
    poses.rotation = body__rotation_out
    c = Contacts()
    c.body_a = contact__contact_body_a_out
    c.body_b = contact__contact_body_b_out
    c.normal = contact__contact_normal_out
    c.offset_a = contact__contact_offset_a_out
    c.offset_b = contact__contact_offset_b_out
    c.depth = contact__contact_depth_out
    c.count = world_contact_count_out
    c.overflow = contact__overflow_out

    nb = body__alive_in.shape[1]
    h = physics_dt / float(physics_substeps)
    for _sub in range(physics_substeps):
        for i in range(nb):
            if body__alive_in[world, i] != 0:
                integrate(
                    bodies,
                    world,
                    i,
                    h,
                    gravity,
                    linear_damping,
                    angular_damping,
                    body__force_in[world, i],
                    body__torque_in[world, i],
                )
        world_contact_count_out[world] = 0
        for k in range(world_pair_count_in[world]):
            collide(c, poses, world, pair__pair_body_a_in[world, k], pair__pair_body_b_in[world, k], contact_margin)
        count = world_contact_count_out[world]
        for k in range(count):
            a = contact__contact_body_a_out[world, k]
            b = contact__contact_body_b_out[world, k]
            qa = body__rotation_out[world, a]
            qb = body__rotation_out[world, b]
            ra = wp.quat_rotate(qa, contact__contact_offset_a_out[world, k])
            rb = wp.quat_rotate(qb, contact__contact_offset_b_out[world, k])
            v = point_velocity(bodies, world, a, ra) - point_velocity(bodies, world, b, rb)
            contact__contact_normal_speed_out[world, k] = wp.dot(contact__contact_normal_out[world, k], v)
            contact__contact_impulse_out[world, k] = 0.0
        k = wp.int32(0)
        while k < count:
            e = manifold_end(c, world, k, count)
            solve_manifold(bodies, c, contact__contact_impulse_out, world, k, e)
            k = e
        for j in range(joint__alive_in.shape[1]):
            if joint__alive_in[world, j] != 0:
                solve_joint(
                    bodies,
                    world,
                    joint__joint_body_a_in[world, j],
                    joint__joint_body_b_in[world, j],
                    joint__joint_anchor_a_in[world, j],
                    joint__joint_anchor_b_in[world, j],
                    joint__joint_rotation_in[world, j],
                )
        for i in range(nb):
            if body__alive_in[world, i] != 0 and movable(body__response_in[world, i], body__locked_by_in[world, i]):
                body__linear_velocity_out[world, i] = (
                    body__position_out[world, i] - body__prev_position_out[world, i]
                ) / h
                dq = body__rotation_out[world, i] * wp.quat_inverse(body__prev_rotation_out[world, i])
                w = wp.vec3(dq[0], dq[1], dq[2]) * (2.0 / h)
                if dq[3] < 0.0:
                    w = -w
                body__angular_velocity_out[world, i] = w
        k = wp.int32(0)
        while k < count:
            e = manifold_end(c, world, k, count)
            solve_manifold_velocity(
                bodies, c, contact__contact_impulse_out, contact__contact_normal_speed_out, world, k, e, h, gravity
            )
            k = e
    count = world_contact_count_out[world]
    for k in range(contact__alive_out.shape[1]):
        contact__alive_out[world, k] = wp.where(k < count, 1, 0)
