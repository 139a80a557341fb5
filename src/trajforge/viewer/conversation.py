"""A trajectory as the viewer shows it: messages with their tool calls and results paired,
outcome, scores and usage, in plain dicts for the templates and the JSON API."""

from __future__ import annotations

import json
from typing import Any

from trajforge.rollout import FOLD_REASON
from trajforge.schema import (
    OutcomeStatus,
    Role,
    Trajectory,
    image_label,
    is_infra_failure,
    is_success,
)


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def conversation(traj: Trajectory) -> list[dict[str, Any]]:
    """Each message with its text, its images (hash, media type, size and label: the page
    loads them from ``/images/<sha256>``), its tool calls (arguments as pretty JSON, a parse
    error marked) and, on a tool message, the name of the call it answers."""
    calls: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    turn = 0
    for index, msg in enumerate(traj.messages):
        assistant = msg.role is Role.ASSISTANT
        for call in msg.tool_calls:
            calls[call.id] = call.name or "(unparsed call)"
        out.append(
            {
                "index": index,
                "role": msg.role.value,
                "turn": turn if assistant else None,
                "content": msg.text,
                "images": [
                    {
                        "sha256": p.sha256,
                        "media_type": p.media_type,
                        "size": p.size,
                        "label": image_label(p),
                    }
                    for p in msg.images
                ],
                "reasoning": msg.reasoning,
                "name": msg.name,
                "tool_call_id": msg.tool_call_id,
                "answers": calls.get(msg.tool_call_id or ""),
                "tool_calls": [
                    {
                        "id": c.id,
                        "name": c.name,
                        "arguments": pretty_json(c.arguments),
                        "parse_error": c.parse_error,
                        "raw": c.raw,
                    }
                    for c in msg.tool_calls
                ],
                "tokens": None if msg.token_ids is None else len(msg.token_ids),
                "reward": msg.reward,
                "state_key": msg.state_key,
                "duration_s": None if msg.timing is None else msg.timing.duration_s,
            }
        )
        turn += assistant
    return out


def outline(traj: Trajectory) -> dict[str, Any]:
    """Outcome, success, scores (with explanations and dimensions), usage and metadata."""
    status = traj.outcome.status
    return {
        "id": traj.id,
        "run_id": traj.run_id,
        "task": traj.task.model_dump(mode="json"),
        "env": traj.env or traj.task.env,
        "group_id": traj.group_id,
        "sample_index": traj.sample_index,
        "model": traj.model,
        "status": status.value,
        "marked": status is not OutcomeStatus.OK,
        "reward": traj.outcome.reward,
        "success": is_success(status, traj.outcome.reward),
        "fault": None if traj.outcome.fault is None else traj.outcome.fault.value,
        "infra": is_infra_failure(traj),
        "exactness": traj.exactness.model_dump(mode="json"),
        "segment": None if traj.segment is None else traj.segment.model_dump(mode="json"),
        "folded": traj.segment is not None and FOLD_REASON in (traj.exactness.reason or ""),
        "error": traj.outcome.error,
        "reason": traj.outcome.reason,
        "scores": [
            {
                "name": s.name,
                "value": s.value,
                "explanation": s.explanation,
                "evaluator": s.evaluator.model_dump(mode="json", exclude_none=True),
                "dimensions": s.dimensions,
                "error": s.error,
            }
            for s in traj.scores
        ],
        "usage": traj.usage.model_dump(mode="json"),
        "turns": traj.num_turns,
        "tokens": traj.num_tokens,
        "tokenized": traj.is_tokenized,
        "tools": [t.name for t in traj.tools],
        "created_at": traj.created_at,
        "metadata": pretty_json(traj.metadata) if traj.metadata else None,
    }
