"""Turn-by-turn prefix checks of a chat template over the shapes of ``shapes``.

A conversation is rendered at each point a model meets it: the prompt before each reply (with
the generation prompt), the conversation right after each reply, and the whole. Each rendering
must be a prefix of the next, in text and in tokens; where it is not, the model's context at
turn k is not the start of its context at turn k+1, and ids recorded at turn k would not be the
ids a whole rendering trains on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from transformers.utils.chat_template_utils import render_jinja_template

from trajforge.chat_templates.shapes import ChatDict, Shape, ShapeName

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SHOWN_TOKENS = 6
SHOWN_CHARS = 40


class BreakKind(StrEnum):
    TEXT = "text"
    """The template writes the earlier turns differently once later ones exist."""
    TOKENS = "tokens"
    """Same text, but the tokenizer merges across the boundary: only a whole re-tokenization
    differs (trajforge's incremental ids do not)."""


class Verdict(StrEnum):
    SAFE = "prefix-safe"
    BREAKS = "breaks"
    UNSUPPORTED = "unsupported"
    """The template refuses the shape (it raises)."""


class PrefixBreak(BaseModel):
    """Where one rendering is not a prefix of the next."""

    model_config = ConfigDict(extra="forbid")

    earlier: str
    """The earlier rendering's point (``prompt for reply 2``, ``after reply 1``, ...)."""
    later: str
    kind: BreakKind
    char: int = Field(ge=0)
    token: int = Field(ge=0)
    earlier_tokens: list[str]
    """The earlier rendering's tokens from the first differing one."""
    later_tokens: list[str]
    earlier_text: str
    """The earlier rendering's text from the first differing character."""
    later_text: str


class ShapeResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    shape: ShapeName
    verdict: Verdict
    renderings: int = Field(default=0, ge=0)
    breaks: list[PrefixBreak] = Field(default_factory=list)
    error: str | None = None

    @property
    def text_safe(self) -> bool:
        """Whether the template text extends turn by turn (token-only breaks aside): what the
        incremental renderer needs."""
        return self.verdict is Verdict.SAFE or (
            self.verdict is Verdict.BREAKS and all(b.kind is BreakKind.TOKENS for b in self.breaks)
        )


class TemplateReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    template: str
    """Where the template came from."""
    tokenizer: str
    """The tokenizer the token comparisons used."""
    tokens_checked: bool
    """Whether token-only breaks count (the tokenizer is the template's own, not a stand-in)."""
    results: list[ShapeResult]

    @property
    def ok(self) -> bool:
        return all(r.verdict is Verdict.SAFE for r in self.results)


@dataclass(frozen=True)
class ChatTemplate:
    """A Jinja chat template and the special tokens it is rendered with."""

    source: str
    text: str
    bos_token: str = ""
    eos_token: str = ""

    def render(
        self, messages: Sequence[ChatDict], tools: Sequence[ChatDict], generation_prompt: bool
    ) -> str:
        """The template's text, rendered as transformers' ``apply_chat_template`` does."""
        # Annotated as returning a string, it returns (renderings, generation indices).
        result: Any = render_jinja_template(
            [list(messages)],
            tools=list(tools) or None,
            chat_template=self.text,
            add_generation_prompt=generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )
        return str(result[0][0])


@dataclass(frozen=True)
class _Point:
    label: str
    count: int
    """How many of the shape's messages are rendered."""
    generation_prompt: bool


def render_points(messages: Sequence[ChatDict]) -> list[_Point]:
    """The points a conversation is rendered at: the prompt before each reply, the
    conversation after each reply, and the whole."""
    points: list[_Point] = []
    replies = 0
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            replies += 1
            if i > 0:
                points.append(_Point(f"prompt for reply {replies}", i, True))
            points.append(_Point(f"after reply {replies}", i + 1, False))
    if not points or points[-1].count != len(messages):
        points.append(_Point("whole", len(messages), False))
    return points


def _common(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _tokens(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int]) -> list[str]:
    return [str(tokenizer.decode([t], skip_special_tokens=False)) for t in ids[:SHOWN_TOKENS]]


def compare(
    tokenizer: PreTrainedTokenizerBase,
    earlier: tuple[str, str],
    later: tuple[str, str],
    *,
    own_tokenizer: bool = True,
) -> PrefixBreak | None:
    """The first difference between two ``(label, rendering)`` pairs, if the earlier rendering
    is not a prefix of the later one in text, or in tokens where ``tokenizer`` is the
    template's own (a stand-in's merges across a boundary say nothing about the model's)."""
    (earlier_label, a), (later_label, b) = earlier, later
    ids_a = list(tokenizer.encode(a, add_special_tokens=False))
    ids_b = list(tokenizer.encode(b, add_special_tokens=False))
    char, token = _common(a, b), _common(ids_a, ids_b)
    if char == len(a) and (token == len(ids_a) or not own_tokenizer):
        return None
    return PrefixBreak(
        earlier=earlier_label,
        later=later_label,
        kind=BreakKind.TEXT if char < len(a) else BreakKind.TOKENS,
        char=char,
        token=token,
        earlier_tokens=_tokens(tokenizer, ids_a[token:]),
        later_tokens=_tokens(tokenizer, ids_b[token:]),
        earlier_text=a[char : char + SHOWN_CHARS],
        later_text=b[char : char + SHOWN_CHARS],
    )


def check_shape(
    template: ChatTemplate,
    tokenizer: PreTrainedTokenizerBase,
    shape: Shape,
    *,
    own_tokenizer: bool = True,
) -> ShapeResult:
    """Render ``shape`` at each of its points and compare each rendering with the next."""
    rendered: list[tuple[str, str]] = []
    for point in render_points(shape.messages):
        try:
            text = template.render(
                shape.messages[: point.count], shape.tools, point.generation_prompt
            )
        except Exception as exc:  # the template is user code: any failure means "refused"
            return ShapeResult(
                shape=shape.name,
                verdict=Verdict.UNSUPPORTED,
                error=f"{point.label}: {type(exc).__name__}: {exc}",
            )
        rendered.append((point.label, text))
    breaks = [
        found
        for earlier, later in pairwise(rendered)
        if (found := compare(tokenizer, earlier, later, own_tokenizer=own_tokenizer)) is not None
    ]
    return ShapeResult(
        shape=shape.name,
        verdict=Verdict.BREAKS if breaks else Verdict.SAFE,
        renderings=len(rendered),
        breaks=breaks,
    )


def check_template(
    template: ChatTemplate,
    tokenizer: PreTrainedTokenizerBase,
    tokenizer_name: str,
    shapes: Sequence[Shape],
    *,
    own_tokenizer: bool = True,
) -> TemplateReport:
    """Check ``template`` on each of ``shapes`` (token breaks only with ``own_tokenizer``)."""
    return TemplateReport(
        template=template.source,
        tokenizer=tokenizer_name,
        tokens_checked=own_tokenizer,
        results=[
            check_shape(template, tokenizer, shape, own_tokenizer=own_tokenizer) for shape in shapes
        ],
    )
