"""Hide-and-seek: episode statistics (OpenAI's TrackStatWrapper) and reward types, against numpy.

The statistics are computed on the device by the env's systems; every test recomputes them in numpy
from what a scripted or random rollout shows: body positions, locks and grabs read with
``sim.tensor`` after each step, and, for the step that ends an episode (whose state the same-step
reset replaces), the ended episode's last observation in ``sim.final_obs``. The rewards of each
``reward_type`` are recomputed from the visibility masks of the observation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ecs
import envs
from envs.hide_and_seek import FINAL_STATS, STATS, Kind, episode_stats
from envs.hide_and_seek.kernels import MAX_TEAM

from .test_hide_and_seek_strategies import Scene

HIDER, SEEKER = 0, MAX_TEAM  # first slot of each team
UNTOUCHED = 1e-4  # m: what a box at rest drifts in an episode (solver noise), far below any push


def rows(sim: ecs.BatchSim, kind: Kind, world: int = 0) -> np.ndarray:
    return np.nonzero(sim.tensor("body", "kind").numpy()[world] == int(kind))[0]


def column(sim: ecs.BatchSim, archetype: str, name: str) -> np.ndarray:
    return sim.tensor(archetype, name).numpy().copy()


def numpy_stats(sim: ecs.BatchSim, start: np.ndarray, world: int) -> dict[str, float]:
    """Travel and locks of one world now, from its body columns (``start``: positions at the episode's start)."""
    pos, locked = column(sim, "body", "position")[world], column(sim, "body", "locked_by")[world]
    out = {}
    for kind, name in ((Kind.BOX, "box"), (Kind.RAMP, "ramp")):
        r = rows(sim, kind, world)
        out[f"max_{name}_move"] = float(np.linalg.norm(pos[r] - start[r], axis=-1).max()) if len(r) else 0.0
        out[f"num_{name}_lock"] = int((locked[r] != 0).sum())
    return out


def final_positions(sim: ecs.BatchSim, world: int, key: str) -> np.ndarray:
    """World positions of the boxes or ramps of an ended episode, rebuilt from its last observation.

    ``final_obs[key]`` holds them relative to an agent, in its heading frame; ``final_obs["self"]`` holds
    that agent's position and heading (cos, sin).
    """
    me = int(np.nonzero(sim.final_obs["active"][world].numpy())[0][0])
    own = sim.final_obs["self"][world, me].numpy().astype(np.float64)
    rel = sim.final_obs[key][world, me, :, :3].numpy().astype(np.float64)
    c, s = own[6], own[7]
    x, y, z = own[0] + c * rel[:, 0] - s * rel[:, 1], own[1] + s * rel[:, 0] + c * rel[:, 1], own[2] + rel[:, 2]
    return np.stack([x, y, z], -1)


def final_numpy_stats(sim: ecs.BatchSim, start: np.ndarray, live: np.ndarray, world: int) -> dict[str, float]:
    """Travel and locks at the end of an ended episode, from ``final_obs``; ``live``: that episode's body rows."""
    out = {}
    for kind, key, name in ((Kind.BOX, "boxes", "box"), (Kind.RAMP, "ramps", "ramp")):
        first = int(sim.env.resources[f"first_{name}_row"])
        slots = np.nonzero(live[first : first + sim.final_obs[key].shape[2]] == int(kind))[0]
        pos = final_positions(sim, world, key)[slots]
        travel = np.linalg.norm(pos - start[first + slots], axis=-1)
        out[f"max_{name}_move"] = float(travel.max()) if len(slots) else 0.0
        me = int(np.nonzero(sim.final_obs["active"][world].numpy())[0][0])
        out[f"num_{name}_lock"] = int(sim.final_obs[key][world, me, slots, 11].sum())
    return out


def before_prep(now: dict[str, float], grabs: np.ndarray) -> dict[str, float]:
    """The ``_prep`` statistics while the preparation phase runs: 0, but the grab count so far."""
    return {f"{k}_prep": 0 for k in now} | {"grab_steps_prep": grabs}


def check(stats: dict[str, torch.Tensor], world: int, expected: dict[str, float], what: str) -> None:
    for name, value in expected.items():
        got = stats[name][world].numpy()
        np.testing.assert_allclose(got, value, atol=2e-5, err_msg=f"{what}: {name}")


# -- a scripted episode on a fixed layout, in several arrangements ------------------------------------------


def scripted(scene: Scene) -> tuple[ecs.BatchSim, dict]:
    """Hider 0 grabs cube A and drags it along +x; hider 1 locks cube B in preparation (and unlocks it after,
    with ``unlock``); the seeker locks the ramp after preparation; cube C is never touched. Locks are presses
    (lock_type "toggle"), each of one step."""
    env = envs.make(
        "hide_and_seek",
        lock_type="toggle",
        max_episode_steps=30,
        prep_fraction=1 / 3,
        fixed_boxes=(
            scene.placed(-0.7, 0.0, 0.0),  # A, in reach of hider 0
            scene.placed(0.6, 1.5, 0.0),  # B, in reach of hider 1
            scene.placed(-2.2, -2.2, 0.3),  # C
        ),
        fixed_ramps=(scene.placed(1.5, -1.5, math.pi),),  # its 0.5 m high end faces the seeker
        fixed_agents=(
            scene.agent(0, -1.3, 0.0, 0.0),
            scene.agent(0, 0.0, 1.5, 0.0),
            scene.agent(1, 0.98, -1.5, 0.0),
        ),
    )
    sim = ecs.BatchSim(env, 1, device="cpu", seed=3)
    sim.actions["move"].fill_(5)
    sim.actions["grab"].zero_()
    sim.actions["lock"].zero_()
    boxes, ramp = rows(sim, Kind.BOX), rows(sim, Kind.RAMP)[0]
    reach = sim.tensor("agent", "reach_target")[0].tolist()
    assert reach[HIDER] == boxes[0] and reach[HIDER + 1] == boxes[1] and reach[SEEKER] == ramp
    return sim, {"boxes": boxes, "ramp": ramp}


def script_actions(sim: ecs.BatchSim, scene: Scene, step: int, prep: int, *, unlock: bool) -> None:
    """The actions of ``step`` (1-based) of the scripted episode."""
    grab = 1 if step <= 20 else 0  # released before the end, so the last step holds nothing
    sim.actions["grab"][0, HIDER] = grab
    scene.drive(sim, HIDER, forward=1 if step <= 20 else 0)
    sim.actions["lock"][0, HIDER + 1] = 1 if step == 1 or (unlock and step == prep + 3) else 0
    sim.actions["lock"][0, SEEKER] = 1 if step == prep + 2 else 0


@pytest.mark.parametrize("unlock", [False, True])
@pytest.mark.parametrize(("quarter", "offset"), [(0, (0.0, 0.0)), (1, (0.07, -0.04)), (2, (-0.05, 0.03))])
def test_scripted_episode_statistics_match_numpy(quarter, offset, unlock):
    scene = Scene(quarter, offset)
    sim, got = scripted(scene)
    horizon, prep = sim.env.max_episode_steps, sim.env.config.prep_steps
    live, stats, final = column(sim, "body", "kind")[0], episode_stats(sim, final=False), episode_stats(sim)
    start = column(sim, "body", "position")[0]
    np.testing.assert_array_equal(column(sim, "body", "start_position")[0][live != 0], start[live != 0])
    grabs, prep_stats = np.zeros(2, np.int64), None
    for step in range(1, horizon + 1):
        script_actions(sim, scene, step, prep, unlock=unlock)
        sim.step()
        if step == horizon:
            break
        now = numpy_stats(sim, start, 0)
        holding, team = column(sim, "agent", "holding")[0], column(sim, "agent", "team")[0]
        alive = column(sim, "agent", "alive")[0] != 0
        grabs += np.bincount(team[alive & (holding != 0)], minlength=2)
        if step == prep:
            prep_stats = {f"{k}_prep": v for k, v in now.items()} | {"grab_steps_prep": grabs.copy()}
        check(stats, 0, {**now, "grab_steps": grabs, **(prep_stats or before_prep(now, grabs))}, f"step {step}")
        for name in STATS:  # no episode has ended yet
            assert not final[name].any(), name
    assert sim.truncated[0]
    expected = {**final_numpy_stats(sim, start, live, 0), **prep_stats, "grab_steps": grabs}
    check(final, 0, expected, "ended episode")
    # The script did what it says: A dragged well over a metre, C untouched, B locked in preparation,
    # the ramp locked afterwards, and B unlocked again with `unlock`.
    pos = final_positions(sim, 0, "boxes")
    assert np.linalg.norm(pos[0] - start[got["boxes"][0]]) > 1.0 and final["max_box_move"][0] > 1.0
    assert np.linalg.norm(pos[2] - start[got["boxes"][2]]) < UNTOUCHED
    assert int(final["num_box_lock_prep"][0]) == 1 and int(final["num_ramp_lock_prep"][0]) == 0
    assert int(final["num_box_lock"][0]) == (0 if unlock else 1) and int(final["num_ramp_lock"][0]) == 1
    assert final["grab_steps"][0].tolist() == [20, 0] and final["grab_steps_prep"][0].tolist() == [prep, 0]
    # The same-step reset began a new episode: its statistics start at 0, the ended one's stay.
    kept = {name: final[name].clone() for name in STATS}
    for name in STATS:
        assert not stats[name].any(), name
    sim.actions["lock"].zero_()
    for _ in range(3):
        sim.step()
        for name in STATS:
            torch.testing.assert_close(final[name], kept[name], rtol=0, atol=0)


def test_untouched_boxes_and_ramps_do_not_travel():
    scene = Scene(0, (0.0, 0.0))
    sim, _ = scripted(scene)
    for _ in range(sim.env.max_episode_steps):  # nobody acts
        sim.step()
    final = episode_stats(sim)
    assert final["max_box_move"][0] < UNTOUCHED and final["max_ramp_move"][0] < UNTOUCHED
    assert all(int(final[n][0]) == 0 for n in ("num_box_lock", "num_box_lock_prep", "num_ramp_lock"))
    assert not final["grab_steps"].any()


# -- random rollouts on procedural levels, several episodes and worlds ----------------------------------------


def test_random_rollout_statistics_match_numpy_and_episode_stats_averages_them():
    W, horizon, episodes = 16, 25, 2
    env = envs.make("hide_and_seek", max_episode_steps=horizon, prep_fraction=0.2, min_boxes=9, team_spawn_radius=0.0)
    sim = ecs.BatchSim(env, W, device="cpu", seed=8)
    prep = sim.env.config.prep_steps
    tracker = ecs.EpisodeStats(sim, extra=FINAL_STATS)
    stats, final = episode_stats(sim, final=False), episode_stats(sim)
    gen = torch.Generator().manual_seed(4)
    start, live = column(sim, "body", "position"), column(sim, "body", "kind")
    grabs, prep_stats, ended, moved, locks = np.zeros((W, 2), np.int64), [None] * W, [], 0.0, 0
    for step in range(1, episodes * horizon + 1):
        for key, high in (("move", 11), ("grab", 2), ("lock", 2)):
            a = sim.actions[key]
            a.copy_(torch.randint(0, high, a.shape, generator=gen, dtype=torch.int32))
        # An episode's last step releases every grab, so that its grab count is known without its state.
        sim.actions["grab"].mul_(int(step % horizon != 0))
        sim.step()
        tracker.update()
        done = (sim.terminated | sim.truncated).numpy()
        assert done.all() == (step % horizon == 0) and done.all() == done.any()
        holding, team = column(sim, "agent", "holding"), column(sim, "agent", "team")
        alive = column(sim, "agent", "alive") != 0
        for w in range(W):
            if done[w]:
                expected = {**final_numpy_stats(sim, start[w], live[w], w), **prep_stats[w], "grab_steps": grabs[w]}
                check(final, w, expected, f"world {w}, step {step}")
                ended.append({name: final[name][w].numpy().astype(np.float64) for name in STATS})
                moved, locks = max(moved, expected["max_box_move"]), locks + expected["num_box_lock"]
                continue
            grabs[w] += np.bincount(team[w][alive[w] & (holding[w] != 0)], minlength=2)
            now = numpy_stats(sim, start[w], w)
            if step % horizon == prep:
                prep_stats[w] = {f"{k}_prep": v for k, v in now.items()} | {"grab_steps_prep": grabs[w].copy()}
            expected = {**now, "grab_steps": grabs[w], **(prep_stats[w] or before_prep(now, grabs[w]))}
            check(stats, w, expected, f"world {w}, step {step}")
        if done.all():  # a new level: new start positions, statistics from 0
            start, live, grabs, prep_stats = (
                column(sim, "body", "position"),
                column(sim, "body", "kind"),
                0 * grabs,
                [None] * W,
            )
            for name in STATS:
                assert not stats[name].any(), name
            np.testing.assert_array_equal(column(sim, "body", "start_position"), start)
    assert len(ended) == episodes * W
    # Random agents moved boxes, locked some and held grabs (in both teams), so the comparison is not all zeros.
    assert moved > 0.05 and locks > 0 and (sum(e["grab_steps"] for e in ended) > 0).all()
    summary = tracker.summary()
    assert summary["episodes"] == episodes * W
    for name in STATS:
        np.testing.assert_allclose(summary[name], np.mean([e[name] for e in ended], 0), rtol=1e-6, atol=1e-7)
    tracker.clear()
    assert math.isnan(tracker.summary()["max_box_move"])
    assert all(math.isnan(v) for v in tracker.summary()["grab_steps"])


def test_episode_stats_extra_is_checked():
    sim = ecs.BatchSim(envs.make("hide_and_seek", max_episode_steps=5), 1, device="cpu", seed=0)
    with pytest.raises(ecs.EcsError, match="no singleton 'final_nothing'"):
        ecs.EpisodeStats(sim, extra=["final_nothing"])
    with pytest.raises(ecs.EcsError, match="collide"):
        ecs.EpisodeStats(sim, extra={"mean_return": "final_max_box_move"})
    tracker = ecs.EpisodeStats(sim, extra=["final_num_box_lock"])  # a name is its own key
    for _ in range(5):
        sim.step()
        tracker.update()
    assert tracker.summary()["final_num_box_lock"] == float(sim.tensor("world", "final_num_box_lock")[0])


# -- reward types ------------------------------------------------------------------------------------------


def numpy_rewards(sim: ecs.BatchSim, reward_type: str, world: int) -> np.ndarray:
    """OpenAI's HideAndSeekRewardWrapper on the visibility masks, then its RestrictAgentsRect: -10 for an agent
    outside the play area (farther from the rectangle's middle than half its size, in x or y)."""
    active = sim.obs["active"][world].numpy() != 0
    mask = sim.obs["agents_mask"][world].numpy()  # [6, 5]: the other slots in slot order
    sees = np.zeros((6, 6), bool)
    for a in range(6):
        others = [o for o in range(6) if o != a]
        sees[a, others] = mask[a] != 0
    hiders = np.array([a < MAX_TEAM for a in range(6)]) & active
    seekers = np.array([a >= MAX_TEAM for a in range(6)]) & active
    own = np.ones(6)
    own[hiders & sees[seekers].any(0)] = -1.0  # a hider some seeker sees
    own[seekers & ~(sees[:, hiders].any(1))] = -1.0  # a seeker that sees no hider
    r = own.copy()
    if reward_type == "joint_mean":
        r[hiders], r[seekers] = own[hiders].mean(), own[seekers].mean()
    elif reward_type == "joint_zero_sum":
        r[hiders], r[seekers] = own[hiders].min(), own[seekers].max()
    xy = sim.obs["self"][world, :, :2].numpy()
    lo, hi = (np.array(v) for v in sim.env.config.play_area_bounds)
    r[(np.abs(xy - (lo + hi) / 2) > (hi - lo) / 2).any(1)] = sim.env.config.out_of_bounds_reward
    r[~active] = 0.0
    return r


def test_reward_types_match_numpy():
    """Three sims of one seed and one action stream: the same dynamics, each reward type's formula. A play area
    smaller than the floor and off its centre, so that agents also leave it."""
    kinds = ("joint_zero_sum", "selfish", "joint_mean")
    area = (-2.0, -2.5, 2.5, 1.5)
    sims = {
        k: ecs.BatchSim(
            envs.make("hide_and_seek", prep_fraction=0.0, reward_type=k, play_area=area), 8, device="cpu", seed=5
        )
        for k in kinds
    }
    assert envs.make("hide_and_seek").config.reward_type == "joint_zero_sum"  # the default
    gen = torch.Generator().manual_seed(6)
    differ = dict.fromkeys(kinds[1:], 0)
    checked = outside = 0
    for _ in range(40):
        for key, high in (("move", 11), ("grab", 2), ("lock", 2)):
            a = torch.randint(0, high, sims["selfish"].actions[key].shape, generator=gen, dtype=torch.int32)
            for sim in sims.values():
                sim.actions[key].copy_(a)
        for sim in sims.values():
            sim.step()
        base = sims["joint_zero_sum"]
        for k, sim in sims.items():
            np.testing.assert_array_equal(column(sim, "body", "position"), column(base, "body", "position"))
            for w in range(sim.num_worlds):
                np.testing.assert_allclose(sim.rewards[w].numpy(), numpy_rewards(sim, k, w), rtol=0, atol=1e-6)
                checked += 1
                outside += int((sim.rewards[w] == sim.env.config.out_of_bounds_reward).any())
            if k != "joint_zero_sum":
                differ[k] += int((sim.rewards != base.rewards).any())
    assert checked == 3 * 8 * 40 and all(differ.values()), differ  # the types do differ on these rollouts
    assert outside > 0  # and agents left the play area


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"reward_type": "zero_sum"}, r"reward_type must be one of \['joint_mean', 'joint_zero_sum', 'selfish'\]"),
        ({"scenario": "rooms"}, r"scenario must be one of \['quadrant', 'randomwalls'\]"),
        ({"play_area": (1.0, 0.0, 0.0, 1.0)}, "x_min < x_max"),
        ({"play_area": (1.0, 0.0)}, "4 finite numbers"),
        ({"num_ramps": 3}, "num_ramps"),
        ({"max_elongated_boxes": 2}, "max_elongated_boxes"),
        ({"door_dropout_prob": 1.5}, "door_dropout_prob"),
        ({"quadrant_size": 1.0}, "quadrant_size"),
        ({"scenario": "quadrant", "quadrant_size": 0.1}, "hold a door"),
        ({"contact_passes": 0}, "contact_passes and max_episode_steps must be >= 1"),
        ({"contact_passes": 2.5}, r"contact_passes must be an int, got 2.5 \(float\)"),
    ],
)
def test_bad_reward_and_scenario_settings_are_refused(overrides, message):
    with pytest.raises(ecs.ConfigError, match=message):
        envs.make("hide_and_seek", **overrides)
