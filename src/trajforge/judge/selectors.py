"""Best-of-N selectors: which of a task's N sampled candidates to keep, chosen without reading
the task's answer key.

- ``verifier``: the highest reward the env's verifier gave, allowed only for an env whose
  verifier does not read the answer (``EnvEntry.answer_free_verifier``: a goal reached, unit
  tests run), as CodeMonkeys selects with tests it runs itself;
- ``judge:CRITERIA``: the highest success an LLM judge gives against criteria (the judge sees
  the task and the conversation, never the gold answer);
- ``majority``: a candidate with the most common final answer (self-consistency, Wang et al.
  2022);
- ``logprob``: the highest mean log-probability of the sampled tokens (the model's own
  confidence).

Ties go to the earliest sample, so a selection is deterministic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from trajforge.errors import ConfigError
from trajforge.judge.criteria import load_criteria
from trajforge.schema import Role, Trajectory, answer_span, final_answer, normalize_answer

SELECT_OPTION = "--select"
BEST_OF_OPTION = "--best-of"
SELECT_JUDGE_NAME = "select_judge"
"""The name of the scores the ``judge`` selector's LLM judge gives the candidates."""


class SelectorKind(StrEnum):
    VERIFIER = "verifier"
    JUDGE = "judge"
    MAJORITY = "majority"
    LOGPROB = "logprob"


SELECTOR_FORMS = "verifier, judge:CRITERIA, majority or logprob"


class Selector(BaseModel):
    """A parsed ``--select`` value: its kind, and the criteria of a ``judge`` selector."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: SelectorKind
    criteria: str | None = None

    @property
    def text(self) -> str:
        return f"{self.kind.value}:{self.criteria}" if self.criteria else self.kind.value


def parse_selector(text: str) -> Selector:
    """The selector ``text`` names; anything else is one ``ConfigError`` naming the forms."""
    name, sep, arg = text.partition(":")
    kinds = {k.value for k in SelectorKind}
    if name not in kinds:
        raise ConfigError(f"{SELECT_OPTION}: unknown selector {text!r}; use {SELECTOR_FORMS}")
    kind = SelectorKind(name)
    if kind is SelectorKind.JUDGE:
        if not arg:
            raise ConfigError(
                f"{SELECT_OPTION}: judge needs criteria, judge:CRITERIA (a built-in name or a "
                "YAML or JSON file)"
            )
        try:
            load_criteria(arg)
        except ConfigError as exc:
            raise ConfigError(f"{SELECT_OPTION}: {exc}") from None
        return Selector(kind=kind, criteria=arg)
    if sep:
        raise ConfigError(f"{SELECT_OPTION}: {name} takes no argument, got {text!r}")
    return Selector(kind=kind)


def check_best_of(n: int) -> None:
    """Refuse a best-of-N with fewer than one sample."""
    if n < 1:
        raise ConfigError(f"{BEST_OF_OPTION}: must be at least 1, got {n}")


def check_verifier_selectable(selector: Selector, env: str, answer_free: bool) -> None:
    """Refuse the ``verifier`` selector on an env whose verifier reads the answer key: picking
    by it would be picking by the answer."""
    if selector.kind is SelectorKind.VERIFIER and not answer_free:
        raise ConfigError(
            f"{SELECT_OPTION} verifier: the verifier of env {env!r} reads the task's answer key, so "
            "it cannot choose; use judge:CRITERIA, majority or logprob"
        )


def mean_logprob(trajectory: Trajectory) -> float | None:
    """The mean log-probability of the assistant's sampled tokens (None without any)."""
    values = [
        lp
        for m in trajectory.messages
        if m.role is Role.ASSISTANT and m.logprobs is not None
        for lp in m.logprobs
    ]
    return sum(values) / len(values) if values else None


def answer_key(trajectory: Trajectory) -> str | None:
    """The candidate's final answer as the majority vote compares it (None: it gave none)."""
    text = final_answer(trajectory.messages)
    if text is None:
        return None
    return normalize_answer(answer_span(text)) or None


def highest(values: Sequence[float | None]) -> int:
    """The index of the highest value (ties: the earliest; all None: the first)."""
    best = 0
    for i, value in enumerate(values):
        top = values[best]
        if value is not None and (top is None or value > top):
            best = i
    return best


def most_common(keys: Sequence[str | None]) -> int:
    """The index of the first candidate whose key is the most common (None never votes; ties:
    the key that appears first; no key at all: the first)."""
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return 0
    top = max(counts.values())
    return next(i for i, k in enumerate(keys) if k is not None and counts[k] == top)


def selection_values(selector: Selector, candidates: Sequence[Trajectory]) -> list[float | None]:
    """What the selector ranks each candidate by: the verifier's reward, the judge's score
    (``select_judge``, given beforehand), the share of candidates with the same answer, or
    the mean token log-probability."""
    if selector.kind is SelectorKind.VERIFIER:
        return [t.outcome.reward for t in candidates]
    if selector.kind is SelectorKind.JUDGE:
        scores = [t.score(SELECT_JUDGE_NAME) for t in candidates]
        return [s.value if s is not None else None for s in scores]
    if selector.kind is SelectorKind.MAJORITY:
        keys = [answer_key(t) for t in candidates]
        counts = Counter(k for k in keys if k is not None)
        return [counts[k] / len(keys) if k is not None else None for k in keys]
    return [mean_logprob(t) for t in candidates]


def choose(selector: Selector, candidates: Sequence[Trajectory]) -> int:
    """The index of the candidate ``selector`` keeps."""
    if not candidates:
        raise ValueError("choose: no candidates")
    if selector.kind is SelectorKind.MAJORITY:
        return most_common([answer_key(t) for t in candidates])
    return highest(selection_values(selector, candidates))
