"""``trajforge eval --best-of N --select SELECTOR``: its options, and the plan they ask for
with the env's verifier looked up (``judge.best_of_run`` does the rest)."""

from __future__ import annotations

from typing import Annotated

import typer

from trajforge.envs import get_env
from trajforge.judge import BEST_OF_OPTION, SELECT_OPTION, BestOf, plan_best_of

BestOfOption = Annotated[
    int | None,
    typer.Option(
        BEST_OF_OPTION,
        metavar="N",
        help="Sample N candidates per task and keep one chosen by --select; reports pass@1, "
        "pass@N and selected@N with 95% intervals.",
    ),
]
SelectOption = Annotated[
    str | None,
    typer.Option(
        SELECT_OPTION,
        metavar="SELECTOR",
        # Not the selector list as errors spell it: "judge:" after a comma reads as a command.
        help="How --best-of chooses, without the answer key: verifier (only where the env's "
        "verifier reads no answer), majority, logprob or judge:CRITERIA by --judge-model.",
    ),
]


def plan_for_env(
    env: str, n: int | None, select: str | None, judge_model: str | None, temperature: float
) -> BestOf | None:
    """``plan_best_of`` for ``env``, whose registry entry says whether its verifier may choose."""
    answer_free = get_env(env).answer_free_verifier if n is not None else False
    return plan_best_of(env, answer_free, n, select, judge_model, temperature)
