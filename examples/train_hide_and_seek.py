"""Multi-agent PPO on hide-and-seek for both teams, driving ``ecs.BatchSim`` directly: one file, torch only.

Every step the two team policies read the padded, masked entity observations of all six agent slots
(``sim.obs``: ``self``, ``agents``, ``boxes``, ``ramps``, ``lidar`` and their masks), write their
sampled actions into ``sim.actions["move" | "grab" | "lock"]`` in place and call ``sim.step()``.

The policy follows Baker et al. 2019 in outline: each entity (another agent, a box, a ramp) is
embedded together with the agent's own observation, the lidar scan goes through a small circular
1-d convolution, one masked self-attention block mixes the entity tokens, and a masked mean and max
pool reduces them; entities whose mask is 0 (unseen, absent or padded) never influence the output.
Separate heads give three categorical distributions of 11 bins for ``move`` and two of 2 for
``grab`` and ``lock``. Actor and critic have separate encoders of the same shape.

**One network per team**: hiders (slots 0..2) share one actor-critic, seekers (slots 3..5) another;
both learn at once from the same rollouts. Unused slots (``active`` 0) are excluded from every loss
term. Episodes only end by truncation at the horizon, so a truncated world's value bootstrap reads
``sim.final_obs``.

Before training, a uniform random policy plays one full episode in every world: its mean return per
team is the baseline drawn in the learning curve. The worlds are then desynchronised (reset at
staggered steps) so that episodes end continually during training. Returns are per agent, averaged
over the active agents of each team (so unused slots do not pull them towards 0); rewards are
multiplied by ``--reward-scale`` for learning only.

    python examples/train_hide_and_seek.py --steps 3000          # tiny CPU run, out/hns_ppo/{policy.pt, learning_curve.png, result.json}
    python examples/train_hide_and_seek.py --steps 2000000       # a longer run
    python examples/train_hide_and_seek.py --watch out/hns_ppo/policy.pt   # greedy, sampled and random returns per team
    python examples/train_hide_and_seek.py --steps 4000000 --resume out/hns_ppo   # go on from the last save

Every save also writes what a run needs to go on (``resume.pt``: the optimiser, the random number generators, the
learning curve and counters; ``sim-<iteration>.npz``: the simulation's state, ``sim.save``). ``--resume DIR`` goes on from
there to ``--steps`` in all, with the same updates as a run never stopped, bit for bit on the same device; the
options that shape training must be the ones the run was started with.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import warp as wp
from torch import nn
from torch.nn import functional as F
from tqdm import tqdm

import ecs
import envs

TEAMS = ("hiders", "seekers")
TEAM_SIZE = 3  # slots 0..2 hiders, 3..5 seekers
MOVE_AXES, MOVE_BINS = 3, 11
ENTITIES = ("agents", "boxes", "ramps")


def _init(layer: nn.Module, gain: float = math.sqrt(2.0)) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class MaskedEntityBlock(nn.Module):
    """One pre-norm residual self-attention layer over entity tokens, then a masked mean and max pool.

    ``tokens`` ``[B, N, d]``, ``mask`` ``[B, N]`` (nonzero: present); returns ``[B, 2 d]``. A masked
    token is never a key or value of the attention (its logit is -inf, so its weight is exactly 0) and
    is left out of both pools, so its features cannot change the output. Every row needs at least one
    present token.
    """

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"embedding size {dim} is not a multiple of {heads} heads")
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, d = tokens.shape
        present = mask > 0
        q, k, v = self.qkv(self.norm(tokens)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        # A boolean mask: False keys get a -inf logit, hence a softmax weight of exactly 0.
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=present[:, None, None, :])
        attn = attn.transpose(1, 2).reshape(b, n, d)
        x = torch.relu(tokens + self.proj(attn))
        keep = present[..., None]
        count = present.sum(1, keepdim=True).clamp_min(1)
        mean = torch.where(keep, x, 0.0).sum(1) / count
        peak = torch.where(keep, x, float("-inf")).amax(1)
        return torch.cat([mean, peak], -1)


class EntityEncoder(nn.Module):
    """Per-agent features from the padded, masked entity observations of one agent slot."""

    def __init__(self, dims: dict[str, int], lidar_range: float, embed: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.lidar_scale = 1.0 / lidar_range
        s = dims["self"]
        self.self_emb = nn.Sequential(_init(nn.Linear(s, embed)), nn.ReLU())
        # Every entity is embedded together with the agent's own observation (as in Baker et al.):
        # a linear layer of the concatenation, computed as the sum of the two parts' projections.
        self.entity_emb = nn.ModuleDict({k: _init(nn.Linear(dims[k], embed)) for k in ENTITIES})
        self.entity_self = nn.ModuleDict({k: nn.Linear(s, embed, bias=False) for k in ENTITIES})
        self.lidar_conv = nn.Sequential(nn.Conv1d(1, 4, 3, padding=1, padding_mode="circular"), nn.ReLU())
        self.lidar_emb = nn.Sequential(_init(nn.Linear(4 * dims["lidar"], embed)), nn.ReLU())
        self.block = MaskedEntityBlock(embed, heads)
        self.out = nn.Sequential(
            _init(nn.Linear(3 * embed, hidden)), nn.ReLU(), _init(nn.Linear(hidden, hidden)), nn.ReLU()
        )

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        lead = obs["self"].shape[:-1]
        me = obs["self"].reshape(-1, obs["self"].shape[-1])
        b = me.shape[0]
        me_tok = self.self_emb(me)
        lidar = obs["lidar"].reshape(b, 1, -1) * self.lidar_scale
        lidar_tok = self.lidar_emb(self.lidar_conv(lidar).flatten(1))
        tokens, masks = [me_tok[:, None], lidar_tok[:, None]], [me.new_ones(b, 2)]
        for k in ENTITIES:
            ent = obs[k].reshape(b, -1, obs[k].shape[-1])
            tokens.append(torch.relu(self.entity_emb[k](ent) + self.entity_self[k](me)[:, None]))
            masks.append(obs[f"{k}_mask"].reshape(b, -1))
        pooled = self.block(torch.cat(tokens, 1), torch.cat(masks, 1))
        return self.out(torch.cat([me_tok, pooled], -1)).reshape(*lead, -1)


class TeamActorCritic(nn.Module):
    """One team's policy (move, grab and lock heads) and value, with separate encoders."""

    def __init__(self, dims: dict[str, int], lidar_range: float, embed: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.actor_enc = EntityEncoder(dims, lidar_range, embed, hidden, heads)
        self.critic_enc = EntityEncoder(dims, lidar_range, embed, hidden, heads)
        self.move_head = _init(nn.Linear(hidden, MOVE_AXES * MOVE_BINS), 0.01)
        self.grab_head = _init(nn.Linear(hidden, 2), 0.01)
        self.lock_head = _init(nn.Linear(hidden, 2), 0.01)
        self.value_head = _init(nn.Linear(hidden, 1), 1.0)

    def dists(self, obs: dict[str, torch.Tensor]) -> tuple[torch.distributions.Categorical, ...]:
        h = self.actor_enc(obs)
        move = self.move_head(h).unflatten(-1, (MOVE_AXES, MOVE_BINS))
        return tuple(torch.distributions.Categorical(logits=x) for x in (move, self.grab_head(h), self.lock_head(h)))

    def value(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.value_head(self.critic_enc(obs)).squeeze(-1)


class HideAndSeekAgents(nn.Module):
    """Both teams' networks; ``nets[0]`` acts for slots 0..2 (hiders), ``nets[1]`` for 3..5 (seekers)."""

    def __init__(self, dims: dict[str, int], lidar_range: float, embed: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.nets = nn.ModuleList(TeamActorCritic(dims, lidar_range, embed, hidden, heads) for _ in TEAMS)

    @staticmethod
    def team_obs(obs: dict[str, torch.Tensor], team: int) -> dict[str, torch.Tensor]:
        """The slots of ``team`` (axis 1 of a ``[W, 6, ...]`` batch)."""
        return {k: v[:, team * TEAM_SIZE : (team + 1) * TEAM_SIZE] for k, v in obs.items()}

    def value(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([net.value(self.team_obs(obs, i)) for i, net in enumerate(self.nets)], 1)

    def act(
        self, obs: dict[str, torch.Tensor], greedy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Samples (or takes the modes of) every slot's actions: move ``[W, 6, 3]``, grab, lock, log-prob ``[W, 6]``."""
        moves, grabs, locks, logps = [], [], [], []
        for i, net in enumerate(self.nets):
            d_move, d_grab, d_lock = net.dists(self.team_obs(obs, i))
            if greedy:
                move, grab, lock = (d.probs.argmax(-1) for d in (d_move, d_grab, d_lock))
            else:
                move, grab, lock = d_move.sample(), d_grab.sample(), d_lock.sample()
            logps.append(d_move.log_prob(move).sum(-1) + d_grab.log_prob(grab) + d_lock.log_prob(lock))
            moves.append(move)
            grabs.append(grab)
            locks.append(lock)
        return torch.cat(moves, 1), torch.cat(grabs, 1), torch.cat(locks, 1), torch.cat(logps, 1)


class TeamReturns:
    """Per-team mean episode return over the active agents of finished episodes, kept on the device.

    Like ``ecs.EpisodeStats`` but weighted by ``active``: an unused slot (reward 0) does not pull a
    team's mean towards 0. ``update()`` never syncs; ``summary()`` reads back once.
    """

    def __init__(self, sim: ecs.BatchSim) -> None:
        dev = sim.rewards.device
        self.sim = sim
        self.running = torch.zeros_like(sim.rewards)
        self.sums = torch.zeros(len(TEAMS), dtype=torch.float64, device=dev)
        self.agents = torch.zeros(len(TEAMS), dtype=torch.float64, device=dev)
        self.episodes = torch.zeros((), dtype=torch.int64, device=dev)

    def update(self, done: torch.Tensor) -> None:
        sim = self.sim
        self.running += sim.rewards
        # For worlds that ended, final_obs["active"] is the ended episode's slot use.
        weight = torch.where(done[:, None], sim.final_obs["active"], 0.0).double()
        self.sums += (self.running.double() * weight).view(-1, len(TEAMS), TEAM_SIZE).sum((0, 2))
        self.agents += weight.view(-1, len(TEAMS), TEAM_SIZE).sum((0, 2))
        self.episodes += done.sum()
        self.running.masked_fill_(done[:, None], 0.0)

    def summary(self, clear: bool = True) -> tuple[int, list[float], list[float]]:
        """(episodes finished, per-team return sums, per-team agent counts); clears them by default."""
        packed = torch.cat([self.episodes.double().view(1), self.sums, self.agents]).cpu().tolist()
        if clear:
            self.sums.zero_()
            self.agents.zero_()
            self.episodes.zero_()
        return int(packed[0]), packed[1:3], packed[3:5]


def random_actions(sim: ecs.BatchSim, gen: torch.Generator) -> None:
    """Writes uniform random actions into ``sim.actions`` in place."""
    for key, high in (("move", MOVE_BINS), ("grab", 2), ("lock", 2)):
        a = sim.actions[key]
        a.copy_(torch.randint(0, high, a.shape, generator=gen, device=a.device, dtype=torch.int32))


def random_baseline(sim: ecs.BatchSim, team_returns: TeamReturns, gen: torch.Generator) -> list[float]:
    """Mean return per team of a uniform random policy over one episode of every world (all worlds reset)."""
    sim.reset()
    team_returns.running.zero_()
    team_returns.summary(clear=True)
    for _ in range(sim.env.max_episode_steps):
        random_actions(sim, gen)
        sim.step()
        team_returns.update(torch.logical_or(sim.terminated, sim.truncated))
    _, sums, agents = team_returns.summary(clear=True)
    return [s / a if a else float("nan") for s, a in zip(sums, agents, strict=True)]


def desynchronise(sim: ecs.BatchSim, team_returns: TeamReturns, gen: torch.Generator) -> int:
    """Resets world w after about w / W of a horizon of random steps, so episodes end at staggered times."""
    horizon = sim.env.max_episode_steps
    dev = sim.rewards.device
    start = (torch.arange(sim.num_worlds, device=dev) * horizon) // sim.num_worlds
    for s in range(1, horizon):
        mask = start == s
        if bool(mask.any()):
            sim.reset(mask)
            team_returns.running.masked_fill_(mask[:, None], 0.0)
        random_actions(sim, gen)
        sim.step()
        team_returns.update(torch.logical_or(sim.terminated, sim.truncated))
    team_returns.summary(clear=True)
    return (horizon - 1) * sim.num_worlds


def obs_dims(sim: ecs.BatchSim) -> dict[str, int]:
    return {k: int(sim.obs[k].shape[-1]) for k in ("self", "agents", "boxes", "ramps", "lidar")}


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--watch",
        metavar="CHECKPOINT",
        help="play one episode per world with CHECKPOINT's policies (greedy, sampled) and a random one",
    )
    p.add_argument(
        "--num-worlds", type=int, default=None, help="worlds stepped together (default 32 on CPU, 1024 on CUDA)"
    )
    p.add_argument("--steps", type=int, default=200_000, help="total training env (world) steps (default 200000)")
    p.add_argument("--rollout", type=int, default=32, help="steps per world per iteration (default 32)")
    p.add_argument("--epochs", type=int, default=4, help="passes over each rollout (default 4)")
    p.add_argument("--minibatches", type=int, default=4, help="minibatches per epoch (default 4)")
    p.add_argument("--embed", type=int, default=32, help="entity embedding size (default 32)")
    p.add_argument("--hidden", type=int, default=64, help="hidden units after pooling (default 64)")
    p.add_argument("--heads", type=int, default=2, help="attention heads (default 2)")
    p.add_argument("--lr", type=float, default=3e-4, help="Adam learning rate (default 3e-4)")
    p.add_argument("--gamma", type=float, default=0.99, help="discount (default 0.99)")
    p.add_argument("--gae-lambda", type=float, default=0.95, help="GAE lambda (default 0.95)")
    p.add_argument("--clip", type=float, default=0.2, help="PPO ratio clip (default 0.2)")
    p.add_argument("--ent-coef", type=float, default=0.01, help="entropy bonus (default 0.01)")
    p.add_argument("--vf-coef", type=float, default=0.5, help="value loss weight (default 0.5)")
    p.add_argument("--max-grad-norm", type=float, default=0.5, help="gradient clip per team (default 0.5)")
    p.add_argument(
        "--reward-scale", type=float, default=0.1, help="rewards are multiplied by this for learning (default 0.1)"
    )
    p.add_argument(
        "--time-budget", type=float, default=0.0, help="stop training after this many seconds (default 0: no limit)"
    )
    p.add_argument(
        "--save-every", type=int, default=0, help="also save every this many iterations (default 0: only at the end)"
    )
    p.add_argument("--out-dir", default="out/hns_ppo", help="checkpoint and plot folder (default out/hns_ppo)")
    p.add_argument(
        "--resume",
        metavar="DIR",
        default=None,
        help="go on from the last save in DIR (its resume.pt and the simulation state it names) to --steps in all",
    )
    p.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (default 1: small matrices run fastest on one)"
    )
    p.add_argument("--device", default=None, help="cpu or cuda:N (default: cuda:0 when present, else cpu)")
    p.add_argument("--seed", type=int, default=0, help="simulation and torch seed (default 0)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return p


def _per_team(sums: list[float], agents: list[float]) -> list[float]:
    return [s / a if a else float("nan") for s, a in zip(sums, agents, strict=True)]


# Options that do not change what a run computes (where it writes, how long it goes, how it reports).
_NOT_TRAINING = {"steps", "time_budget", "save_every", "out_dir", "threads", "device", "no_progress", "resume", "watch"}


def training_options(args: argparse.Namespace) -> dict:
    return {k: v for k, v in sorted(vars(args).items()) if k not in _NOT_TRAINING}


def load_resume(folder: Path, args: argparse.Namespace, device: torch.device) -> dict:
    """The state a save in ``folder`` left to go on from, checked against this run's training options."""
    path = folder / "resume.pt"
    if not path.is_file():
        raise SystemExit(f"--resume {folder}: no resume.pt there; give the --out-dir of an earlier run")
    saved = torch.load(path, map_location=device, weights_only=True)
    if not (folder / saved["sim"]).is_file():
        raise SystemExit(f"--resume {folder}: resume.pt names {saved['sim']}, which is not there")
    differs = {
        k: (v, saved["options"].get(k)) for k, v in training_options(args).items() if saved["options"].get(k) != v
    }
    if differs:
        named = ", ".join(f"--{k.replace('_', '-')} {new} here, {old} there" for k, (new, old) in differs.items())
        raise SystemExit(f"--resume {folder}: the run was started with other training options ({named}); pass its own")
    return saved


def train(args: argparse.Namespace) -> dict:
    t_start = time.perf_counter()
    torch.manual_seed(args.seed)
    sim = ecs.BatchSim(envs.make("hide_and_seek"), num_worlds=args.num_worlds, device=args.device, seed=args.seed)
    obs, final_obs = sim.obs, sim.final_obs
    dev = sim.rewards.device
    W, T, A = sim.num_worlds, args.rollout, sim.rewards.shape[1]
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    dims = obs_dims(sim)
    lidar_range = float(sim.env.config.lidar_range)
    model = HideAndSeekAgents(dims, lidar_range, args.embed, args.hidden, args.heads).to(dev)
    optim = torch.optim.Adam(model.parameters(), lr=args.lr, eps=1e-5)
    team_returns = TeamReturns(sim)
    print(f"built {W} hide_and_seek worlds on {sim.device} in {time.perf_counter() - t_start:.2f} s")

    saved = load_resume(Path(args.resume), args, dev) if args.resume else None
    if saved is None:
        t0 = time.perf_counter()
        baseline = random_baseline(sim, team_returns, gen)
        warmup = desynchronise(sim, team_returns, gen)
        print(
            f"random policy over {W} episodes: hider return {baseline[0]:.1f}, seeker return {baseline[1]:.1f} "
            f"({W * sim.env.max_episode_steps + warmup} random env steps in {time.perf_counter() - t0:.1f} s)"
        )

    # Rollout storage, allocated once: [T, W, 6, ...] per observation key.
    b_obs = {k: torch.zeros((T, *v.shape), dtype=v.dtype, device=dev) for k, v in obs.items()}
    b_move = torch.zeros((T, W, A, MOVE_AXES), dtype=torch.int64, device=dev)
    b_grab = torch.zeros((T, W, A), dtype=torch.int64, device=dev)
    b_lock = torch.zeros((T, W, A), dtype=torch.int64, device=dev)
    b_logp = torch.zeros((T, W, A), device=dev)
    b_val = torch.zeros((T, W, A), device=dev)
    b_rew = torch.zeros((T, W, A), device=dev)
    b_done = torch.zeros((T, W, 1), device=dev)
    batch = T * W
    mb_size = max(1, batch // args.minibatches)
    iterations = max(1, math.ceil(args.steps / batch))
    team_params = [list(net.parameters()) for net in model.nets]
    arch = {"dims": dims, "lidar_range": lidar_range, "embed": args.embed, "hidden": args.hidden, "heads": args.heads}

    curve: list[tuple[int, float, float, float]] = []  # (env steps, seconds, hider, seeker return)
    window: list[tuple[int, list[float], list[float]]] = []  # the last iterations' finished episodes
    steps, episodes_total, first, trained_s = 0, 0, 1, 0.0
    means = [float("nan"), float("nan")]
    losses: dict[str, float] = {}
    if saved is not None:
        sim.load(Path(args.resume) / saved["sim"])
        model.load_state_dict(saved["model"])
        optim.load_state_dict(saved["optim"])
        torch.set_rng_state(saved["rng"].cpu())
        if dev.type == "cuda":
            torch.cuda.set_rng_state(saved["cuda_rng"].cpu(), dev)
        gen.set_state(saved["gen"].cpu())
        team_returns.running.copy_(saved["running"])
        baseline, losses = saved["baseline"], saved["losses"]
        means = [saved["curve"][-1][2], saved["curve"][-1][3]]
        curve = [tuple(c) for c in saved["curve"]]
        window = [tuple(w) for w in saved["window"]]
        steps, episodes_total, trained_s = saved["env_steps"], saved["episodes"], saved["train_s"]
        first = saved["iteration"] + 1
        print(f"resumed from {args.resume} after {steps} env steps, {first - 1} iterations")
    bar = tqdm(total=iterations * batch, initial=steps, unit="step", disable=args.no_progress, mininterval=0.5)
    t_train = time.perf_counter()
    result = None
    for it in range(first, iterations + 1):
        with torch.no_grad():
            for t in range(T):
                for k, v in obs.items():
                    b_obs[k][t] = v
                move, grab, lock, logp = model.act(obs)
                b_move[t], b_grab[t], b_lock[t], b_logp[t] = move, grab, lock, logp
                b_val[t] = model.value(obs)
                sim.actions["move"].copy_(move)
                sim.actions["grab"].copy_(grab)
                sim.actions["lock"].copy_(lock)
                sim.step()
                done = torch.logical_or(sim.terminated, sim.truncated)
                team_returns.update(done)
                b_rew[t] = sim.rewards * args.reward_scale
                # A truncated episode continues in the MDP: bootstrap from its last observation.
                # (final_obs is only written for worlds that ended: select, never multiply, stale rows.)
                if bool(sim.truncated.any()):
                    v_final = model.value(final_obs)
                    b_rew[t] += torch.where(sim.truncated[:, None], args.gamma * v_final, 0.0)
                b_done[t] = done[:, None].float()
            next_value = model.value(obs)
            adv = torch.zeros_like(b_rew)
            last = torch.zeros((W, A), device=dev)
            for t in reversed(range(T)):
                nv = next_value if t == T - 1 else b_val[t + 1]
                nonterminal = 1.0 - b_done[t]
                delta = b_rew[t] + args.gamma * nv * nonterminal - b_val[t]
                last = delta + args.gamma * args.gae_lambda * nonterminal * last
                adv[t] = last
            ret = adv + b_val
        steps += batch

        f_obs = {k: v.reshape(batch, *v.shape[2:]) for k, v in b_obs.items()}
        f_move, f_grab, f_lock = b_move.reshape(batch, A, -1), b_grab.reshape(batch, A), b_lock.reshape(batch, A)
        f_logp, f_adv, f_ret = b_logp.reshape(batch, A), adv.reshape(batch, A), ret.reshape(batch, A)
        f_active = f_obs["active"]
        for _ in range(args.epochs):
            perm = torch.randperm(batch, device=dev)
            for start in range(0, batch - mb_size + 1, mb_size):
                idx = perm[start : start + mb_size]
                mb_obs = {k: v[idx] for k, v in f_obs.items()}
                loss = torch.zeros((), device=dev)
                for i, net in enumerate(model.nets):
                    sl = slice(i * TEAM_SIZE, (i + 1) * TEAM_SIZE)
                    m = f_active[idx, sl]  # only active slots contribute
                    n = m.sum().clamp_min(1.0)
                    d_move, d_grab, d_lock = net.dists(model.team_obs(mb_obs, i))
                    logp = (
                        d_move.log_prob(f_move[idx, sl]).sum(-1)
                        + d_grab.log_prob(f_grab[idx, sl])
                        + d_lock.log_prob(f_lock[idx, sl])
                    )
                    entropy = d_move.entropy().sum(-1) + d_grab.entropy() + d_lock.entropy()
                    a = f_adv[idx, sl]
                    a_mean = (a * m).sum() / n
                    a_std = ((a - a_mean).square() * m).sum().div(n).sqrt()
                    a = (a - a_mean) / (a_std + 1e-8)
                    ratio = (logp - f_logp[idx, sl]).exp()
                    pg = torch.max(-a * ratio, -a * ratio.clamp(1 - args.clip, 1 + args.clip))
                    v_err = 0.5 * (net.value(model.team_obs(mb_obs, i)) - f_ret[idx, sl]).square()
                    team_loss = ((pg + args.vf_coef * v_err - args.ent_coef * entropy) * m).sum() / n
                    loss = loss + team_loss
                    losses[f"{TEAMS[i]}_value"] = float(((v_err * m).sum() / n).detach())
                    losses[f"{TEAMS[i]}_entropy"] = float(((entropy * m).sum() / n).detach())
                optim.zero_grad(set_to_none=True)
                loss.backward()
                for params in team_params:
                    nn.utils.clip_grad_norm_(params, args.max_grad_norm)
                optim.step()

        # One host sync per iteration: the finished episodes' per-team returns.
        episodes, sums, agents = team_returns.summary(clear=True)
        episodes_total += episodes
        if episodes:
            window.append((episodes, sums, agents))
            window = window[-math.ceil(sim.env.max_episode_steps / T) :]  # about W episodes
        tot_s = [sum(w[1][j] for w in window) for j in range(len(TEAMS))]
        tot_a = [sum(w[2][j] for w in window) for j in range(len(TEAMS))]
        means = _per_team(tot_s, tot_a)
        elapsed = trained_s + time.perf_counter() - t_train
        curve.append((steps, elapsed, means[0], means[1]))
        bar.update(batch)
        bar.set_postfix(it=it, hider=f"{means[0]:.1f}", seeker=f"{means[1]:.1f}")
        out_of_time = bool(args.time_budget) and elapsed >= args.time_budget
        last = it == iterations or out_of_time
        if last or (args.save_every and it % args.save_every == 0):
            result = {
                "env_steps": steps,
                "iterations": it,
                "num_worlds": W,
                "episodes": episodes_total,
                "hider_return": means[0],
                "seeker_return": means[1],
                "random_hider_return": baseline[0],
                "random_seeker_return": baseline[1],
                "losses": dict(losses),
                "train_s": elapsed,
                "wall_s": time.perf_counter() - t_start,
                "curve": [{"env_steps": c[0], "seconds": c[1], "hider": c[2], "seeker": c[3]} for c in curve],
            }
            checkpoint, plot = save_run(Path(args.out_dir), model, arch, curve, baseline, result)
            save_resume(Path(args.out_dir), args, sim, model, optim, gen, team_returns, result, window, it)
        if last:
            break
    bar.close()
    if result is None:
        raise SystemExit(f"--resume {args.resume}: that run already reached {steps} env steps; ask for more --steps")
    print(
        f"after {steps} env steps, {it} iterations, {result['train_s']:.1f} s training "
        f"({time.perf_counter() - t_start:.1f} s wall): hider return {means[0]:.2f} (random {baseline[0]:.2f}), "
        f"seeker return {means[1]:.2f} (random {baseline[1]:.2f}), {episodes_total} episodes finished"
    )
    print(f"saved {checkpoint}" + (f" and {plot}" if plot else ""))
    return result


def save_resume(
    out: Path,
    args: argparse.Namespace,
    sim: ecs.BatchSim,
    model: nn.Module,
    optim: torch.optim.Optimizer,
    gen: torch.Generator,
    team_returns: TeamReturns,
    result: dict,
    window: list,
    iteration: int,
) -> None:
    """Writes what ``--resume`` needs to go on from here: the simulation's state (``sim-<iteration>.npz``), then
    ``resume.pt``, which names it, in its place at once; then removes older states. A run killed at any point
    leaves a ``resume.pt`` and the state it names."""
    sim_file = f"sim-{iteration}.npz"
    sim.save(out / sim_file)
    state = {
        "sim": sim_file,
        "options": training_options(args),
        "model": model.state_dict(),
        "optim": optim.state_dict(),
        "rng": torch.get_rng_state(),
        "gen": gen.get_state(),
        "running": team_returns.running,
        "baseline": [result["random_hider_return"], result["random_seeker_return"]],
        "losses": result["losses"],
        "curve": [[c["env_steps"], c["seconds"], c["hider"], c["seeker"]] for c in result["curve"]],
        "window": [[w[0], w[1], w[2]] for w in window],
        "env_steps": result["env_steps"],
        "episodes": result["episodes"],
        "train_s": result["train_s"],
        "iteration": iteration,
    }
    if sim.rewards.device.type == "cuda":
        state["cuda_rng"] = torch.cuda.get_rng_state(sim.rewards.device)
    tmp = out / "resume.pt.tmp"
    torch.save(state, tmp)
    tmp.replace(out / "resume.pt")
    for old in out.glob("sim-*.npz"):
        if old.name != sim_file:
            old.unlink()


def save_run(
    out: Path, model: nn.Module, arch: dict, curve: list, baseline: list[float], result: dict
) -> tuple[Path, Path | None]:
    """Writes policy.pt, learning_curve.png and result.json into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / "policy.pt"
    state = {"env": "hide_and_seek", **arch, "model": model.state_dict(), "env_steps": result["env_steps"]}
    torch.save(state, checkpoint)
    plot = save_curve(curve, out / "learning_curve.png", baseline)
    (out / "result.json").write_text(json.dumps(result, indent=2))
    return checkpoint, plot


def save_curve(curve: list[tuple[int, float, float, float]], path: Path, baseline: list[float]) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[examples]'); no learning curve written")
        return None
    steps = [c[0] for c in curve]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for j, (team, color) in enumerate(zip(TEAMS, ("tab:blue", "tab:red"), strict=True)):
        ax.plot(steps, [c[2 + j] for c in curve], color=color, marker="." if len(curve) < 30 else None, label=team)
        ax.axhline(baseline[j], color=color, linestyle="--", alpha=0.6, label=f"{team}, random policy")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("mean episode return per agent")
    secs = f" ({curve[-1][1]:.0f} s)" if curve else ""
    ax.set_title(f"MAPPO on hide-and-seek{secs}")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def watch(args: argparse.Namespace) -> dict[str, list[float]]:
    """Plays one episode in every world with the checkpoint's greedy and sampled policies, and with a uniform
    random policy, all on the same levels; prints and returns the mean return per team of each."""
    ckpt = torch.load(args.watch, map_location="cpu", weights_only=True)
    seed = args.seed + 1
    sim = ecs.BatchSim(envs.make(ckpt["env"]), num_worlds=args.num_worlds, device=args.device, seed=seed)
    dev = sim.rewards.device
    model = HideAndSeekAgents(ckpt["dims"], ckpt["lidar_range"], ckpt["embed"], ckpt["hidden"], ckpt["heads"])
    model.load_state_dict(ckpt["model"])
    model.to(dev).eval()
    team_returns = TeamReturns(sim)
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    results = {}
    for mode in ("greedy", "sampled", "random"):
        sim.reseed(seed)  # the same levels for every mode
        team_returns.running.zero_()
        team_returns.summary(clear=True)
        with torch.no_grad():
            for _ in range(sim.env.max_episode_steps):
                if mode == "random":
                    random_actions(sim, gen)
                else:
                    move, grab, lock, _ = model.act(sim.obs, greedy=mode == "greedy")
                    sim.actions["move"].copy_(move)
                    sim.actions["grab"].copy_(grab)
                    sim.actions["lock"].copy_(lock)
                sim.step()
                team_returns.update(torch.logical_or(sim.terminated, sim.truncated))
        episodes, sums, agents = team_returns.summary()
        results[mode] = means = _per_team(sums, agents)
        print(
            f"{mode} policies over {episodes} episodes of {sim.num_worlds} worlds: "
            f"hider return {means[0]:.2f}, seeker return {means[1]:.2f}"
        )
    return results


def main(argv: list[str] | None = None) -> None:
    args = make_parser().parse_args(argv)
    if args.num_worlds is None:
        cuda = torch.cuda.is_available() and (args.device is None or str(args.device).startswith("cuda"))
        args.num_worlds = 1024 if cuda else 32
    for name in ("num_worlds", "steps", "rollout", "epochs", "minibatches", "embed", "hidden", "heads", "threads"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1")
    if args.embed % args.heads:
        raise SystemExit("--embed must be a multiple of --heads")
    torch.set_num_threads(args.threads)
    wp.config.log_level = wp.LOG_WARNING
    if args.watch:
        watch(args)
    else:
        train(args)


if __name__ == "__main__":
    main()
