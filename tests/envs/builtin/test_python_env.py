"""The python environment: seeded problems, the sandboxed run_python tool, verifier, expert."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from trajforge.envs import sandbox
from trajforge.envs.base import Env
from trajforge.envs.builtin import python_env
from trajforge.envs.sandbox import SandboxConfig, SandboxError, SandboxUnavailableError
from trajforge.errors import InfraError
from trajforge.formats.tool_calls import format_tool_call, parse_tool_calls
from trajforge.rollout import PolicyRef, RolloutSpec, run_rollout
from trajforge.schema import Fault, Message, Role, Task, is_infra_failure
from trajforge.schema.evidence import Evidence

needs_sandbox = pytest.mark.skipif(
    not sandbox.sandbox_available(),
    reason="bubblewrap cannot run here (apt-get install bubblewrap)",
)
Reply = Callable[[Task, list[Message]], str | None]


async def _episode(env: Env, task: Task, reply: Reply) -> tuple[float, list[Message]]:
    messages = await env.reset(task)
    turn = 0
    while True:
        parsed = parse_tool_calls(reply(task, messages) or "", id_prefix=f"call_{turn}")
        action = Message(role=Role.ASSISTANT, content=parsed.content, tool_calls=parsed.tool_calls)
        messages.append(action)
        result = await env.step(action)
        messages.extend(result.observations)
        turn += 1
        if result.done:
            await env.close()
            return result.reward, messages


async def _scores(tasks: list[Task], reply: Reply, parallel: int = 4) -> list[float]:
    gate = asyncio.Semaphore(parallel)

    async def one(task: Task) -> float:
        async with gate:
            reward, _ = await _episode(python_env.make_env(), task, reply)
            return reward

    return list(await asyncio.gather(*(one(t) for t in tasks)))


def test_tasks_are_seeded_and_splits_disjoint() -> None:
    first = python_env.generate_tasks(50, seed=3)
    assert [t.id for t in first] == [t.id for t in python_env.generate_tasks(50, seed=3)]
    assert [t.id for t in first] != [t.id for t in python_env.generate_tasks(50, seed=4)]
    test_ids = {t.id for t in python_env.generate_tasks(30, seed=3, split="test")}
    assert not test_ids & {t.id for t in first}
    assert all(t.env == "python" and t.answer is not None and t.data["code"] for t in first)


@needs_sandbox
def test_expert_solves_ten_tasks() -> None:
    tasks = python_env.generate_tasks(10, seed=0)
    assert asyncio.run(_scores(tasks, python_env.expert)) == [1.0] * 10


@needs_sandbox
@pytest.mark.slow
def test_expert_solves_100_tasks() -> None:
    tasks = python_env.generate_tasks(100, seed=1)
    assert asyncio.run(_scores(tasks, python_env.expert)) == [1.0] * 100


def test_empty_and_wrong_policies_score_zero() -> None:
    tasks = python_env.generate_tasks(20, seed=2)
    assert sum(asyncio.run(_scores(tasks, lambda t, m: ""))) == 0.0
    assert sum(asyncio.run(_scores(tasks, lambda t, m: "The answer is 0."))) == 0.0


@needs_sandbox
def test_expert_trajectory_uses_the_tool_then_answers() -> None:
    task = python_env.generate_tasks(1, seed=5)[0]
    reward, messages = asyncio.run(_episode(python_env.make_env(), task, python_env.expert))
    assert reward == 1.0
    roles = [m.role for m in messages]
    assert roles == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert messages[2].tool_calls[0].id == "call_0_0"
    assert messages[3].content.strip() == str(task.answer)


@needs_sandbox
def test_failures_come_back_as_tool_errors_and_the_episode_goes_on() -> None:
    task = python_env.generate_tasks(1, seed=6)[0]
    script = [
        format_tool_call("run_python", {"code": "1/0"}),
        format_tool_call("run_python", {"code": "import time\ntime.sleep(60)"}),
        '<tool_call>{"name": "run_python", "arguments": {"code": </tool_call>',
        format_tool_call("run_python", {"code": "print('x' * 10**6)"}),
    ]

    def reply(t: Task, messages: list[Message]) -> str | None:
        turn = sum(m.role is Role.ASSISTANT for m in messages)
        if turn < len(script):
            return script[turn]
        # The expert sees the episode from where it took over (each turn: a call and its result).
        return python_env.expert(t, messages[:2] + messages[2 + 2 * len(script) :])

    env = python_env.make_env(sandbox=SandboxConfig(timeout_s=1.0, max_output_bytes=5000))
    env.max_turns = 8
    reward, messages = asyncio.run(_episode(env, task, reply))
    tool_texts = [m.content for m in messages if m.role is Role.TOOL]
    assert "ZeroDivisionError" in tool_texts[0] and tool_texts[0].startswith("Error:")
    assert "exit code 1" in tool_texts[0]
    assert "wall-clock time limit" in tool_texts[1]
    assert "could not parse the tool call" in tool_texts[2]
    assert "output limit exceeded" in tool_texts[3] and len(tool_texts[3]) < 4200
    assert tool_texts[4].strip() == str(task.answer) and reward == 1.0


def test_verifier_reads_the_final_answer() -> None:
    number = Task(id="n", prompt="?", answer=1234)
    text = Task(id="s", prompt="?", answer="OLLEH")

    def said(content: str) -> list[Message]:
        return [Message(role=Role.USER, content="?"), Message(role=Role.ASSISTANT, content=content)]

    assert python_env.verify(Evidence(number, said("The answer is 1,234."))) == 1.0
    assert python_env.verify(Evidence(number, said("I ran it.\n1234"))) == 1.0
    assert python_env.verify(Evidence(number, said("The answer is 1235."))) == 0.0
    assert python_env.verify(Evidence(text, said("The answer is: `OLLEH`."))) == 1.0
    assert python_env.verify(Evidence(text, said("The answer is olleh."))) == 0.0
    assert python_env.verify(Evidence(text, said(""))) == 0.0


def _unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "probe", lambda: "bubblewrap is not installed (simulated)")


def test_a_sandbox_that_does_not_start_marks_the_episode_lost_to_the_infrastructure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _unavailable(monkeypatch)
    tasks = python_env.generate_tasks(2, seed=0)
    trajs = run_rollout(
        RolloutSpec(env="python", policy=PolicyRef(name="expert"), tasks=tasks, run_id="py")
    )
    for traj in trajs:
        results = [m.content for m in traj.messages if m.role is Role.TOOL]
        assert results and all("SandboxUnavailableError" in r for r in results), results
        assert traj.outcome.fault is Fault.INFRA and is_infra_failure(traj)
        assert "bubblewrap is not installed (simulated)" in (traj.outcome.error or "")


def test_a_sandbox_process_that_cannot_be_spawned_is_an_infra_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _unavailable(monkeypatch)
    monkeypatch.setattr(sandbox, "python_executable", lambda: tmp_path / "no-python")
    config = SandboxConfig(allow_unsandboxed=True, timeout_s=5)
    with pytest.raises(SandboxUnavailableError, match="the sandbox did not start") as caught:
        sandbox.run_python_sync("print(1)", config)
    assert isinstance(caught.value, InfraError)
    # Code the sandbox refuses is the model's failure, not the machine's.
    with pytest.raises(SandboxError) as refused:
        sandbox.run_python_sync("print(1)\x00", config)
    assert not isinstance(refused.value, InfraError)
