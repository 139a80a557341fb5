"""The MiniWoB++ scripted experts: each solves its task on real Chromium from the instruction
and the page tree alone; a task without one has the expert policy refused in one line."""

from __future__ import annotations

import pytest

from trajforge.envs import get_env
from trajforge.envs.browser import BrowserEnv, BrowserPool, MiniWoB
from trajforge.envs.browser.experts import EXPERT_TASKS, ExpertError, expert, plan
from trajforge.formats import parse_tool_calls
from trajforge.rollout import RolloutError, RolloutSpec, TaskSample, run_rollout
from trajforge.schema import Message, Role, Task


def _task(name: str, seed: int) -> Task:
    return Task(id=f"{name}/{seed}", prompt=name, data={"task": name, "seed": seed})


async def _expert_reward(pool: BrowserPool, task: Task, max_turns: int = 8) -> float:
    env = BrowserEnv(MiniWoB((task.data["task"],)), pool=pool)
    messages = await env.reset(task)
    try:
        for _ in range(max_turns):
            reply = expert(task, messages)
            assert reply is not None
            parsed = parse_tool_calls(reply)
            action = Message(role=Role.ASSISTANT, content="", tool_calls=parsed.tool_calls)
            result = await env.step(action)
            messages = [*messages, action, *result.observations]
            if result.done:
                return result.reward
        raise AssertionError(f"{task.id}: the expert did not finish in {max_turns} turns")
    finally:
        await env.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPERT_TASKS)
async def test_each_expert_solves_its_task_in_the_browser(pool: BrowserPool, name: str) -> None:
    for seed in (7, 1_000_000_123):  # a training and a test page seed
        assert await _expert_reward(pool, _task(name, seed)) == 1.0, f"{name} seed {seed}"


def _opening(goal: str, tree: str) -> list[Message]:
    return [
        Message(role=Role.SYSTEM, content="sys"),
        Message(role=Role.USER, content=f"Task: {goal}\n\nPage:\n{tree}"),
    ]


def test_an_expert_reads_the_instruction_and_tree_and_plays_one_action_a_turn() -> None:
    tree = "RootWebArea 'Login'\n\t[19] textbox ''\n\t[22] textbox ''\n\t[23] button 'Login'"
    goal = 'Enter the username "ann" and the password "x1" into the text fields and press login.'
    task = _task("login-user", 1)
    assert plan(task, _opening(goal, tree)) == [
        ("fill", {"element": "19", "text": "ann"}),
        ("fill", {"element": "22", "text": "x1"}),
        ("click", {"element": "23"}),
    ]
    first = parse_tool_calls(expert(task, _opening(goal, tree)) or "").tool_calls
    assert [(c.name, c.arguments) for c in first] == [("fill", {"element": "19", "text": "ann"})]


def test_a_page_the_expert_cannot_read_is_one_line_naming_the_task() -> None:
    tree = "RootWebArea 'Click Button Task'\n\t[15] button 'no'"
    with pytest.raises(ExpertError, match=r"^click-button expert: no button 'Ok' on the page$"):
        plan(_task("click-button", 1), _opening('Click on the "Ok" button.', tree))


def test_the_expert_policy_is_refused_in_one_line_for_a_task_without_an_expert() -> None:
    entry = get_env("miniwob:click-button,click-shape")
    spec = RolloutSpec(
        env=entry.name, policy={"name": "expert"}, tasks=TaskSample(count=2, split="test")
    )
    with pytest.raises(RolloutError) as caught:
        run_rollout(spec)
    message = str(caught.value)
    assert "\n" not in message
    assert "no scripted expert for miniwob task click-shape;" in message
    assert message.endswith(", ".join(EXPERT_TASKS))
    assert get_env("miniwob:click-button,login-user").expert_refusal is None
