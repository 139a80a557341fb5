"""Token exactness checks for stored trajectories.

A trajectory is replayed through a ``ChatRenderer``: the opening messages and every batch of
observations are rendered again from the messages (with the assistant turns' stored ids, which
cannot be re-derived from text), and the result is compared with the stored ids per message.
On top of that:

- each assistant message's ids must decode and parse back to its content and tool calls;
- its logprobs (when present) must be one per token;
- nothing may follow the end-of-turn token inside an assistant message: a policy stops sampling
  there, so such tokens were not sampled and would leak into the loss mask (the mask is exactly
  the assistant messages' ids);
- its exactness label must not claim more than its provenance shows: ids rendered from text
  (``metadata["rendered_with"]``) are not ``exact``, and a split names another trajectory.
  Every trajectory's label is checked, those without ids or a tokenizer here too.
- the segments of an episode whose context was rewritten form one chain: indexes 0 to the
  episode's own, each after the first split from the one before (``check_segments``);
- the rendered prefix of a trajectory that is not exact is replayed as it was opened: turn by
  turn, or as one whole rendering where the template rewrites earlier turns
  (``RenderedSession.opened``); a whole rendering's replies are compared as ids, not parsed.

A trajectory with image parts is checked only by a renderer that places images (a
vision-language model's, with its image placeholder tokens); the text-only renderer refuses
them, and such a trajectory is skipped and counted (``skipped_images``), not reported as drift.

A closing token moved from an observation into the preceding assistant message right before its
end is indistinguishable from a sampled one and is not reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from trajforge.policy.renderer import ChatRenderer, RenderError, ToolProtocol
from trajforge.policy.session import RenderedSession
from trajforge.policy.text_render import RENDERED_WITH
from trajforge.schema import ExactnessKind, Message, Role, Trajectory

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_CONTEXT = 6
RAW_RENDERING = "raw"
"""``metadata["rendering"]`` of a trajectory whose ids are a raw prompt and its completion (a
text-completion call), not a chat rendering: only what holds for any ids is checked."""


class MismatchKind(StrEnum):
    MISSING_TOKENS = "missing_tokens"
    TOKENS = "tokens"
    LOGPROBS = "logprobs"
    MASK = "mask"
    CONTENT = "content"
    RENDER = "render"
    EXACTNESS = "exactness"
    SEGMENT = "segment"


class Mismatch(BaseModel):
    """One way a stored trajectory differs from its exact rendering."""

    model_config = ConfigDict(extra="forbid")

    trajectory_id: str
    message_index: int | None = None
    role: str | None = None
    kind: MismatchKind
    position: int | None = None
    expected: str = ""
    actual: str = ""
    detail: str = ""


class CheckReport(BaseModel):
    """The result of checking many trajectories."""

    model_config = ConfigDict(extra="forbid")

    checked: int = 0
    skipped: int = 0
    skipped_ids: list[str] = Field(default_factory=list)
    skipped_text_only: int = 0
    """Skipped: no message carries token ids (imported text, a server that reports none)."""
    skipped_no_tokenizer: int = 0
    """Skipped: its model's tokenizer is not here (``--tokenizer`` names one)."""
    skipped_images: int = 0
    """Skipped: it holds images and its renderer is text only, so the image placeholder tokens
    in its ids cannot be rendered again (a vision-language model's renderer checks them)."""
    mismatches: list[Mismatch] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    @property
    def bad_trajectories(self) -> int:
        return len({m.trajectory_id for m in self.mismatches})


def _context(renderer: ChatRenderer, ids: Sequence[int], at: int) -> str:
    return renderer.decode(ids[max(0, at - _CONTEXT) : at + _CONTEXT])


def _compare_ids(
    renderer: ChatRenderer, traj_id: str, index: int, message: Message, expected: Sequence[int]
) -> Mismatch | None:
    actual = message.token_ids or []
    if list(actual) == list(expected):
        return None
    at = next(
        (i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b),
        min(len(expected), len(actual)),
    )
    return Mismatch(
        trajectory_id=traj_id,
        message_index=index,
        role=message.role.value,
        kind=MismatchKind.TOKENS,
        position=at,
        expected=_context(renderer, expected, at),
        actual=_context(renderer, actual, at),
        detail=f"{len(expected)} ids expected, {len(actual)} stored; first difference at {at}",
    )


