"""A gateway in front of another OpenAI-compatible server (vLLM, SGLang, llama.cpp, another
``trajforge serve``): calls are forwarded and recorded with the token ids the server reports.

Each call asks for vLLM's ``return_token_ids`` (the prompt's ids, ``prompt_token_ids``, and
each choice's sampled ``token_ids``) and for ``logprobs``. While a session's prompts extend the
recorded context token for token, the new messages get the prompt's new ids (all on the last of
them: only the server knows where one message's template ends) and the reply its sampled ids.
A prompt that does not extend the context (the server re-rendered the history differently from
what it sampled) starts a new trajectory, marked ``drift``: ids are never re-tokenized here. A
server that returns no ids gives text-only trajectories, marked ``text_only``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import httpx

from trajforge.errors import DataError
from trajforge.formats import content_to_openai, messages_from_openai
from trajforge.policy import OPENAI_PREFIX, FinishReason, parse_openai_spec
from trajforge.rollout import PolicyRef, TurnCap
from trajforge.schema import Message, ToolSpec
from trajforge.serve.gateway import (
    ChatCall,
    ChatGateway,
    Choice,
    Gateway,
    TextSink,
    served_names,
    served_policy,
)
from trajforge.serve.recorder import Recorder
from trajforge.serve.recording import GatewaySession, Recording, told
from trajforge.serve.wire import ChatRequest, WireError
from trajforge.store import TrajectoryStore

UPSTREAM_TIMEOUT_S = 600.0


class UpstreamConversation:
    """Messages as the agent sent them, with the ids the server reported (``None`` until it
    has answered a call that contains them, and for good on a server that reports none)."""

    def __init__(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> None:
        self.messages = [
            m.model_copy(update={"token_ids": None, "logprobs": None}) for m in messages
        ]
        self.tools = list(tools)
        self.ids_absent = False
        """Set once the server answered without ids: the conversation stays text-only."""

    @property
    def num_tokens(self) -> int:
        return sum(len(m.token_ids or ()) for m in self.messages)

    def add_observations(self, observations: Sequence[Message]) -> list[Message]:
        added = [m.model_copy(update={"token_ids": None}) for m in observations]
        self.messages += added
        return added

    def copy(self) -> UpstreamConversation:
        twin = UpstreamConversation([], self.tools)
        twin.messages, twin.ids_absent = list(self.messages), self.ids_absent
        return twin

    def known(self) -> int:
        """How many leading messages carry the ids the server reported."""
        known = 0
        while known < len(self.messages) and self.messages[known].token_ids is not None:
            known += 1
        return known

    def extends(self, prompt_ids: list[int]) -> bool:
        """Whether ``prompt_ids`` starts with the context recorded so far."""
        context = [t for m in self.messages[: self.known()] for t in m.token_ids or ()]
        return prompt_ids[: len(context)] == context

    def add_reply(self, prompt_ids: list[int] | None, reply: Message) -> None:
        """Give the pending messages the prompt's new ids and append the reply."""
        if prompt_ids is None or reply.token_ids is None or self.ids_absent:
            self.ids_absent = True
            self.messages = [m.model_copy(update={"token_ids": None, "logprobs": None})
                             for m in [*self.messages, reply]]  # fmt: skip
            return
        known = self.known()
        new = prompt_ids[sum(len(m.token_ids or ()) for m in self.messages[:known]) :]
        pending = self.messages[known:]
        for k, message in enumerate(pending):
            ids = new if k == len(pending) - 1 else []
            self.messages[known + k] = message.model_copy(update={"token_ids": ids})
        self.messages.append(reply)


