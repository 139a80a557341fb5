"""The one evaluation recipe: rolled-out episodes scored (into a store, each scorer once per
trajectory, so a resumed evaluation scores nothing twice), summarised, and one candidate per task
selected where a best-of-N plan asks for it. ``trajforge eval``, a pipeline's eval stage and RL
validation call ``evaluate``; RL validation passes its ``Rubric``, whose totals are the rewards it
trains on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trajforge.judge.best_of import BestOfSummary
from trajforge.judge.best_of_run import BestOf, TrajectorySink, select_into
from trajforge.judge.llm_judge import LLMJudge
from trajforge.judge.scorer import Rubric, Scorer
from trajforge.judge.scoring import EvalSummary, score_all, score_missing_into, summarize
from trajforge.schema import Trajectory


@dataclass
class Evaluation:
    """The scored trajectories, their summary, and the best-of-N figures (with a plan)."""

    trajectories: list[Trajectory]
    summary: EvalSummary
    best_of: BestOfSummary | None = None

    def as_dict(self) -> dict[str, object]:
        data = self.summary.as_dict()
        if self.best_of is not None:
            data["best_of"] = self.best_of.as_dict()
        return data


async def close_scorers(scorers: Sequence[Scorer]) -> None:
    """Close the policies the scorers run (an LLM judge's model)."""
    for s in scorers:
        if isinstance(s, LLMJudge):
            await s.policy.close()


async def evaluate(
    trajectories: Sequence[Trajectory],
    scorers: list[Scorer] | Rubric,
    *,
    store: TrajectorySink | None = None,
    ks: Sequence[int] = (1,),
    best_of: BestOf | None = None,
    close: bool = True,
) -> Evaluation:
    """Score ``trajectories`` with ``scorers``, each only where it has not scored the
    trajectory yet, the new scores stored in ``store``; summarise them with pass@k for ``ks``;
    and with a ``best_of`` plan select one candidate per task, its marks in ``store``. The
    scorers' policies are closed afterwards unless ``close`` is false (a trainer scores again).

    ``scorers`` may be a ``Rubric``: every scorer's verdict is appended and the summary's
    rewards are the rubric's weighted totals (RL validation), nothing stored.

    Raises:
        ValueError: a ``best_of`` plan without a ``store`` to mark the candidates in, or a
            rubric with a store or plan.
    """
    if best_of is not None and store is None:
        raise ValueError("evaluate: a best-of plan marks its candidates in a store; pass store=")
    if isinstance(scorers, Rubric) and (store is not None or best_of is not None):
        raise ValueError("evaluate: a rubric's totals are not stored; pass a list of scorers")
    rewards: list[float] | None = None
    try:
        if isinstance(scorers, Rubric):
            scored, rewards = await _rubric_scored(trajectories, scorers)
        elif store is None:
            scored = await score_all(trajectories, scorers)
        else:
            scored = await score_missing_into(store, trajectories, scorers)
    finally:
        if close:
            await close_scorers(scorers.scorers if isinstance(scorers, Rubric) else scorers)
    picked = None
    if best_of is not None and store is not None:
        picked = await select_into(store, scored, best_of)
    summary = summarize(scored, ks=ks, rewards=rewards)
    return Evaluation(scored, summary, picked)


async def _rubric_scored(
    trajectories: Sequence[Trajectory], rubric: Rubric
) -> tuple[list[Trajectory], list[float]]:
    """The trajectories with every scorer's verdict appended, and their weighted totals."""
    scored, totals = [], []
    for t in trajectories:
        total, scores = await rubric.evaluate(t)
        scored.append(t.model_copy(update={"scores": [*t.scores, *scores]}))
        totals.append(total)
    return scored, totals
