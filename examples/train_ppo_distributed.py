"""Distributed PPO on cartpole: one BatchSim per rank, gradients averaged by DistributedDataParallel.

Every rank steps its own share of the global worlds (``ecs.distributed.make_sim``), collects a
rollout, computes advantages (GAE) locally and runs the same number of minibatch updates; DDP
all-reduces the gradients in ``backward()``, so the ranks keep identical weights. Episode returns
and losses are reduced over all ranks and rank 0 prints one line per update under a progress bar.

    torchrun --standalone --nproc-per-node=2 examples/train_ppo_distributed.py --device cpu --total-steps 200000
    torchrun --standalone --nproc-per-node=gpu examples/train_ppo_distributed.py --num-worlds 65536

It is a minimal, readable baseline (no observation normalisation, no learning-rate schedule), not a
tuned trainer; ``--total-steps`` counts world-steps over all ranks.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import warp as wp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

import envs
from ecs import distributed


class ActorCritic(nn.Module):
    """Two small MLPs: action logits and a state value."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.actor = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, num_actions)
        )
        self.critic = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1)
        )

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor(obs), self.critic(obs).squeeze(-1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-worlds", type=int, default=256, help="worlds over all ranks (default 256)")
    parser.add_argument("--total-steps", type=int, default=200_000, help="world-steps over all ranks (default 200000)")
    parser.add_argument("--rollout-steps", type=int, default=32, help="steps per world per update (default 32)")
    parser.add_argument("--epochs", type=int, default=4, help="passes over each rollout (default 4)")
    parser.add_argument("--minibatches", type=int, default=4, help="minibatches per epoch (default 4)")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 1e-3)")
    parser.add_argument("--gamma", type=float, default=0.99, help="discount (default 0.99)")
    parser.add_argument("--gae-lambda", type=float, default=0.95, help="GAE lambda (default 0.95)")
    parser.add_argument("--clip", type=float, default=0.2, help="PPO ratio clip (default 0.2)")
    parser.add_argument("--ent-coef", type=float, default=0.01, help="entropy bonus (default 0.01)")
    parser.add_argument("--vf-coef", type=float, default=0.5, help="value loss weight (default 0.5)")
    parser.add_argument("--device", default=None, help="cpu or cuda (cuda:{local_rank}); default cuda when present")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default=None, help="default: nccl on CUDA, gloo on cpu")
    parser.add_argument("--seed", type=int, default=0, help="simulation and network seed (default 0)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    if min(args.num_worlds, args.total_steps, args.rollout_steps, args.epochs, args.minibatches) < 1:
        parser.error("--num-worlds, --total-steps, --rollout-steps, --epochs and --minibatches must be >= 1")

    wp.config.log_level = wp.LOG_WARNING
    sim = distributed.make_sim(
        envs.make("cartpole"), args.num_worlds, device=args.device, seed=args.seed, backend=args.backend
    )
    ctx = distributed.context()
    try:
        train(args, sim, ctx)
        ctx.barrier()  # every rank is done with the group before it goes
    finally:
        distributed.shutdown()


def train(args: argparse.Namespace, sim, ctx: distributed.DistContext) -> None:
    obs_view, final_obs_view = sim.obs["state"], sim.final_obs["state"]
    dev = obs_view.device
    T, N = args.rollout_steps, ctx.num_worlds
    if (T * N) % args.minibatches:
        raise SystemExit(f"rollout-steps * worlds per rank = {T * N} is not divisible by --minibatches")

    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model = ActorCritic(obs_view.shape[1], 2).to(dev)
    if ctx.distributed:
        ddp: nn.Module = DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    else:
        ddp = model
    opt = torch.optim.Adam(ddp.parameters(), lr=args.lr, eps=1e-5)
    torch.manual_seed(args.seed * 1009 + ctx.rank)  # each rank explores differently

    per_update = args.num_worlds * T
    updates = max(1, args.total_steps // per_update)
    ctx.log(
        f"PPO on cartpole: {args.num_worlds} worlds on {ctx.world_size} rank(s) ({N} per rank, {sim.device}), "
        f"{updates} updates of {per_update:,} world-steps"
    )
    obs_buf = torch.zeros((T, N, obs_view.shape[1]), device=dev)
    act_buf = torch.zeros((T, N), dtype=torch.long, device=dev)
    logp_buf, val_buf, rew_buf = (torch.zeros((T, N), device=dev) for _ in range(3))
    done_buf = torch.zeros((T, N), dtype=torch.bool, device=dev)
    ep_return = torch.zeros(N, dtype=torch.float64, device=dev)
    ep_length = torch.zeros(N, dtype=torch.int64, device=dev)

    bar = tqdm(total=updates * per_update, unit="step", unit_scale=True, disable=args.no_progress or not ctx.is_main)
    for update in range(1, updates + 1):
        episodes = torch.zeros((), dtype=torch.int64, device=dev)
        return_sum = torch.zeros((), dtype=torch.float64, device=dev)
        length_sum = torch.zeros((), dtype=torch.int64, device=dev)
        with torch.no_grad():
            for t in range(T):
                obs = obs_view.clone()
                logits, value = model(obs)
                dist_t = torch.distributions.Categorical(logits=logits)
                action = dist_t.sample()
                obs_buf[t], act_buf[t], logp_buf[t], val_buf[t] = obs, action, dist_t.log_prob(action), value
                sim.step({"push": action.to(torch.int32)})
                reward = sim.rewards.clone()
                # A time-limit end is not a terminal state: bootstrap from the last observation.
                reward += args.gamma * model(final_obs_view)[1] * sim.truncated
                done = sim.terminated | sim.truncated
                rew_buf[t], done_buf[t] = reward, done
                ep_return += sim.rewards
                ep_length += 1
                episodes += done.sum()
                return_sum += torch.where(done, ep_return, 0.0).sum()
                length_sum += torch.where(done, ep_length, 0).sum()
                ep_return.masked_fill_(done, 0.0)
                ep_length.masked_fill_(done, 0)
            next_value = model(obs_view)[1]
            adv = torch.zeros_like(rew_buf)
            last = torch.zeros(N, device=dev)
            for t in reversed(range(T)):
                not_done = (~done_buf[t]).float()
                following = next_value if t == T - 1 else val_buf[t + 1]
                delta = rew_buf[t] + args.gamma * following * not_done - val_buf[t]
                last = delta + args.gamma * args.gae_lambda * not_done * last
                adv[t] = last
            ret = adv + val_buf

        b_obs, b_act, b_logp = obs_buf.reshape(T * N, -1), act_buf.reshape(-1), logp_buf.reshape(-1)
        b_adv, b_ret = adv.reshape(-1), ret.reshape(-1)
        b_adv = (b_adv - b_adv.mean()) / (b_adv.std() + 1e-8)
        size = T * N // args.minibatches
        sums = torch.zeros(4, dtype=torch.float64, device=dev)  # loss, policy, value, entropy
        for _ in range(args.epochs):
            for idx in torch.randperm(T * N, device=dev).split(size):
                logits, value = ddp(b_obs[idx])
                d = torch.distributions.Categorical(logits=logits)
                ratio = torch.exp(d.log_prob(b_act[idx]) - b_logp[idx])
                pg = -torch.min(ratio * b_adv[idx], ratio.clamp(1 - args.clip, 1 + args.clip) * b_adv[idx]).mean()
                vf = 0.5 * ((value - b_ret[idx]) ** 2).mean()
                ent = d.entropy().mean()
                loss = pg + args.vf_coef * vf - args.ent_coef * ent
                opt.zero_grad(set_to_none=True)
                loss.backward()  # DDP averages the gradients over the ranks here
                nn.utils.clip_grad_norm_(ddp.parameters(), 0.5)
                opt.step()
                sums += torch.stack([loss, pg, vf, ent]).detach().double()
        sums /= args.epochs * args.minibatches
        if ctx.distributed:
            sums = sums.to(ctx.comm_device())
            dist.all_reduce(sums, op=dist.ReduceOp.SUM)
        loss_mean = (sums.cpu() / ctx.world_size).tolist()
        stats = ctx.reduce_episode_stats(episodes, return_sum, length_sum)
        bar.update(per_update)
        if ctx.is_main:
            line = (
                f"update {update}/{updates}: loss {loss_mean[0]:.4f} (policy {loss_mean[1]:.4f}, value "
                f"{loss_mean[2]:.4f}, entropy {loss_mean[3]:.4f}), episodes {stats.episodes}"
            )
            if stats.episodes:
                line += f", mean return {stats.mean_return:.2f}, mean length {stats.mean_length:.1f}"
            tqdm.write(line)
    bar.close()


if __name__ == "__main__":
    main()
