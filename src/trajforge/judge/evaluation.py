"""The one evaluation recipe: rolled-out episodes scored (into a store, each scorer once per
trajectory, so a resumed evaluation scores nothing twice), summarised, and one candidate per task
selected where a best-of-N plan asks for it. ``trajforge eval`` and a pipeline's eval stage call
``evaluate``; RL validation states its figures through the same ``summarize``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trajforge.judge.best_of import BestOfSummary
from trajforge.judge.best_of_run import BestOf, TrajectorySink, select_into
from trajforge.judge.llm_judge import LLMJudge
from trajforge.judge.scorer import Scorer
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
    scorers: list[Scorer],
    *,
    store: TrajectorySink | None = None,
    ks: Sequence[int] = (1,),
    best_of: BestOf | None = None,
) -> Evaluation:
    """Score ``trajectories`` with ``scorers`` (closed afterwards), each only where it has not
    scored the trajectory yet, the new scores stored in ``store``; summarise them with pass@k
    for ``ks``; and with a ``best_of`` plan select one candidate per task, its marks in
    ``store``.

    Raises:
        ValueError: a ``best_of`` plan without a ``store`` to mark the candidates in.
    """
    if best_of is not None and store is None:
        raise ValueError("evaluate: a best-of plan marks its candidates in a store; pass store=")
    try:
        if store is None:
            scored = await score_all(trajectories, scorers)
        else:
            scored = await score_missing_into(store, trajectories, scorers)
    finally:
        await close_scorers(scorers)
    picked = None
    if best_of is not None and store is not None:
        picked = await select_into(store, scored, best_of)
    return Evaluation(scored, summarize(scored, ks=ks), picked)
