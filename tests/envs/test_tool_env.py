"""ToolEnv: every call gets exactly one tool message; every failure is a named error, not a crash."""

from __future__ import annotations

import asyncio
import time

import pytest

from episodes import assistant_message, play, reward
from trajforge.envs.builtin import calculator
from trajforge.envs.tool import ToolError, tool
from trajforge.envs.tool_env import EnvError, ToolEnv
from trajforge.schema import Message, OutcomeStatus, Role, Task, Trajectory
from trajforge.schema.evidence import Evidence

pytestmark = pytest.mark.timeout(60)


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


@tool
def explode(reason: str) -> str:
    """Always fail."""
    raise ValueError(f"boom: {reason}")


@tool
def refuse() -> str:
    """Fail the way tools report problems to the model."""
    raise ToolError("the widget is not plugged in")


@tool(timeout=0.2)
async def sleepy() -> str:
    """Sleep too long."""
    await asyncio.sleep(30)
    return "never"


@tool
def slow_sync(seconds: float) -> str:
    """Block the thread for a while."""
    time.sleep(seconds)
    return "slept"


TASK = Task(id="t", prompt="Add 2 and 3.", answer="5")


def make_env(**kwargs: object) -> ToolEnv:
    return ToolEnv([add, explode, refuse, sleepy, slow_sync], **kwargs)  # type: ignore[arg-type]


def call(text: str, turn: int = 0) -> Message:
    return assistant_message(text, turn)


async def one_step(env: ToolEnv, text: str) -> list[Message]:
    await env.reset(TASK)
    result = await env.step(call(text))
    assert not result.done
    return result.observations


def run_one(text: str, **kwargs: object) -> Message:
    observations = asyncio.run(one_step(make_env(**kwargs), text))
    assert len(observations) == 1
    return observations[0]


def test_reset_returns_system_and_user_messages() -> None:
    env = ToolEnv([add], system_prompt="Be brief.")
    opening = asyncio.run(env.reset(TASK))
    assert [(m.role, m.content) for m in opening] == [
        (Role.SYSTEM, "Be brief."),
        (Role.USER, "Add 2 and 3."),
    ]
    assert [s.name for s in env.tools] == ["add"]


def test_good_call_returns_result_with_id_and_name() -> None:
    obs = run_one('<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>')
    assert (obs.role, obs.content, obs.tool_call_id, obs.name) == (
        Role.TOOL,
        "5",
        "call_0_0",
        "add",
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '<tool_call>{"name": "mul", "arguments": {}}</tool_call>',
            "Error: unknown tool 'mul'; available tools: add, explode, refuse, sleepy, slow_sync",
        ),
        (
            '<tool_call>{"name": "add", "arguments": {"a": 1,}}</tool_call>',
            "Error: could not parse the tool call: invalid JSON in tool call: Expecting property name",
        ),
        (
            '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>',
            "Error: invalid arguments for tool 'add': missing required argument 'b'",
        ),
        (
            '<tool_call>{"name": "add", "arguments": {"a": 1, "b": "two"}}</tool_call>',
            "Error: invalid arguments for tool 'add': argument 'b': expected integer, got 'two'",
        ),
        (
            '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2, "c": 3}}</tool_call>',
            "Error: invalid arguments for tool 'add': unexpected argument 'c'",
        ),
        (
            '<tool_call>{"name": "explode", "arguments": {"reason": "x"}}</tool_call>',
            "Error: tool 'explode' raised ValueError: boom: x",
        ),
        (
            '<tool_call>{"name": "refuse", "arguments": {}}</tool_call>',
            "Error: the widget is not plugged in",
        ),
        (
            '<tool_call>{"name": "sleepy", "arguments": {}}</tool_call>',
            "Error: tool 'sleepy' timed out after 0.2 s",
        ),
        (
            '<tool_call>{"arguments": {}}</tool_call>',
            'Error: could not parse the tool call: the tool call has no "name" string',
        ),
    ],
)
def test_each_failure_is_a_named_tool_error(text: str, expected: str) -> None:
    obs = run_one(text)
    assert obs.content.startswith(expected), obs.content
    assert obs.tool_call_id == "call_0_0"


def test_sync_tool_timeout_uses_env_default_and_does_not_block_the_loop() -> None:
    async def run() -> tuple[Message, float]:
        started = time.perf_counter()
        text = '<tool_call>{"name": "slow_sync", "arguments": {"seconds": 1.0}}</tool_call>'
        observations = await one_step(make_env(tool_timeout=0.1), text)
        return observations[0], time.perf_counter() - started

    obs, elapsed = asyncio.run(run())
    assert obs.content == "Error: tool 'slow_sync' timed out after 0.1 s"
    assert elapsed < 0.9


