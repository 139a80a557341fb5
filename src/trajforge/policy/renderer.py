"""Exact, incremental chat rendering: messages -> token ids, completions -> messages.

The context a model sees is built piece by piece and never re-tokenized:

- the opening messages are rendered with the tokenizer's chat template (ending in the
  generation prompt) and their ids split per message;
- an assistant turn contributes exactly the ids the policy sampled;
- each batch of observations (tool/user messages) contributes the exact text the template adds
  for it (rendering the conversation with and without the batch and taking the difference),
  preceded by whatever closes the previous assistant turn that the policy did not sample (the
  end-of-turn token when generation stopped on a stop string or the length limit, the newline
  after it) and followed by the next generation prompt.

Tools are passed to the template when it renders them natively (it references ``tools``);
otherwise they are described in the system message and called with the ``<tool_call>`` text
protocol (``trajforge.formats.tool_calls``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trajforge.errors import TrajforgeError
from trajforge.formats import ParsedCompletion, get_parser
from trajforge.policy.chat_template import unwrap, wrap
from trajforge.policy.template_dicts import (
    ToolProtocol,
    message_text,
    template_message,
    with_tools_prompt,
)
from trajforge.schema import Message, Role, ToolSpec, refuse_images

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_SENTINEL = "TRAJFORGE_SENTINEL_5e1f"
_TOOLS_REFERENCE = re.compile(r"\btools\b")


class RenderError(TrajforgeError):
    """A conversation cannot be rendered exactly with this tokenizer's chat template."""


class HistoryRewritten(RenderError):
    """Adding messages makes the chat template write the earlier ones differently (it drops
    past reasoning, shortens past replies): ids recorded for them cannot be extended. Carries
    the two renderings, so that ``policy.whole_render.break_reason`` can say where they part."""

    def __init__(
        self,
        message: str,
        *,
        renderer: ChatRenderer,
        history: Sequence[Message],
        tools: Sequence[ToolSpec],
        earlier: str,
        later: str,
    ) -> None:
        super().__init__(message)
        self.renderer = renderer
        self.history = list(history)
        self.tools = list(tools)
        self.earlier = earlier
        """The rendering of ``history`` alone."""
        self.later = later
        """The rendering once the new messages follow it."""


