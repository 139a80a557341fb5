"""The tau2-bench adapter on tau2's ``mock`` domain: tau2's evaluator scores trajforge episodes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from episodes import assistant_message

pytest.importorskip(
    "tau2", reason="the tau2 extra is not installed (pip install 'trajforge[tau2]')"
)

from trajforge.envs.registry import get_env
from trajforge.envs.tau2_bench import adapter
from trajforge.errors import ConfigError
from trajforge.rollout.engine import run_rollout
from trajforge.rollout.spec import PolicyRef, RolloutSpec, TaskSample
from trajforge.schema import Message, Task

Reply = Callable[[Task, list[Message]], str | None]
# Its only criterion is an env assertion (task_2 ends completed) and it has no gold action:
# nothing the scripted expert can replay, so tau2 gives it 0.
NO_GOLD_ACTION = "update_task_with_history_and_env_assertions"


async def _episode(task: Task, reply: Reply) -> tuple[float, adapter.Tau2Env]:
    return await _episode_on("tau2-mock", task, reply)


async def _episode_on(name: str, task: Task, reply: Reply) -> tuple[float, adapter.Tau2Env]:
    env = get_env(name).make()
    assert isinstance(env, adapter.Tau2Env)
    await env.reset(task)
    for turn in range(adapter.MAX_TURNS):
        result = await env.step(assistant_message(reply(task, list(env.messages)) or "", turn))
        if result.done:
            return result.reward, env
    raise AssertionError("the episode did not end")


def _mock_tasks() -> list[Task]:
    return get_env("tau2-mock").tasks(9, split="test")


def test_the_mock_domain_maps_tasks_tools_and_policy() -> None:
    entry = get_env("tau2-mock")
    tasks = _mock_tasks()
    assert len({t.id for t in tasks}) == 9 and {t.split for t in tasks} == {"test"}
    assert {t.id for t in entry.tasks(9, split="train")} == {t.id for t in tasks}
    assert set(entry.tool_names()) == {
        "create_task",
        "get_users",
        "update_task_status",
        "transfer_to_human_agents",
    }
    env = entry.make()
    assert "Mock Domain Policy" in env.system_prompt
    update = next(t for t in tasks if t.id == "update_task_1")
    assert update.data["required_tools"] == ["update_task_status"]
    history = next(t for t in tasks if t.id == "update_task_with_message_history")
    assert history.system is not None and "Project Review" in history.system
    with pytest.raises(ConfigError, match="unknown tau2 domain 'nope'; tau2 envs are tau2-mock"):
        get_env("tau2-nope")


@pytest.mark.parametrize("task", _mock_tasks(), ids=lambda t: t.id)
def test_scripted_expert_earns_tau2_reward_1(task: Task) -> None:
    reward, env = asyncio.run(_episode(task, adapter.expert))
    assert env.context is not None
    if task.id == NO_GOLD_ACTION:
        assert reward == 0.0
        return
    assert reward == 1.0 and env.context.state["premature_stops"] == 0
    assert env.context.state["signal"] == (
        "tool:transfer_to_human_agents" if task.id == "impossible_task_1" else "###STOP###"
    )


def test_one_wrong_write_earns_0() -> None:
    task = next(t for t in _mock_tasks() if t.id == "update_task_1")
    plan = [
        ["call", "update_task_status", {"task_id": "task_1", "status": "pending"}],
        *[step for step in task.data["plan"] if step[0] == "say"],
    ]
    wrong = task.model_copy(update={"data": {**task.data, "plan": plan}})
    reward, _ = asyncio.run(_episode(wrong, adapter.expert))
    assert reward == 0.0


def test_tool_answers_are_tau2s_own_errors_included() -> None:
    task = next(t for t in _mock_tasks() if t.id == "create_task_1")
    missing = {"task_id": "task_404", "status": "completed"}
    plan = [["call", "update_task_status", missing], *task.data["plan"]]
    detour = task.model_copy(update={"data": {**task.data, "plan": plan}})
    reward, env = asyncio.run(_episode(detour, adapter.expert))
    answers = [m.content for m in env.messages if m.role.value == "tool"]
    assert answers[0] == "Error: Task task_404 not found"
    created = json.loads(answers[1])
    assert created["title"] == "Important Meeting" and created["status"] == "pending"
    # tau2 replays both calls and finds the same answers; the failed call changed nothing.
    assert reward == 1.0


def test_rollout_scores_every_mock_task_through_the_engine(tmp_path: Path) -> None:
    spec = RolloutSpec(
        env="tau2-mock",
        policy=PolicyRef(name="expert"),
        tasks=TaskSample(count=9, split="test"),
        run_id="tau2",
        store=tmp_path / "store.db",
    )
    rewards = {t.task.id: t.outcome.reward for t in run_rollout(spec)}
    assert rewards == {t.id: float(t.id != NO_GOLD_ACTION) for t in _mock_tasks()}


PROBE = """
import json, sys
events = []
def audit(name, args):
    if name in ("socket.connect", "socket.getaddrinfo"):
        events.append([name, repr(args)[:80]])
sys.addaudithook(audit)
from trajforge.rollout import RolloutSpec, run_rollout
spec = {"env": "tau2-mock", "policy": {"name": "expert"}, "tasks": {"count": 1, "split": "test"}}
[episode] = run_rollout(RolloutSpec.model_validate(spec))
print(json.dumps({"reward": episode.outcome.reward, "network": events}))
"""


def test_importing_and_scoring_never_touch_the_network() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"reward": 1.0, "network": []}


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["retail", "airline"])
def test_scripted_expert_earns_tau2_reward_1_on_real_domains(domain: str) -> None:
    entry = get_env(f"tau2-{domain}")
    for task in entry.tasks(5, split="test"):
        reward, _ = asyncio.run(_episode_on(entry.name, task, adapter.expert))
        assert reward == 1.0, task.id
