"""Which scorers judge a run, as ``eval``, ``judge`` and ``judge-eval`` take them
(``--scorer``, ``--judge-model``, ``--criteria``), and the score rows those commands print."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from trajforge.cli.preflight import check_reachable
from trajforge.cli.renamed import refuse_renamed
from trajforge.errors import ConfigError
from trajforge.judge import (
    LLMJudge,
    Scorer,
    close_scorers,
    format_reward,
    format_scored,
    get_scorer,
    load_criteria,
    score_all,
    score_into,
    scorer_names,
)
from trajforge.policy import load_policy
from trajforge.registry import absolute_ref

if TYPE_CHECKING:
    from trajforge.judge import EvalSummary, JudgeCriteria, ScoreSink
    from trajforge.schema import Trajectory

DEFAULT_SCORERS = ("env_verifier", "process")
DEFAULT_CRITERIA = "agentrewardbench"
LLM_JUDGE_NAME = "llm_judge"

USER_SCORERS_HELP = "or your own as module:function or file.py:function"
ScorerOption = Annotated[
    list[str] | None,
    typer.Option(
        "--scorer",
        "-s",
        help=f"Scorer (repeatable), one of: {', '.join(scorer_names())}; {USER_SCORERS_HELP}.",
    ),
]
JudgeModelOption = Annotated[
    str | None,
    typer.Option(
        "--judge-model",
        metavar="SPEC",
        help=f"Score with an LLM judge too (its score is named {LLM_JUDGE_NAME}), run by this "
        "policy: embedded, tiny, a model folder or openai:<url>#<model>.",
    ),
]
CriteriaOption = Annotated[
    str | None,
    typer.Option(
        "--criteria",
        metavar="FILE.yaml",
        help=f"What the LLM judge grades: a criteria YAML or JSON file, or a built-in name "
        f"(default: {DEFAULT_CRITERIA}).",
    ),
]
CRITERIA_ARE = "what the LLM judge grades"


def refuse_rubric(value: str | None) -> None:
    """Refuse the old spelling of ``--criteria``."""
    refuse_renamed("--rubric", "--criteria", value, CRITERIA_ARE)


class Judging(BaseModel):
    """Which scorers judge a run; an eval run stores it, so that --resume judges alike."""

    model_config = ConfigDict(extra="forbid")

    scorers: list[str] = list(DEFAULT_SCORERS)
    judge_model: str | None = None
    # Runs stored before the rename keep their "rubric" key and still resume.
    criteria: str | None = Field(default=None, validation_alias=AliasChoices("criteria", "rubric"))

    @field_validator("scorers")
    @classmethod
    def _absolute_files(cls, scorers: list[str]) -> list[str]:
        # A user scorer file is kept by its absolute path, so --resume finds it from anywhere.
        return [absolute_ref(name) for name in scorers]

    def criteria_to_use(self) -> JudgeCriteria | None:
        """What the LLM judge grades, or None without a judge model."""
        if self.judge_model is None:
            if self.criteria is not None:
                raise ConfigError(
                    "--criteria: give --judge-model too (it is what the judge grades)"
                )
            return None
        try:
            return load_criteria(self.criteria or DEFAULT_CRITERIA)
        except ConfigError as exc:
            raise ConfigError(f"--criteria: {exc}") from None

    def check(self) -> None:
        """Refuse unknown scorers and bad criteria before anything runs."""
        for name in self.scorers:
            get_scorer(name)
        self.criteria_to_use()
        check_reachable(self.judge_model, "--judge-model")

    def build(self) -> list[Scorer]:
        """The scorers, with the judge model loaded: call it in the event loop that scores."""
        scorers = [get_scorer(name) for name in self.scorers]
        criteria = self.criteria_to_use()
        if criteria is None or self.judge_model is None:
            return scorers
        try:
            policy = load_policy(self.judge_model)
        except ConfigError as exc:
            raise ConfigError(f"--judge-model: {exc}") from None
        return [*scorers, LLMJudge(criteria, policy, name=LLM_JUDGE_NAME)]


async def score_trajectories(
    trajectories: Sequence[Trajectory], judging: Judging, sink: ScoreSink | None = None
) -> list[Trajectory]:
    """The trajectories with new scores appended (and stored in ``sink`` when given)."""
    scorers = judging.build()
    try:
        if sink is None:
            return await score_all(trajectories, scorers)
        return await score_into(sink, trajectories, scorers)
    finally:
        await close_scorers(scorers)


def score_rows(summary: EvalSummary) -> list[tuple[str, str]]:
    return [
        (
            f"score {name}",
            f"{format_reward(summary.scores.get(name))} "
            f"(scored {format_scored(scored, summary.episodes)})",
        )
        for name, scored in summary.scores_scored.items()
    ]
