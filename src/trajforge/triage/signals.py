"""Rule signals: what went wrong in a trajectory, read from the trajectory alone (no model).

Each detector returns ``SignalHit``s, each naming the message where the problem shows: for a
problem with a tool call (an error result, a repeat, a malformed call) the assistant message
that made the call, since that is the step a policy got wrong and a repair rewrites; for a
problem with the ending (no answer, a wrong answer, a cut-off) the last assistant message.
A detector finds nothing in a trajectory it does not apply to (no tool calls, no reward, no
gold answer, an env nobody knows), so every trajectory gets the signals that apply.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trajforge.judge import TOOL_ERROR_PREFIX
from trajforge.schema import (
    SUCCESS_THRESHOLD,
    Message,
    OutcomeStatus,
    Role,
    ToolCall,
    Trajectory,
    contains_answer,
    final_answer,
    is_infra_failure,
    is_success,
)

CONTEXT_REASON = "max_context_tokens"
"""``Outcome.reason`` of an episode cut off by a full model context (``rollout.limits``)."""


class Signal(StrEnum):
    """The rule signals. ``POLICY_SIGNALS`` are the policy's own mistakes: only they place the
    first error; the others describe the episode (a slow tool, a verifier that disagrees with
    the answer, the infrastructure failing) without blaming a step on the policy."""

    TOOL_ERROR = "tool_error"
    LOOP = "loop"
    MALFORMED_CALL = "malformed_call"
    TRUNCATED = "truncated"
    CONTEXT_OVERFLOW = "context_overflow"
    NO_FINAL_ANSWER = "no_final_answer"
    ANSWER_WITHOUT_TOOL = "answer_without_tool"
    WRONG_ANSWER = "wrong_answer"
    SLOW_TOOL = "slow_tool"
    REWARD_CONTRADICTION = "reward_contradiction"
    INFRA_FAILURE = "infra_failure"


POLICY_SIGNALS = frozenset(
    {
        Signal.TOOL_ERROR,
        Signal.LOOP,
        Signal.MALFORMED_CALL,
        Signal.TRUNCATED,
        Signal.CONTEXT_OVERFLOW,
        Signal.NO_FINAL_ANSWER,
        Signal.ANSWER_WITHOUT_TOOL,
        Signal.WRONG_ANSWER,
    }
)

CALL_SIGNALS = frozenset({Signal.TOOL_ERROR, Signal.LOOP, Signal.MALFORMED_CALL})
"""The signals that blame a step before the ending (a call)."""


class TriageOptions(BaseModel):
    """Thresholds of the rule signals."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    loop_repeats: int = Field(default=3, ge=2)
    """An identical call (tool and arguments) answered identically this many times is a loop;
    its first repeat is where the loop began."""
    slow_tool_s: float = Field(default=30.0, gt=0)
    """A tool call taking longer than this many seconds is slow."""
    success_threshold: float = SUCCESS_THRESHOLD
    """The reward at which an episode succeeded (``schema.success``)."""


@dataclass(frozen=True)
class SignalHit:
    """One occurrence of a signal: the message index it points at (``None``: the whole
    episode) and what was seen there."""

    signal: Signal
    step: int | None
    detail: str


class _Calls:
    """The tool calls of a conversation with where each was made and how it was answered."""

    def __init__(self, messages: list[Message]) -> None:
        self.made: list[tuple[int, ToolCall]] = []
        self.result: dict[str, Message] = {}
        for i, m in enumerate(messages):
            self.made.extend((i, c) for c in m.tool_calls)
            if m.role is Role.TOOL and m.tool_call_id is not None:
                self.result[m.tool_call_id] = m

    def failed(self, call: ToolCall) -> bool:
        result = self.result.get(call.id)
        return result is not None and result.text.lstrip().startswith(TOOL_ERROR_PREFIX)


def _last_assistant(messages: list[Message]) -> int | None:
    last = (i for i in range(len(messages) - 1, -1, -1) if messages[i].role is Role.ASSISTANT)
    return next(last, None)


