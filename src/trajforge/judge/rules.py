"""Rule scorers: deterministic checks of the final answer against the task's gold answer."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Any

from trajforge.judge.scorer import scorer_class
from trajforge.schema import (
    Evaluator,
    EvaluatorKind,
    Score,
    Trajectory,
    answer_span,
    contains_answer,
    final_answer,
    normalize_answer,
    numbers_close,
    parse_number,
    parse_table,
    tables_equal,
)


class RuleScorer(ABC):
    """Base for rule scorers: compare the final answer with ``task.answer``."""

    name = "rule"
    kind = EvaluatorKind.RULE

    def _score(self, value: float, explanation: str) -> Score:
        evaluator = Evaluator(kind=self.kind, name=self.name)
        return Score(name=self.name, value=value, explanation=explanation, evaluator=evaluator)

    async def __call__(self, trajectory: Trajectory) -> Score:
        answer = final_answer(trajectory.messages)
        if answer is None:
            return self._score(0.0, "no final answer: the episode ended on a tool call or no reply")
        return self.judge(answer, trajectory.task.answer)

    @abstractmethod
    def judge(self, answer: str, gold: Any) -> Score:
        """Compare one final answer with the gold answer."""


@scorer_class
class ExactMatch(RuleScorer):
    """The answer span equals the gold answer exactly (after trimming)."""

    name = "exact_match"

    def judge(self, answer: str, gold: Any) -> Score:
        span = answer_span(answer)
        ok = span == str(gold).strip()
        return self._score(float(ok), f"answer {span!r} {'==' if ok else '!='} gold {gold!r}")


@scorer_class
class NormalizedMatch(RuleScorer):
    """The answer span equals the gold answer after SQuAD normalisation."""

    name = "normalized_match"

    def judge(self, answer: str, gold: Any) -> Score:
        span = normalize_answer(answer_span(answer))
        ok = span == normalize_answer(str(gold))
        return self._score(
            float(ok), f"normalised answer {span!r} vs gold {normalize_answer(str(gold))!r}"
        )


@scorer_class
class NumericMatch(RuleScorer):
    """The last number in the answer span is within tolerance of the gold number (units ignored)."""

    name = "numeric_match"

    def __init__(self, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> None:
        self.rel_tol = rel_tol
        self.abs_tol = abs_tol

    def judge(self, answer: str, gold: Any) -> Score:
        want = gold if isinstance(gold, int | float) else parse_number(str(gold))
        got = parse_number(answer_span(answer))
        if want is None:
            return self._score(0.0, f"gold answer {gold!r} has no number")
        if got is None:
            return self._score(0.0, f"no number in the answer {answer_span(answer)!r}")
        ok = numbers_close(got, float(want), self.rel_tol, self.abs_tol)
        return self._score(float(ok), f"answer {got} vs gold {want} (rel_tol {self.rel_tol})")


@scorer_class
class RegexMatch(RuleScorer):
    """The final answer matches a regular expression (default: the task's gold answer, escaped)."""

    name = "regex"

    def __init__(self, pattern: str | None = None, ignore_case: bool = True) -> None:
        self.pattern = pattern
        self.flags = re.I if ignore_case else 0

    def judge(self, answer: str, gold: Any) -> Score:
        pattern = self.pattern if self.pattern is not None else re.escape(str(gold))
        ok = re.search(pattern, answer, self.flags) is not None
        return self._score(float(ok), f"pattern {pattern!r} {'found' if ok else 'not found'}")


@scorer_class
class Contains(RuleScorer):
    """The normalised gold answer occurs in the normalised final answer, as whole words."""

    name = "contains"

    def judge(self, answer: str, gold: Any) -> Score:
        ok = contains_answer(answer, str(gold))
        return self._score(float(ok), f"gold {gold!r} {'in' if ok else 'not in'} the answer")


@scorer_class
class TableMatch(RuleScorer):
    """The answer's result table equals the gold rows as a multiset (SQL result sets)."""

    name = "table_match"

    def __init__(self, ordered: bool = False, digits: int = 6) -> None:
        self.ordered = ordered
        self.digits = digits

    def judge(self, answer: str, gold: Any) -> Score:
        table = parse_table(answer)
        if table is None or not isinstance(gold, list):
            return self._score(0.0, "no result table in the answer or no gold rows")
        gold_rows = [list(r) if isinstance(r, list | tuple) else [r] for r in gold]
        ok = tables_equal(table, gold_rows, ordered=self.ordered, digits=self.digits)
        return self._score(float(ok), f"{len(table)} answer rows vs {len(gold_rows)} gold rows")
