"""The gateway: chat calls from any agent, answered by an in-process policy and recorded.

Every call, from every session, goes to the same policy, so concurrent agents share the model's
dynamic batching. ``Gateway.chat`` returns the assistant messages (the recorded ones, with their
token ids and logprobs); the HTTP layer (``app``) turns them into OpenAI objects.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from trajforge.errors import ConfigError
from trajforge.policy import (
    ChatRenderer,
    Completion,
    FinishReason,
    HistoryRewritten,
    RenderedSession,
    RenderError,
    SamplingParams,
    TokenPolicy,
    TokenSink,
    TurnRequest,
)
from trajforge.rollout import PolicyRef, TurnCap
from trajforge.schema import Fault, Message, OutcomeStatus, Timing, ToolSpec
from trajforge.serve.adapter_routing import AdapterEndpoints, check_served_model
from trajforge.serve.recorder import Recorder, turn_cap
from trajforge.serve.recording import GatewaySession, Recording, told
from trajforge.serve.reply_text import ReplyText, prose
from trajforge.serve.wire import ChatRequest, WireError, context_room, sampling_of
from trajforge.store import TrajectoryStore

TEXT_PARSER = "text"
TextSink = Callable[[int, str], None]
"""Receives ``(choice index, prose)`` as a reply's prose settles."""


@dataclass(frozen=True)
class ChatCall:
    """One call as every wire (chat completions, Responses, Messages, Gemini) hands it to a
    gateway: the session it continues, its request in the chat-completions form (model, ``n``,
    sampling), and its messages and tools in trajforge's."""

    session_id: str
    request: ChatRequest
    messages: list[Message]
    tools: list[ToolSpec]


@dataclass
class Choice:
    """One sampled reply: the recorded assistant message and how it ended."""

    message: Message
    content: str
    """The reply's prose exactly as sampled (the message's content is it stripped)."""
    finish: FinishReason
    prompt_ids: list[int] | None
    """The exact prompt (``None``: a server that does not say)."""
    trajectory_id: str
    token_texts: list[str] | None = None
    """Each sampled token as text, for ``logprobs``."""
    prompt_count: int | None = None
    """Prompt tokens, when a server reports the count but not the ids."""
    completion_count: int | None = None

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids) if self.prompt_ids is not None else self.prompt_count or 0

    @property
    def completion_tokens(self) -> int:
        if self.message.token_ids is not None:
            return len(self.message.token_ids)
        return self.completion_count or 0


class ChatGateway(Protocol):
    """What the HTTP layer and ``collect`` use: ``Gateway`` (a policy here) and
    ``UpstreamGateway`` (another server) are the two."""

    model_names: tuple[str, ...]
    recorder: Recorder

    def check_model(self, model: str) -> None:
        check_served_model(model, self.model_names)

    async def chat(self, call: ChatCall, on_text: TextSink | None = None) -> list[Choice]:
        """The call's choices; ``on_text(k, text)`` gets the prose of choice ``k`` as it
        settles while sampling (a gateway that gets replies whole never calls it)."""
        ...

    def count_prompt(
        self, session_id: str, messages: list[Message], tools: list[ToolSpec]
    ) -> int | None:
        """The prompt tokens a call of ``messages`` and ``tools`` in the session would be
        given, sampling and recording nothing (``None``: a gateway that cannot count)."""
        ...

    async def load_adapter(self, name: str, path: str) -> None: ...

    async def unload_adapter(self, name: str) -> None: ...

    async def close(self) -> None: ...


def counted_prompt(
    gateway: ChatGateway,
    session_id: str,
    messages: list[Message],
    tools: list[ToolSpec],
    route: str,
) -> int:
    """``gateway.count_prompt``, a 400 naming ``route`` where the gateway cannot count."""
    count = gateway.count_prompt(session_id, messages, tools)
    if count is None:
        raise WireError(
            f"{route}: a gateway forwarding to another server cannot count its prompts (only "
            "that server's tokenizer can)"
        )
    return count


