"""A program that compacts its own history (as Claude Code does) through ``trajforge serve``:
its session records one episode as a chain of segments, each token-exact on its own, the run's
reward on every segment; other sessions stay episodes of their own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from anthropic import Anthropic
from openai import OpenAI
from serve_helpers import ADD_TOOL, MODEL, add, assert_token_exact, session_trajectories

from trajforge.rollout.context import FOLD_REASON
from trajforge.schema import ExactnessKind, OutcomeStatus, Role, Segment, Trajectory
from trajforge.serve.recording import DEFAULT_SESSION
from trajforge.train.rl.segments import episode_chains

SYSTEM = "You add numbers with the add tool."
SUMMARY = "Add 3 and 3? (Summary of the earlier turns: you added one and two.)"


def _openai_run(base_url: str, session: str) -> str:
    """Turn 1 and turn 2 of a tool loop, then the history compacted to a summary and the last
    turn (the reply and its tool result) for the final answer."""
    sdk = OpenAI(base_url=f"{base_url}/sessions/{session}/v1", api_key="unused", max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Add 1 and 2 and 3?"},
    ]
    for _ in range(2):
        message = sdk.chat.completions.create(model=MODEL, messages=messages, tools=[ADD_TOOL])
        reply = message.choices[0].message
        (call,) = reply.tool_calls or []
        messages.append(reply.model_dump(exclude_none=True))
        result = add(call.function.arguments)  # type: ignore[union-attr]
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    compacted = [messages[0], {"role": "user", "content": SUMMARY}, *messages[-2:]]
    final = sdk.chat.completions.create(model=MODEL, messages=compacted, tools=[ADD_TOOL])
    return final.choices[0].message.content or ""


def _chain(store_path: Path, session: str) -> list[Trajectory]:
    found = session_trajectories(store_path, session)
    return sorted(found, key=lambda t: -1 if t.segment is None else t.segment.index)


def _assert_one_episode_of_two_segments(chain: list[Trajectory]) -> None:
    first, last = chain
    assert first.segment == Segment(episode_id=last.id, index=0)
    assert last.segment == Segment(episode_id=last.id, index=1)
    assert first.is_earlier_segment and not last.is_earlier_segment
    assert first.num_turns == 2
    # The last segment: the summary and the last turn as the client sent them, then the answer.
    assert [m.role for m in last.messages[1:]] == [Role.USER, Role.ASSISTANT, Role.TOOL,
                                                   Role.ASSISTANT]  # fmt: skip
    assert last.messages[2].logprobs is None and last.messages[-1].logprobs is not None
    assert first.exactness.is_exact
    label = last.exactness
    assert label.kind is ExactnessKind.SPLIT and label.split_from == first.id
    # The compacted history (summary and last turn) is rendered whole; the answer is sampled.
    assert label.rendered_prefix == len(last.messages) - 1
    assert label.reason is not None and FOLD_REASON in label.reason  # the viewer marks a fold
    assert last.metadata["gateway"]["rewrite"] == "compaction"
    assert first.metadata["gateway"]["split_into"] == last.id
    assert {t.metadata["gateway"]["segments"] for t in chain} == {2}
    assert episode_chains(chain) == [[0, 1]]


def test_a_compacting_program_records_one_episode_of_two_exact_segments(
    base_url: str, store_path: Path
) -> None:
    assert _openai_run(base_url, "compacts") == "The total is 6."
    _assert_one_episode_of_two_segments(_chain(store_path, "compacts"))
    posted = httpx.post(f"{base_url}/sessions/compacts/reward", json={"reward": 1.0})
    assert posted.json()["trajectories"] == 2
    # The run's reward and outcome are the episode's, on every segment, as a rollout's are.
    chain = _chain(store_path, "compacts")
    assert [(t.outcome.status, t.reward) for t in chain] == [(OutcomeStatus.OK, 1.0)] * 2
    assert_token_exact(store_path)


def test_unrelated_sessions_stay_episodes_of_their_own(base_url: str, store_path: Path) -> None:
    for session in ("one", "two"):
        assert _openai_run(base_url, session) == "The total is 6."
    one, two = _chain(store_path, "one"), _chain(store_path, "two")
    _assert_one_episode_of_two_segments(one)
    _assert_one_episode_of_two_segments(two)
    assert {t.id for t in one}.isdisjoint(t.id for t in two)
    assert episode_chains([*one, *two]) == [[0, 1], [2, 3]]
    assert_token_exact(store_path)


def test_a_side_call_with_its_own_prompt_and_the_default_session_never_chain(
    base_url: str, store_path: Path
) -> None:
    # A harness's side call (a title, a sub-agent) between turns is a trajectory of its own,
    # and the compaction after it still rewrites the main conversation.
    sdk = OpenAI(base_url=f"{base_url}/sessions/side/v1", api_key="unused", max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Add 1 and 2?"},
    ]
    reply = sdk.chat.completions.create(model=MODEL, messages=messages, tools=[ADD_TOOL])
    title = [{"role": "system", "content": "Write a title."}, {"role": "user", "content": "Hi 1"}]
    sdk.chat.completions.create(model=MODEL, messages=title)
    summary = [messages[0], {"role": "user", "content": "Add 4 and 4?"}]
    sdk.chat.completions.create(model=MODEL, messages=summary, tools=[ADD_TOOL])
    assert reply.choices[0].message.tool_calls
    found = session_trajectories(store_path, "side")
    side = [t for t in found if t.segment is None]
    assert [t.messages[0].content for t in side] == ["Write a title."]
    chain = sorted((t for t in found if t.segment), key=lambda t: t.segment.index)  # type: ignore[union-attr]
    assert [t.segment.index for t in chain] == [0, 1]  # type: ignore[union-attr]
    # The episode's last call left its tool call unanswered: truncated, the stored earlier
    # segment too, as its episode's outcome.
    assert {t.outcome.status for t in chain} == {OutcomeStatus.TRUNCATED}
    # Calls that name no session share the default one: many programs, never one episode.
    default = OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    for question in ("Add 1 and 1?", "Add 2 and 2?"):
        asked = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        default.chat.completions.create(model=MODEL, messages=asked, tools=[ADD_TOOL])
    stored = session_trajectories(store_path, DEFAULT_SESSION)
    assert len(stored) == 2 and all(t.segment is None for t in stored)
    assert_token_exact(store_path)


def test_a_compacting_claude_style_run_on_the_messages_api(base_url: str, store_path: Path) -> None:
    sdk = Anthropic(base_url=f"{base_url}/sessions/claude", api_key="dummy", max_retries=0)
    tool = {"name": "add", "description": "Add two integers.",
            "input_schema": ADD_TOOL["function"]["parameters"]}  # fmt: skip
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Add 1 and 2 and 3?"}]
    asked: dict[str, Any] = {"model": MODEL, "max_tokens": 200, "system": SYSTEM, "tools": [tool]}
    for _ in range(2):
        reply = sdk.messages.create(**asked, messages=messages)
        assert reply.stop_reason == "tool_use"
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        results = [{"type": "tool_result", "tool_use_id": b.id,
                    "content": add(json.dumps(b.input))}
                   for b in reply.content if b.type == "tool_use"]  # fmt: skip
        messages.append({"role": "user", "content": results})
    compacted = [{"role": "user", "content": SUMMARY}, *messages[-2:]]
    final = sdk.messages.create(**asked, messages=compacted)
    assert final.content[0].type == "text" and final.content[0].text == "The total is 6."
    _assert_one_episode_of_two_segments(_chain(store_path, "claude"))
    assert_token_exact(store_path)