def _check_assistant(
    renderer: ChatRenderer, traj: Trajectory, index: int, turn: int
) -> list[Mismatch]:
    found: list[Mismatch] = []
    message = traj.messages[index]
    ids = message.token_ids or []
    where = {"trajectory_id": traj.id, "message_index": index, "role": message.role.value}
    if message.logprobs is not None and len(message.logprobs) != len(ids):
        found.append(
            Mismatch(
                **where,
                kind=MismatchKind.LOGPROBS,
                detail=f"{len(message.logprobs)} logprobs for {len(ids)} token ids",
            )
        )
    if message.logprobs is None:
        # A message given as text that follows no generation prompt holds the template's
        # opening or the header of its turn first (``ChatRenderer.lead_ids``).
        lead = renderer.lead_ids(traj.messages[:index], traj.tools)
        ids = ids[len(lead) :] if ids[: len(lead)] == lead else ids
    eot = list(renderer.end_of_turn_ids)
    stop = next((i + len(eot) for i in range(len(ids)) if ids[i : i + len(eot)] == eot), None)
    if stop is not None and stop < len(ids):
        found.append(
            Mismatch(
                **where,
                kind=MismatchKind.MASK,
                position=stop,
                actual=renderer.decode(ids[stop : stop + 2 * _CONTEXT]),
                detail=f"{len(ids) - stop} id(s) after the end-of-turn token were not sampled "
                "but sit in the loss mask",
            )
        )
    parsed = renderer.parse(ids, turn)
    calls = [(c.name, c.arguments, c.parse_error) for c in parsed.tool_calls]
    stored = [(c.name, c.arguments, c.parse_error) for c in message.tool_calls]
    if parsed.content != message.text.strip() or calls != stored:
        found.append(
            Mismatch(
                **where,
                kind=MismatchKind.CONTENT,
                expected=renderer.completion_text(ids)[:200],
                actual=message.content[:200],
                detail=f"the ids parse to {len(calls)} tool call(s) and different content than "
                f"the message's ({len(stored)} tool call(s))",
            )
        )
    return found


def check_trajectory(
    traj: Trajectory,
    tokenizer: PreTrainedTokenizerBase | ChatRenderer,
    *,
    tool_protocol: ToolProtocol | str = ToolProtocol.AUTO,
    parser: str = "text",
) -> list[Mismatch]:
    """Every way ``traj``'s stored ids differ from its exact rendering (empty when exact)."""
    renderer = _renderer(tokenizer, tool_protocol, parser)
    found: list[Mismatch] = []
    for i, m in enumerate(traj.messages):
        if m.token_ids is None:
            found.append(
                Mismatch(
                    trajectory_id=traj.id,
                    message_index=i,
                    role=m.role.value,
                    kind=MismatchKind.MISSING_TOKENS,
                    detail="the message has no token ids",
                )
            )
    if found:
        return found
    try:
        # The rendered prefix of a trajectory that is not exact opened it as the model was
        # given it: turn by turn, or whole where the template rewrites earlier turns.
        prefix = 0 if traj.exactness.is_exact else traj.exactness.rendered_prefix or 0
        session = RenderedSession.opened(
            renderer, traj.messages[:prefix], traj.tools, task=traj.task
        )
        session.add_messages(traj.messages[prefix:])
        turns = 0
        for i, (stored, expected) in enumerate(zip(traj.messages, session.messages, strict=True)):
            if stored.role is Role.ASSISTANT and i >= session.whole_prefix:
                found += _check_assistant(renderer, traj, i, turns)
            else:
                mismatch = _compare_ids(renderer, traj.id, i, stored, expected.token_ids or [])
                found += [] if mismatch is None else [mismatch]
            turns += stored.role is Role.ASSISTANT
    except RenderError as exc:
        return [Mismatch(trajectory_id=traj.id, kind=MismatchKind.RENDER, detail=str(exc))]
    return found


def _renderer(
    tokenizer: PreTrainedTokenizerBase | ChatRenderer,
    tool_protocol: ToolProtocol | str = ToolProtocol.AUTO,
    parser: str = "text",
) -> ChatRenderer:
    if isinstance(tokenizer, ChatRenderer):
        return tokenizer
    return ChatRenderer(tokenizer, tool_protocol=tool_protocol, parser=parser)


def renders_images(renderer: ChatRenderer, traj: Trajectory) -> bool:
    """Whether ``renderer`` places ``traj``'s images (asked with its first image alone): the
    text-only renderer refuses image parts, a vision-language one renders its placeholders."""
    image = next((p for m in traj.messages for p in m.images), None)
    if image is None:
        return True
    try:
        renderer.template_messages([Message(role=Role.USER, content=[image])], [])
    except RenderError:
        return False
    return True


