"""The scorer contract, the scorer registry, and ``Rubric``: weighted scorers.

A scorer is any async callable taking a ``Trajectory`` and returning a ``Score``: the one
judging contract. ``@scorer`` turns a plain (sync or async) function into one and registers it
under a name, so configs and the CLI can name scorers (``scorers: [numeric_match, process]``).
User scorers load by reference: ``module:function`` or ``file.py:function``, a function
``(trajectory) -> float | Score`` (sync or async), a scorer class built with the given options,
or an environment's verifier, a function ``(evidence) -> float | Score`` (its one argument
named ``evidence``), which ``VerifierScorer`` runs on each trajectory's ``Evidence.of``.

An environment's own verdict is a scorer too: ``env_verifier`` (``EnvVerdict``) reports the
reward the env's verifier gave the episode when it ended (with the tool state it saw), and
``env_success`` (``EnvSuccess``) the same verdict as 1 or 0, whether the episode succeeded.

A ``Rubric`` is weighted scorers; it is what an evaluation and the RL reward use. The built-in
scorers register where they are defined (``rules``, ``process``); importing ``trajforge.judge``
registers them all.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Annotated, Any, Protocol, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from trajforge.errors import ConfigError
from trajforge.registry import Registry, is_ref
from trajforge.schema import (
    Evaluator,
    EvaluatorKind,
    Evidence,
    Score,
    Trajectory,
    Verifier,
    check_verifier,
    is_success,
    run_verifier,
)


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


class VerifierScorer:
    """An environment's verifier ``(evidence) -> float | Score`` as a scorer of stored
    trajectories: run on ``Evidence.of(trajectory)``, the task and messages without the tool
    state (it is not stored), so a verifier that reads ``evidence.state`` is judged by the
    reward it recorded (``env_verifier``) instead. Its scores are named ``reverified`` unless
    named otherwise: ``env_verifier`` is only the verdict the env recorded.

    Raises:
        ConfigError: ``verifier`` does not take ``(evidence)``.
    """

    kind = EvaluatorKind.ENV

    def __init__(self, verifier: Verifier, name: str = "reverified") -> None:
        check_verifier(verifier)
        self.verifier = verifier
        self.name = name

    async def __call__(self, trajectory: Trajectory) -> Score:
        evaluator = Evaluator(kind=self.kind, name=self.name)
        verdict = await run_verifier(self.verifier, Evidence.of(trajectory))
        if isinstance(verdict, Score):
            return verdict.model_copy(update={"name": self.name, "evaluator": evaluator})
        return Score(name=self.name, value=verdict, evaluator=evaluator, explanation="re-verified")


SCORERS: Registry[Callable[..., Scorer]] = Registry("scorer")
"""Scorer factories by name: ``factory(**options) -> Scorer``."""


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
        SCORERS.add(scorer_name, lambda: wrapped)
        return wrapped

    return deco


ScorerClass = TypeVar("ScorerClass", bound=type[Scorer])


def scorer_class(cls: ScorerClass) -> ScorerClass:
    """Class decorator: register a scorer class under its ``name``; the registry builds it
    with a config's options (``get_scorer("numeric_match", rel_tol=0.01)``)."""
    SCORERS.add(cls.name, cls)
    return cls


@scorer_class
class EnvVerdict:
    """The environment's verdict on the episode, as recorded when it ended: the outcome reward
    its verifier gave (having seen the tool state)."""

    name = "env_verifier"
    kind = EvaluatorKind.ENV

    async def __call__(self, trajectory: Trajectory) -> Score:
        evaluator = Evaluator(kind=self.kind, name=self.name)
        reward = trajectory.outcome.reward
        if reward is None:
            return Score(name=self.name, evaluator=evaluator, error="no outcome reward recorded")
        return Score(name=self.name, value=reward, evaluator=evaluator, explanation="recorded")


@scorer_class
class EnvSuccess:
    """The environment's verdict as success (1) or failure (0), by ``is_success``: a binary
    reward (WebAgent-R1's) for a benchmark whose failures score apart. MiniWoB++ gives -1 for a
    wrong final action and 0 for running out of turns, so on its own reward RL learns to give up
    rather than to try; on this one every failure is alike."""

    name = "env_success"
    kind = EvaluatorKind.ENV

    async def __call__(self, trajectory: Trajectory) -> Score:
        evaluator = Evaluator(kind=self.kind, name=self.name)
        outcome = trajectory.outcome
        if outcome.reward is None:
            return Score(name=self.name, evaluator=evaluator, error="no outcome reward recorded")
        solved = is_success(outcome.status, outcome.reward)
        return Score(
            name=self.name,
            value=1.0 if solved else 0.0,
            evaluator=evaluator,
            explanation=f"{outcome.status.value}, reward {outcome.reward:g}",
        )


def _is_verifier(fn: Callable[..., Any]) -> bool:
    """Whether user function ``fn`` is a verifier: its one argument is named ``evidence``."""
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    return params[:1] == ["evidence"]


