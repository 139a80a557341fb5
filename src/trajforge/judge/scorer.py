"""The scorer contract: ``async (trajectory) -> Score``, and a registry of named scorers.

A scorer is any async callable taking a ``Trajectory`` and returning a ``Score``. ``@scorer``
turns a plain (sync or async) function into one and registers it under a name, so configs and
the CLI can name scorers (``scorers: [numeric_match, process]``).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from trajforge.errors import ConfigError
from trajforge.schema import Evaluator, EvaluatorKind, Score, Trajectory


class Scorer(Protocol):
    name: str

    async def __call__(self, trajectory: Trajectory) -> Score: ...


ScoreFn = Callable[[Trajectory], Score | float | Awaitable[Score | float]]


class FunctionScorer:
    """Adapts a function returning a ``Score`` or a bare float into a ``Scorer``."""

    def __init__(self, fn: ScoreFn, name: str, kind: EvaluatorKind) -> None:
        self.fn = fn
        self.name = name
        self.kind = kind
        self.__doc__ = fn.__doc__

    async def __call__(self, trajectory: Trajectory) -> Score:
        result = self.fn(trajectory)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, Score):
            return result
        evaluator = Evaluator(kind=self.kind, name=self.name)
        return Score(name=self.name, value=float(result), evaluator=evaluator)


_REGISTRY: dict[str, Callable[..., Scorer]] = {}


def register_scorer(name: str, factory: Callable[..., Scorer]) -> None:
    """Register ``factory(**options) -> Scorer`` under ``name``."""
    _REGISTRY[name] = factory


def scorer(
    name: str | None = None, *, kind: EvaluatorKind = EvaluatorKind.RULE
) -> Callable[[ScoreFn], FunctionScorer]:
    """Decorator: a function ``(trajectory) -> Score | float`` becomes a registered scorer.

    Args:
        name: Registry name; defaults to the function's name.
        kind: What kind of evaluator this is (rule, metric, llm, env, human).
    """

    def deco(fn: ScoreFn) -> FunctionScorer:
        scorer_name = name or fn.__name__
        wrapped = FunctionScorer(fn, scorer_name, kind)
        register_scorer(scorer_name, lambda: wrapped)
        return wrapped

    return deco


def get_scorer(name: str, **options: Any) -> Scorer:
    """Build the registered scorer ``name`` with ``options``."""
    from trajforge.judge import builtin  # noqa: F401 - registers the built-in scorers

    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        raise ConfigError(f"unknown scorer {name!r}; known scorers: {known}")
    try:
        return _REGISTRY[name](**options)
    except TypeError as exc:
        raise ConfigError(f"scorer {name!r}: bad options {options}: {exc}") from None


def scorer_names() -> list[str]:
    from trajforge.judge import builtin  # noqa: F401

    return sorted(_REGISTRY)


async def score_trajectory(trajectory: Trajectory, scorers: list[Scorer]) -> list[Score]:
    """Run every scorer; a scorer that raises yields a failed score, not a crash."""
    scores: list[Score] = []
    for s in scorers:
        try:
            scores.append(await s(trajectory))
        except Exception as exc:  # a broken scorer must not lose the other verdicts
            evaluator = Evaluator(kind=getattr(s, "kind", EvaluatorKind.RULE), name=s.name)
            scores.append(
                Score(name=s.name, evaluator=evaluator, error=f"{type(exc).__name__}: {exc}")
            )
    return scores
