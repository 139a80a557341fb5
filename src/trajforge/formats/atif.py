"""Trajectories to and from Harbor's Agent Trajectory Interchange Format (ATIF, v1.0 to v1.8;
the models and their sources are in ``atif_models``).

A system, user or assistant message is a ``system``, ``user`` or ``agent`` step; an assistant's
tool calls are its step's ``tool_calls`` and the tool messages answering them its
``observation.results`` (``source_call_id`` the call's id). An assistant's sampled ``token_ids``
and ``logprobs`` are the step's ``metrics.completion_token_ids`` and ``logprobs``, and the ids
of every message before it its ``prompt_token_ids``. What ATIF has no field for is kept under
``extra["trajforge"]`` (the root: task, outcome, scores, usage, metadata, ...; a step, tool
call or observation result: a message's reward, state key, timing, token ids) and restored on
the way back, so a trajectory written and read again is the same trajectory.

Image parts are ATIF image parts (``atif_content``: data URLs out; data URLs and files beside
the document in). Read from other producers: an observation result without a ``source_call_id``
(an action that is no tool call, a system event) is a user message after the step; audio is
``[audio: path]`` in the text; a subagent reference without content ``[subagent trajectory:
id]``. Logprobs that do not align with the completion ids (ATIF only says they should) are
dropped and the drop noted in ``metadata["atif"]["dropped"]``. A file is one ATIF document
(Harbor's ``agent/trajectory.json``) or one per line; it is read whole or not at all, an error
naming the line of the bad field, and an unknown ``schema_version`` is refused, naming it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trajforge import __version__
from trajforge.errors import DataError
from trajforge.formats.atif_content import content_from_atif, content_to_atif
from trajforge.formats.atif_models import (
    ATIF_VERSIONS,
    AtifTrajectory,
    ObservationResult,
    Step,
    StepSource,
)
from trajforge.formats.jsonl import format_validation_error, json_error
from trajforge.schema import (
    Content,
    Message,
    Role,
    Task,
    Timing,
    ToolCall,
    ToolSpec,
    Trajectory,
    Usage,
)

ATIF_VERSION = ATIF_VERSIONS[-1]
KEEP = "trajforge"
"""The key of ``extra`` under which trajforge keeps what ATIF has no field for."""
META = "atif"
"""Where an imported document's own agent, notes and extras are kept (``Trajectory.metadata``)."""
AGENT_NAME = "trajforge"
# What a message dump loses on the way to each kind of ATIF object: the fields ATIF has.
_STEP_FIELDS = {"role", "content", "reasoning", "tool_calls"}
_SAMPLED = {"token_ids", "logprobs"}
_RESULT_FIELDS = {"role", "content", "tool_call_id"}
_ROLES = {Role.SYSTEM: StepSource.SYSTEM, Role.USER: StepSource.USER}


def to_atif(traj: Trajectory) -> dict[str, Any]:
    """The trajectory as an ATIF document (``ATIF-v1.8``).

    Raises:
        DataError: the trajectory has no messages (an ATIF document has at least one step).
    """
    if not traj.messages:
        raise DataError(f"trajectory {traj.id}: no messages; an ATIF document needs a step")
    imported = traj.metadata.get(META, {})
    agent: dict[str, Any] = {"name": AGENT_NAME, "version": __version__,
                             **imported.get("agent", {})}  # fmt: skip
    if traj.model is not None:
        agent["model_name"] = traj.model
    if traj.tools:
        agent["tool_definitions"] = [tool.to_openai() for tool in traj.tools]
    steps = _steps(traj.messages)
    keep = traj.model_dump(mode="json", exclude={"id", "model", "tools", "messages"})
    doc: dict[str, Any] = {
        "schema_version": ATIF_VERSION,
        "session_id": traj.run_id or traj.id,
        "trajectory_id": traj.id,
        "agent": agent,
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": traj.usage.prompt_tokens,
            "total_completion_tokens": traj.usage.completion_tokens,
            "total_steps": len(steps),
        },
        "extra": {**imported.get("extra", {}), KEEP: keep},
    }
    for name in ("notes", "subagent_trajectories"):
        if imported.get(name) is not None:
            doc[name] = imported[name]
    return doc


