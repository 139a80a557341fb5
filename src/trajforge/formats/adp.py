"""Trajectories to and from Agent Data Protocol standardized trajectories (ADP schema 1.2.0,
arXiv:2510.24702): ``{"schema_version", "id", "content": [actions and observations],
"details": {...}}``.

Assistant turns are actions: text is a ``message_action``, each tool call an ``api_action``
(``function``, ``kwargs``, ``tool_call_id``; the turn's text in the first call's
``description``), a call to ``run_<language>`` with only ``code`` a ``code_action``. User
messages are ``text_observation``s from ``user``, tool results ``text_observation``s from
``environment`` carrying the call's ``tool_call_id``. Reasoning and per-turn rewards keep their
ADP fields. What ADP has no place for (the system prompt, the task, the tool specs, the outcome)
is kept in ``details["trajforge"]`` and restored on the way back; a record's other ``details``
are kept in ``metadata["adp_details"]`` and written back as they were. Any ADP 1.x record reads
(minor versions only add optional fields); another major is refused.

Read back: consecutive tool actions form one assistant turn (parallel calls); an observation
from ``agent`` is assistant text, one from ``environment`` without a call id a user message;
web observations become text (their accessibility tree, else HTML, else URL) and images a
``[image]`` placeholder.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from trajforge.errors import DataError
from trajforge.formats.images import refuse_images_in
from trajforge.formats.jsonl import format_validation_error
from trajforge.schema import (
    Message,
    Outcome,
    Role,
    Task,
    ToolCall,
    ToolSpec,
    Trajectory,
)

ADP_VERSION = "1.2.0"
ADP_MAJOR = ADP_VERSION.split(".", 1)[0]
DETAILS_KEY = "adp_details"
"""Where an imported record's own ``details`` are kept (``Trajectory.metadata``), written back
beside trajforge's on export."""
CODE_PREFIX = "run_"


def to_adp(traj: Trajectory) -> dict[str, Any]:
    """The trajectory as an ADP standardized trajectory (text only: images are refused)."""
    refuse_images_in(traj, "ADP")
    content: list[dict[str, Any]] = []
    system = None
    for message in traj.messages:
        if message.role is Role.SYSTEM:  # ADP has one system prompt: every one, in order
            system = message.text if system is None else f"{system}\n\n{message.text}"
        elif message.role is Role.USER:
            content.append(_observation(message.text, "user", reward=message.reward))
        elif message.role is Role.TOOL:
            content.append(
                _observation(message.text, "environment", message.tool_call_id, message.reward)
            )
        else:
            content += _actions(message)
    keep = {
        "system": system,
        "task": traj.task.model_dump(mode="json"),
        "tools": [t.model_dump(mode="json") for t in traj.tools],
        "outcome": traj.outcome.model_dump(mode="json"),
        "env": traj.env,
        "model": traj.model,
    }
    details = {**traj.metadata.get(DETAILS_KEY, {}), "trajforge": keep}
    return {"schema_version": ADP_VERSION, "id": traj.id, "content": content,
            "details": details}  # fmt: skip


def _observation(
    text: str, source: str, tool_call_id: str | None = None, reward: float | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"class_": "text_observation", "content": text, "source": source}
    if tool_call_id is not None:
        out["tool_call_id"] = tool_call_id
    if reward is not None:
        out["reward"] = reward
    return out


def _actions(message: Message) -> list[dict[str, Any]]:
    common: dict[str, Any] = {}
    if message.reasoning is not None:
        common["reasoning_content"] = message.reasoning
    if message.reward is not None:
        common["reward"] = message.reward
    if not message.tool_calls:
        return [{"class_": "message_action", "content": message.content, **common}]
    actions = []
    for k, call in enumerate(message.tool_calls):
        extra = dict(common) if k == 0 else {}
        if k == 0 and message.content:
            extra["description"] = message.content
        language = call.name.removeprefix(CODE_PREFIX)
        if call.name.startswith(CODE_PREFIX) and set(call.arguments) == {"code"}:
            actions.append({"class_": "code_action", "language": language,
                            "content": call.arguments["code"], "tool_call_id": call.id,
                            **extra})  # fmt: skip
        else:
            actions.append({"class_": "api_action", "function": call.name,
                            "kwargs": call.arguments, "tool_call_id": call.id, **extra})  # fmt: skip
    return actions


