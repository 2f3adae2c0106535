"""Hide-and-seek demo: many procedural worlds stepped together with a random policy, rendered by a Warp ray caster.

Each agent keeps a random move (force x, force y, turn bins) for about ten steps before drawing a
new one, and holds grab and lock on some stretches, so boxes get dragged and locked (a lock holds
while its team's agents near it hold lock). The printed rate is of stepping with the policy (rendering is timed apart). Frames of the
first four worlds go to a GIF, the state one step before the end, at twice the size, to a PNG, each
with a colour legend below. The returns are printed per team, with the share that comes from the
out-of-play-area penalty (a random policy wanders off a floor without outside walls, and each step it
spends outside the play area, 6 m beyond the floor's edges by default, scores -10).

    python examples/hide_and_seek_demo.py --num-worlds 64 --steps 240 --video out/hide_and_seek.gif --png out/hide_and_seek.png
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import warp as wp
from tqdm import tqdm

import ecs
import envs
from envs.hide_and_seek import render
from envs.hide_and_seek.kernels import MAX_TEAM


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-worlds", type=int, default=64, help="worlds stepped together (default 64)")
    parser.add_argument("--steps", type=int, default=240, help="steps of every world (default 240, one episode)")
    parser.add_argument("--device", default=None, help="cpu or cuda:N (default: cuda:0 when present, else cpu)")
    parser.add_argument("--seed", type=int, default=0, help="simulation and policy seed (default 0)")
    parser.add_argument(
        "--video", default="out/hide_and_seek.gif", help="GIF of the first worlds (default out/hide_and_seek.gif)"
    )
    parser.add_argument(
        "--png", default="out/hide_and_seek.png", help="PNG one step before the end (default out/hide_and_seek.png)"
    )
    parser.add_argument("--render-worlds", type=int, default=4, help="worlds in each frame (default 4)")
    parser.add_argument("--frame-every", type=int, default=2, help="render every k-th step (default 2)")
    parser.add_argument("--size", type=int, nargs=2, default=(240, 180), metavar=("W", "H"), help="pixels per world")
    parser.add_argument("--no-render", action="store_true", help="step only; write no pictures")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.num_worlds < 1 or args.frame_every < 1:
        parser.error("--steps, --num-worlds and --frame-every must be >= 1")

    wp.config.log_level = wp.LOG_WARNING
    t0 = time.perf_counter()
    sim = ecs.BatchSim(envs.make("hide_and_seek"), num_worlds=args.num_worlds, device=args.device, seed=args.seed)
    print(f"built {sim.num_worlds} hide-and-seek worlds on {sim.device} in {time.perf_counter() - t0:.2f} s")

    move, grab, lock = sim.actions["move"], sim.actions["grab"], sim.actions["lock"]
    dev = move.device
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    held_move = torch.randint(0, 11, move.shape, generator=gen, dtype=torch.int32, device=dev)
    held_grab = torch.zeros(grab.shape, dtype=torch.int32, device=dev)
    held_lock = torch.zeros(lock.shape, dtype=torch.int32, device=dev)
    returns = torch.zeros(sim.rewards.shape, dtype=torch.float64, device=dev)
    cfg = sim.env.config
    outside = torch.zeros(sim.rewards.shape, dtype=torch.float64, device=dev)  # steps scored out_of_bounds_reward
    shown = list(range(min(args.render_worlds, sim.num_worlds)))
    frames: list[np.ndarray] = []

    def frame() -> None:
        tiles = render.tile(render.render(sim, shown, width=args.size[0], height=args.size[1]), cols=2)
        frames.append(render.with_legend(tiles))

    render_s = 0.0
    if not args.no_render:
        t = time.perf_counter()
        frame()
        render_s += time.perf_counter() - t
    step_s = 0.0
    for k in tqdm(range(args.steps), unit="step", disable=args.no_progress, mininterval=0.5):
        wp.synchronize_device(sim.device)
        t = time.perf_counter()
        # Each agent redraws its move with probability 0.1 per step, flips its grab and its lock with 0.05.
        redraw = torch.rand(move.shape[:2], generator=gen, device=dev) < 0.1
        fresh = torch.randint(0, 11, move.shape, generator=gen, dtype=torch.int32, device=dev)
        held_move = torch.where(redraw[..., None], fresh, held_move)
        flip = torch.rand(grab.shape, generator=gen, device=dev) < 0.05
        held_grab = torch.where(flip, 1 - held_grab, held_grab)
        flip = torch.rand(lock.shape, generator=gen, device=dev) < 0.05
        held_lock = torch.where(flip, 1 - held_lock, held_lock)
        move.copy_(held_move)
        grab.copy_(held_grab)
        lock.copy_(held_lock)
        sim.step()
        returns += sim.rewards
        outside += sim.rewards == cfg.out_of_bounds_reward
        wp.synchronize_device(sim.device)
        step_s += time.perf_counter() - t
        if not args.no_render and (k + 1) % args.frame_every == 0:
            t = time.perf_counter()
            frame()
            render_s += time.perf_counter() - t
        if not args.no_render and k + 1 == max(1, args.steps - 1):
            # The picture, at twice the video's resolution, one step before the end: the last step of
            # a 240-step run ends the episode and shows the next level's start instead.
            t = time.perf_counter()
            big = render.render(sim, shown, width=2 * args.size[0], height=2 * args.size[1])
            picture = render.with_legend(render.tile(big, cols=2))
            render_s += time.perf_counter() - t

    world_steps = sim.num_worlds * args.steps
    print(f"{world_steps:,} world-steps in {step_s:.3f} s: {world_steps / step_s:,.0f} world-steps/s")
    agent_steps = float(sim.obs["active"].sum().item()) / sim.num_worlds * world_steps
    print(f"about {agent_steps / step_s:,.0f} agent-steps/s (the policy's sampling included)")
    print_returns(returns, outside, sim.obs["active"] > 0, cfg)
    if not args.no_render:
        render.save_gif(args.video, frames, fps=15.0 / args.frame_every * 2)
        render.save_png(args.png, picture)
        print(f"rendered {len(frames)} frames in {render_s:.2f} s; wrote {args.video} and {args.png}")


def print_returns(returns: torch.Tensor, outside: torch.Tensor, active: torch.Tensor, cfg) -> None:
    """Mean return per agent of each team over the run, and the part of it due to leaving the play area."""
    (x0, y0), (x1, y1) = cfg.play_area_bounds
    print(
        f"rewards: hiders +1 per step while no seeker sees a hider, else -1; seekers the opposite; 0 during the "
        f"first {cfg.prep_steps} (preparation) steps of an episode; an agent outside the play area "
        f"([{x0:g}, {x1:g}] x [{y0:g}, {y1:g}] m) scores {cfg.out_of_bounds_reward:g} for that step instead."
    )
    team_slots = {"hiders": slice(0, MAX_TEAM), "seekers": slice(MAX_TEAM, 2 * MAX_TEAM)}
    for team, slots in team_slots.items():
        agents = float(active[:, slots].sum().clamp(min=1))  # slots in use at the end of the run
        mean = float(returns[:, slots].sum()) / agents
        steps_out = float(outside[:, slots].sum()) / agents
        print(
            f"{team}: mean return {mean:+.1f} per agent, of which {steps_out * cfg.out_of_bounds_reward:+.1f} "
            f"from {steps_out:.1f} steps outside the play area"
        )


if __name__ == "__main__":
    main()
