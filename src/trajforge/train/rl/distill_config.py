"""``trajforge train distill``'s config: an RL config whose ``distill`` is required, and what a
distillation refuses of the rest of it.

Every key is documented by the docstring under it: ``trajforge config show`` and
``docs/configuration.md`` are generated from them.
"""

from __future__ import annotations

from pydantic import model_validator

from trajforge.train.rl.config import RLConfig
from trajforge.train.rl.distill_settings import DistillSettings


class DistillConfig(RLConfig):
    """On-policy distillation: the student (``model``) samples groups on the env as RL does, a
    teacher scores each sampled token, and the update follows the per-token reverse KL to the
    teacher (plus ``distill.outcome_weight`` times the outcome advantage). Every other key is
    RL's."""

    distill: DistillSettings
    """The teacher and how its scores weigh (``teacher``, ``privileged``, ``coef``,
    ``outcome_weight``, ``token_map``)."""

    @model_validator(mode="after")
    def _distills(self) -> DistillConfig:
        if problem := distill_problem(self):
            raise ValueError(problem)
        return self


def distill_problem(cfg: RLConfig) -> str | None:
    """One line on what ``cfg.distill`` cannot do beside the rest of ``cfg`` (``None``: it can)."""
    d = cfg.distill
    if d is None:
        return None
    if cfg.self_play is not None:
        return (
            "distill: a self-play game's seats train on role advantages; leave out one of the two"
        )
    if cfg.plays_program:
        return "distill: an agent program's episodes are not scored by a teacher; leave out agent"
    if cfg.context is not None and cfg.context.strategy != "none":
        # The teacher scores an episode's own row; an earlier segment's tokens have no row of it.
        return "distill: the teacher scores whole episodes; leave out context (or strategy: none)"
    if d.outcome_weight == 0 and cfg.difficulty is not None and cfg.difficulty.refill:
        return (
            "distill: with outcome_weight 0 a group whose rewards are alike still learns from "
            "the teacher; difficulty.refill would drop it (set refill: false)"
        )
    if d.teacher.startswith("openai:") and cfg.temperature not in (0.0, 1.0):
        return (
            f"distill.teacher: a server scores tokens untempered; sample at temperature 1 "
            f"(not {cfg.temperature:g}) so the student's log-probabilities compare"
        )
    return None
