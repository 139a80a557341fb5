"""Tree-structured rollouts in the RL step (``tree:``): after a step's groups are played, each
task's group grows by branches from one of its episodes at a turn boundary
(``rollout.tree``): the parent's turns replayed token for token, then sampled afresh by the
weights being trained. The branches join the parent's group (its outcome comparison) with the
replayed turns out of the loss, and meet the parent at the branch turn's state, a step-level
group for GiGPO (``estimator: gigpo``) to compare.
"""

from __future__ import annotations

from trajforge.errors import ConfigError
from trajforge.policy import TokenPolicy
from trajforge.rollout import RolloutSpec, branch_points, branch_rollout
from trajforge.schema import Trajectory
from trajforge.train.rl.config import RLConfig
from trajforge.train.rl.selection import assistant_tokens
from trajforge.train.rl.settings import TreeSettings


class TreeRollouts:
    """Grows a step's groups by branches (one branch point per task, ``branches`` from it)."""

    def __init__(self, cfg: RLConfig) -> None:
        assert cfg.tree is not None  # the trainer builds one only for a config with it
        for key, on in (
            ("ray", cfg.ray is not None),
            ("agent", cfg.plays_program),
            ("self_play", cfg.self_play is not None),
            ("async_staleness", cfg.async_staleness > 0),
        ):
            if on:
                raise ConfigError(
                    f"tree: branches are sampled in this process from the weights just trained; "
                    f"not with {key}"
                )
        self.settings: TreeSettings = cfg.tree
        self.seed = cfg.seed

    def grow(
        self, trajs: list[Trajectory], spec: RolloutSpec, policy: TokenPolicy, step: int
    ) -> tuple[list[Trajectory], dict[str, float]]:
        """The branches of ``trajs`` rolled out as ``spec`` says, and the step's tree
        metrics: ``branch_points``, ``branched_episodes``, ``branch_diverged``,
        ``branch_replayed_tokens``."""
        points = branch_points(trajs, seed=self.seed * 1_000_003 + step)
        tree = branch_rollout(spec, policy, points, self.settings.branches)
        metrics = {
            "branch_points": float(len(points)),
            "branched_episodes": float(len(tree.trajectories)),
            "branch_diverged": float(tree.diverged),
            "branch_replayed_tokens": float(sum(assistant_tokens(t)[0] for t in tree.trajectories)),
        }
        return tree.trajectories, metrics
