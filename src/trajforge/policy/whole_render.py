"""A conversation rendered whole, for templates that rewrite earlier turns once later ones exist.

Where a chat template is not prefix-safe for a conversation (Qwen 3 and gpt-oss drop past
reasoning, Phi 3.5 ends a last reply differently from a past one), the ids recorded turn by turn
cannot be extended: the model's next prompt is the template's fresh rendering of the whole
history. ``whole_ids`` gives that rendering's ids, split per message, and ``break_reason`` says
where the incremental rendering and the whole one part (the message, its text and its first
differing tokens, as ``trajforge template-check`` shows a break).
"""

from __future__ import annotations

from collections.abc import Sequence

from trajforge.policy.renderer import ChatRenderer, HistoryRewritten, RenderError, common_prefix
from trajforge.schema import Message, ToolSpec

SHOWN_TOKENS = 6
SHOWN_CHARS = 40


def whole_ids(
    renderer: ChatRenderer, messages: Sequence[Message], tools: Sequence[ToolSpec]
) -> list[list[int]]:
    """Per-message ids of the template's rendering of ``messages`` as one conversation, ending
    with the generation prompt, tokenized once. A message's piece ends where the rendering of
    the messages up to it stops agreeing with the whole one: text the template writes
    differently for a past turn (its dropped reasoning, a shortened reply) falls to the
    message after it, so the pieces always concatenate to the exact prompt."""
    full = renderer.render_text(messages, tools, add_generation_prompt=True)
    cuts: list[int] = []
    for j in range(1, len(messages)):
        try:
            partial = renderer.render_text(messages[:j], tools, add_generation_prompt=False)
        except RenderError:  # a template may refuse a partial conversation: no cut found there
            cuts.append(cuts[-1] if cuts else 0)
            continue
        cuts.append(max(common_prefix(partial, full), cuts[-1] if cuts else 0))
    return renderer.split_text(full, cuts)


def _tokens(renderer: ChatRenderer, ids: Sequence[int]) -> list[str]:
    return [renderer.decode([t]) for t in ids[:SHOWN_TOKENS]]


def break_reason(exc: HistoryRewritten) -> str:
    """Which earlier message the template writes differently once the new messages follow it,
    and how: its text and tokens from the first difference, in each rendering."""
    renderer = exc.renderer
    at = common_prefix(exc.earlier, exc.later)
    index = len(exc.history) - 1
    for j in range(len(exc.history)):
        try:
            partial = renderer.render_text(
                exc.history[: j + 1], exc.tools, add_generation_prompt=False
            )
        except RenderError:
            continue
        if common_prefix(partial, exc.earlier) > at:
            index = j
            break
    earlier_ids, later_ids = renderer.encode(exc.earlier), renderer.encode(exc.later)
    token = common_prefix(earlier_ids, later_ids)
    role = exc.history[index].role.value
    return (
        f"the chat template writes message {index} ({role}) differently once message "
        f"{len(exc.history)} follows: {exc.earlier[at : at + SHOWN_CHARS]!r} became "
        f"{exc.later[at : at + SHOWN_CHARS]!r} (tokens from {token}: "
        f"{_tokens(renderer, earlier_ids[token:])} became {_tokens(renderer, later_ids[token:])})"
    )