def _check_version(version: Any) -> None:
    """ADP's minor versions only add optional fields, so any 1.x record reads (what a newer
    minor adds is ignored); another major may change what a field means and is refused."""
    parts = str(version).split(".")
    if not all(p.isdigit() for p in parts) or len(parts) > 3:
        raise DataError(f"schema_version: {version!r} is not a version such as {ADP_VERSION!r}")
    if parts[0] != ADP_MAJOR:
        raise DataError(
            f"schema_version: {version!r} is ADP {parts[0]}.x; this trajforge reads ADP "
            f"{ADP_MAJOR}.x (up to {ADP_VERSION}, later minor versions too)"
        )


def from_adp(record: dict[str, Any]) -> Trajectory:
    """A trajectory from an ADP standardized trajectory; ``DataError`` names the bad field."""
    _check_version(record.get("schema_version", ADP_VERSION))
    items = record.get("content")
    if not isinstance(items, list):
        raise DataError("content: expected a list of actions and observations")
    details = record.get("details") or {}
    if not isinstance(details, dict):
        raise DataError("details: expected an object")
    kept = details.get("trajforge") or {}
    own = {k: v for k, v in details.items() if k != "trajforge"}
    messages: list[Message] = []
    if kept.get("system") is not None:
        messages.append(Message(role=Role.SYSTEM, content=str(kept["system"])))
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise DataError(f"content.{i}: expected an object")
        _add(messages, item, f"content.{i}")
    try:
        task = (
            Task.model_validate(kept["task"])
            if kept.get("task")
            else Task(
                id=str(record.get("id", "adp")),
                prompt=next((m.text for m in messages if m.role is Role.USER), ""),
            )
        )
        return Trajectory(
            id=str(record.get("id") or task.id),
            task=task,
            env=kept.get("env"),
            model=kept.get("model"),
            tools=[ToolSpec.model_validate(t) for t in kept.get("tools") or []],
            messages=messages,
            outcome=Outcome.model_validate(kept["outcome"]) if kept.get("outcome") else Outcome(),
            metadata={DETAILS_KEY: own} if own else {},
        )
    except ValidationError as exc:
        raise DataError(format_validation_error(exc, "record")) from None


def _add(messages: list[Message], item: dict[str, Any], where: str) -> None:
    kind = item.get("class_")
    reward = item.get("reward")
    if kind in ("api_action", "code_action"):
        last = messages[-1] if messages else None
        joins = last is not None and last.role is Role.ASSISTANT and bool(last.tool_calls)
        turn = sum(1 for m in messages if m.role is Role.ASSISTANT) - joins
        k = len(last.tool_calls) if last is not None and joins else 0
        call = _call(item, kind, where, f"call_{turn}_{k}")
        if last is not None and joins:
            messages[-1] = last.model_copy(update={"tool_calls": [*last.tool_calls, call]})
            return
        messages.append(Message(role=Role.ASSISTANT, content=str(item.get("description") or ""),
                                tool_calls=[call], reasoning=item.get("reasoning_content"),
                                reward=reward))  # fmt: skip
    elif kind == "message_action":
        messages.append(Message(role=Role.ASSISTANT, content=str(item.get("content", "")),
                                reasoning=item.get("reasoning_content"), reward=reward))  # fmt: skip
    elif kind in ("text_observation", "web_observation", "image_observation"):
        text = _observed_text(item, kind)
        source, call_id = item.get("source", "environment"), item.get("tool_call_id")
        if call_id is not None:
            messages.append(
                Message(role=Role.TOOL, content=text, tool_call_id=call_id, reward=reward)
            )
        elif source == "agent":
            messages.append(Message(role=Role.ASSISTANT, content=text, reward=reward))
        else:
            messages.append(Message(role=Role.USER, content=text, reward=reward))
    else:
        raise DataError(f"{where}.class_: unknown ADP item {kind!r}")


def _call(item: dict[str, Any], kind: str, where: str, default_id: str) -> ToolCall:
    call_id = str(item.get("tool_call_id") or default_id)
    if kind == "code_action":
        language = str(item.get("language", ""))
        return ToolCall(id=call_id, name=f"{CODE_PREFIX}{language}",
                        arguments={"code": str(item.get("content", ""))})  # fmt: skip
    kwargs = item.get("kwargs", {})
    if not isinstance(kwargs, dict) or not isinstance(item.get("function"), str):
        raise DataError(f"{where}: an api_action needs a function name and kwargs object")
    return ToolCall(id=call_id, name=item["function"], arguments=kwargs)


def _observed_text(item: dict[str, Any], kind: str) -> str:
    if kind == "text_observation":
        return str(item.get("content", ""))
    if kind == "image_observation":
        return "[image]"
    return str(item.get("axtree") or item.get("html") or item.get("url") or "")