def _at_last_turn(traj: Trajectory, signal: Signal, detail: str) -> list[SignalHit]:
    """One hit of ``signal`` on the trajectory's last assistant turn."""
    return [SignalHit(signal, _last_assistant(traj.messages), detail)]


def _short(text: str, limit: int = 80) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def tool_errors(traj: Trajectory, calls: _Calls, options: TriageOptions) -> list[SignalHit]:
    hits = []
    for i, call in calls.made:
        if call.parse_error is None and calls.failed(call):
            text = calls.result[call.id].text
            hits.append(SignalHit(Signal.TOOL_ERROR, i, f"{call.name}: {_short(text)}"))
    return hits


def loops(traj: Trajectory, calls: _Calls, options: TriageOptions) -> list[SignalHit]:
    seen: Counter[str] = Counter()
    first_repeat: dict[str, int] = {}
    hits = []
    for i, call in calls.made:
        result = calls.result.get(call.id)
        if call.parse_error is not None or result is None:
            continue
        key = json.dumps([call.name, call.arguments, result.content], sort_keys=True, default=str)
        seen[key] += 1
        if seen[key] == 2:
            first_repeat[key] = i
        if seen[key] == options.loop_repeats:
            hits.append(
                SignalHit(
                    Signal.LOOP,
                    first_repeat[key],
                    f"{call.name} called {options.loop_repeats}x with the same arguments "
                    "and the same result",
                )
            )
    return hits


def _schema_problem(call: ToolCall, schemas: dict[str, dict[str, Any]]) -> str | None:
    if call.parse_error is not None:
        return f"unparsable call: {_short(call.parse_error)}"
    if not schemas:
        return None  # the tools are not recorded: nothing to check the call against
    if call.name not in schemas:
        return f"no tool named {call.name!r}"
    params = schemas[call.name]
    props = params.get("properties") or {}
    missing = [p for p in params.get("required") or [] if p not in call.arguments]
    if missing:
        return f"{call.name}: missing argument(s) {', '.join(missing)}"
    unknown = [a for a in call.arguments if props and a not in props]
    if unknown and params.get("additionalProperties") is not True:
        return f"{call.name}: unknown argument(s) {', '.join(unknown)}"
    return None


def malformed_calls(traj: Trajectory, calls: _Calls, options: TriageOptions) -> list[SignalHit]:
    schemas = {t.function.name: t.function.parameters for t in traj.tools}
    hits = []
    for i, call in calls.made:
        problem = _schema_problem(call, schemas)
        if problem is not None:
            hits.append(SignalHit(Signal.MALFORMED_CALL, i, problem))
    return hits


def cut_off(traj: Trajectory, calls: _Calls, options: TriageOptions) -> list[SignalHit]:
    if traj.outcome.status is not OutcomeStatus.TRUNCATED or is_infra_failure(traj):
        return []
    reason = traj.outcome.reason or "a limit"
    signal = Signal.CONTEXT_OVERFLOW if reason == CONTEXT_REASON else Signal.TRUNCATED
    return _at_last_turn(traj, signal, f"cut off by {reason}")


def no_final_answer(traj: Trajectory, calls: _Calls, options: TriageOptions) -> list[SignalHit]:
    """No final answer, unless the env itself ended the episode on a tool call and counted it
    a success (a door opened, an order placed: the call was the ending)."""
    answer = final_answer(traj.messages)
    if (answer is not None and answer.strip()) or is_infra_failure(traj):
        return []
    ended_well = is_success(traj.outcome.status, traj.outcome.reward, options.success_threshold)
    if ended_well:
        return []
    last = _last_assistant(traj.messages)
    if last is None:
        return [SignalHit(Signal.NO_FINAL_ANSWER, None, "no assistant message")]
    how = "ended on a tool call" if traj.messages[last].tool_calls else "the last reply is empty"
    return [SignalHit(Signal.NO_FINAL_ANSWER, last, how)]


