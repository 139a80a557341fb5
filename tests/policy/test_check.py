"""check_trajectory: clean trajectories pass; injected drift is found and located."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from image_samples import png_bytes
from trajforge.policy.base import SamplingParams
from trajforge.policy.check import MismatchKind, check_trajectories, check_trajectory
from trajforge.policy.renderer import ChatRenderer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import ImagePart, Message, Role, Task, TextPart, ToolSpec, Trajectory
from trajforge.schema.content import labelled_text

EOS = 2


def make_trajectory(tokenizer: Any, tools: list[ToolSpec], opening: list[Message]) -> Trajectory:
    """Scripted: a call, its result, a final answer, a user follow-up, another answer."""
    replies = [
        'Adding.\n<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>',
        "The sum is 3.",
        "Yes, 3.",
    ]
    policy = ScriptedPolicy(replies, tokenizer)

    async def episode() -> list[Message]:
        session = policy.start_session(opening, tools)
        await policy.respond(session, SamplingParams(), turn=0)
        session.add_observations(
            [Message(role=Role.TOOL, content="3", tool_call_id="call_0_0", name="add")]
        )
        await policy.respond(session, SamplingParams(), turn=1)
        session.add_observations([Message(role=Role.USER, content="Sure?")])
        await policy.respond(session, SamplingParams(), turn=2)
        return session.messages

    messages = asyncio.run(episode())
    return Trajectory(
        task=Task(id="t1", prompt="1+2"), tools=tools, messages=messages, model="expert"
    )


@pytest.fixture
def traj(smol_tokenizer: Any, tools: list[ToolSpec], opening: list[Message]) -> Trajectory:
    return make_trajectory(smol_tokenizer, tools, opening)


def with_ids(
    traj: Trajectory, index: int, ids: list[int], logprobs: list[float] | None = None
) -> Trajectory:
    messages = list(traj.messages)
    update: dict[str, Any] = {"token_ids": ids}
    if messages[index].role is Role.ASSISTANT:
        update["logprobs"] = logprobs
    messages[index] = messages[index].model_copy(update=update)
    return traj.model_copy(update={"messages": messages})


def test_clean_trajectory_has_no_mismatch(traj: Trajectory, smol_tokenizer: Any) -> None:
    assert check_trajectory(traj, smol_tokenizer) == []


def test_flipped_observation_token_is_located(traj: Trajectory, smol_tokenizer: Any) -> None:
    ids = list(traj.messages[3].token_ids or [])
    ids[4] = ids[4] + 1
    (found,) = check_trajectory(with_ids(traj, 3, ids), smol_tokenizer)
    assert found.kind is MismatchKind.TOKENS
    assert (found.message_index, found.role, found.position) == (3, "tool", 4)
    assert found.expected != found.actual


def test_flipped_prompt_token_is_located(traj: Trajectory, smol_tokenizer: Any) -> None:
    ids = list(traj.messages[0].token_ids or [])
    bad = ids[:10] + ids[11:]
    (found,) = check_trajectory(with_ids(traj, 0, bad), smol_tokenizer)
    assert (found.kind, found.message_index, found.position) == (MismatchKind.TOKENS, 0, 10)


def test_observation_token_in_the_loss_mask_is_found(traj: Trajectory, smol_tokenizer: Any) -> None:
    assistant, tool = traj.messages[2], traj.messages[3]
    a_ids, t_ids = list(assistant.token_ids or []), list(tool.token_ids or [])
    assert a_ids[-1] == EOS and t_ids[0] == 198  # "\n" closes the turn after the sampled EOS
    moved = with_ids(traj, 2, [*a_ids, t_ids[0]], [*(assistant.logprobs or []), 0.0])
    moved = with_ids(moved, 3, t_ids[1:])
    (found,) = check_trajectory(moved, smol_tokenizer)
    assert found.kind is MismatchKind.MASK
    assert (found.message_index, found.position) == (2, len(a_ids))


def test_sampled_token_moved_out_of_the_mask_is_found(
    traj: Trajectory, smol_tokenizer: Any
) -> None:
    assistant, tool = traj.messages[2], traj.messages[3]
    a_ids, t_ids = list(assistant.token_ids or []), list(tool.token_ids or [])
    # The last call token leaves the assistant message: the ids no longer parse to the call.
    moved = with_ids(traj, 2, [*a_ids[:-2], EOS], (assistant.logprobs or [])[:-1])
    moved = with_ids(moved, 3, [a_ids[-2], *t_ids])
    kinds = {(m.kind, m.message_index) for m in check_trajectory(moved, smol_tokenizer)}
    assert (MismatchKind.CONTENT, 2) in kinds and (MismatchKind.TOKENS, 3) in kinds


def test_content_that_disagrees_with_the_ids_is_found(
    traj: Trajectory, smol_tokenizer: Any
) -> None:
    messages = list(traj.messages)
    messages[4] = messages[4].model_copy(update={"content": "The sum is 4."})
    (found,) = check_trajectory(traj.model_copy(update={"messages": messages}), smol_tokenizer)
    assert (found.kind, found.message_index) == (MismatchKind.CONTENT, 4)


def test_logprob_count_and_missing_ids_are_found(traj: Trajectory, smol_tokenizer: Any) -> None:
    messages = list(traj.messages)
    messages[2] = messages[2].model_copy(update={"logprobs": [0.0]})
    (found,) = check_trajectory(traj.model_copy(update={"messages": messages}), smol_tokenizer)
    assert (found.kind, found.message_index) == (MismatchKind.LOGPROBS, 2)
    missing = with_ids(traj, 3, [])
    missing.messages[3] = missing.messages[3].model_copy(update={"token_ids": None})
    (found,) = check_trajectory(missing, smol_tokenizer)
    assert (found.kind, found.message_index) == (MismatchKind.MISSING_TOKENS, 3)


def test_check_trajectories_skips_untokenized_and_unknown(
    traj: Trajectory, smol_tokenizer: Any
) -> None:
    text_only = Trajectory(
        task=Task(id="t2", prompt="x"),
        messages=[Message(role=Role.USER, content="x"), Message(role=Role.ASSISTANT, content="y")],
        model="openai:http://127.0.0.1:1/v1#m",
    )
    bad = with_ids(traj, 3, [1, 2, 3])
    seen: list[str] = []
    report = check_trajectories(
        [traj, text_only, bad],
        lambda t: None if t.model and t.model.startswith("openai:") else smol_tokenizer,
        on_checked=lambda t: seen.append(t.id),
    )
    assert (report.checked, report.skipped, report.bad_trajectories) == (2, 1, 1)
    assert report.skipped_ids == [text_only.id]
    assert not report.ok and {m.trajectory_id for m in report.mismatches} == {bad.id}
    assert seen == [traj.id, text_only.id, bad.id]


def _with_an_image(traj: Trajectory) -> Trajectory:
    """``traj`` with an image beside its first user message's text (its ids unchanged: a
    vision-language model's ids would hold the image's placeholder tokens there)."""
    messages = list(traj.messages)
    k = next(i for i, m in enumerate(messages) if m.role is Role.USER)
    parts = [TextPart(text=messages[k].text), ImagePart.from_bytes(png_bytes(1))]
    messages[k] = messages[k].model_copy(update={"content": parts})
    return traj.model_copy(update={"messages": messages, "id": "with-image"})


class _PlacingRenderer(ChatRenderer):
    """A renderer that places images, as a vision-language model's does (here as text)."""

    def template_messages(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> list[dict[str, Any]]:
        placed = [m.model_copy(update={"content": labelled_text(m.content)}) for m in messages]
        return super().template_messages(placed, tools)


def test_images_a_text_renderer_cannot_place_are_skipped_not_drift(
    traj: Trajectory, smol_tokenizer: Any
) -> None:
    seen = _with_an_image(traj)
    report = check_trajectories([traj, seen], lambda t: smol_tokenizer)
    assert (report.checked, report.skipped, report.skipped_images) == (1, 1, 1)
    assert report.ok and report.skipped_ids == [seen.id]
    placing = check_trajectories([seen], lambda t: _PlacingRenderer(smol_tokenizer))
    assert (placing.checked, placing.skipped_images) == (1, 0)
    # The ids were rendered without the image's label: a renderer that places it sees drift.
    assert {m.kind for m in placing.mismatches} == {MismatchKind.TOKENS}