def _steps(messages: list[Message]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    context: list[int] | None = []
    for message in messages:
        if message.role is Role.TOOL:
            result: dict[str, Any] = {"source_call_id": message.tool_call_id,
                                      "content": content_to_atif(message.content)}  # fmt: skip
            _keep(result, message, _RESULT_FIELDS)
            steps[-1].setdefault("observation", {"results": []})["results"].append(result)
        elif message.role is Role.ASSISTANT:
            steps.append(_agent_step(len(steps) + 1, message, context))
        else:
            step = {"step_id": len(steps) + 1, "source": _ROLES[message.role].value,
                    "message": content_to_atif(message.content)}  # fmt: skip
            _keep(_stamped(step, message), message, _STEP_FIELDS)
            steps.append(step)
        known = context is not None and message.token_ids is not None
        context = context + message.token_ids if known else None  # type: ignore[operator]
    return steps


def _agent_step(step_id: int, message: Message, context: list[int] | None) -> dict[str, Any]:
    step: dict[str, Any] = {"step_id": step_id, "source": "agent",
                            "message": content_to_atif(message.content)}  # fmt: skip
    if message.reasoning is not None:
        step["reasoning_content"] = message.reasoning
    if message.tool_calls:
        step["tool_calls"] = [_tool_call(call) for call in message.tool_calls]
    if message.token_ids is not None:
        metrics: dict[str, Any] = {"completion_tokens": len(message.token_ids),
                                   "completion_token_ids": message.token_ids}  # fmt: skip
        if context:
            metrics |= {"prompt_tokens": len(context), "prompt_token_ids": context}
        if message.logprobs is not None:
            metrics["logprobs"] = message.logprobs
        step["metrics"] = metrics
    _keep(_stamped(step, message), message, _STEP_FIELDS | _SAMPLED)
    return step


def _tool_call(call: ToolCall) -> dict[str, Any]:
    out: dict[str, Any] = {"tool_call_id": call.id, "function_name": call.name,
                           "arguments": call.arguments}  # fmt: skip
    kept = call.model_dump(mode="json", include={"raw", "parse_error"}, exclude_none=True)
    if kept:
        out["extra"] = {KEEP: kept}
    return out


def _stamped(step: dict[str, Any], message: Message) -> dict[str, Any]:
    if message.timing is not None:
        started = datetime.fromtimestamp(message.timing.started_at, UTC)
        step["timestamp"] = started.isoformat()
    return step


def _keep(out: dict[str, Any], message: Message, native: set[str]) -> None:
    kept = message.model_dump(mode="json", exclude=native, exclude_defaults=True)
    if kept:
        out["extra"] = {KEEP: kept}


def from_atif(
    record: dict[str, Any], record_id: str = "atif", base: Path | None = None
) -> Trajectory:
    """A trajectory from an ATIF document; ``DataError`` names the bad field. Image files
    are looked for relative to ``base`` (the document's folder).

    Raises:
        DataError: an unknown ``schema_version`` (named), a document ATIF's rules refuse, or a
            conversation trajforge cannot hold (a tool call no result answers).
    """
    version = record.get("schema_version")
    if version not in ATIF_VERSIONS:
        raise DataError(
            f"schema_version: {version!r} is not an ATIF version this trajforge reads "
            f"({ATIF_VERSIONS[0]} to {ATIF_VERSION})"
        )
    try:
        doc = AtifTrajectory.model_validate(record)
    except ValidationError as exc:
        raise DataError(format_validation_error(exc, "record")) from None
    extra = dict(doc.extra or {})
    kept = extra.pop(KEEP, None) or {}
    dropped: list[str] = []
    last = len(doc.steps) - 1
    messages = [
        m
        for i, step in enumerate(doc.steps)
        for m in _messages(step, i, (i == last, base), dropped)
    ]
    try:
        if kept:
            return Trajectory.model_validate(
                {**kept, "id": doc.trajectory_id or doc.session_id or record_id,
                 "model": doc.agent.model_name, "tools": _tools(doc), "messages": messages}
            )  # fmt: skip
        first_user = next((m.text for m in messages if m.role is Role.USER), "")
        trajectory_id = doc.trajectory_id or doc.session_id or record_id
        return Trajectory(
            id=trajectory_id,
            task=Task(id=doc.session_id or trajectory_id, prompt=first_user),
            model=doc.agent.model_name,
            tools=_tools(doc),
            messages=messages,
            usage=_usage(doc, messages),
            metadata={META: _imported(doc, extra, dropped)},
        )
    except ValidationError as exc:
        raise DataError(format_validation_error(exc, "record")) from None


def _messages(
    step: Step, index: int, place: tuple[bool, Path | None], dropped: list[str]
) -> Iterator[Message]:
    """The step's messages; ``place``: whether it is the last step, and the document's folder."""
    last, base = place
    kept = (step.extra or {}).get(KEEP, {})
    where = f"steps.{index}"
    fields: dict[str, Any] = {"content": content_from_atif(step.message, f"{where}.message",
                                                            base, dropped)}  # fmt: skip
    if step.timestamp is not None and "timing" not in kept:
        started = datetime.fromisoformat(step.timestamp.replace("Z", "+00:00"))
        fields["timing"] = Timing(started_at=started.timestamp(), duration_s=0.0)
    if step.source is StepSource.AGENT:
        calls = [ToolCall(id=c.tool_call_id, name=c.function_name, arguments=c.arguments,
                          **(c.extra or {}).get(KEEP, {})) for c in step.tool_calls or []]  # fmt: skip
        metrics = step.metrics
        ids = metrics.completion_token_ids if metrics else None
        logprobs = metrics.logprobs if metrics else None
        if logprobs is not None and (ids is None or len(ids) != len(logprobs)):
            dropped.append(f"steps[{index}].metrics.logprobs: {len(logprobs)} logprobs for "
                           f"{len(ids or ())} completion_token_ids")  # fmt: skip
            logprobs = None
        fields |= {"reasoning": step.reasoning_content, "tool_calls": calls, "token_ids": ids,
                   "logprobs": logprobs}  # fmt: skip
    yield Message(role=Role(_role(step.source)), **{**fields, **kept})
    answered = set()
    results = step.observation.results if step.observation else []
    for k, result in enumerate(results):
        content = _result_content(result, f"{where}.observation.results.{k}.content", base, dropped)
        if result.source_call_id is None:
            yield Message(role=Role.USER, content=content)
            continue
        answered.add(result.source_call_id)
        own = (result.extra or {}).get(KEEP, {})
        yield Message(role=Role.TOOL, content=content, tool_call_id=result.source_call_id, **own)
    unanswered = [c.tool_call_id for c in step.tool_calls or [] if c.tool_call_id not in answered]
    # The last step's calls may be open in an episode cut short: its outcome decides.
    if unanswered and not last:
        raise DataError(
            f"steps.{index}.observation: no result answers tool call(s) {', '.join(unanswered)}"
        )


def _role(source: StepSource) -> str:
    return "assistant" if source is StepSource.AGENT else source.value


def _result_content(
    result: ObservationResult, where: str, base: Path | None, dropped: list[str]
) -> Content:
    if result.content is not None or not result.subagent_trajectory_ref:
        return content_from_atif(result.content, where, base, dropped)
    names = (
        r.trajectory_id or r.trajectory_path or r.session_id for r in result.subagent_trajectory_ref
    )
    return "\n".join(f"[subagent trajectory: {name}]" for name in names)


def _tools(doc: AtifTrajectory) -> list[ToolSpec]:
    """The agent's tool definitions, OpenAI function tools; fields beyond trajforge's
    (``strict``, say) are not kept."""
    tools = []
    for definition in doc.agent.tool_definitions or []:
        function = definition.get("function") or {}
        keep = {k: function[k] for k in ("name", "description", "parameters") if k in function}
        tools.append(ToolSpec.model_validate({"type": "function", "function": keep}))
    return tools


def _usage(doc: AtifTrajectory, messages: list[Message]) -> Usage:
    metrics = [step.metrics for step in doc.steps if step.metrics is not None]
    final = doc.final_metrics
    prompt = sum(m.prompt_tokens or 0 for m in metrics)
    completion = sum(m.completion_tokens or 0 for m in metrics)
    if final is not None:  # steps without metrics: the document's totals
        prompt = prompt or final.total_prompt_tokens or 0
        completion = completion or final.total_completion_tokens or 0
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        turns=sum(1 for m in messages if m.role is Role.ASSISTANT),
        tool_calls=sum(len(m.tool_calls) for m in messages),
    )


