"""Best-of-N over a stored run: the plan (N, the selector, the judge model), checked before
anything runs, and the selection itself: candidates judged where the selector asks for it,
one kept per task, each candidate's mark written back to the store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from trajforge.errors import ConfigError
from trajforge.judge.best_of import BestOfSummary, best_of_summary, marked, select_best
from trajforge.judge.criteria import load_criteria
from trajforge.judge.llm_judge import LLMJudge
from trajforge.judge.scoring import ScoreSink, score_missing_into
from trajforge.judge.selectors import (
    BEST_OF_OPTION,
    SELECT_JUDGE_NAME,
    SELECT_OPTION,
    SELECTOR_FORMS,
    Selector,
    SelectorKind,
    check_best_of,
    check_verifier_selectable,
    parse_selector,
)
from trajforge.policy import load_policy
from trajforge.schema import Trajectory


class TrajectorySink(ScoreSink, Protocol):
    """Where the selection goes (a ``TrajectoryStore``): new scores, and trajectories replaced
    with their marks."""

    def put(self, traj: Trajectory) -> None: ...


class BestOf(BaseModel):
    """A best-of-N plan, stored with an eval run so that ``--resume`` selects alike."""

    model_config = ConfigDict(extra="forbid")

    n: int
    select: str
    judge_model: str | None = None

    @property
    def selector(self) -> Selector:
        return parse_selector(self.select)


def plan_best_of(
    env: str,
    answer_free: bool,
    n: int | None,
    select: str | None,
    judge_model: str | None,
    temperature: float,
) -> BestOf | None:
    """The plan ``--best-of`` and ``--select`` ask for (None: neither was given), every bad
    value refused in one line before anything runs; ``answer_free``: whether ``env``'s
    verifier reads no answer key (only then may it choose)."""
    if n is None:
        if select is not None:
            raise ConfigError(f"{SELECT_OPTION}: give {BEST_OF_OPTION} N too (it chooses among N)")
        return None
    check_best_of(n)
    if select is None:
        raise ConfigError(f"{BEST_OF_OPTION}: give {SELECT_OPTION} ({SELECTOR_FORMS})")
    selector = parse_selector(select)
    check_verifier_selectable(selector, env, answer_free)
    if selector.kind is SelectorKind.JUDGE and judge_model is None:
        raise ConfigError(f"{SELECT_OPTION} {select}: give --judge-model (the policy that judges)")
    if n > 1 and temperature == 0:
        raise ConfigError(
            f"{BEST_OF_OPTION} {n}: greedy samples (--temperature 0) are all alike; "
            "give --temperature above 0"
        )
    return BestOf(n=n, select=select, judge_model=judge_model)


async def _judged(
    db: TrajectorySink, trajectories: Sequence[Trajectory], plan: BestOf
) -> list[Trajectory]:
    """The candidates with a ``select_judge`` score each (given only where missing)."""
    selector = plan.selector
    if selector.kind is not SelectorKind.JUDGE or plan.judge_model is None:
        return list(trajectories)
    policy = load_policy(plan.judge_model)
    try:
        judge = LLMJudge(load_criteria(selector.criteria or ""), policy, name=SELECT_JUDGE_NAME)
        return await score_missing_into(db, trajectories, [judge])
    finally:
        await policy.close()


async def select_into(
    db: TrajectorySink, trajectories: Sequence[Trajectory], plan: BestOf
) -> BestOfSummary:
    """Choose one candidate per task, mark every candidate's metadata in ``db`` and return the
    figures."""
    selector = plan.selector
    judged = await _judged(db, trajectories, plan)
    choices = select_best(selector, judged)
    for choice in choices:
        for traj in marked(selector, choice):
            db.put(traj)
    return best_of_summary(selector, choices)
