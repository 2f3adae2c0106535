"""PPO on cartpole, driving ``ecs.BatchSim`` directly: one file, torch only.

Every step the policy reads ``sim.obs["state"]`` (a persistent tensor), writes its sampled pushes
into ``sim.actions["push"]`` in place and calls ``sim.step()``. Episodes end and restart inside
the step (same-step reset), so a truncated world's value bootstrap reads ``sim.final_obs``. Episode
returns are accumulated on the device by ``ecs.EpisodeStats`` and read once per iteration.

    python examples/train_ppo.py                          # train, save out/ppo_cartpole/policy.pt and a curve
    python examples/train_ppo.py --watch out/ppo_cartpole/policy.pt   # run the greedy policy, print its return

Training stops when the mean return of the episodes finished over the last iterations reaches
``--target-return`` (475 of a possible 500), or at ``--time-budget`` seconds, or ``--max-iterations``.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import time
from pathlib import Path

import torch
import warp as wp
from torch import nn
from tqdm import tqdm

import ecs
import envs


class ActorCritic(nn.Module):
    """Separate tanh MLPs for the policy logits and the state value."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: int) -> None:
        super().__init__()

        def mlp(out: int, gain: float) -> nn.Sequential:
            layers = [
                nn.Linear(obs_dim, hidden),
                nn.Tanh(),
                nn.Linear(hidden, hidden),
                nn.Tanh(),
                nn.Linear(hidden, out),
            ]
            for layer in layers:
                if isinstance(layer, nn.Linear):
                    nn.init.orthogonal_(layer.weight, math.sqrt(2.0))
                    nn.init.zeros_(layer.bias)
            nn.init.orthogonal_(layers[-1].weight, gain)
            return nn.Sequential(*layers)

        self.actor = mlp(num_actions, 0.01)
        self.critic = mlp(1, 1.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--watch", metavar="CHECKPOINT", help="run the greedy policy of CHECKPOINT and print its mean return"
    )
    p.add_argument("--num-worlds", type=int, default=64, help="worlds stepped together (default 64)")
    p.add_argument("--rollout-steps", type=int, default=32, help="steps per world per iteration (default 32)")
    p.add_argument("--epochs", type=int, default=4, help="passes over each rollout (default 4)")
    p.add_argument("--minibatches", type=int, default=4, help="minibatches per epoch (default 4)")
    p.add_argument("--hidden", type=int, default=64, help="hidden units per layer (default 64)")
    p.add_argument("--lr", type=float, default=2e-3, help="Adam learning rate (default 2e-3)")
    p.add_argument("--gamma", type=float, default=0.99, help="discount (default 0.99)")
    p.add_argument("--gae-lambda", type=float, default=0.95, help="GAE lambda (default 0.95)")
    p.add_argument("--clip", type=float, default=0.2, help="PPO ratio clip (default 0.2)")
    p.add_argument("--ent-coef", type=float, default=0.0, help="entropy bonus (default 0)")
    p.add_argument("--vf-coef", type=float, default=0.5, help="value loss weight (default 0.5)")
    p.add_argument("--max-grad-norm", type=float, default=0.5, help="gradient clip (default 0.5)")
    p.add_argument("--target-return", type=float, default=475.0, help="stop at this mean return (default 475)")
    p.add_argument("--time-budget", type=float, default=180.0, help="stop after this many seconds (default 180)")
    p.add_argument("--max-iterations", type=int, default=0, help="stop after this many iterations (0: no limit)")
    p.add_argument(
        "--out-dir", default="out/ppo_cartpole", help="checkpoint and plot folder (default out/ppo_cartpole)"
    )
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    p.add_argument("--device", default=None, help="cpu or cuda:N (default: cuda:0 when present, else cpu)")
    p.add_argument("--seed", type=int, default=0, help="simulation and torch seed (default 0)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return p


def train(args: argparse.Namespace) -> dict:
    t_start = time.perf_counter()
    torch.manual_seed(args.seed)
    sim = ecs.BatchSim(envs.make("cartpole"), num_worlds=args.num_worlds, device=args.device, seed=args.seed)
    obs, final_obs = sim.obs["state"], sim.final_obs["state"]
    push = sim.actions["push"]
    dev = obs.device
    W, T = sim.num_worlds, args.rollout_steps
    obs_dim, num_actions = obs.shape[1], int(sim.action_space["push"].n)
    model = ActorCritic(obs_dim, num_actions, args.hidden).to(dev)
    optim = torch.optim.Adam(model.parameters(), lr=args.lr, eps=1e-5)
    stats = ecs.EpisodeStats(sim)
    print(f"built {W} cartpole worlds on {sim.device} in {time.perf_counter() - t_start:.2f} s")

    # Rollout storage, allocated once.
    b_obs = torch.zeros((T, W, obs_dim), device=dev)
    b_act = torch.zeros((T, W), dtype=torch.int64, device=dev)
    b_logp = torch.zeros((T, W), device=dev)
    b_val = torch.zeros((T, W), device=dev)
    b_rew = torch.zeros((T, W), device=dev)
    b_done = torch.zeros((T, W), device=dev)
    batch = T * W
    mb_size = batch // args.minibatches

    curve: list[tuple[int, float, float]] = []  # (env steps, seconds, mean return)
    window: collections.deque[tuple[int, float]] = collections.deque(maxlen=4)
    mean_return, steps, it = float("nan"), 0, 0
    reached = False
    bar = tqdm(total=int(args.time_budget), unit="s", disable=args.no_progress, mininterval=0.5)
    t_train = time.perf_counter()
    while True:
        it += 1
        with torch.no_grad():
            for t in range(T):
                b_obs[t] = obs
                logits = model.actor(obs)
                dist = torch.distributions.Categorical(logits=logits)
                action = dist.sample()
                b_act[t] = action
                b_logp[t] = dist.log_prob(action)
                b_val[t] = model.value(obs)
                push.copy_(action)
                sim.step()
                stats.update()
                # A truncated episode continues in the MDP: bootstrap from its last observation.
                bootstrap = args.gamma * model.value(final_obs) * sim.truncated
                b_rew[t] = sim.rewards + bootstrap
                b_done[t] = torch.logical_or(sim.terminated, sim.truncated).float()
            next_value = model.value(obs)
            adv = torch.zeros_like(b_rew)
            last = torch.zeros(W, device=dev)
            for t in reversed(range(T)):
                nv = next_value if t == T - 1 else b_val[t + 1]
                nonterminal = 1.0 - b_done[t]
                delta = b_rew[t] + args.gamma * nv * nonterminal - b_val[t]
                last = delta + args.gamma * args.gae_lambda * nonterminal * last
                adv[t] = last
            ret = adv + b_val
        steps += batch

        f_obs, f_act, f_logp = b_obs.reshape(batch, obs_dim), b_act.reshape(batch), b_logp.reshape(batch)
        f_adv, f_ret = adv.reshape(batch), ret.reshape(batch)
        for _ in range(args.epochs):
            perm = torch.randperm(batch, device=dev)
            for start in range(0, batch - mb_size + 1, mb_size):
                idx = perm[start : start + mb_size]
                dist = torch.distributions.Categorical(logits=model.actor(f_obs[idx]))
                logp = dist.log_prob(f_act[idx])
                ratio = (logp - f_logp[idx]).exp()
                a = f_adv[idx]
                a = (a - a.mean()) / (a.std() + 1e-8)
                pg_loss = torch.max(-a * ratio, -a * ratio.clamp(1 - args.clip, 1 + args.clip)).mean()
                v_loss = 0.5 * (model.value(f_obs[idx]) - f_ret[idx]).square().mean()
                loss = pg_loss + args.vf_coef * v_loss - args.ent_coef * dist.entropy().mean()
                optim.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optim.step()

        # One host sync per iteration: the finished episodes' statistics.
        s = stats.summary(clear=True)
        if s["episodes"]:
            window.append((s["episodes"], s["episodes"] * s["mean_return"]))
        n = sum(c for c, _ in window)
        mean_return = sum(r for _, r in window) / n if n else float("nan")
        elapsed = time.perf_counter() - t_train
        curve.append((steps, elapsed, mean_return))
        bar.update(int(elapsed) - bar.n)
        bar.set_postfix(it=it, steps=steps, ret=f"{mean_return:.1f}")
        # Enough episodes in the window that the mean is not one lucky world.
        if n >= max(8, W // 4) and mean_return >= args.target_return:
            reached = True
            break
        if elapsed >= args.time_budget or (args.max_iterations and it >= args.max_iterations):
            break
    bar.close()
    train_s = time.perf_counter() - t_train
    total_s = time.perf_counter() - t_start

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / "policy.pt"
    torch.save(
        {
            "env": "cartpole",
            "obs_dim": obs_dim,
            "num_actions": num_actions,
            "hidden": args.hidden,
            "model": model.state_dict(),
            "mean_return": mean_return,
            "env_steps": steps,
        },
        checkpoint,
    )
    plot = save_curve(curve, out / "learning_curve.png", args.target_return)
    verb = "reached" if reached else "stopped at"
    print(
        f"{verb} mean return {mean_return:.1f} after {steps} env steps, {it} iterations, "
        f"{train_s:.1f} s training ({total_s:.1f} s wall in all)"
    )
    print(f"saved {checkpoint}" + (f" and {plot}" if plot else ""))
    result = {
        "reached": reached,
        "mean_return": mean_return,
        "env_steps": steps,
        "iterations": it,
        "train_s": train_s,
        "wall_s": total_s,
    }
    (out / "result.json").write_text(json.dumps(result, indent=2))
    return result


def save_curve(curve: list[tuple[int, float, float]], path: Path, target: float) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[examples]'); no learning curve written")
        return None
    steps = [c[0] for c in curve]
    returns = [c[2] for c in curve]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(steps, returns, label="mean episodic return")
    ax.axhline(target, color="gray", linestyle="--", label=f"target {target:g}")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return")
    ax.set_title(f"PPO on cartpole ({curve[-1][1]:.0f} s)" if curve else "PPO on cartpole")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def watch(args: argparse.Namespace) -> float:
    """Runs the greedy policy until every world has finished one episode; returns their mean return."""
    ckpt = torch.load(args.watch, map_location="cpu", weights_only=True)
    sim = ecs.BatchSim(envs.make(ckpt["env"]), num_worlds=args.num_worlds, device=args.device, seed=args.seed + 1)
    dev = sim.obs["state"].device
    model = ActorCritic(ckpt["obs_dim"], ckpt["num_actions"], ckpt["hidden"]).to(dev)
    model.load_state_dict(ckpt["model"])
    obs, push = sim.obs["state"], sim.actions["push"]
    first_return = torch.full((sim.num_worlds,), float("nan"), device=dev)
    running = torch.zeros(sim.num_worlds, device=dev)
    horizon = sim.env.max_episode_steps or 10_000
    with torch.no_grad():
        for _ in range(horizon):
            push.copy_(model.actor(obs).argmax(-1))
            sim.step()
            running += sim.rewards
            done = torch.logical_or(sim.terminated, sim.truncated)
            first_return = torch.where(done & first_return.isnan(), running, first_return)
            running.masked_fill_(done, 0.0)
    finished = first_return[~first_return.isnan()]
    if not finished.numel():
        print(f"greedy policy: no episode of {sim.num_worlds} worlds ended within {horizon} steps")
        return float("nan")
    mean = float(finished.mean())
    print(
        f"greedy policy over {finished.numel()} of {sim.num_worlds} worlds: mean return {mean:.1f} "
        f"(min {float(finished.min()):.0f}, max {float(finished.max()):.0f})"
    )
    return mean


def main(argv: list[str] | None = None) -> None:
    args = make_parser().parse_args(argv)
    for name in ("num_worlds", "rollout_steps", "epochs", "minibatches", "hidden", "threads"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1")
    if args.num_worlds * args.rollout_steps < args.minibatches:
        raise SystemExit("--num-worlds x --rollout-steps must be at least --minibatches")
    torch.set_num_threads(args.threads)
    wp.config.log_level = wp.LOG_WARNING
    if args.watch:
        watch(args)
    else:
        train(args)


if __name__ == "__main__":
    main()