class UpstreamGateway(ChatGateway):
    """Forward chat calls to ``base_url`` and record them.

    Args:
        base_url: the server's OpenAI base URL (``http://host:port/v1``).
        upstream_model: the model name the server knows.
        store: where trajectories are written.
        run_id: the run the trajectories belong to.
        model_names: the names clients may ask for (``upstream_model`` always works).
        served_name: the one name clients may ask for instead (vLLM's ``--served-model-name``).
        env: the environment recorded on trajectories.
        api_key: sent as the bearer token, when the server wants one.
    """

    def __init__(
        self,
        base_url: str,
        upstream_model: str,
        store: TrajectoryStore | None,
        run_id: str,
        *,
        model_names: tuple[str, ...] = (),
        served_name: str | None = None,
        env: str | None = None,
        api_key: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.upstream_model = upstream_model
        self.model_names = served_names(upstream_model, model_names, served_name)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(timeout=UPSTREAM_TIMEOUT_S, headers=headers)
        self.recorder = Recorder(
            lambda messages, tools, task: UpstreamConversation(messages, tools),
            f"openai:{self.base_url}#{upstream_model}",
            None,
            store,
            run_id,
            env,
        )

    async def chat(self, call: ChatCall, on_text: TextSink | None = None) -> list[Choice]:
        """Forward the call, then record each choice in its trajectory. The server's reply
        comes whole (``on_text`` is never called): a streamed call gets its text at the end."""
        request, tools = call.request, call.tools
        self.check_model(request.model)
        session, recordings = await self.recorder.begin_call(
            call.session_id, call.messages, tools, request.n
        )
        messages = told(session, call.messages)
        clock = time.perf_counter()
        with self.recorder.aborted_on_failure(session, recordings):
            data = await self._forward(request, messages, bool(session.system_text))
        took = time.perf_counter() - clock
        prompt_ids = data.get("prompt_token_ids")
        choices = []
        asked = request.max_completion_tokens or request.max_tokens
        cap = None if asked is None else TurnCap(asked)
        for recording, raw in zip(recordings, data.get("choices") or [], strict=False):
            choices.append(
                self._record(session, recording, raw, prompt_ids, messages, tools, took, cap)
            )
        usage = data.get("usage") or {}
        for choice in choices:
            choice.prompt_count = usage.get("prompt_tokens")
            choice.completion_count = usage.get("completion_tokens")
        return choices

    def count_prompt(
        self, session_id: str, messages: list[Message], tools: list[ToolSpec]
    ) -> int | None:
        return None  # only the server's tokenizer can count

    async def _forward(
        self, request: ChatRequest, messages: list[Message], added_system: bool
    ) -> dict[str, Any]:
        """The server's reply to ``request``, its system message the one recorded in
        ``messages`` where the session adds text to it (``added_system``)."""
        body = request.model_dump(exclude_none=True, exclude={"stream", "stream_options"})
        body.update(model=self.upstream_model, logprobs=True, return_token_ids=True)
        if added_system:
            wire = body["messages"]
            rest = wire[1:] if wire[0].get("role") in ("system", "developer") else wire
            system = {"role": "system", "content": content_to_openai(messages[0].content)}
            body["messages"] = [system, *rest]
        try:
            reply = await self.client.post(f"{self.base_url}/chat/completions", json=body)
        except httpx.HTTPError as exc:
            raise WireError(
                f"the upstream server at {self.base_url} failed: {exc}", status=502,
                kind="upstream_error",
            ) from None  # fmt: skip
        if reply.status_code != 200:
            try:
                detail = reply.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                detail = reply.text[:500]
            status = reply.status_code if reply.status_code < 500 else 502
            raise WireError(f"upstream: {detail}", status=status, kind="upstream_error")
        data = reply.json()
        if not isinstance(data, dict) or not data.get("choices"):
            raise WireError("upstream: the reply has no choices", status=502, kind="upstream_error")
        return data

    def _record(
        self,
        session: GatewaySession,
        recording: Recording,
        raw: dict[str, Any],
        prompt_ids: list[int] | None,
        messages: list[Message],
        tools: list[ToolSpec],
        took: float,
        cap: TurnCap | None,
    ) -> Choice:
        try:
            (reply,) = messages_from_openai([raw.get("message") or {}])
        except DataError as exc:
            raise WireError(f"upstream: {exc}", status=502, kind="upstream_error") from None
        entries = (raw.get("logprobs") or {}).get("content") or []
        ids = raw.get("token_ids")
        logprobs = [float(e["logprob"]) for e in entries] if entries else None
        if ids is not None and logprobs is not None and len(logprobs) != len(ids):
            logprobs = None
        reply = reply.model_copy(update={"token_ids": ids, "logprobs": logprobs})
        conversation = recording.session
        assert isinstance(conversation, UpstreamConversation)  # every one of this gateway
        if prompt_ids is not None and ids is not None and not conversation.extends(prompt_ids):
            # The server's prompt is not the recorded context continued: a new trajectory.
            conversation.messages = conversation.messages[: conversation.known()]
            recording.busy = False
            self.recorder.save(session, recording)
            recording = self.recorder.new_recording(session, messages, tools)
            recording.notes["drift"] = True
            conversation = recording.session
            assert isinstance(conversation, UpstreamConversation)
        conversation.add_reply(prompt_ids, reply)
        finish = FinishReason.LENGTH if raw.get("finish_reason") == "length" else FinishReason.STOP
        self.recorder.finish(session, recording, took, cap, finish)
        return Choice(
            message=conversation.messages[-1],
            content=reply.text,
            finish=finish,
            prompt_ids=prompt_ids,
            trajectory_id=recording.id,
            token_texts=[str(e.get("token", "")) for e in entries] if entries else None,
        )

    async def load_adapter(self, name: str, path: str) -> None:
        """Forward to the server's ``/v1/load_lora_adapter`` (vLLM with ``--enable-lora``)."""
        await self._admin("load_lora_adapter", {"lora_name": name, "lora_path": path})
        self.model_names = tuple(dict.fromkeys((*self.model_names, name)))

    async def unload_adapter(self, name: str) -> None:
        """Forward to the server's ``/v1/unload_lora_adapter``."""
        await self._admin("unload_lora_adapter", {"lora_name": name})
        self.model_names = tuple(n for n in self.model_names if n != name)

    async def _admin(self, endpoint: str, body: dict[str, Any]) -> None:
        try:
            reply = await self.client.post(f"{self.base_url}/{endpoint}", json=body)
        except httpx.HTTPError as exc:
            raise WireError(
                f"the upstream server at {self.base_url} failed: {exc}", status=502
            ) from None
        if reply.status_code != 200:
            raise WireError(f"upstream {endpoint}: {reply.text[:500]}", status=reply.status_code)

    async def close(self) -> None:
        await self.client.aclose()


def open_gateway(
    ref: PolicyRef,
    store: TrajectoryStore | None,
    run_id: str,
    *,
    env: str | None = None,
    served_name: str | None = None,
) -> tuple[ChatGateway, str]:
    """The gateway serving ``ref`` under its own name (or ``served_name`` alone), and what it
    runs on: a policy here (its precision), or ``openai:<base_url>#<model>`` forwarded to that
    server."""
    if ref.name.startswith(OPENAI_PREFIX):
        base_url, model = parse_openai_spec(ref.name)
        upstream = UpstreamGateway(
            base_url,
            model,
            store,
            run_id,
            model_names=(ref.name,),
            served_name=served_name,
            env=env,
        )
        return upstream, f"forwarded to {base_url}"
    policy = served_policy(ref)
    gateway = Gateway(
        policy, store, run_id, model_names=(ref.name,), served_name=served_name, env=env
    )
    return gateway, str(policy.precision)
