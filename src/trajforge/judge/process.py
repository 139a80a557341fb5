"""Process metrics computed from the trajectory alone (FinTrace-style efficiency and process
quality): how the agent got to its answer, not only whether the answer is right."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass

from trajforge.judge.scorer import scorer_class
from trajforge.schema import Evaluator, EvaluatorKind, Role, Score, Trajectory, final_answer

TOOL_ERROR_PREFIX = "Error"


@dataclass(frozen=True)
class ProcessMetrics:
    turns: int
    tokens: int
    tool_calls: int
    invalid_tool_call_rate: float
    tool_error_rate: float
    max_repeated_calls: int
    looped: bool
    step_overhead: float | None
    answer_without_evidence: bool


def _call_key(name: str, arguments: dict[str, object]) -> str:
    return name + json.dumps(arguments, sort_keys=True, default=str)


def process_metrics(
    trajectory: Trajectory, *, expert_turns: int | None = None, loop_threshold: int = 3
) -> ProcessMetrics:
    """Compute the process metrics of one trajectory.

    Args:
        trajectory: The episode.
        expert_turns: Assistant turns the scripted expert needs for this task; defaults to
            ``task.metadata["expert_turns"]`` when present. Overhead = turns / expert_turns - 1.
        loop_threshold: This many identical calls (same tool, same arguments) count as a loop.
    """
    calls = [c for m in trajectory.messages if m.role is Role.ASSISTANT for c in m.tool_calls]
    results = [m for m in trajectory.messages if m.role is Role.TOOL]
    invalid = sum(1 for c in calls if c.parse_error is not None)
    errors = sum(1 for m in results if m.text.lstrip().startswith(TOOL_ERROR_PREFIX))
    repeats = Counter(_call_key(c.name, c.arguments) for c in calls if c.parse_error is None)
    max_repeat = max(repeats.values(), default=0)
    turns = trajectory.num_turns
    if expert_turns is None:
        meta = trajectory.task.metadata.get("expert_turns")
        expert_turns = int(meta) if isinstance(meta, int | float) else None
    overhead = turns / expert_turns - 1.0 if expert_turns else None
    successful_results = len(results) - errors
    answered = final_answer(trajectory.messages) is not None
    tokens = trajectory.num_tokens or (
        trajectory.usage.prompt_tokens + trajectory.usage.completion_tokens
    )
    return ProcessMetrics(
        turns=turns,
        tokens=tokens,
        tool_calls=len(calls),
        invalid_tool_call_rate=invalid / len(calls) if calls else 0.0,
        tool_error_rate=errors / len(results) if results else 0.0,
        max_repeated_calls=max_repeat,
        looped=max_repeat >= loop_threshold,
        step_overhead=overhead,
        answer_without_evidence=answered and successful_results == 0,
    )


@scorer_class
class ProcessScorer:
    """All process metrics as one ``Score``: value 1.0 for a clean process (no invalid calls,
    no tool errors, no loop, evidence before the answer), the metrics as dimensions."""

    name = "process"
    kind = EvaluatorKind.METRIC

    def __init__(self, loop_threshold: int = 3) -> None:
        self.loop_threshold = loop_threshold

    async def __call__(self, trajectory: Trajectory) -> Score:
        m = process_metrics(trajectory, loop_threshold=self.loop_threshold)
        dims = {k: float(v) for k, v in asdict(m).items() if v is not None}
        clean = (
            m.invalid_tool_call_rate == 0.0
            and m.tool_error_rate == 0.0
            and not m.looped
            and not m.answer_without_evidence
        )
        problems = [
            label
            for label, bad in (
                ("invalid tool calls", m.invalid_tool_call_rate > 0),
                ("tool errors", m.tool_error_rate > 0),
                (f"a call repeated {m.max_repeated_calls}x", m.looped),
                ("answer with no successful tool call", m.answer_without_evidence),
            )
            if bad
        ]
        explanation = "clean process" if clean else "; ".join(problems)
        evaluator = Evaluator(kind=self.kind, name=self.name)
        return Score(
            name=self.name,
            value=float(clean),
            explanation=explanation,
            evaluator=evaluator,
            dimensions=dims,
        )
