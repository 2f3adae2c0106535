"""The hide-and-seek multi-agent PPO example: masked entity pooling, then a tiny training run and --watch."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "train_hide_and_seek.py"
TIMEOUT = 600  # seconds; a cold kernel cache compiles every module first
DIMS = {"self": 11, "agents": 7, "boxes": 13, "ramps": 13, "lidar": 30}
COUNTS = {"agents": 5, "boxes": 9, "ramps": 2}


def _module():
    spec = importlib.util.spec_from_file_location("train_hide_and_seek", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("train_hide_and_seek", module)
    spec.loader.exec_module(module)
    return module


def _obs(gen: torch.Generator, worlds: int = 4) -> dict[str, torch.Tensor]:
    obs = {
        "self": torch.randn(worlds, 6, DIMS["self"], generator=gen),
        "lidar": 6.0 * torch.rand(worlds, 6, DIMS["lidar"], generator=gen),
        "active": torch.ones(worlds, 6),
    }
    for k, n in COUNTS.items():
        obs[k] = torch.randn(worlds, 6, n, DIMS[k], generator=gen)
        mask = (torch.rand(worlds, 6, n, generator=gen) < 0.5).float()
        mask[:, :, 0] = 0.0  # entity 0 always masked out, entity 1 always present
        mask[:, :, 1] = 1.0
        obs[f"{k}_mask"] = mask
    return obs


def _outputs(model, obs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    outs = [model.value(obs)]
    for i, net in enumerate(model.nets):
        outs += [d.logits for d in net.dists(model.team_obs(obs, i))]
    return outs


def test_masked_pooling_ignores_masked_entities() -> None:
    m = _module()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)

    # The attention-and-pool block alone: [B, N, d] tokens with a [B, N] mask.
    block = m.MaskedEntityBlock(16, 2)
    tokens = torch.randn(8, 10, 16, generator=gen)
    mask = (torch.rand(8, 10, generator=gen) < 0.5).float()
    mask[:, 0] = 1.0
    mask[:, 1] = 0.0
    with torch.no_grad():
        ref = block(tokens, mask)
        changed = tokens.clone()
        changed[mask == 0] = 1e3 * torch.randn(int((mask == 0).sum()), 16, generator=gen)
        torch.testing.assert_close(block(changed, mask), ref, rtol=0, atol=1e-6)
        changed = tokens.clone()
        changed[:, 0] += 1.0
        assert (block(changed, mask) - ref).abs().amax(-1).min() > 1e-4  # every row moves

    # The whole two-team model on observation dicts shaped like the env's.
    model = m.HideAndSeekAgents(DIMS, 6.0, embed=16, hidden=32, heads=2)
    obs = _obs(gen)
    with torch.no_grad():
        ref = _outputs(model, obs)
        for k in COUNTS:
            changed = dict(obs)
            hidden = obs[f"{k}_mask"] == 0
            feats = obs[k].clone()
            feats[hidden] = 50.0 * torch.randn(int(hidden.sum()), DIMS[k], generator=gen)
            changed[k] = feats
            for a, b in zip(_outputs(model, changed), ref, strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
            # Changing a present entity (slot 1 is always seen) changes every agent's outputs.
            feats = obs[k].clone()
            feats[:, :, 1] += 1.0
            changed[k] = feats
            diffs = [
                (a - b).abs().flatten(2).amax(-1) for a, b in zip(_outputs(model, changed)[1:], ref[1:], strict=True)
            ]
            assert all(bool((d > 1e-6).any()) for d in diffs)
            assert bool(((_outputs(model, changed)[0] - ref[0]).abs() > 1e-6).all())


def _run(*args: str, returncode: int = 0) -> str:
    """The script's stdout (its stderr where it is to fail)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == returncode, (
        f"{args} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return proc.stdout if returncode == 0 else proc.stderr


