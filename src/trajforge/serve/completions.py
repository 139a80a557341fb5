"""OpenAI's text completions (``/v1/completions``): a prompt, no chat template.

Each call is its own trajectory: a user message holding the prompt's ids (the prompt text
encoded as is, or the ids the client sent) and an assistant message holding the sampled ids,
marked ``metadata["rendering"] = "raw"`` so that ``check`` compares them with the raw encoding
rather than a chat rendering. Served by the in-process gateway only.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi.responses import StreamingResponse
from pydantic import Field

from trajforge.policy import RAW_RENDERING, Completion, FinishReason, SamplingParams
from trajforge.rollout import TurnCap
from trajforge.schema import Message, Role, ToolSpec
from trajforge.serve.gateway import ChatGateway, Gateway
from trajforge.serve.recorder import turn_cap
from trajforge.serve.recording import Recording
from trajforge.serve.wire import (
    SAMPLING_UNSUPPORTED,
    Unsupported,
    WireError,
    WireModel,
    check_supported,
    context_room,
    new_id,
    parse_body,
    usage,
)

DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default for text completions


class CompletionRequest(WireModel):
    model: str
    prompt: str | list[int]
    max_tokens: int = Field(default=DEFAULT_COMPLETION_TOKENS, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=16)
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: int | None = None
    stream: bool = False


UNSUPPORTED: Unsupported = {
    **SAMPLING_UNSUPPORTED,
    "logprobs": ((0,), "no alternatives are returned with the sampled tokens' logprobs"),
    "echo": ((False,), "the prompt is not sent back"),
    "best_of": ((1,), "use n"),
    "suffix": (("",), "there is no insertion decoding"),
}
"""The text-completion fields the gateway cannot honour."""


class RawConversation:
    """A prompt and its completion, as ids: nothing to render."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self.messages = list(messages)
        self.tools: list[ToolSpec] = []

    @property
    def num_tokens(self) -> int:
        return sum(len(m.token_ids or ()) for m in self.messages)

    def add_observations(self, observations: Sequence[Message]) -> list[Message]:
        raise WireError("a text completion cannot be continued; send the whole prompt")

    def copy(self) -> RawConversation:
        return RawConversation(self.messages)


async def completions_route(gateway: ChatGateway, session_id: str, body: Any) -> Any:
    """Answer a text-completion call and record each choice as a raw trajectory."""
    if isinstance(body, dict):
        check_supported(body, UNSUPPORTED)
    request = parse_body(body, CompletionRequest)
    gateway.check_model(request.model)
    if not isinstance(gateway, Gateway):
        raise WireError(
            "/v1/completions is served by a model here, not when forwarding to another server",
            status=404,
        )
    adapter = gateway.adapter_of(request.model)
    policy = gateway.policy
    prompt_ids = (
        request.prompt
        if isinstance(request.prompt, list)
        else policy.renderer.encode(request.prompt)
    )
    if not prompt_ids:
        raise WireError("prompt: empty", param="prompt")
    prompt_text = (
        request.prompt if isinstance(request.prompt, str) else policy.renderer.decode(prompt_ids)
    )
    room = context_room(
        len(prompt_ids), policy.max_context_tokens, "prompt: it fills the model's context", "prompt"
    )
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    cap = turn_cap(request.max_tokens, room)
    samplings = [
        SamplingParams(
            temperature=request.temperature,
            top_p=request.top_p,
            max_new_tokens=cap.tokens,
            stop=stop,
            seed=None if request.seed is None else request.seed + k,
        )
        for k in range(request.n)
    ]
    clock = time.perf_counter()
    completions = await asyncio.gather(
        *(gateway.generate_with(adapter, list(prompt_ids), s) for s in samplings)
    )
    took = time.perf_counter() - clock
    prompt = Message(role=Role.USER, content=prompt_text, token_ids=list(prompt_ids))
    for completion in completions:
        _record(gateway, session_id, prompt, completion, request.temperature, took, cap, adapter)
    choices = [_choice(k, c, request, policy) for k, c in enumerate(completions)]
    counts = usage(len(prompt_ids), sum(len(c.token_ids) for c in completions))
    reply = {"id": new_id("cmpl"), "object": "text_completion", "created": int(time.time()),
             "model": request.model, "choices": choices, "usage": counts}  # fmt: skip
    if request.stream:
        return StreamingResponse(_stream(reply), media_type="text/event-stream")
    return reply


def _record(
    gateway: Gateway,
    session_id: str,
    prompt: Message,
    completion: Completion,
    temperature: float,
    took: float,
    cap: TurnCap,
    adapter: str | None,
) -> None:
    session = gateway.recorder.session(session_id)
    reply = Message(
        role=Role.ASSISTANT,
        content=completion.text,
        token_ids=list(completion.token_ids),
        logprobs=completion.logprobs,
    )
    recording = Recording(
        id=uuid.uuid4().hex,
        session=RawConversation([prompt, reply]),
        sequence=next(session.sequences),
        busy=True,
    )
    recording.notes["endpoint"] = "completions"
    recording.notes["weights_versions"] = [completion.weights_version]
    recording.notes["temperatures"] = [temperature]
    if adapter is not None:
        recording.notes["adapters"] = [adapter]
    recording.rendering = RAW_RENDERING
    session.add(recording)
    gateway.recorder.finish(session, recording, took, cap, completion.finish_reason)


def _choice(
    index: int, completion: Completion, request: CompletionRequest, policy: Any
) -> dict[str, Any]:
    logprobs = None
    if request.logprobs is not None and completion.logprobs is not None:
        logprobs = {
            "tokens": [policy.renderer.decode([t]) for t in completion.token_ids],
            "token_logprobs": completion.logprobs,
            "top_logprobs": None,
            "text_offset": [],
        }
    finish = "length" if completion.finish_reason is FinishReason.LENGTH else "stop"
    return {"index": index, "text": completion.text, "finish_reason": finish, "logprobs": logprobs}


async def _stream(reply: dict[str, Any]) -> AsyncIterator[str]:
    """The finished reply as SSE: one chunk per choice, then usage, then ``[DONE]``."""
    for choice in reply["choices"]:
        yield f"data: {json.dumps({**reply, 'choices': [choice], 'usage': None})}\n\n"
    yield f"data: {json.dumps({**reply, 'choices': [], 'usage': reply['usage']})}\n\n"
    yield "data: [DONE]\n\n"
