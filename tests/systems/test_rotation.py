"""Rotation that keeps its energy: the solver's exponential map, its inverse and the gyroscopic step
against numpy references, and free bodies against closed forms (the torque-free symmetric top) and a
fine RK4 integration of Euler's equations (the intermediate-axis flip).

Free bodies run at the default step (1/30 s, 4 substeps) without gravity. The stored angular
velocity is the mean rate of the last substep (the solver recovers it from the turn), so the
world-frame angular momentum ``R I R^T w`` read from the state carries an offset of order ``h``
that does not grow; energy and ``|L|`` do not depend on the frame and are kept to rounding.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import ecs
from systems.geometry import ShapeType
from systems.physics import BodySpec, PhysicsConfig
from systems.rigid_body import Response, gyroscopic_step, rotate_by, rotation_vector
from systems.solver import substep_angular_velocity

from . import scene

wp.set_module_options({"enable_backward": False})

STEPS_10S = 300  # 10 s at the default 1/30 s
BOX = (0.3, 0.2, 0.1)  # m, half extents: three different principal moments, y the intermediate one
TOP = (0.2, 0.2, 0.05)  # m, half extents of a symmetric top (I1 = I2 < I3)


@wp.kernel
def turn_and_recover(
    q_in: wp.array[wp.quat],
    dw_in: wp.array[wp.vec3],
    q_out: wp.array[wp.quat],
    dw_out: wp.array[wp.vec3],
):
    i = wp.tid()
    q = rotate_by(q_in[i], dw_in[i])
    q_out[i] = q
    dw_out[i] = rotation_vector(q * wp.quat_inverse(q_in[i]))


@wp.kernel
def recover_rate(
    h: float,
    q_prev_in: wp.array[wp.quat],
    w_in: wp.array[wp.vec3],
    correction_in: wp.array[wp.vec3],
    q_out: wp.array[wp.quat],
    w_out: wp.array[wp.vec3],
):
    """A substep as the solver makes it: integrate by ``w h``, a constraint turns by ``correction``, recover."""
    i = wp.tid()
    q = rotate_by(q_prev_in[i], w_in[i] * h)
    if wp.length_sq(correction_in[i]) > 0.0:
        q = rotate_by(q, correction_in[i])
    q_out[i] = q
    w_out[i] = substep_angular_velocity(q_prev_in[i], q, w_in[i], h)


@wp.kernel
def step_gyroscopic(h: float, inertia_in: wp.array[wp.mat33], w_in: wp.array[wp.vec3], w_out: wp.array[wp.vec3]):
    i = wp.tid()
    w_out[i] = gyroscopic_step(inertia_in[i], w_in[i], h)


def rodrigues(axis: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """Rotation matrices by ``angle`` about the unit ``axis`` (batched), float64."""
    k = np.zeros((*axis.shape[:-1], 3, 3))
    k[..., 0, 1], k[..., 0, 2], k[..., 1, 2] = -axis[..., 2], axis[..., 1], -axis[..., 0]
    k = k - np.swapaxes(k, -1, -2)
    s, c = np.sin(angle)[..., None, None], np.cos(angle)[..., None, None]
    return np.eye(3) + s * k + (1.0 - c) * (k @ k)


def random_turns(rng: np.random.Generator, n: int, largest: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unit quaternions, unit axes and angles in [0, largest], with zero and tiny angles among them."""
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    axis = rng.normal(size=(n, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    angle = rng.uniform(0.0, largest, n)
    angle[:5] = [0.0, 1e-7, 1e-5, 1e-4, 1e-3]
    return q, axis, angle


def run_turns(device: str, q: np.ndarray, dw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    q_in = wp.array(q.astype(np.float32), dtype=wp.quat, device=device)
    dw_in = wp.array(dw.astype(np.float32), dtype=wp.vec3, device=device)
    q_out = wp.empty_like(q_in)
    dw_out = wp.empty_like(dw_in)
    wp.launch(turn_and_recover, dim=len(q), inputs=[q_in, dw_in], outputs=[q_out, dw_out], device=device)
    return q_out.numpy().astype(np.float64), dw_out.numpy().astype(np.float64)


def test_rotate_by_turns_by_the_angle_about_the_axis(device):
    rng = np.random.default_rng(1)
    q, axis, angle = random_turns(rng, 512, 3.0)
    q_out, _ = run_turns(device, q, axis * angle[:, None])
    expected = rodrigues(axis, angle) @ np.array([scene.quat_matrix(x) for x in q])
    got = np.array([scene.quat_matrix(x) for x in q_out])
    np.testing.assert_allclose(np.linalg.norm(q_out, axis=1), 1.0, atol=3e-7)
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-6)


def test_rotation_vector_inverts_rotate_by_to_float32_precision(device):
    """Turns of up to 1 rad (a substep of 30 rad/s at 1/30 s) come back to a few 1e-7 rad."""
    rng = np.random.default_rng(2)
    q, axis, angle = random_turns(rng, 1024, 1.0)
    dw = (axis * angle[:, None]).astype(np.float32).astype(np.float64)
    _, back = run_turns(device, q, dw)
    assert np.abs(back - dw).max() < 5e-7, f"largest error {np.abs(back - dw).max():.2e} rad"


def test_rotation_vector_takes_the_short_way_round(device):
    """A turn by more than pi comes back as the turn by 2 pi less, the other way."""
    rng = np.random.default_rng(3)
    q, axis, _ = random_turns(rng, 256, 1.0)
    angle = rng.uniform(3.4, 6.0, len(q))
    _, back = run_turns(device, q, axis * angle[:, None])
    np.testing.assert_allclose(back, axis * (angle - 2.0 * np.pi)[:, None], rtol=0, atol=2e-6)


def test_substep_angular_velocity_is_the_turn_over_the_substep(device):
    """Turns of up to 1 rad, half of them followed by a constraint's turn of up to 0.5 rad: the recovered
    rate turns the start orientation into the end one (the short way); untouched bodies keep their rate."""
    rng = np.random.default_rng(7)
    n, h = 512, 1.0 / 120.0
    q, axis, angle = random_turns(rng, n, 1.0)
    w = (axis * (angle / h)[:, None]).astype(np.float32)
    _, c_axis, c_angle = random_turns(rng, n, 0.5)
    correction = c_axis * c_angle[:, None] * (np.arange(n) % 2)[:, None]
    q_out, w_out = wp.empty(n, dtype=wp.quat, device=device), wp.empty(n, dtype=wp.vec3, device=device)
    wp.launch(
        recover_rate,
        dim=n,
        inputs=[
            h,
            wp.array(q.astype(np.float32), dtype=wp.quat, device=device),
            wp.array(w, dtype=wp.vec3, device=device),
            wp.array(correction.astype(np.float32), dtype=wp.vec3, device=device),
        ],
        outputs=[q_out, w_out],
        device=device,
    )
    rate = w_out.numpy().astype(np.float64)
    untouched = np.arange(n) % 2 == 0
    np.testing.assert_array_equal(rate[untouched], w[untouched])
    turn = rate * h
    size = np.linalg.norm(turn, axis=1)
    assert size.max() <= np.pi
    direction = turn / np.maximum(size, 1e-30)[:, None]
    start = np.array([scene.quat_matrix(x) for x in q])
    end = np.array([scene.quat_matrix(x) for x in q_out.numpy().astype(np.float64)])
    np.testing.assert_allclose(rodrigues(direction, size) @ start, end, rtol=0, atol=2e-6)


def skew(v: np.ndarray) -> np.ndarray:
    return np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])


