"""Distilling memory items: the templates on a success and a failure, and a policy as the
distiller (its reply parsed strictly, a non-item skipped and counted)."""

from __future__ import annotations

from trajforge.memory.distil import PolicyDistiller, distil_rules, parse_item_fields
from trajforge.memory.items import MemoryKind
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import Message, Outcome, OutcomeStatus, Role, Task, ToolCall, Trajectory


def episode(reward: float, status: OutcomeStatus = OutcomeStatus.OK) -> Trajectory:
    call = ToolCall(id="c0", name="move", arguments={"direction": "down"})
    return Trajectory(
        id="traj-1",
        env="keydoor",
        task=Task(id="t", prompt="Reach the goal G past the locked door A"),
        messages=[
            Message(role=Role.USER, content="Reach the goal G past the locked door A"),
            Message(role=Role.ASSISTANT, tool_calls=[call]),
            Message(role=Role.TOOL, content="Error: the door is locked", tool_call_id="c0"),
            Message(role=Role.ASSISTANT, content="I am done"),
        ],
        outcome=Outcome(status=status, reward=reward, reason="turn limit"),
    )


def test_a_success_becomes_what_worked() -> None:
    item = distil_rules(episode(1.0))
    assert item.kind is MemoryKind.SUCCESS
    assert (item.id, item.env, item.sources, item.distiller) == (
        "mem-traj-1",
        "keydoor",
        ["traj-1"],
        "rules",
    )
    assert item.title == "Worked: Reach the goal G past the locked door A"
    assert (
        item.lesson == 'This sequence reached the goal: move({"direction": "down"}) -> I am done.'
    )
    assert item.applies_when == "Reach the goal G past the locked door A"


def test_a_failure_becomes_what_to_avoid_with_how_it_ended() -> None:
    item = distil_rules(episode(1.0, OutcomeStatus.TRUNCATED))  # cut short: never a success
    assert item.kind is MemoryKind.FAILURE
    assert item.title.startswith("Failed: ")
    assert item.lesson.startswith("Avoid repeating this (turn limit, reward 1.0): move(")
    assert item.lesson.endswith("It met: Error: the door is locked.")


def test_item_fields_are_parsed_strictly() -> None:
    good = '{"title": "Keys first", "applies_when": "locked doors", "lesson": "fetch the key"}'
    assert parse_item_fields(f"Sure: {good}") == {
        "title": "Keys first",
        "applies_when": "locked doors",
        "lesson": "fetch the key",
    }
    assert parse_item_fields("no object") is None
    assert parse_item_fields('{"title": "x", "applies_when": "y"}') is None
    assert parse_item_fields('{"title": "", "applies_when": "y", "lesson": "z"}') is None


async def test_a_policy_writes_items_and_a_non_item_is_skipped() -> None:
    good = '{"title": "Keys first", "applies_when": "locked doors", "lesson": "fetch the key"}'
    replies = iter(["no idea", good, "still nothing", "nothing again"])
    policy = ScriptedPolicy(lambda task, messages: next(replies), load_tokenizer(), name="writer")
    distiller = PolicyDistiller(policy, max_retries=1)
    item = await distiller(episode(0.0))
    assert item is not None
    assert (item.title, item.lesson, item.distiller) == ("Keys first", "fetch the key", "writer")
    assert item.kind is MemoryKind.FAILURE and item.sources == ["traj-1"]
    assert await distiller(episode(1.0)) is None
    assert distiller.skipped == 1