def answer_without_tool(traj: Trajectory, calls: _Calls, options: TriageOptions) -> list[SignalHit]:
    """The final answer came before any call of the tools the task needs succeeded: the tools
    in ``task.metadata["required_tools"]``, else any of the trajectory's tools."""
    last = _last_assistant(traj.messages)
    if last is None or final_answer(traj.messages) in (None, ""):
        return []
    required = traj.task.metadata.get("required_tools")
    needed = (
        {str(t) for t in required}
        if isinstance(required, list)
        else {t.function.name for t in traj.tools}
    )
    if not needed:
        return []
    used = any(
        call.name in needed and call.id in calls.result and not calls.failed(call)
        for i, call in calls.made
        if i < last
    )
    if used:
        return []
    names = ", ".join(sorted(needed))
    return [SignalHit(Signal.ANSWER_WITHOUT_TOOL, last, f"answered without a working {names}")]


def _gold_text(gold: Any) -> str | None:
    return str(gold) if isinstance(gold, str | int | float) and not isinstance(gold, bool) else None


def wrong_answer(traj: Trajectory, calls: _Calls, options: TriageOptions) -> list[SignalHit]:
    reward = traj.outcome.reward
    answer = final_answer(traj.messages)
    # A wrong answer is an ok, scored episode that did not succeed; one cut short is not.
    if traj.outcome.status is not OutcomeStatus.OK or reward is None or not answer:
        return []
    if is_success(traj.outcome.status, reward, options.success_threshold):
        return []
    detail = f"answer {_short(answer, 40)!r} got reward {reward:g}"
    return _at_last_turn(traj, Signal.WRONG_ANSWER, detail)


def slow_tools(traj: Trajectory, calls: _Calls, options: TriageOptions) -> list[SignalHit]:
    hits = []
    for i, call in calls.made:
        result = calls.result.get(call.id)
        if result is not None and result.timing is not None:
            took = result.timing.duration_s
            if took > options.slow_tool_s:
                hits.append(SignalHit(Signal.SLOW_TOOL, i, f"{call.name} took {took:.1f}s"))
    return hits


def reward_contradiction(
    traj: Trajectory, calls: _Calls, options: TriageOptions
) -> list[SignalHit]:
    """The verdict and the final message disagree: the answer holds the gold answer and the
    episode failed, or it lacks it and the episode succeeded. Only tasks with a scalar gold
    answer can be read this way."""
    gold = _gold_text(traj.task.answer)
    answer = final_answer(traj.messages)
    if gold is None or not answer or traj.outcome.reward is None:
        return []
    succeeded = is_success(traj.outcome.status, traj.outcome.reward, options.success_threshold)
    holds = contains_answer(answer, gold)
    if holds == succeeded:
        return []
    verdict = "succeeded" if succeeded else "failed"
    has = "holds" if holds else "lacks"
    detail = f"the answer {has} the gold answer {gold!r} but the episode {verdict}"
    return _at_last_turn(traj, Signal.REWARD_CONTRADICTION, detail)


def infra_failure(traj: Trajectory, calls: _Calls, options: TriageOptions) -> list[SignalHit]:
    if not is_infra_failure(traj):
        return []
    return [
        SignalHit(Signal.INFRA_FAILURE, None, traj.outcome.error or "lost to the infrastructure")
    ]


Detector = Callable[[Trajectory, _Calls, TriageOptions], list[SignalHit]]

DETECTORS: tuple[Detector, ...] = (
    tool_errors,
    loops,
    malformed_calls,
    cut_off,
    no_final_answer,
    answer_without_tool,
    wrong_answer,
    slow_tools,
    reward_contradiction,
    infra_failure,
)


def detect(traj: Trajectory, options: TriageOptions | None = None) -> list[SignalHit]:
    """Every rule signal of ``traj``, in message order (episode-wide hits last)."""
    opts = options or TriageOptions()
    calls = _Calls(traj.messages)
    hits = [hit for detector in DETECTORS for hit in detector(traj, calls, opts)]
    return sorted(hits, key=lambda h: (h.step is None, h.step or 0))
