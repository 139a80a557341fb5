"""A conversation whose messages carry the exact token ids the model saw and produced."""

from __future__ import annotations

from collections.abc import Sequence

from trajforge.policy.base import ChatSession, Completion
from trajforge.policy.renderer import ChatRenderer, HistoryRewritten, RenderError
from trajforge.policy.whole_render import whole_ids
from trajforge.schema import Message, Role, Task, Timing, ToolSpec


class RenderedSession(ChatSession):
    """Messages plus token ids, kept in step by a ``ChatRenderer``.

    The concatenation of ``m.token_ids`` over ``messages`` is always the exact model context.
    Assistant messages given without token ids (a reply written as text) are tokenized as the
    template renders them and carry no logprobs, marking them as not sampled.

    ``opened`` starts one from a history as the model is given it: rendered message by message
    where the template extends turn by turn, else whole (``whole_prefix`` then counts the
    messages whose ids are the whole rendering's, earlier replies included).
    """

    def __init__(
        self,
        renderer: ChatRenderer,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        task: Task | None = None,
    ) -> None:
        self.renderer = renderer
        self.tools = list(tools)
        self.task = task
        self.messages = []
        self.whole_prefix = 0
        """How many leading messages carry ids of one whole rendering rather than their own."""
        self._versions: dict[int, int] = {}
        self.add_messages(messages)

    @classmethod
    def opened(
        cls,
        renderer: ChatRenderer,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        task: Task | None = None,
    ) -> RenderedSession:
        """A session over ``messages`` rendered turn by turn, or, where the template writes
        earlier turns differently once later ones follow, as one whole rendering: the prompt
        the model is then given. Replies in it keep their text, not their sampled ids or
        logprobs (they were sampled in another context)."""
        try:
            return cls(renderer, messages, tools, task=task)
        except HistoryRewritten:
            session = cls(renderer, [], tools, task=task)
        pieces = whole_ids(renderer, messages, tools)
        session.messages = [
            m.model_copy(update={"token_ids": ids, "logprobs": None})
            for m, ids in zip(messages, pieces, strict=True)
        ]
        session.whole_prefix = len(messages)
        return session

    @property
    def num_tokens(self) -> int:
        return sum(len(m.token_ids or ()) for m in self.messages)

    def token_ids(self) -> list[int]:
        """The whole context so far."""
        return [t for m in self.messages for t in (m.token_ids or ())]

    def prompt_ids(self) -> list[int]:
        """The context to generate the next assistant turn from (ends with the generation
        prompt)."""
        if not self.messages:
            raise RenderError("cannot generate from an empty conversation")
        if self.messages[-1].role is Role.ASSISTANT:
            raise RenderError(
                "cannot generate right after an assistant message: add the observations "
                "(tool results or a user message) first"
            )
        return self.token_ids()

    def copy(self) -> RenderedSession:
        """An independent continuation of this conversation (same renderer and tools)."""
        twin = RenderedSession(self.renderer, [], self.tools, task=self.task)
        twin.messages = list(self.messages)
        twin.whole_prefix = self.whole_prefix
        twin._versions = dict(self._versions)
        return twin

    @property
    def sampled_versions(self) -> dict[int, int]:
        return self._versions

    def add_observations(self, observations: Sequence[Message]) -> list[Message]:
        if any(m.role is Role.ASSISTANT for m in observations):
            raise RenderError("observations are tool/user messages, not assistant messages")
        return self._add_batch(observations)

    def add_messages(self, messages: Sequence[Message]) -> list[Message]:
        """Append any messages. Assistant messages with token ids keep them (a replay);
        assistant messages without are tokenized as text (not sampled)."""
        added: list[Message] = []
        batch: list[Message] = []
        for message in messages:
            if message.role is not Role.ASSISTANT:
                batch.append(message)
                continue
            added += self._add_batch(batch)
            batch = []
            if message.token_ids is None:
                ids = self.renderer.assistant_message_ids(self.messages, message, self.tools)
                message = message.model_copy(update={"token_ids": ids, "logprobs": None})
            self.messages.append(message)
            added.append(message)
        added += self._add_batch(batch)
        return added

    def add_assistant_text(self, text: str, *, turn: int) -> Message:
        """Append an assistant turn given as text (e.g. an expert's reply), not sampled."""
        ids = self.renderer.text_assistant_ids(text)
        return self._append_assistant(ids, None, turn=turn, timing=None)

    def add_completion(
        self, completion: Completion, *, turn: int, timing: Timing | None
    ) -> Message:
        """Append the assistant turn a policy generated. A completion without token ids
        (a text-only endpoint) is tokenized as text and carries no logprobs."""
        if not completion.token_ids:
            ids = self.renderer.text_assistant_ids(completion.text)
            return self._append_assistant(ids, None, turn=turn, timing=timing)
        if completion.logprobs is not None and len(completion.logprobs) != len(
            completion.token_ids
        ):
            raise RenderError(
                f"completion has {len(completion.token_ids)} token ids but "
                f"{len(completion.logprobs)} logprobs"
            )
        if completion.weights_version is not None:
            self._versions[len(self.messages)] = completion.weights_version
        return self._append_assistant(
            list(completion.token_ids), completion.logprobs, turn=turn, timing=timing
        )

    def _append_assistant(
        self, ids: list[int], logprobs: list[float] | None, *, turn: int, timing: Timing | None
    ) -> Message:
        self.prompt_ids()  # raises if the context does not end with a generation prompt
        parsed = self.renderer.parse(ids, turn)
        message = Message(
            role=Role.ASSISTANT,
            content=parsed.content,
            tool_calls=parsed.tool_calls,
            token_ids=ids,
            logprobs=None if logprobs is None else list(logprobs),
            timing=timing,
        )
        self.messages.append(message)
        return message

    def _add_batch(self, batch: Sequence[Message]) -> list[Message]:
        if not batch:
            return []
        # Observations already added since the last assistant turn end with a generation
        # prompt nothing has been sampled from yet; render them again together with the new
        # ones, so the context holds a single generation prompt at its end.
        start = len(self.messages)
        # A whole rendering is never re-rendered in parts.
        while start > self.whole_prefix and self.messages[start - 1].role is not Role.ASSISTANT:
            start -= 1
        pending = [*self.messages[start:], *batch]
        history = self.messages[:start]
        pieces = self.renderer.render_observations(history, pending, self.tools)
        rendered = [
            m.model_copy(update={"token_ids": ids}) for m, ids in zip(pending, pieces, strict=True)
        ]
        self.messages[start:] = rendered
        return rendered[len(rendered) - len(batch) :]