def served_names(
    own_name: str, model_names: tuple[str, ...], served_name: str | None
) -> tuple[str, ...]:
    """The model names a gateway answers to: ``served_name`` alone when given, else its own
    name and ``model_names``."""
    return (served_name,) if served_name else tuple(dict.fromkeys((own_name, *model_names)))


def served_policy(ref: PolicyRef) -> TokenPolicy:
    """The in-process policy a gateway serves: a model with weights here, whose tokens it
    records (the scripted expert needs an env's tasks; another server is not proxied)."""
    if not ref.is_local_model:
        raise ConfigError(
            f"model {ref.name!r}: the gateway serves a model with weights here (embedded, tiny "
            "or a model folder); proxying another server is not supported"
        )
    policy = ref.load()
    if not isinstance(policy, TokenPolicy):
        raise ConfigError(f"model {ref.name!r} does not generate token ids here")
    return policy


class Gateway(AdapterEndpoints, ChatGateway):
    """Answer and record chat calls.

    Args:
        policy: an in-process token policy (embedded, tiny, a model folder, a script).
        store: where trajectories are written (``None``: in memory only).
        run_id: the run the trajectories belong to.
        model_names: the model names clients may ask for (the policy's name always works).
        served_name: the one name clients may ask for instead (vLLM's ``--served-model-name``).
        env: the environment recorded on trajectories, when the agent solves its tasks.
    """

    def __init__(
        self,
        policy: TokenPolicy,
        store: TrajectoryStore | None,
        run_id: str,
        *,
        model_names: tuple[str, ...] = (),
        served_name: str | None = None,
        env: str | None = None,
    ) -> None:
        self.policy = policy
        self.recorder = Recorder(
            lambda messages, tools, task: policy.start_session(messages, tools, task=task),
            policy.name,
            policy.precision,
            store,
            run_id,
            env,
        )
        self.base_names = served_names(policy.name, model_names, served_name)
        self.model_names = self.base_names
        self.adapter: str | None = None

    async def chat(self, call: ChatCall, on_text: TextSink | None = None) -> list[Choice]:
        """Sample ``request.n`` replies to the call's messages and record each in its
        trajectory; ``on_text`` gets each reply's prose as it settles, token by token."""
        request, messages, tools = call.request, call.messages, call.tools
        adapter = self.adapter_of(request.model)
        try:
            session, recordings = await self.recorder.begin_call(
                call.session_id, messages, tools, request.n
            )
        except RenderError as exc:
            raise unrenderable(
                self.policy.renderer, self.policy.name, messages, tools, exc
            ) from None
        prompt_ids = _rendered(recordings[0]).prompt_ids()
        try:
            room = context_room(
                len(prompt_ids),
                self.policy.max_context_tokens,
                "messages: the conversation fills the model's context",
                "messages",
            )
        except WireError:
            self.recorder.abort_all(
                session, recordings, OutcomeStatus.TRUNCATED, "the context is full", Fault.POLICY
            )
            raise
        sampling = sampling_of(request, room)
        samples = [
            replace(sampling, seed=None if sampling.seed is None else sampling.seed + k)
            for k in range(len(recordings))
        ]
        cap = turn_cap(sampling.max_new_tokens, room)
        choices = await self._sample(
            session, recordings, prompt_ids, samples, cap, on_text, adapter
        )
        if request.logprobs:
            for choice in choices:
                ids = choice.message.token_ids or []
                choice.token_texts = [self.policy.renderer.decode([t]) for t in ids]
        return choices

    def count_prompt(self, session_id: str, messages: list[Message], tools: list[ToolSpec]) -> int:
        """The prompt of a call of ``messages`` and ``tools``, counted as the recorder would
        render it: after the trajectory it continues (whose sampled ids are kept), else whole."""
        session = self.recorder.sessions.get(session_id)
        if session is not None:
            messages = told(session, messages)
        try:
            return len(self._preview(session, messages, tools).prompt_ids())
        except RenderError as exc:
            raise unrenderable(
                self.policy.renderer, self.policy.name, messages, tools, exc
            ) from None

    def _preview(
        self, session: GatewaySession | None, messages: list[Message], tools: list[ToolSpec]
    ) -> RenderedSession:
        for recording in reversed(session.recordings if session else []):
            if recording.extends(messages, tools):
                conversation = _rendered(recording).copy()
                try:
                    conversation.add_observations(messages[len(conversation.messages) :])
                    return conversation
                except HistoryRewritten:  # the call would start a new piece, rendered whole
                    break
        started = self.recorder.start(messages, tools, session.task if session else None)
        assert isinstance(started, RenderedSession)  # every conversation of a Gateway is
        return started

    async def _sample(
        self,
        session: GatewaySession,
        recordings: list[Recording],
        prompt_ids: list[int],
        samplings: list[SamplingParams],
        cap: TurnCap,
        on_text: TextSink | None,
        adapter: str | None,
    ) -> list[Choice]:
        started, clock = time.time(), time.perf_counter()
        renderer = self.policy.renderer
        with self.recorder.aborted_on_failure(session, recordings):
            asked = [
                TurnRequest(_rendered(r), prompt_ids, s, _prose_stream(renderer, k, on_text))
                for k, (r, s) in enumerate(zip(recordings, samplings, strict=True))
            ]
            completions: list[Completion] = await asyncio.gather(
                *(self.complete_with(adapter, turn) for turn in asked)
            )
        timing = Timing(started_at=started, duration_s=time.perf_counter() - clock)
        choices = []
        for recording, completion, sampling in zip(recordings, completions, samplings, strict=True):
            message = _rendered(recording).add_completion(
                completion, turn=recording.turn, timing=timing
            )
            # Which weights sampled each turn, and how hot: a trainer needs both to know the
            # turn was sampled from the policy it trains.
            recording.notes.setdefault("weights_versions", []).append(completion.weights_version)
            recording.notes.setdefault("temperatures", []).append(sampling.temperature)
            if adapter is not None or "adapters" in recording.notes:
                turns = len(recording.notes["weights_versions"])
                recording.notes.setdefault("adapters", [None] * (turns - 1)).append(adapter)
            self.recorder.finish(
                session, recording, timing.duration_s, cap, completion.finish_reason
            )
            choices.append(
                Choice(
                    message=message,
                    content=reply_prose(renderer, message),
                    finish=completion.finish_reason,
                    prompt_ids=prompt_ids,
                    trajectory_id=recording.id,
                )
            )
        return choices

    async def close(self) -> None:
        await self.policy.close()