def check_label(traj: Trajectory) -> list[Mismatch]:
    """Where ``traj``'s exactness label claims more than its provenance shows."""
    label = traj.exactness
    detail = None
    if label.is_exact and traj.metadata.get(RENDERED_WITH):
        detail = (
            f"labelled exact, but its ids were rendered from text by "
            f"{traj.metadata[RENDERED_WITH]} (re-rendered)"
        )
    elif label.kind is ExactnessKind.SPLIT and label.split_from in (None, traj.id):
        detail = "labelled split, but it names no other trajectory it broke off"
    if detail is None:
        return []
    return [Mismatch(trajectory_id=traj.id, kind=MismatchKind.EXACTNESS, detail=detail)]


def check_raw(traj: Trajectory) -> list[Mismatch]:
    """A raw prompt and completion: every message has ids, each sampled id one logprob."""
    found = []
    for index, message in enumerate(traj.messages):
        where = {"trajectory_id": traj.id, "message_index": index, "role": message.role.value}
        if message.token_ids is None:
            found.append(Mismatch(**where, kind=MismatchKind.MISSING_TOKENS))
        elif message.logprobs is not None and len(message.logprobs) != len(message.token_ids):
            found.append(
                Mismatch(
                    **where,
                    kind=MismatchKind.LOGPROBS,
                    detail=f"{len(message.token_ids)} ids, {len(message.logprobs)} logprobs",
                )
            )
    return found


def check_segments(trajectories: Iterable[Trajectory]) -> list[Mismatch]:
    """Where the segments among ``trajectories`` do not chain: an episode (the segment whose id
    is its ``episode_id``) must follow segments 0 up to its own index, each present once and
    split from the one before it. Episodes not among ``trajectories`` are not judged."""
    chains: dict[str, dict[int, list[Trajectory]]] = {}
    for traj in trajectories:
        if traj.segment is not None:
            chains.setdefault(traj.segment.episode_id, {}).setdefault(traj.segment.index, [])
            chains[traj.segment.episode_id][traj.segment.index].append(traj)
    found: list[Mismatch] = []
    for episode_id, by_index in chains.items():
        last = [t for ts in by_index.values() for t in ts if t.id == episode_id]
        if not last:
            continue
        end = last[0].segment.index if last[0].segment is not None else 0
        for index in range(end + 1):
            here = by_index.get(index, [])
            before = {t.id for t in by_index.get(index - 1, [])}
            detail = None
            if len(here) != 1:
                detail = f"segment {index} of episode {episode_id} is stored {len(here)} times"
            elif index and before and here[0].exactness.split_from not in before:
                detail = f"segment {index} does not split from segment {index - 1} of its episode"
            if detail is not None:
                where = here[0].id if here else episode_id
                found.append(
                    Mismatch(trajectory_id=where, kind=MismatchKind.SEGMENT, detail=detail)
                )
        for index in sorted(i for i in by_index if i > end):
            found.append(
                Mismatch(
                    trajectory_id=by_index[index][0].id,
                    kind=MismatchKind.SEGMENT,
                    detail=f"segment {index} comes after its episode's last segment ({end})",
                )
            )
    return found


def check_trajectories(
    trajectories: Iterable[Trajectory],
    tokenizer_for: Callable[[Trajectory], PreTrainedTokenizerBase | ChatRenderer | None],
    *,
    on_checked: Callable[[Trajectory], None] | None = None,
) -> CheckReport:
    """Check many trajectories. ``tokenizer_for`` picks each one's tokenizer (or renderer);
    it returns ``None`` for a trajectory that cannot be checked, and trajectories whose
    messages carry no token ids at all (text-only endpoints), or that hold images their
    renderer cannot place, are skipped as well."""
    report = CheckReport()
    segments: list[Trajectory] = []
    for traj in trajectories:
        if traj.segment is not None:
            segments.append(traj)
        report.mismatches += check_label(traj)
        has_ids = any(m.token_ids is not None for m in traj.messages)
        tokenizer = tokenizer_for(traj) if has_ids else None
        if tokenizer is None:
            report.skipped += 1
            report.skipped_ids.append(traj.id)
            if has_ids:
                report.skipped_no_tokenizer += 1
            else:
                report.skipped_text_only += 1
        elif traj.metadata.get("rendering") == RAW_RENDERING:
            report.checked += 1
            report.mismatches += check_raw(traj)
        elif not renders_images(renderer := _renderer(tokenizer), traj):
            report.skipped += 1
            report.skipped_ids.append(traj.id)
            report.skipped_images += 1
        else:
            report.checked += 1
            report.mismatches += check_trajectory(traj, renderer)
        if on_checked is not None:
            on_checked(traj)
    report.mismatches += check_segments(segments)
    return report
