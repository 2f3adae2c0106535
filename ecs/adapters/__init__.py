"""Adapters from ``ecs.BatchSim`` to RL libraries, one module each, imported on demand.

| module | gives |
|---|---|
| ``ecs.adapters.gymnasium`` | ``GymVectorEnv``: a ``gymnasium.vector.VectorEnv`` (same-step autoreset) over a single-agent sim; Gymnasium's vector wrappers computed with torch |
| ``ecs.adapters.torchrl`` | ``TorchRLEnv``: a TorchRL ``EnvBase``; multi-agent envs as a nested ``"agents"`` group |
| ``ecs.adapters.sb3`` | ``SB3VecEnv``: a Stable-Baselines3 ``VecEnv`` over a single-agent sim |
| ``ecs.adapters.rsl_rl`` | ``RslRlVecEnv``: an RSL-RL ``VecEnv`` (the Isaac Lab convention) over a single-agent sim |
| ``ecs.adapters.pettingzoo`` | ``PettingZooWorld``: a PettingZoo ``ParallelEnv`` view of one world |
| ``ecs.adapters.stats`` | ``EpisodeStats``: episode returns and lengths, and an env's per-episode statistics (``extra``), accumulated on the device (also ``ecs.EpisodeStats``) |
| ``ecs.adapters.policy_step`` | ``PolicyStep``: a policy's forward pass and the step as one CUDA graph replay |

This package imports nothing at module level, so ``import ecs`` needs none of those libraries;
each adapter module imports its library (and torch, inside functions) when it is imported.
"""
