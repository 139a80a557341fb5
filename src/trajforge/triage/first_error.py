"""The first-error step and the triage verdict of one trajectory, and its form as scores.

A verdict is stored as scores (the one judging vocabulary): ``triage`` (1.0 clean, 0.0 with a
policy signal; dimensions: each signal's count and ``first_error`` when there is one) and one
``triage.<signal>`` per signal found (its count; the explanation says where). The store's
score filter then finds them (``--signal loop`` is the score ``triage.loop``), and triaging
again replaces them.
"""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, ConfigDict

from trajforge.schema import Evaluator, EvaluatorKind, Score, Trajectory, is_success
from trajforge.triage.signals import (
    CALL_SIGNALS,
    POLICY_SIGNALS,
    Signal,
    SignalHit,
    TriageOptions,
    detect,
)

SCORE_NAME = "triage"
FIRST_ERROR = "first_error"
_EVALUATOR = Evaluator(kind=EvaluatorKind.RULE, name=SCORE_NAME)


def signal_score_name(signal: Signal | str) -> str:
    """The score a signal is stored as: ``triage.<signal>``."""
    return f"{SCORE_NAME}.{Signal(signal).value}"


def first_error(hits: list[SignalHit]) -> int | None:
    """The earliest message a policy signal points at, or ``None`` when no policy signal has a
    step (a clean trajectory, or one whose only problems are not the policy's)."""
    steps = [h.step for h in hits if h.signal in POLICY_SIGNALS and h.step is not None]
    return min(steps, default=None)


class TriageVerdict(BaseModel):
    """One trajectory's triage: its signals with their counts and where they showed, and the
    first-error step (an index into ``messages``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    run_id: str | None
    signals: dict[Signal, int]
    first_error: int | None
    details: list[str]
    succeeded: bool
    """The episode succeeded (``schema.is_success``)."""

    @property
    def unplaced(self) -> bool:
        """A failure of the policy's in which the rules blame no step before the ending (no
        failed, malformed or repeated call): what an LLM localiser is asked about."""
        return (
            not self.succeeded
            and Signal.INFRA_FAILURE not in self.signals
            and not any(s in CALL_SIGNALS for s in self.signals)
        )

    @property
    def clean(self) -> bool:
        """No policy signal: nothing the policy did wrong was found."""
        return not any(s in POLICY_SIGNALS for s in self.signals)

    def scores(self) -> list[Score]:
        """The verdict as the scores it is stored as."""
        dims = {s.value: float(n) for s, n in self.signals.items()}
        if self.first_error is not None:
            dims[FIRST_ERROR] = float(self.first_error)
        summary = Score(
            name=SCORE_NAME,
            value=float(self.clean),
            explanation="; ".join(self.details) or "no signal",
            evaluator=_EVALUATOR,
            dimensions=dims,
        )
        per_signal = [
            Score(
                name=signal_score_name(s),
                value=float(n),
                explanation="; ".join(d for d in self.details if d.startswith(f"{s.value} ")),
                evaluator=_EVALUATOR,
            )
            for s, n in self.signals.items()
        ]
        return [summary, *per_signal]

    @classmethod
    def from_scores(cls, traj: Trajectory) -> TriageVerdict | None:
        """The verdict stored with ``traj`` (``None`` if it was never triaged)."""
        summary = traj.score(SCORE_NAME)
        if summary is None:
            return None
        names = {s.value for s in Signal}
        signals = {Signal(k): int(v) for k, v in summary.dimensions.items() if k in names}
        step = summary.dimensions.get(FIRST_ERROR)
        details = [] if summary.explanation == "no signal" else summary.explanation.split("; ")
        return cls(
            id=traj.id,
            run_id=traj.run_id,
            signals=signals,
            first_error=None if step is None else int(step),
            details=details,
            succeeded=is_success(traj.outcome.status, traj.outcome.reward),
        )


def triage(traj: Trajectory, options: TriageOptions | None = None) -> TriageVerdict:
    """The rule verdict on ``traj``: no model, any trajectory (no tool calls, no reward, an
    unknown env all give the signals that apply)."""
    hits = detect(traj, options)
    counts = Counter(h.signal for h in hits)
    where = [f"{h.signal.value} @{'-' if h.step is None else h.step}: {h.detail}" for h in hits]
    return TriageVerdict(
        id=traj.id,
        run_id=traj.run_id,
        signals={s: counts[s] for s in Signal if counts[s]},
        first_error=first_error(hits),
        details=where,
        succeeded=is_success(
            traj.outcome.status, traj.outcome.reward, (options or TriageOptions()).success_threshold
        ),
    )
