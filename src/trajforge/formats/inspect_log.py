"""Inspect AI eval logs (``.eval``, a zip whose members may be zstd-compressed, and ``.json``)
as trajectories: one per sample and epoch, read with Inspect's own reader so every log version
it writes is understood.

A sample's messages keep their roles, text, reasoning, tool calls (ids, names, arguments, parse
errors) and tool results (a tool error becomes the result's text); its scores become ``Score``s
(``C``/``I``/``P``/``N`` read as 1, 0, 0.5, 0; a dict of numbers as dimensions); the reward is
the first score's value. A sample that errored is ``error``, one stopped by a limit
``truncated`` (``timeout`` for a time limit). Epochs of a sample share a group id.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trajforge.errors import DataError
from trajforge.formats.images import image_from_data_url
from trajforge.formats.jsonl import format_validation_error
from trajforge.schema import (
    Content,
    Evaluator,
    EvaluatorKind,
    ImagePart,
    Message,
    Outcome,
    OutcomeStatus,
    Role,
    Score,
    Task,
    TextPart,
    ToolCall,
    Trajectory,
    Usage,
)

LETTER_VALUES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
"""Inspect's CORRECT, INCORRECT, PARTIAL and NOANSWER."""


def read_inspect_log(path: Path) -> Iterator[Trajectory]:
    """The samples of an Inspect log as trajectories.

    Raises:
        DataError: the file is not an Inspect log, or a sample does not convert (naming it).
    """
    # lazy: inspect_ai takes seconds to import; only this format needs it
    from inspect_ai.log import read_eval_log, resolve_sample_attachments

    try:
        log = read_eval_log(str(path))
    except Exception as exc:  # Inspect raises many kinds for a file that is not its log
        raise DataError(f"{path}: not a readable Inspect log: {exc}") from None
    run = f"inspect-{log.eval.run_id}"
    for sample in log.samples or []:
        where = f"{path}: sample {sample.id} epoch {sample.epoch}"
        try:
            # Inspect keeps images (and long texts) as attachments the messages refer to.
            resolved = resolve_sample_attachments(sample, "core")
            yield _trajectory(resolved, run, log.eval.task, log.eval.model)
        except ValidationError as exc:
            raise DataError(format_validation_error(exc, where)) from None
        except DataError as exc:
            raise DataError(f"{where}: {exc}") from None


def _trajectory(sample: Any, run: str, task_name: str, model: str) -> Trajectory:
    messages = [_message(m, i) for i, m in enumerate(sample.messages)]
    prompt = (
        sample.input
        if isinstance(sample.input, str)
        else next((m.text for m in messages if m.role is Role.USER), "")
    )
    scores = [_score(name, score) for name, score in (sample.scores or {}).items()]
    status, error = OutcomeStatus.OK, None
    if sample.error is not None:
        status, error = OutcomeStatus.ERROR, sample.error.message
    elif sample.limit is not None:
        kind = str(sample.limit.type)
        status = OutcomeStatus.TIMEOUT if kind in ("time", "working") else OutcomeStatus.TRUNCATED
        error = f"{kind} limit: {sample.limit.limit}"
    reward = scores[0].value if scores else None
    usage = sum_usage(sample.model_usage or {})
    return Trajectory(
        id=f"{run}-{sample.id}-{sample.epoch}",
        task=Task(
            id=str(sample.id),
            prompt=prompt,
            env=task_name,
            answer=sample.target,
            metadata=dict(sample.metadata or {}),
        ),
        env=task_name,
        group_id=f"{run}.{sample.id}",
        sample_index=sample.epoch - 1,
        run_id=run,
        model=model,
        messages=messages,
        outcome=Outcome(status=status, reward=reward, error=error),
        scores=scores,
        usage=usage.model_copy(
            update={
                "turns": sum(1 for m in messages if m.role is Role.ASSISTANT),
                "tool_calls": sum(len(m.tool_calls) for m in messages),
                "wall_time_s": float(sample.total_time or 0.0),
            }
        ),
        metadata={"inspect": {"task": task_name, "epoch": sample.epoch}},
    )


def _message(message: Any, index: int) -> Message:
    role = Role(message.role)
    reasoning = [
        part.reasoning
        for part in (message.content if isinstance(message.content, list) else [])
        if getattr(part, "type", None) == "reasoning"
    ]
    content = _content(message, index)
    if role is Role.TOOL and getattr(message, "error", None) is not None:
        content = content or f"error: {message.error.type}: {message.error.message}"
    calls = [
        ToolCall(
            id=call.id,
            name=call.function,
            arguments=dict(call.arguments or {}),
            parse_error=call.parse_error,
            raw=None if call.parse_error is None else str(call.arguments),
        )
        for call in getattr(message, "tool_calls", None) or []
    ]
    return Message(
        role=role,
        content=content,
        reasoning="\n".join(reasoning) or None,
        tool_calls=calls,
        tool_call_id=getattr(message, "tool_call_id", None),
        name=getattr(message, "function", None) if role is Role.TOOL else None,
    )


def _content(message: Any, index: int) -> Content:
    """The message's text, or its text and image parts where it has images (a base64 data URI,
    as Inspect keeps an image it read from a file; a remote URL is refused, never fetched)."""
    parts = message.content if isinstance(message.content, list) else []
    if not any(getattr(part, "type", None) == "image" for part in parts):
        return str(message.text)
    out: list[TextPart | ImagePart] = []
    for k, part in enumerate(parts):
        if part.type == "image":
            out.append(image_from_data_url(part.image, f"messages.{index}.content.{k}"))
        elif part.type == "text":
            out.append(TextPart(text=part.text))
    return out


def _score(name: str, score: Any) -> Score:
    evaluator = Evaluator(kind=EvaluatorKind.RULE, name=f"inspect:{name}")
    value, dimensions, problem = score_value(score.value)
    return Score(
        name=name,
        value=value,
        explanation=score.explanation or "",
        evaluator=evaluator,
        dimensions=dimensions,
        error=problem,
    )


def score_value(value: Any) -> tuple[float | None, dict[str, float], str | None]:
    """An Inspect score value as ``(value, dimensions, error)``."""
    if isinstance(value, bool):
        return float(value), {}, None
    if isinstance(value, int | float):
        return float(value), {}, None
    if isinstance(value, str) and value in LETTER_VALUES:
        return LETTER_VALUES[value], {}, None
    if isinstance(value, dict) and all(isinstance(v, int | float) for v in value.values()):
        dims = {str(k): float(v) for k, v in value.items()}
        return (sum(dims.values()) / len(dims) if dims else None), dims, None
    return None, {}, f"score value {value!r} is not a number"


def sum_usage(model_usage: dict[str, Any]) -> Usage:
    prompt = sum(u.input_tokens for u in model_usage.values())
    completion = sum(u.output_tokens for u in model_usage.values())
    return Usage(prompt_tokens=prompt, completion_tokens=completion)