def reply_prose(renderer: ChatRenderer, message: Message) -> str:
    """A sampled reply's prose as the client gets it: exactly as sampled under the text
    protocol's parser, the parsed content under another."""
    if renderer.parser_name != TEXT_PARSER:
        return message.text
    return prose(renderer.completion_text(message.token_ids or []))


def _prose_stream(renderer: ChatRenderer, index: int, on_text: TextSink | None) -> TokenSink | None:
    """A token sink that hands choice ``index``'s prose to ``on_text`` as it settles (under
    another parser than the text protocol's, nothing settles before the reply ends)."""
    if on_text is None or renderer.parser_name != TEXT_PARSER:
        return None
    ids: list[int] = []
    text = ReplyText()

    def sampled(token: int) -> None:
        ids.append(token)
        delta = text.feed(renderer.completion_text(ids))
        if delta:
            on_text(index, delta)

    return sampled


def unrenderable(
    renderer: ChatRenderer,
    model: str,
    messages: list[Message],
    tools: list[ToolSpec],
    exc: RenderError,
) -> WireError:
    """A 400 naming the first message the model's chat template cannot render."""
    where = "messages"
    for k in range(len(messages)):
        try:
            renderer.render_text(messages[: k + 1], tools, add_generation_prompt=False)
        except RenderError:
            where = f"messages[{k}]"
            break
    return WireError(
        f"{where}: the chat template of {model!r} cannot render this conversation ({exc})",
        param=where,
    )


def _rendered(recording: Recording) -> RenderedSession:
    conversation = recording.session
    assert isinstance(conversation, RenderedSession)  # every conversation of a Gateway is
    return conversation
