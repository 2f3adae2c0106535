"""Shapes and their geometry as Warp functions: local vertices, faces and edges, closest points, inertia.

Every shape is described in its body frame, whose origin is the centre of mass:

| ``ShapeType`` | ``size`` [m] | solid |
|---|---|---|
| ``SPHERE`` | (radius, -, -) | points within ``radius`` of the origin |
| ``CAPSULE`` | (radius, half_length, -) | points within ``radius`` of the segment from (0, 0, -half_length) to (0, 0, +half_length) |
| ``BOX`` | half extents (hx, hy, hz) | ``|x| <= hx``, ``|y| <= hy``, ``|z| <= hz`` |
| ``WEDGE`` | half extents (hx, hy, hz) of its bounding box | a ramp: the prism over the right triangle (-hx, -hz), (hx, -hz), (hx, hz) in the x-z plane, extruded over ``|y| <= hy``; the slope rises towards +x at ``atan(hz / hx)`` (45 degrees when hx == hz); the body origin is the triangle's centroid, so the bounding box centre sits at (-hx / 3, 0, hz / 3) |
| ``PLANE`` | unused | the half-space ``z <= 0`` (static only); its surface normal is local +z |

Boxes and wedges are convex polyhedra (``is_polyhedron``): vertices, face planes (outward normal
``n`` and offset ``d``, inside where ``n . x <= d``) and edges, all in the body frame.
"""

from __future__ import annotations

import enum
import math

import numpy as np
import warp as wp

wp.set_module_options({"enable_backward": False})


class ShapeType(enum.IntEnum):
    """Collision shape of a body (the ``shape`` component)."""

    NONE = 0
    SPHERE = 1
    CAPSULE = 2
    BOX = 3
    WEDGE = 4
    PLANE = 5


SPHERE = wp.constant(int(ShapeType.SPHERE))
CAPSULE = wp.constant(int(ShapeType.CAPSULE))
BOX = wp.constant(int(ShapeType.BOX))
WEDGE = wp.constant(int(ShapeType.WEDGE))
PLANE = wp.constant(int(ShapeType.PLANE))

BIG = wp.constant(1.0e30)


@wp.func
def is_round(shape: wp.int32) -> bool:
    return shape >= SPHERE and shape <= CAPSULE  # the two are adjacent in ShapeType


@wp.func
def is_polyhedron(shape: wp.int32) -> bool:
    return shape >= BOX and shape <= WEDGE  # the two are adjacent in ShapeType


@wp.func
def core_half_length(shape: wp.int32, size: wp.vec3) -> float:
    """Half length of a round shape's core segment (0 for a sphere)."""
    if shape == CAPSULE:
        return size[1]
    return 0.0


# -- polyhedra ------------------------------------------------------------------------------


@wp.func
def num_vertices(shape: wp.int32) -> wp.int32:
    if shape == BOX:
        return 8
    if shape == WEDGE:
        return 6
    return 0


@wp.func
def num_faces(shape: wp.int32) -> wp.int32:
    if shape == BOX:
        return 6
    if shape == WEDGE:
        return 5
    if shape == PLANE:
        return 1
    return 0


@wp.func
def num_edges(shape: wp.int32) -> wp.int32:
    if shape == BOX:
        return 12
    if shape == WEDGE:
        return 9
    return 0


@wp.func
def vertex(shape: wp.int32, size: wp.vec3, i: wp.int32) -> wp.vec3:
    """Vertex ``i`` in the body frame. Box: bit k of i picks the sign of axis k. Wedge: i % 3 picks
    the triangle corner (0: low front, 1: low back, 2: high back), i / 3 the side (-y, +y)."""
    if shape == BOX:
        sx = wp.where((i & 1) != 0, 1.0, -1.0)
        sy = wp.where((i & 2) != 0, 1.0, -1.0)
        sz = wp.where((i & 4) != 0, 1.0, -1.0)
        return wp.vec3(sx * size[0], sy * size[1], sz * size[2])
    corner = i % 3
    y = wp.where(i >= 3, size[1], -size[1])
    hx = size[0]
    hz = size[2]
    if corner == 0:
        return wp.vec3(-4.0 * hx / 3.0, y, -2.0 * hz / 3.0)
    if corner == 1:
        return wp.vec3(2.0 * hx / 3.0, y, -2.0 * hz / 3.0)
    return wp.vec3(2.0 * hx / 3.0, y, 4.0 * hz / 3.0)