def midpoint_reference(inertia: np.ndarray, w: np.ndarray, h: float) -> np.ndarray:
    """Implicit midpoint on Euler's equations, ``I (w' - w) + h m x I m = 0``, Newton to convergence, float64."""
    w_new = w.copy()
    for _ in range(20):
        m = 0.5 * (w + w_new)
        residual = inertia @ (w_new - w) + h * np.cross(m, inertia @ m)
        w_new = w_new - np.linalg.solve(inertia + 0.5 * h * (skew(m) @ inertia - skew(inertia @ m)), residual)
    return w_new


def test_gyroscopic_step_is_the_implicit_midpoint_and_keeps_energy_and_momentum(device):
    """Random inertia tensors (principal moments 0.01-0.1 kg m^2, random axes), rates up to 20 rad/s."""
    rng = np.random.default_rng(4)
    n, h = 256, 1.0 / 120.0
    inertia = []
    for _ in range(n):
        r = np.linalg.qr(rng.normal(size=(3, 3)))[0]
        inertia.append(r @ np.diag(rng.uniform(0.01, 0.1, 3)) @ r.T)
    inertia = np.array(inertia, dtype=np.float32).astype(np.float64)
    w = rng.normal(size=(n, 3))
    w *= (rng.uniform(0.0, 20.0, n) / np.linalg.norm(w, axis=1))[:, None]
    w = w.astype(np.float32).astype(np.float64)
    out = wp.empty(n, dtype=wp.vec3, device=device)
    wp.launch(
        step_gyroscopic,
        dim=n,
        inputs=[
            h,
            wp.array(inertia.astype(np.float32), dtype=wp.mat33, device=device),
            wp.array(w, dtype=wp.vec3, device=device),
        ],
        outputs=[out],
        device=device,
    )
    got = out.numpy().astype(np.float64)
    expected = np.array([midpoint_reference(i, x, h) for i, x in zip(inertia, w, strict=True)])
    speed = np.linalg.norm(w, axis=1)
    assert np.all(np.linalg.norm(got - expected, axis=1) <= 2e-6 * speed + 1e-7)
    assert np.abs(expected - w).max() > 0.1, "the step should turn the rate: the test needs tumbling inputs"
    energy = np.einsum("ni,nij,nj->n", w, inertia, w)
    np.testing.assert_allclose(np.einsum("ni,nij,nj->n", got, inertia, got), energy, rtol=1e-6)
    momentum = np.linalg.norm(np.einsum("nij,nj->ni", inertia, w), axis=1)
    np.testing.assert_allclose(np.linalg.norm(np.einsum("nij,nj->ni", inertia, got), axis=1), momentum, rtol=2e-6)


