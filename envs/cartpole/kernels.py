"""Cartpole systems: per-world functions; the engine generates the kernels around them."""

import warp as wp

wp.set_module_options({"enable_backward": False})


@wp.func
def step_cartpole(
    # Resources:
    gravity: float,
    masscart: float,
    masspole: float,
    length: float,
    tau: float,
    force_mag: float,
    # Components in:
    world_push_in: wp.int32,
    # Components out:
    world_cart_position_out: float,
    world_cart_velocity_out: float,
    world_pole_angle_out: float,
    world_pole_angular_velocity_out: float,
):
    """Explicit Euler step of the cart-pole equations, in Gymnasium's order of operations."""
    x = world_cart_position_out
    x_dot = world_cart_velocity_out
    theta = world_pole_angle_out
    theta_dot = world_pole_angular_velocity_out
    force = wp.where(world_push_in == 1, force_mag, -force_mag)
    total_mass = masspole + masscart
    polemass_length = masspole * length
    costheta = wp.cos(theta)
    sintheta = wp.sin(theta)
    temp = (force + polemass_length * theta_dot * theta_dot * sintheta) / total_mass
    thetaacc = (gravity * sintheta - costheta * temp) / (
        length * (4.0 / 3.0 - masspole * costheta * costheta / total_mass)
    )
    xacc = temp - polemass_length * thetaacc * costheta / total_mass
    return x + tau * x_dot, x_dot + tau * xacc, theta + tau * theta_dot, theta_dot + tau * thetaacc


@wp.func
def judge_cartpole(
    # Resources:
    x_threshold: float,
    theta_threshold_radians: float,
    # Components in:
    world_cart_position_in: float,
    world_pole_angle_in: float,
    # Components out:
    world_reward_out: float,
    world_terminated_out: wp.bool,
):
    """Reward 1 on every step, the terminating one included; terminate outside the thresholds."""
    x = world_cart_position_in
    theta = world_pole_angle_in
    fell = x < -x_threshold or x > x_threshold or theta < -theta_threshold_radians or theta > theta_threshold_radians
    return 1.0, fell


@wp.func
def reset_cartpole(
    # Resources:
    reset_noise: float,
    # Components out:
    world_rng_out: wp.uint32,
    world_cart_position_out: float,
    world_cart_velocity_out: float,
    world_pole_angle_out: float,
    world_pole_angular_velocity_out: float,
):
    """Every state variable uniform in [-reset_noise, reset_noise]."""
    state = world_rng_out
    x = wp.randf(state, -reset_noise, reset_noise)
    x_dot = wp.randf(state, -reset_noise, reset_noise)
    theta = wp.randf(state, -reset_noise, reset_noise)
    theta_dot = wp.randf(state, -reset_noise, reset_noise)
    return state, x, x_dot, theta, theta_dot


@wp.func
def observe_cartpole(
    # Components in:
    world_cart_position_in: float,
    world_cart_velocity_in: float,
    world_pole_angle_in: float,
    world_pole_angular_velocity_in: float,
    # Components out:
    world_state_out: wp.vec4,
):
    return wp.vec4(world_cart_position_in, world_cart_velocity_in, world_pole_angle_in, world_pole_angular_velocity_in)
