"""Blueprint synthesis (APIGen-MT) on retail and sql: a blueprint whose actions the env refuses
is rejected with its reason; valid ones are played with the simulated user and written; a
conversation the verifier fails is counted as such."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from trajforge.envs import Blueprint, TaskSet, get_env, proposer_for
from trajforge.envs.builtin.retail_db import build_db
from trajforge.policy import load_policy
from trajforge.rollout import RolloutSpec, run_rollout
from trajforge.schema import is_success
from trajforge.synthesis import SynthesisSettings, synthesize
from trajforge.synthesis.blueprints import execute, play_conversations


def _first(env: str, kind: str | None = None) -> Blueprint:
    propose = proposer_for(env)
    for i in range(200):
        found = propose(random.Random(i))
        if kind is None or found.task.data.get("kind") == kind:
            return found
    raise AssertionError(f"no {kind} blueprint in 200 draws")


def test_a_blueprint_whose_write_the_env_refuses_is_rejected_with_its_reason() -> None:
    valid = _first("retail", "cancel")
    db = build_db(int(valid.task.data["db_seed"]))
    delivered = next(o for o, d in sorted(db["orders"].items()) if d["status"] == "delivered")
    refused = Blueprint(
        valid.task,
        (("cancel_pending_order", {"order_id": delivered, "reason": "no longer needed"}),),
    )
    why = asyncio.run(execute("retail", refused))
    assert why == (
        "cancel_pending_order failed: order _ is delivered; only pending orders can be cancelled"
    )


def test_a_sql_blueprint_with_a_bad_query_or_nothing_found_is_rejected() -> None:
    valid = _first("sql")
    bad = Blueprint(valid.task, (("query", {"sql": "SELECT nope FROM nowhere"}),), valid.settle)
    assert asyncio.run(execute("sql", bad)) == "query failed: SQL error: no such table: nowhere"
    table = valid.task.data["tables"][0]
    empty = valid.task.model_copy(
        update={"data": {**valid.task.data, "gold_sql": f"SELECT COUNT(*) FROM {table} WHERE 0"}}
    )
    assert valid.settle(empty) == "the gold query finds nothing"


@pytest.mark.parametrize("env", ["retail", "sql"])
def test_valid_blueprints_are_written_and_their_conversations_pass(
    env: str, tmp_path: Path
) -> None:
    out = tmp_path / "tasks.jsonl"
    report = synthesize(
        env, SynthesisSettings(episodes=12), run_id="", store=tmp_path / "s.db", out=out
    )
    tasks = list(TaskSet.from_jsonl(out))
    assert [t.id for t in tasks] == [t.id for t in report.tasks] and tasks
    assert len(tasks) + sum(report.dropped.values()) == 12
    assert all(reason.count("_") or "finds nothing" in reason for reason in report.dropped)
    assert all(isinstance(t.data["synthesis"]["blueprint"], int) for t in tasks)
    held_out = {t.id for t in get_env(env).tasks(10, split="test")}
    assert not held_out & {t.id for t in tasks}
    played = run_rollout(
        RolloutSpec(env=str(out), tasks=tasks),
        policy=load_policy("expert", expert=get_env(env).expert),
    )
    assert all(is_success(t.outcome.status, t.outcome.reward) for t in played)


def test_a_conversation_the_verifier_fails_is_counted() -> None:
    task = get_env("retail").tasks(1, split="train")[0]
    # The blueprint asks for an amount its plan never says.
    unsaid = {**task.data, "outputs": ["$999.99"]}
    wrong = task.model_copy(update={"id": "mistaken", "data": unsaid})
    verdicts = play_conversations("retail", [task, wrong], user=None)
    assert verdicts[task.id] is None
    assert str(verdicts["mistaken"]).startswith("the conversation failed")