@dataclass(frozen=True)
class _Lead:
    """What precedes an assistant message's content where no generation prompt does."""

    closing: str
    """The end of the assistant turn before that its sampled ids did not include."""
    header: str
    """What the template writes from there to the content (an opening, the turn's header)."""


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class ChatRenderer:
    """Renders conversations into token ids with ``tokenizer``'s chat template.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        tool_protocol: ``native`` (tools go to the template), ``text`` (tools described in the
            system message, ``<tool_call>`` protocol), or ``auto`` (native when the template
            references ``tools``; a template trajforge saved, ``chat_template.wrap``, renders
            with the model's own template under the protocol it was saved with).
        parser: the ``trajforge.formats.tool_calls`` parser that reads completions.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        tool_protocol: ToolProtocol | str = ToolProtocol.AUTO,
        parser: str = "text",
    ) -> None:
        self.tokenizer = tokenizer
        template = tokenizer.chat_template
        if isinstance(template, dict):
            template = template.get("tool_use") or template.get("default")
        if not isinstance(template, str) or not template:
            name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
            raise RenderError(f"tokenizer {name!r} has no chat template to render with")
        own, saved_protocol, _ = unwrap(template)
        self.template: str = own
        self.supports_native_tools = bool(_TOOLS_REFERENCE.search(own))
        protocol = ToolProtocol(tool_protocol)
        if protocol is ToolProtocol.AUTO and saved_protocol is not None:
            protocol = ToolProtocol(saved_protocol)
        if protocol is ToolProtocol.AUTO:
            protocol = ToolProtocol.NATIVE if self.supports_native_tools else ToolProtocol.TEXT
        self.tool_protocol = protocol
        self.parser_name = parser
        self._parse = get_parser(parser)
        self.tool_role = self._detect_tool_role()
        self.end_suffix_ids = self._detect_end_suffix()
        self.end_of_turn_ids = self._end_of_turn(self.end_suffix_ids)

    def deploy_template(self) -> str:
        """The chat template a saved model folder carries: any other renderer of the folder
        (transformers, vLLM, llama.cpp) renders what this one does, tools included."""
        return wrap(self.template, self.tool_protocol.value, self.tool_role)

    # --- template plumbing -------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added (the template writes them)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def _apply(
        self, conversation: list[dict[str, Any]], tools: Sequence[ToolSpec], gen: bool
    ) -> str:
        kwargs: dict[str, Any] = {}
        if tools and self.tool_protocol is ToolProtocol.NATIVE:
            kwargs["tools"] = [t.to_openai() for t in tools]
        try:
            text = self.tokenizer.apply_chat_template(
                conversation,
                chat_template=self.template,
                tokenize=False,
                add_generation_prompt=gen,
                **kwargs,
            )
        except Exception as exc:  # the template is user code: any failure is a render error
            roles = ",".join(m["role"] for m in conversation)
            raise RenderError(f"chat template failed on roles [{roles}]: {exc}") from exc
        return str(text)

    def _detect_tool_role(self) -> str:
        """``tool`` when the template renders that role as it is (ChatML renders any role)."""
        if self.tool_protocol is ToolProtocol.NATIVE:
            return "tool"
        probe = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "ok"},
            {"role": "tool", "content": _SENTINEL},
        ]
        try:
            text = self._apply(probe, (), gen=False)
        except RenderError:
            return "user"
        return "tool" if _SENTINEL in text else "user"

    def _detect_end_suffix(self) -> list[int]:
        """The ids the template writes after an assistant turn's content (``<|im_end|>\\n``)."""
        user = [{"role": "user", "content": "hi"}]
        prompt = self._apply(user, (), gen=True)
        full = self._apply([*user, {"role": "assistant", "content": _SENTINEL}], (), gen=False)
        at = full.find(_SENTINEL, len(prompt) if full.startswith(prompt) else 0)
        if at < 0:
            raise RenderError("the chat template does not render assistant message content")
        return self.encode(full[at + len(_SENTINEL) :])

    def _end_of_turn(self, suffix: list[int]) -> list[int]:
        """The part of the end suffix a model samples: up to its first special token."""
        special = set(self.tokenizer.all_special_ids)
        for i, token in enumerate(suffix):
            if token in special:
                return suffix[: i + 1]
        eos = self.tokenizer.eos_token_id
        return [eos] if isinstance(eos, int) else suffix

    def template_messages(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> list[dict[str, Any]]:
        """The dicts handed to the chat template, with the text-protocol tool description
        added to (or as) the system message. Image parts are refused: this renderer writes
        text only, and a model must not be shown a conversation with its images left out."""
        name = getattr(self.tokenizer, "name_or_path", "") or type(self.tokenizer).__name__
        try:
            refuse_images(list(messages), f"the text-only chat renderer of {name!r}")
        except ValueError as exc:
            raise RenderError(str(exc)) from None
        conversation = [template_message(m, self.tool_protocol, self.tool_role) for m in messages]
        if conversation and tools and self.tool_protocol is ToolProtocol.TEXT:
            with_tools_prompt(conversation, tools)
        return conversation

    def render_text(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        add_generation_prompt: bool,
    ) -> str:
        """The template's text for ``messages`` (empty for no messages)."""
        if not messages:
            return ""
        return self._apply(self.template_messages(messages, tools), tools, add_generation_prompt)

    # --- incremental rendering ---------------------------------------------------------

    def closing_ids(self, assistant_ids: Sequence[int]) -> list[int]:
        """The end-of-turn ids the template writes after ``assistant_ids`` that were not
        sampled: the whole suffix after a stop string, only the newline after a sampled EOS."""
        suffix = self.end_suffix_ids
        for k in range(len(suffix), 0, -1):
            if len(assistant_ids) >= k and list(assistant_ids[-k:]) == suffix[:k]:
                return suffix[k:]
        return list(suffix)

    def render_observations(
        self,
        history: Sequence[Message],
        observations: Sequence[Message],
        tools: Sequence[ToolSpec],
    ) -> list[list[int]]:
        """Per-message ids that ``observations`` add after ``history``, ending with the
        generation prompt. ``history`` is empty or ends with an assistant message whose
        ``token_ids`` are set."""
        if not observations:
            return []
        if any(m.role is Role.ASSISTANT for m in observations):
            raise RenderError("observations may not contain assistant messages")
        head = ""
        base = ""
        if history:
            last = history[-1]
            if last.role is not Role.ASSISTANT or last.token_ids is None:
                raise RenderError(
                    "observations must follow an assistant message that carries its token ids"
                )
            head = self.decode(self.closing_ids(last.token_ids))
            base = self.render_text(history, tools, add_generation_prompt=False)
        full = self.render_text([*history, *observations], tools, add_generation_prompt=True)
        if not full.startswith(base):
            at = common_prefix(base, full)
            raise HistoryRewritten(
                "the chat template is not prefix-stable: adding observations changes the "
                f"rendering of earlier turns at character {at} ({base[at : at + 40]!r} became "
                f"{full[at : at + 40]!r})",
                renderer=self,
                history=history,
                tools=tools,
                earlier=base,
                later=full,
            )
        cuts = []
        for j in range(1, len(observations)):
            partial = self.render_text(
                [*history, *observations[:j]], tools, add_generation_prompt=False
            )
            cuts.append(len(head) + common_prefix(partial, full) - len(base))
        return self.split_text(head + full[len(base) :], cuts)

    def split_text(self, text: str, cuts: Sequence[int]) -> list[list[int]]:
        """Tokenize ``text`` once and split the ids at the character positions ``cuts``; a
        token that straddles a cut goes to the later piece."""
        whole = self.encode(text)
        pieces: list[list[int]] = []
        start = 0
        for cut in cuts:
            end = max(start, common_prefix(self.encode(text[: max(cut, 0)]), whole))
            pieces.append(whole[start:end])
            start = end
        pieces.append(whole[start:])
        return pieces

    def text_assistant_ids(self, text: str) -> list[int]:
        """Ids of an assistant turn given as text (not sampled): its content as the template
        renders it, plus the end-of-turn token a model would have sampled."""
        return self.encode(text) + list(self.end_of_turn_ids)

    def assistant_message_ids(
        self, history: Sequence[Message], message: Message, tools: Sequence[ToolSpec]
    ) -> list[int]:
        """Ids of an assistant message given without ids, as the template renders it after
        ``history`` (its content and calls, then the end-of-turn token). Where no generation
        prompt precedes it (``lead_ids``), those ids come first."""
        full = self.render_text([*history, message], tools, add_generation_prompt=False)
        suffix = self.decode(self.end_suffix_ids)
        if self.follows_prompt(history):
            prompt = self.render_text(history, tools, add_generation_prompt=True)
            if not (full.startswith(prompt) and full.endswith(suffix)):
                return self.text_assistant_ids(message_text(message))
            return self.text_assistant_ids(full[len(prompt) : len(full) - len(suffix)])
        lead = self._lead(history, tools)
        opening = self.render_text(history, tools, add_generation_prompt=False) + lead.header
        if not (full.startswith(opening) and full.endswith(suffix)):
            raise RenderError(
                "the chat template renders an assistant message that opens the conversation or "
                "follows another one unlike the probe it was measured with"
            )
        body = full[len(opening) : len(full) - len(suffix)]
        return self.encode(lead.closing + lead.header) + self.text_assistant_ids(body)

    def follows_prompt(self, history: Sequence[Message]) -> bool:
        """Whether an assistant message after ``history`` follows a generation prompt (the
        observations before it end with one); otherwise it opens the conversation or follows
        another assistant turn."""
        return bool(history) and history[-1].role is not Role.ASSISTANT

    def lead_ids(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> list[int]:
        """The ids the template writes before the content of an assistant message that follows
        no generation prompt: whatever opens the conversation (a default system prompt), or
        the closing of the assistant turn before, and then the turn's header. Empty after a
        generation prompt. They are not sampled: ``check`` reads the message after them."""
        if self.follows_prompt(history):
            return []
        lead = self._lead(history, tools)
        return self.encode(lead.closing + lead.header)

    def _lead(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> _Lead:
        base = self.render_text(history, tools, add_generation_prompt=False)
        probe = Message(role=Role.ASSISTANT, content=_SENTINEL)
        full = self.render_text([*history, probe], tools, add_generation_prompt=False)
        at = full.find(_SENTINEL, len(base))
        if not full.startswith(base) or at < 0:
            raise RenderError(
                "the chat template is not prefix-stable: an assistant message after "
                f"{len(history)} message(s) changes the rendering of the earlier ones"
            )
        closing = self.decode(self.closing_ids(history[-1].token_ids or [])) if history else ""
        return _Lead(closing=closing, header=full[len(base) : at])

    # --- completions -> messages -------------------------------------------------------

    def completion_text(self, token_ids: Sequence[int]) -> str:
        """The text of an assistant turn's ids up to its end-of-turn token (a model stops
        there; anything after it is not part of the reply)."""
        ids = list(token_ids)
        eot = list(self.end_of_turn_ids)
        if eot:
            for i in range(len(ids) - len(eot) + 1):
                if ids[i : i + len(eot)] == eot:
                    return self.decode(ids[:i])
        if ids and ids[-1] == self.tokenizer.eos_token_id:
            ids = ids[:-1]
        return self.decode(ids)

    def parse(self, token_ids: Sequence[int], turn: int) -> ParsedCompletion:
        """Prose and tool calls (ids ``call_{turn}_{k}``) of an assistant turn's ids. Calls
        that cannot be parsed keep ``parse_error`` and ``raw`` for the env to answer."""
        return self.parse_text(self.completion_text(token_ids), turn)

    def parse_text(self, text: str, turn: int) -> ParsedCompletion:
        """Prose and tool calls of an assistant turn's text (see ``parse``)."""
        return self._parse(text, f"call_{turn}")