def test_calls_in_one_turn_run_concurrently_and_answer_in_order() -> None:
    text = (
        "".join(
            '<tool_call>{"name": "slow_sync", "arguments": {"seconds": 0.3}}</tool_call>'
            for _ in range(4)
        )
        + '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 1}}</tool_call>'
    )
    started = time.perf_counter()
    observations = asyncio.run(one_step(make_env(), text))
    assert time.perf_counter() - started < 1.0
    assert [o.tool_call_id for o in observations] == [f"call_0_{k}" for k in range(5)]
    assert [o.content for o in observations] == ["slept"] * 4 + ["2"]


def test_episode_continues_after_errors_and_ends_on_a_plain_answer() -> None:
    async def run() -> Trajectory:
        env = make_env()
        messages = await env.reset(TASK)
        for turn, text in enumerate(
            [
                '<tool_call>{"name": "nope", "arguments": {}}</tool_call>',
                '<tool_call>{"name": "explode", "arguments": {"reason": "r"}}</tool_call>',
                '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>',
            ]
        ):
            action = call(text, turn)
            result = await env.step(action)
            assert not result.done and result.reward == 0.0
            messages += [action, *result.observations]
        final = call("5", 3)
        result = await env.step(final)
        assert result.done and result.reward == 1.0 and result.info["truncated"] is False
        return Trajectory(task=TASK, messages=[*messages, final])

    traj = asyncio.run(run())
    assert traj.num_turns == 4


def test_max_turns_truncates_answers_the_calls_and_still_asks_the_verifier() -> None:
    verdicts: list[int] = []

    def verifier(evidence: Evidence) -> float:
        verdicts.append(len(evidence.messages))
        return 0.25

    async def run() -> None:
        env = make_env(max_turns=2, verifier=verifier)
        await env.reset(TASK)
        first = await env.step(
            call('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 1}}</tool_call>', 0)
        )
        assert not first.done
        second = await env.step(
            call('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>', 1)
        )
        assert second.done and second.info["truncated"] is True and second.reward == 0.25
        assert [o.content for o in second.observations] == ["3"]
        with pytest.raises(EnvError, match="after the episode ended"):
            await env.step(call("more", 2))

    asyncio.run(run())
    assert verdicts == [6]


def test_async_verifier_and_out_of_range_reward() -> None:
    async def good(evidence: Evidence) -> float:
        return 1.0

    def bad(evidence: Evidence) -> float:
        return 2.0

    async def run(verifier: object) -> float:
        env = ToolEnv([add], verifier=verifier)  # type: ignore[arg-type]
        await env.reset(TASK)
        return (await env.step(call("done"))).reward

    assert asyncio.run(run(good)) == 1.0
    with pytest.raises(EnvError, match="outside"):
        asyncio.run(run(bad))


def test_step_before_reset_is_an_error() -> None:
    with pytest.raises(EnvError, match="reset"):
        asyncio.run(ToolEnv([add]).step(call("hi")))


def test_state_key_is_stable_and_tracks_tool_history() -> None:
    async def keys(texts: list[str]) -> list[str | None]:
        env = ToolEnv([add])
        await env.reset(TASK)
        out = []
        for turn, text in enumerate(texts):
            out.append((await env.step(call(text, turn))).state_key)
        return out

    add12 = '<tool_call>{"name": "add", "arguments": {"b": 2, "a": 1}}</tool_call>'
    add21 = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 1}}</tool_call>'
    a = asyncio.run(keys([add12, add12, "x"]))
    b = asyncio.run(keys([add12, add12, "x"]))
    c = asyncio.run(keys([add21, add12, "x"]))
    assert a == b
    assert len(set(a)) == 3
    assert c[0] == a[0] and c[1] != a[1]


def test_malformed_call_mid_episode_is_named_and_the_expert_still_finishes() -> None:
    task = calculator.generate_tasks(1, seed=3)[0]
    turns: list[int] = []

    def reply(t: Task, messages: list[Message]) -> str | None:
        turn = sum(1 for m in messages if m.role is Role.ASSISTANT)
        turns.append(turn)
        if turn == 1:
            return '<tool_call>{"name": "calculator", "arguments": {"expression": "1 +</tool_call>'
        if turn == 2:
            return '<tool_call>{"name": "calculator", "arguments": {"expresion": "1"}}</tool_call>'
        return calculator.expert(t, messages)

    episode = play(calculator.make_env, task, reply)
    tool_messages = [m for m in episode.messages if m.role is Role.TOOL]
    assert tool_messages[1].content.startswith("Error: could not parse the tool call: invalid JSON")
    assert tool_messages[1].tool_call_id == "call_1_0"
    assert tool_messages[2].content == (
        "Error: invalid arguments for tool 'calculator': missing required argument 'expression'; "
        "unexpected argument 'expresion'"
    )
    assert episode.outcome.status is OutcomeStatus.OK and reward(episode) == 1.0
    assert episode.messages[-1].content == f"The answer is {task.answer}."