@wp.func
def slope_normal(size: wp.vec3) -> wp.vec3:
    return wp.normalize(wp.vec3(-size[2], 0.0, size[0]))


@wp.func
def face_normal(shape: wp.int32, size: wp.vec3, i: wp.int32) -> wp.vec3:
    """Outward unit normal of face ``i`` in the body frame."""
    if shape == BOX:
        axis = i / 2
        s = wp.where((i % 2) == 0, -1.0, 1.0)
        n = wp.vec3(0.0, 0.0, 0.0)
        n[axis] = s
        return n
    if shape == WEDGE:
        if i == 0:
            return wp.vec3(0.0, 0.0, -1.0)
        if i == 1:
            return wp.vec3(1.0, 0.0, 0.0)
        if i == 2:
            return wp.vec3(0.0, -1.0, 0.0)
        if i == 3:
            return wp.vec3(0.0, 1.0, 0.0)
        return slope_normal(size)
    return wp.vec3(0.0, 0.0, 1.0)  # plane


@wp.func
def face_offset(shape: wp.int32, size: wp.vec3, i: wp.int32) -> float:
    """Offset ``d`` of face ``i``: the solid lies where ``face_normal . x <= d``."""
    if shape == BOX:
        return size[i / 2]
    if shape == WEDGE:
        if i == 0:
            return 2.0 * size[2] / 3.0
        if i == 1:
            return 2.0 * size[0] / 3.0
        if i == 2 or i == 3:
            return size[1]
        return wp.dot(slope_normal(size), vertex(shape, size, 0))
    return 0.0


@wp.func
def edge_vertex(shape: wp.int32, i: wp.int32, end: wp.int32) -> wp.int32:
    """Index of vertex ``end`` (0 or 1) of edge ``i``."""
    if shape == BOX:
        # Edges 0-3 run along x, 4-7 along y, 8-11 along z; j enumerates the other two sign bits.
        axis = i / 4
        j = i % 4
        bit = 1 << axis
        low = wp.int32(0)
        if axis == 0:
            low = j << 1
        elif axis == 1:
            low = (j & 1) | ((j & 2) << 1)
        else:
            low = j
        return wp.where(end == 0, low, low | bit)
    # Wedge: edges 0-2 are the -y triangle, 3-5 the +y triangle, 6-8 join them along y.
    if i < 6:
        base = wp.where(i >= 3, 3, 0)
        k = i % 3
        return wp.where(end == 0, base + k, base + (k + 1) % 3)
    return wp.where(end == 0, i - 6, i - 3)


@wp.func
def num_axes(shape: wp.int32) -> wp.int32:
    """Distinct face-normal (and edge) directions of a polyhedron, up to sign."""
    if shape == BOX:
        return 3
    return 4


@wp.func
def axis_direction(shape: wp.int32, size: wp.vec3, i: wp.int32) -> wp.vec3:
    """Distinct face-normal direction ``i`` (for separating-axis tests)."""
    if i == 3:
        return slope_normal(size)
    n = wp.vec3(0.0, 0.0, 0.0)
    n[i] = 1.0
    return n


@wp.func
def edge_direction(shape: wp.int32, size: wp.vec3, i: wp.int32) -> wp.vec3:
    """Distinct edge direction ``i``: the axes, and for a wedge the slope."""
    if i == 3:
        return wp.normalize(wp.vec3(size[0], 0.0, size[2]))
    n = wp.vec3(0.0, 0.0, 0.0)
    n[i] = 1.0
    return n


@wp.func
def along_face_normal(shape: wp.int32, size: wp.vec3, i: wp.int32, v: wp.vec3) -> float:
    """``face_normal(shape, size, i) . v``. A box's face normals are the axes, so for a box this is one coordinate of
    ``v`` with a sign, exactly what the dot product gives, without building the normal."""
    if shape == BOX:
        return wp.where((i % 2) == 0, -1.0, 1.0) * v[i / 2]
    return wp.dot(face_normal(shape, size, i), v)


