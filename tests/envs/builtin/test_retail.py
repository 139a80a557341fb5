"""The retail domain: seeded tasks, the expert and the scripted user, the state verifier."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from episodes import assistant_message
from trajforge.envs.builtin import retail
from trajforge.envs.builtin.retail_db import TOOLS, WRITE_TOOLS, build_db
from trajforge.envs.builtin.retail_tasks import KINDS, all_tasks
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError
from trajforge.policy.check import check_trajectory
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.rollout.engine import run_rollout
from trajforge.rollout.limits import Limits
from trajforge.rollout.spec import PolicyRef, RolloutSpec, Sampling, TaskSample
from trajforge.schema import Message, Role, Task
from trajforge.store.sqlite import TrajectoryStore

Reply = Callable[[Task, list[Message]], str | None]


async def _episode(task: Task, reply: Reply) -> tuple[float, dict[str, object]]:
    env = retail.make_env()
    await env.reset(task)
    for turn in range(retail.MAX_TURNS):
        result = await env.step(assistant_message(reply(task, list(env.messages)) or "", turn))
        if result.done:
            assert env.context is not None
            return result.reward, {**result.info, **env.context.state}
    raise AssertionError("the episode did not end")


def test_tasks_are_seeded_split_and_cover_every_kind() -> None:
    tasks = all_tasks()
    assert len(tasks) == 40 and len({t.id for t in tasks}) == 40
    assert Counter(t.split for t in tasks) == {"train": 30, "test": 10}
    assert {t.data["kind"] for t in tasks} == set(KINDS)
    assert {t.data["kind"] for t in tasks if t.split == "test"} >= {"cancel", "address", "info"}
    assert [t.model_dump() for t in all_tasks()] == [t.model_dump() for t in tasks]
    assert build_db(3) == build_db(3) and build_db(3) != build_db(4)
    assert 6 <= len(TOOLS) <= 10 and {t.name for t in TOOLS} > WRITE_TOOLS
    train = retail.generate_tasks(30, seed=1)
    assert {t.split for t in train} == {"train"} and len({t.id for t in train}) == 30
    with pytest.raises(ConfigError, match="retail has 10 test tasks; 11 were asked for"):
        retail.generate_tasks(11, split="test")


@pytest.mark.parametrize("task", all_tasks(), ids=lambda t: t.id)
def test_expert_with_scripted_user_earns_1_and_one_wrong_write_earns_0(task: Task) -> None:
    reward, state = asyncio.run(_episode(task, retail.expert))
    assert reward == 1.0 and state["premature_stops"] == 0
    ending = "tool:transfer_to_human_agents" if task.data["kind"] == "transfer" else "###STOP###"
    assert state["signal"] == ending
    wrong, _ = asyncio.run(_episode(task, retail.mistaken_expert))
    assert wrong == 0.0


def test_the_verifier_wants_the_amount_said() -> None:
    task = next(t for t in all_tasks() if t.data["kind"] == "cancel")
    amount = task.data["outputs"][0]
    plan = [
        ["say", step[1].replace(amount, "the amount")] if step[0] == "say" else step
        for step in task.data["plan"]
    ]
    silent = task.model_copy(update={"data": {**task.data, "plan": plan}})
    reward, _ = asyncio.run(_episode(silent, retail.expert))
    assert reward == 0.0


def test_scripted_user_answers_from_its_facts() -> None:
    task = next(t for t in all_tasks() if t.data["kind"] == "address")
    facts = task.data["user"]

    def view(*agent: str) -> list[Message]:
        messages = [Message(role=Role.SYSTEM, content="s"), Message(role=Role.USER, content="hi")]
        for text in agent:
            opening = Message(role=Role.ASSISTANT, content=facts["opening"])
            messages += [opening, Message(role=Role.USER, content=text)]
        return messages

    assert retail.scripted_user(task, view()[:2]) == facts["opening"]
    assert facts["zip"] in (retail.scripted_user(task, view("Your name and zip code?")) or "")
    new_zip = facts["new_address"]["zip"]
    assert new_zip in (retail.scripted_user(task, view("What is the new address?")) or "")
    assert retail.scripted_user(task, view("Shall I proceed (yes/no)?")) == "Yes, please proceed."
    assert "###STOP###" in (retail.scripted_user(task, view("All done.")) or "")
    # It restates its request once when it cannot answer, then gives up.
    assert retail.scripted_user(task, view("Huh?")) == facts["opening"]
    assert retail.scripted_user(task, view("Huh?", "Huh?")) == "###OUT-OF-SCOPE###"


def test_rollout_stores_both_sides_linked_and_token_exact(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    spec = RolloutSpec(
        env="retail",
        policy=PolicyRef(name="expert"),
        tasks=TaskSample(count=4, split="test"),
        n=2,
        run_id="ev",
        store=store,
    )
    agents = run_rollout(spec)
    assert [t.outcome.reward for t in agents] == [1.0] * 8
    with TrajectoryStore(store) as db:
        users = {t.id: t for t in db.query(run="ev.user")}
        assert len(list(db.query(run="ev"))) == 8
    assert len(users) == 8
    tokenizer = load_tokenizer()
    for agent in agents:
        user = users[agent.metadata["linked"]]
        assert agent.metadata["side"] == "agent" and user.metadata == {
            "side": "user",
            "linked": agent.id,
            "seed": 0,
        }
        assert (user.group_id, user.sample_index, user.task.id) == (
            agent.group_id,
            agent.sample_index,
            agent.task.id,
        )
        assert user.model == "scripted-user" and user.messages[0].role is Role.SYSTEM
        # What the user said is what the agent read, word for word (the final stop aside).
        said = [m.content for m in user.messages if m.role is Role.ASSISTANT]
        heard = [m.content for m in agent.messages if m.role is Role.USER]
        assert heard == said[: len(heard)]
        assert check_trajectory(agent, tokenizer) == [] and check_trajectory(user, tokenizer) == []


def test_registry_lists_retail_with_its_scripted_user() -> None:
    entry = get_env("retail")
    assert entry.scripted_user is retail.scripted_user
    assert "find_user_id_by_email" in entry.tool_names()


@pytest.mark.slow
def test_embedded_model_on_both_sides_is_token_exact(tmp_path: Path) -> None:
    """The embedded model as the agent and as the simulated user (one policy, batched): every
    sampled turn of either side holds its exact ids and logprobs, and re-renders to them."""
    embedded = PolicyRef(name="embedded")
    spec = RolloutSpec(
        env="retail",
        policy=embedded,
        user=embedded,
        tasks=TaskSample(count=3, split="test"),
        limits=Limits(max_turns=3),
        sampling=Sampling(temperature=0.8, max_new_tokens=40),
        run_id="both",
        store=tmp_path / "store.db",
    )
    agents = run_rollout(spec)
    with TrajectoryStore(tmp_path / "store.db") as db:
        users = {t.id: t for t in db.query(run="both.user")}
    assert len(agents) == 3 and len(users) == 3
    tokenizer = load_tokenizer()
    for agent in agents:
        user = users[agent.metadata["linked"]]
        assert user.model == "embedded" and user.metadata["linked"] == agent.id
        for side in (agent, user):
            sampled = [m for m in side.messages if m.role is Role.ASSISTANT]
            assert sampled and all(
                m.token_ids and m.logprobs and len(m.logprobs) == len(m.token_ids) for m in sampled
            )
            assert check_trajectory(side, tokenizer) == []