def free_bodies(half: tuple[float, float, float], spins: list, **cfg: float) -> ecs.BatchSim:
    """One box of 1 kg per world, away from everything, no gravity, spinning at ``spins[world]`` (world frame)."""

    def bodies(world: int) -> list[BodySpec]:
        return [BodySpec(ShapeType.BOX, size=half, position=(0, 0, 2), angular_velocity=spins[world])]

    return scene.build(bodies, PhysicsConfig(gravity=0.0, **cfg), num_worlds=len(spins))


def trajectory(sim: ecs.BatchSim, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Rotation matrices [steps + 1, worlds, 3, 3] and body-frame angular velocities [steps + 1, worlds, 3] of row 0."""
    rotations, rates = [], []
    for step in range(steps + 1):
        if step:
            sim.step()
        q = scene.column(sim, "rotation")[:, 0].astype(np.float64)
        r = np.array([scene.quat_matrix(x / np.linalg.norm(x)) for x in q])
        w = scene.column(sim, "angular_velocity")[:, 0].astype(np.float64)
        rotations.append(r)
        rates.append(np.einsum("wji,wj->wi", r, w))
    return np.array(rotations), np.array(rates)


def test_free_body_turns_by_its_rate_and_keeps_it():
    """Spheres (no gyroscopic term) turning up to 1 rad in one substep of 1/30 s: the orientation turns by
    ``|w| h`` about ``w`` and the rate comes out as it went in."""
    rng = np.random.default_rng(5)
    axis = rng.normal(size=(64, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    h = 1.0 / 30.0
    spins = axis * (np.geomspace(1e-3, 1.0, 64) / h)[:, None]

    def bodies(world: int) -> list[BodySpec]:
        return [BodySpec(ShapeType.SPHERE, size=(0.3, 0.3, 0.3), position=(0, 0, 2), angular_velocity=spins[world])]

    sim = scene.build(bodies, PhysicsConfig(gravity=0.0, physics_dt=h, physics_substeps=1), num_worlds=len(spins))
    sim.step()
    w = scene.column(sim, "angular_velocity")[:, 0].astype(np.float64)
    assert np.abs(w - spins).max() * h < 5e-7, f"largest error per substep {np.abs(w - spins).max() * h:.2e} rad"
    rotation = np.array([scene.quat_matrix(q) for q in scene.column(sim, "rotation")[:, 0].astype(np.float64)])
    np.testing.assert_allclose(rotation, rodrigues(axis, np.linalg.norm(spins, axis=1) * h), rtol=0, atol=1e-6)


def test_kinematic_body_turns_by_its_rate_times_the_time():
    rng = np.random.default_rng(6)
    axis = rng.normal(size=(8, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    spins = axis * rng.uniform(0.5, 5.0, (8, 1))

    def bodies(world: int) -> list[BodySpec]:
        return [BodySpec(ShapeType.BOX, size=BOX, response=Response.KINEMATIC, angular_velocity=spins[world])]

    sim = scene.build(bodies, PhysicsConfig(gravity=0.0), num_worlds=len(spins))
    rotations, _ = trajectory(sim, 30)  # 1 s
    np.testing.assert_allclose(rotations[-1], rodrigues(axis, np.linalg.norm(spins, axis=1)), rtol=0, atol=2e-5)


def test_tumbling_box_keeps_energy_and_angular_momentum():
    """Energy and |L| hold to 0.01 % (the target is 1 %); world-frame ``L = R I R^T w`` holds to first order in
    the substep (the stored rate is the substep's mean) and does not drift."""
    spins = [(3.0, 0.5, 2.0), (10.0, 2.0, 7.0)]
    inertia = scene.box_inertia(BOX, 1.0)
    offset = {}
    for substeps in (4, 16):
        rotations, rates = trajectory(free_bodies(BOX, spins, physics_substeps=substeps), STEPS_10S)
        energy = 0.5 * np.einsum("swi,ij,swj->sw", rates, inertia, rates)
        body_l = rates @ inertia
        world_l = np.einsum("swij,swj->swi", rotations, body_l)
        np.testing.assert_allclose(energy / energy[0], 1.0, rtol=1e-4)
        np.testing.assert_allclose(np.linalg.norm(body_l, axis=2) / np.linalg.norm(body_l[0], axis=1), 1.0, rtol=1e-4)
        change = np.linalg.norm(world_l - world_l[0], axis=2) / np.linalg.norm(world_l[0], axis=1)
        offset[substeps] = change.max(axis=0)
        # No drift: the last second strays no further than the worst of the first two.
        assert np.all(change[-30:].max(axis=0) < 1.5 * change[:60].max(axis=0))
    assert offset[4][0] < 0.02, f"(3, 0.5, 2) rad/s: world L off by {offset[4][0]:.2%} at 4 substeps"
    assert np.all(offset[16] < offset[4] / 3), f"not first order in the substep: {offset}"


def test_symmetric_top_precesses_at_the_analytic_rates():
    """Torque-free top, I1 = I2: in the body frame ``w`` turns about the axis at ``(I3 - I1) / I1 w3``, and the
    axis turns about the world-frame ``L`` at ``|L| / I1``, at a constant angle to it."""
    spins = [(2.0, 0.0, 5.0), (1.0, 0.5, -8.0), (3.0, 0.0, 2.0)]
    inertia = scene.box_inertia(TOP, 1.0)
    i1, i3 = inertia[0, 0], inertia[2, 2]
    rotations, rates = trajectory(free_bodies(TOP, spins), STEPS_10S)
    t = np.arange(STEPS_10S + 1) / 30.0
    for k, spin in enumerate(np.array(spins)):
        body_rate = (i3 - i1) / i1 * spin[2]
        phase = np.unwrap(np.arctan2(rates[:, k, 1], rates[:, k, 0]))
        assert np.polyfit(t, phase, 1)[0] == pytest.approx(body_rate, rel=5e-3)
        turn = np.arctan2(spin[1], spin[0]) + body_rate * t
        closed_form = np.stack(
            [np.hypot(*spin[:2]) * np.cos(turn), np.hypot(*spin[:2]) * np.sin(turn), 0 * t + spin[2]]
        )
        assert np.abs(rates[:, k] - closed_form.T).max() < 0.01 * np.linalg.norm(spin)
        momentum = inertia @ spin
        l_hat = momentum / np.linalg.norm(momentum)
        e1 = np.cross(l_hat, (1.0, 0.0, 0.0))
        e1 /= np.linalg.norm(e1)
        e2 = np.cross(l_hat, e1)
        axis = rotations[:, k, :, 2]
        sweep = np.unwrap(np.arctan2(axis @ e2, axis @ e1))
        assert np.polyfit(t, sweep, 1)[0] == pytest.approx(np.linalg.norm(momentum) / i1, rel=5e-3)
        np.testing.assert_allclose(axis @ l_hat, axis[0] @ l_hat, atol=5e-3)


def euler_reference(inertia: np.ndarray, w0, seconds: float, per_step: int) -> np.ndarray:
    """Body-frame angular velocity every 1/30 s by RK4 on Euler's equations with ``per_step`` steps per 1/30 s."""
    inv = np.linalg.inv(inertia)
    dt = 1.0 / 30.0 / per_step

    def rate(w: np.ndarray) -> np.ndarray:
        return -inv @ np.cross(w, inertia @ w)

    w = np.array(w0, dtype=np.float64)
    out = [w]
    for _ in range(round(seconds * 30)):
        for _ in range(per_step):
            k1 = rate(w)
            k2 = rate(w + 0.5 * dt * k1)
            k3 = rate(w + 0.5 * dt * k2)
            k4 = rate(w + dt * k3)
            w = w + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        out.append(w)
    return np.array(out)


def test_spin_about_the_intermediate_axis_flips_and_keeps_energy_and_momentum():
    """Dzhanibekov: a spin about the intermediate axis, slightly off, turns over and back; the first flip
    comes when RK4 says, and energy and |L| hold to 0.01 % throughout (the target is 1 %)."""
    spins = [(0.05, 10.0, 0.05), (0.1, 20.0, 0.1)]
    inertia = scene.box_inertia(BOX, 1.0)
    rotations, rates = trajectory(free_bodies(BOX, spins), STEPS_10S)
    for k, spin in enumerate(spins):
        energy = 0.5 * np.einsum("si,ij,sj->s", rates[:, k], inertia, rates[:, k])
        body_l = rates[:, k] @ inertia
        np.testing.assert_allclose(energy, energy[0], rtol=1e-4)
        np.testing.assert_allclose(np.linalg.norm(body_l, axis=1), np.linalg.norm(body_l[0]), rtol=1e-4)
        l_hat = inertia @ np.array(spin) / np.linalg.norm(inertia @ np.array(spin))
        assert (rotations[:, k, :, 1] @ l_hat).min() < -0.99, "the intermediate axis never turned over"
        reference = euler_reference(inertia, spin, 2.5, per_step=40)
        flips = np.flatnonzero(np.diff(np.sign(rates[: len(reference), k, 1])))
        expected = np.flatnonzero(np.diff(np.sign(reference[:, 1])))
        assert len(expected) and len(flips) and abs(int(flips[0]) - int(expected[0])) <= 1, (flips, expected)