@wp.func
def max_face_distance(shape: wp.int32, size: wp.vec3, p: wp.vec3) -> wp.vec2:
    """(largest signed distance of body-frame point ``p`` to a face plane, that face's index)."""
    best = wp.float32(-BIG)
    best_i = wp.int32(0)
    for i in range(num_faces(shape)):
        s = along_face_normal(shape, size, i, p) - face_offset(shape, size, i)
        if s > best:
            best = s
            best_i = i
    return wp.vec2(best, float(best_i))


# -- closest points ----------------------------------------------------------------------------


@wp.func
def closest_on_segment(a: wp.vec3, b: wp.vec3, p: wp.vec3) -> wp.vec3:
    ab = b - a
    denom = wp.dot(ab, ab)
    t = wp.float32(0.0)
    if denom > 1.0e-12:
        t = wp.clamp(wp.dot(p - a, ab) / denom, 0.0, 1.0)
    return a + ab * t


@wp.func
def segment_segment(p1: wp.vec3, q1: wp.vec3, p2: wp.vec3, q2: wp.vec3) -> wp.vec2:
    """Parameters (s, t) in [0, 1] of the closest points p1 + s (q1 - p1) and p2 + t (q2 - p2)."""
    d1 = q1 - p1
    d2 = q2 - p2
    r = p1 - p2
    a = wp.dot(d1, d1)
    e = wp.dot(d2, d2)
    f = wp.dot(d2, r)
    eps = 1.0e-12
    s = wp.float32(0.0)
    t = wp.float32(0.0)
    if a <= eps and e <= eps:
        return wp.vec2(0.0, 0.0)
    if a <= eps:
        return wp.vec2(0.0, wp.clamp(f / e, 0.0, 1.0))
    c = wp.dot(d1, r)
    if e <= eps:
        return wp.vec2(wp.clamp(-c / a, 0.0, 1.0), 0.0)
    b = wp.dot(d1, d2)
    denom = a * e - b * b
    if denom > eps * a * e:
        s = wp.clamp((b * f - c * e) / denom, 0.0, 1.0)
    t = (b * s + f) / e
    if t < 0.0:
        t = 0.0
        s = wp.clamp(-c / a, 0.0, 1.0)
    elif t > 1.0:
        t = 1.0
        s = wp.clamp((b - c) / a, 0.0, 1.0)
    return wp.vec2(s, t)


@wp.func
def closest_on_polyhedron(shape: wp.int32, size: wp.vec3, p: wp.vec3) -> wp.vec3:
    """Closest point of the solid to body-frame point ``p`` (``p`` itself when inside)."""
    if shape == BOX:
        return wp.vec3(
            wp.clamp(p[0], -size[0], size[0]), wp.clamp(p[1], -size[1], size[1]), wp.clamp(p[2], -size[2], size[2])
        )
    if max_face_distance(shape, size, p)[0] <= 0.0:
        return p
    # Outside a convex polyhedron the closest point is a face projection that lands on its face,
    # or lies on an edge.
    best = wp.vec3(0.0, 0.0, 0.0)
    best_d = wp.float32(BIG)
    nf = num_faces(shape)
    for i in range(nf):
        n = face_normal(shape, size, i)
        s = wp.dot(n, p) - face_offset(shape, size, i)
        if s > 0.0:
            q = p - n * s
            inside = bool(True)  # noqa: UP018 (Warp: a variable changed in a loop must be declared dynamic)
            for j in range(nf):
                if j != i and wp.dot(face_normal(shape, size, j), q) - face_offset(shape, size, j) > 1.0e-6:
                    inside = False
            if inside and s < best_d:
                best_d = s
                best = q
    for i in range(num_edges(shape)):
        a = vertex(shape, size, edge_vertex(shape, i, 0))
        b = vertex(shape, size, edge_vertex(shape, i, 1))
        q = closest_on_segment(a, b, p)
        d = wp.length(q - p)
        if d < best_d:
            best_d = d
            best = q
    return best


# -- mass properties ---------------------------------------------------------------------------