TINY = [
    "--num-worlds",
    "4",
    "--rollout",
    "8",
    "--epochs",
    "1",
    "--minibatches",
    "2",
    "--device",
    "cpu",
    "--no-progress",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out_dir = tmp_path_factory.mktemp("hns") / "ppo"
    out = _run(*TINY, "--steps", "64", "--out-dir", str(out_dir))
    assert "built 4 hide_and_seek worlds on cpu" in out
    assert re.search(r"random policy over 4 episodes: hider return [-\d.]+, seeker return [-\d.]+", out), out
    assert re.search(r"after 64 env steps, 2 iterations", out), out
    return out_dir


def test_train_tiny_run_writes_checkpoint_curve_and_result(trained: Path) -> None:
    result = json.loads((trained / "result.json").read_text())
    assert result["env_steps"] == 64 and result["iterations"] == 2 and result["num_worlds"] == 4
    for key in ("hider_return", "seeker_return", "random_hider_return", "random_seeker_return"):
        assert isinstance(result[key], float)
    # Every world played one full random episode: the baseline is finite and bounded by the rewards
    # (+-1 per step after the 96 preparation steps, -10 per step out of bounds).
    assert math.isfinite(result["random_hider_return"]) and math.isfinite(result["random_seeker_return"])
    assert -2400 <= result["random_hider_return"] <= 144 and -2400 <= result["random_seeker_return"] <= 144
    # The staggered worlds: world 0 ends its episode on the first training step.
    assert result["episodes"] >= 1 and math.isfinite(result["hider_return"])
    assert len(result["curve"]) == 2 and result["curve"][-1]["env_steps"] == 64
    ckpt = torch.load(trained / "policy.pt", map_location="cpu", weights_only=True)
    assert ckpt["env"] == "hide_and_seek" and ckpt["dims"] == DIMS
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pytest.skip("matplotlib not installed: no learning curve to check")
    assert (trained / "learning_curve.png").stat().st_size > 1000


def test_watch_checkpoint(trained: Path) -> None:
    out = _run("--watch", str(trained / "policy.pt"), "--num-worlds", "4", "--device", "cpu")
    for mode in ("greedy", "sampled", "random"):
        line = re.search(
            mode + r" policies over (\d+) episodes of 4 worlds: hider return ([-\d.]+), seeker return ([-\d.]+)", out
        )
        assert line is not None, out
        assert int(line.group(1)) == 4 and math.isfinite(float(line.group(2))) and math.isfinite(float(line.group(3)))


def test_a_resumed_run_goes_on_as_a_run_never_stopped(trained: Path, tmp_path: Path) -> None:
    """Resumed from the tiny run's last save (2 iterations) to 4 iterations, the run ends with the same weights,
    learning curve, losses and episode counts as one run of 4 iterations, bit for bit; the save names its own
    simulation state. Other training options, a folder without a save, or no steps left are refused, naming why."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _run(*TINY, "--steps", "128", "--out-dir", str(straight))
    assert sorted(p.name for p in trained.glob("sim-*.npz")) == ["sim-2.npz"]
    out = _run(*TINY, "--steps", "128", "--out-dir", str(resumed), "--resume", str(trained))
    assert (
        "resumed from" in out
        and "after 64 env steps, 2 iterations" in out
        and "after 128 env steps, 4 iterations" in out
    )
    assert "random policy over" not in out  # the baseline comes from the save
    a, b = (json.loads((d / "result.json").read_text()) for d in (straight, resumed))
    for key in ("env_steps", "iterations", "episodes", "hider_return", "seeker_return", "losses"):
        assert a[key] == b[key], key
    assert a["random_hider_return"] == b["random_hider_return"]
    assert [(c["env_steps"], c["hider"], c["seeker"]) for c in a["curve"]] == [
        (c["env_steps"], c["hider"], c["seeker"]) for c in b["curve"]
    ]
    wa, wb = (torch.load(d / "policy.pt", map_location="cpu", weights_only=True)["model"] for d in (straight, resumed))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    w2 = torch.load(trained / "policy.pt", map_location="cpu", weights_only=True)["model"]
    assert not all(torch.equal(wa[k], w2[k]) for k in wa)  # the last two updates changed the weights
    assert sorted(p.name for p in resumed.glob("sim-*.npz")) == ["sim-4.npz"]

    err = _run(
        *TINY,
        "--steps",
        "128",
        "--rollout",
        "16",
        "--out-dir",
        str(tmp_path / "x"),
        "--resume",
        str(trained),
        returncode=1,
    )
    assert "the run was started with other training options (--rollout 16 here, 8 there)" in err
    err = _run(*TINY, "--steps", "128", "--out-dir", str(tmp_path / "x"), "--resume", str(tmp_path), returncode=1)
    assert "no resume.pt there" in err
    err = _run(*TINY, "--steps", "64", "--out-dir", str(tmp_path / "x"), "--resume", str(trained), returncode=1)
    assert "that run already reached 64 env steps; ask for more --steps" in err