def _imported(doc: AtifTrajectory, extra: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    """What a re-export writes back: the document's agent, notes, extras and subagents."""
    agent = doc.agent.model_dump(include={"name", "version", "extra"}, exclude_none=True)
    subagents = [
        sub.model_dump(mode="json", exclude_none=True) for sub in doc.subagent_trajectories or []
    ]
    out: dict[str, Any] = {"schema_version": doc.schema_version, "agent": agent}
    for name, value in (("session_id", doc.session_id), ("notes", doc.notes),
                        ("extra", extra or None), ("dropped", dropped or None),
                        ("subagent_trajectories", subagents or None)):  # fmt: skip
        if value is not None:
            out[name] = value
    return out


def read_atif_file(path: Path) -> Iterator[Trajectory]:
    """The trajectories of an ATIF file: one JSON document (over any number of lines), or one
    document per line. ``DataError`` names ``file:line`` (the line of the bad field, or of its
    nearest parent present) and the field; a caller gets every trajectory or none."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read: {exc}") from None
    try:
        documents = [(1, text, json.loads(text))]
    except json.JSONDecodeError:
        documents = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    documents.append((lineno, line, json.loads(line)))
                except json.JSONDecodeError:
                    raise DataError(json_error(line, f"{path}:{lineno}")) from None
    if not documents:
        raise DataError(f"{path}: the file is empty")
    trajectories = []
    for lineno, source, document in documents:
        if not isinstance(document, dict):
            raise DataError(f"{path}:{lineno}: expected an ATIF document (a JSON object)")
        try:
            trajectories.append(from_atif(document, f"{path.stem}-{lineno}", path.parent))
        except DataError as exc:
            problem = str(exc).removeprefix("record: ")
            field = _FIELD.match(problem)
            offset = _offset(source, field.group(1).split(".")) if field else 0
            at = lineno + source.count("\n", 0, offset)
            raise DataError(f"{path}:{at}: {problem}") from None
    yield from trajectories


_FIELD = re.compile(r"^(\w+(?:\.\w+)*): ")
_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _offset(text: str, parts: list[str]) -> int:
    """Where the value at ``parts`` (keys and list indexes) starts in the JSON ``text``, or
    its deepest parent present (a missing field: the object that lacks it)."""
    pos = _skip(text, 0)
    for part in parts:
        found = _child(text, pos, part)
        if found is None:
            break
        pos = found
    return pos


def _child(text: str, pos: int, part: str) -> int | None:
    opening = text[pos : pos + 1]
    if opening not in ("{", "["):
        return None
    pos, index = _skip(text, pos + 1), 0
    while text[pos : pos + 1] not in ("}", "]", ""):
        if opening == "{":
            key, pos = _DECODER.raw_decode(text, pos)  # a key is a JSON string
            pos = _skip(text, _skip(text, pos) + 1)  # past the colon
            hit = key == part
        else:
            hit = str(index) == part
        if hit:
            return pos
        pos = _skip(text, _DECODER.raw_decode(text, pos)[1])
        if text[pos : pos + 1] == ",":
            pos = _skip(text, pos + 1)
        index += 1
    return None


def _skip(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    return match.end() if match else pos