def get_scorer(name: str, **options: Any) -> Scorer:
    """The scorer ``name`` built with ``options``: a registered name, or user code
    ``module:attr`` / ``file.py:attr``.

    Raises:
        ConfigError: the name is unknown, the code cannot be loaded, or the options do not fit.
    """
    if is_ref(name):
        return _load_user_scorer(name, options)
    factory = SCORERS.get(name)
    try:
        return factory(**options)
    except TypeError as exc:
        raise ConfigError(f"scorer {name!r}: bad options {options}: {exc}") from None


def _load_user_scorer(ref: str, options: dict[str, Any]) -> Scorer:
    found = SCORERS.load(ref)
    attr = ref.rpartition(":")[2]
    if isinstance(found, type):
        try:
            made = found(**options)
        except TypeError as exc:
            raise ConfigError(f"scorer {ref!r}: bad options {options}: {exc}") from None
        if not (isinstance(getattr(made, "name", None), str) and callable(made)):
            raise ConfigError(
                f"scorer {ref!r}: {attr}() made no scorer (it needs name and __call__)"
            )
        return made
    if options:
        raise ConfigError(f"scorer {ref!r}: {attr} takes no options (only a scorer class does)")
    if isinstance(getattr(found, "name", None), str) and callable(found):
        return found  # already a scorer (e.g. made by @scorer)
    if callable(found) and _is_verifier(found):
        return VerifierScorer(found, name=attr)
    if callable(found):
        return FunctionScorer(found, attr, EvaluatorKind.RULE)
    raise ConfigError(f"scorer {ref!r}: {attr} is a {type(found).__name__}, not a function")


def scorer_names() -> list[str]:
    """The registered scorers' names."""
    return SCORERS.names()


async def score_trajectory(trajectory: Trajectory, scorers: Sequence[Scorer]) -> list[Score]:
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


class ScorerRef(BaseModel):
    """One scorer of a rubric, as a config names it (a bare string is ``{name: ...}``)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str = Field(min_length=1)
    """A registered scorer (``env_verifier``, ``numeric_match``, ``process``, ...),
    ``module:function`` or ``file.py:function``."""
    weight: float = 1.0
    """Its weight in the rubric's total."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Keyword options of the scorer (e.g. ``{rel_tol: 0.01}`` for ``numeric_match``)."""

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    def build(self) -> Scorer:
        """The scorer this names (``get_scorer``)."""
        return get_scorer(self.name, **self.options)


class Rubric:
    """Weighted scorers. Each scorer's verdict is kept; the rubric's value is the weighted sum
    of their values, a failed score counting 0.

    Args:
        items: ``(scorer, weight)`` pairs.
        name: The name of the rubric's own ``Score``.
    """

    kind = EvaluatorKind.METRIC

    def __init__(self, items: Iterable[tuple[Scorer, float]], name: str = "rubric") -> None:
        self.items = list(items)
        self.name = name

    @classmethod
    def from_refs(cls, refs: Iterable[ScorerRef | str], name: str = "rubric") -> Rubric:
        """Build every scorer ``refs`` names (strings are names with weight 1)."""
        parsed = [ScorerRef.model_validate(ref) for ref in refs]
        return cls(((ref.build(), ref.weight) for ref in parsed), name=name)

    @property
    def scorers(self) -> list[Scorer]:
        return [s for s, _ in self.items]

    async def evaluate(self, trajectory: Trajectory) -> tuple[float, list[Score]]:
        """The weighted total and every scorer's ``Score`` (failures as failed scores)."""
        scores = await score_trajectory(trajectory, self.scorers)
        total = sum(w * (s.value or 0.0) for (_, w), s in zip(self.items, scores, strict=True))
        return float(total), scores

    async def __call__(self, trajectory: Trajectory) -> Score:
        total, scores = await self.evaluate(trajectory)
        failed = [s.name for s in scores if s.value is None]
        weights = ", ".join(f"{w:g} x {s.name}" for s, w in self.items)
        return Score(
            name=self.name,
            value=total,
            explanation=f"{weights}" + (f"; failed: {', '.join(failed)}" if failed else ""),
            evaluator=Evaluator(kind=self.kind, name=self.name),
            dimensions={s.name: s.value for s in scores if s.value is not None},
        )


def _refs_build(refs: list[ScorerRef | str]) -> list[ScorerRef | str]:
    try:
        Rubric.from_refs(refs)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return refs


ScorerRefs = Annotated[list[ScorerRef | str], AfterValidator(_refs_build)]
"""A config's scorers: names or ``{name, weight, options}``, each built once when the config
loads, so a bad name or user file is an error naming the key rather than a failure mid-run."""


def default_refs(*names: str) -> Callable[[], list[ScorerRef | str]]:
    """The ``default_factory`` of a ``ScorerRefs`` field: these registered names, weight 1."""

    def make() -> list[ScorerRef | str]:
        return list(names)

    return make