@wp.func
def wedge_inertia(size: wp.vec3, mass: float) -> wp.mat33:
    # Second moments of the right triangle about its centroid (per unit area: (1/12) sum x_i x_j
    # over the centroid-relative corners), and the extrusion's y^2 term.
    xx = wp.float32(0.0)
    zz = wp.float32(0.0)
    xz = wp.float32(0.0)
    for k in range(3):
        v = vertex(WEDGE, size, k)
        xx += v[0] * v[0]
        zz += v[2] * v[2]
        xz += v[0] * v[2]
    xx = xx / 12.0
    zz = zz / 12.0
    xz = xz / 12.0
    yy = size[1] * size[1] / 3.0
    return mass * wp.mat33(yy + zz, 0.0, -xz, 0.0, xx + zz, 0.0, -xz, 0.0, xx + yy)


@wp.func
def shape_inertia(shape: wp.int32, size: wp.vec3, mass: float) -> wp.mat33:
    """Inertia tensor about the centre of mass in the body frame [kg m^2] of a uniform solid."""
    if shape == SPHERE:
        i = 0.4 * mass * size[0] * size[0]
        return wp.mat33(i, 0.0, 0.0, 0.0, i, 0.0, 0.0, 0.0, i)
    if shape == CAPSULE:
        r = size[0]
        h = 2.0 * size[1]
        vc = wp.pi * r * r * h
        vs = 4.0 / 3.0 * wp.pi * r * r * r
        mc = mass * vc / (vc + vs)
        ms = mass - mc
        axial = mc * r * r / 2.0 + ms * 2.0 * r * r / 5.0
        # Hemispheres: about their own centroid (3r/8 from the flat face), moved to the capsule centre.
        side = mc * (h * h / 12.0 + r * r / 4.0) + ms * (2.0 * r * r / 5.0 + h * h / 4.0 + 3.0 * h * r / 8.0)
        return wp.mat33(side, 0.0, 0.0, 0.0, side, 0.0, 0.0, 0.0, axial)
    if shape == BOX:
        x2 = 4.0 * size[0] * size[0]
        y2 = 4.0 * size[1] * size[1]
        z2 = 4.0 * size[2] * size[2]
        return (mass / 12.0) * wp.mat33(y2 + z2, 0.0, 0.0, 0.0, x2 + z2, 0.0, 0.0, 0.0, x2 + y2)
    if shape == WEDGE:
        return wedge_inertia(size, mass)
    return wp.mat33(0.0)


@wp.func
def inverse_inertia(shape: wp.int32, size: wp.vec3, mass: float) -> wp.mat33:
    """Inverse of ``shape_inertia`` [1 / (kg m^2)]; zero for a plane or a non-positive mass."""
    if shape == PLANE or shape == 0 or not (mass > 0.0):
        return wp.mat33(0.0)
    return wp.inverse(shape_inertia(shape, size, mass))


@wp.func
def bounding_radius(shape: wp.int32, size: wp.vec3) -> float:
    """Radius of a sphere about the body origin holding the whole shape (planes: 0)."""
    if shape == SPHERE:
        return size[0]
    if shape == CAPSULE:
        return size[0] + size[1]
    if shape == BOX:
        return wp.length(size)
    if shape == WEDGE:
        r = wp.float32(0.0)
        for k in range(3):
            r = wp.max(r, wp.length(vertex(WEDGE, size, k)))
        return r
    return 0.0


# -- host mirrors for tests and validation --------------------------------------------------------


def wedge_vertices_np(size) -> np.ndarray:
    """The six wedge vertices in the body frame, numpy, in ``vertex`` order."""
    hx, hy, hz = (float(s) for s in size)
    tri = [(-4 * hx / 3, -2 * hz / 3), (2 * hx / 3, -2 * hz / 3), (2 * hx / 3, 4 * hz / 3)]
    return np.array([(x, y, z) for y in (-hy, hy) for x, z in tri], dtype=np.float64)


def shape_volume(shape: int, size) -> float:
    """Volume of a shape [m^3] (planes: infinite)."""
    s = [float(v) for v in size]
    if shape == ShapeType.SPHERE:
        return 4.0 / 3.0 * math.pi * s[0] ** 3
    if shape == ShapeType.CAPSULE:
        return math.pi * s[0] ** 2 * 2 * s[1] + 4.0 / 3.0 * math.pi * s[0] ** 3
    if shape == ShapeType.BOX:
        return 8.0 * s[0] * s[1] * s[2]
    if shape == ShapeType.WEDGE:
        return 4.0 * s[0] * s[1] * s[2]
    return math.inf
