"""The sql environment: generated databases, read-only tools, result-set verifier, expert."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from trajforge.envs.base import Env
from trajforge.envs.builtin import sql_env
from trajforge.envs.builtin.sql_db import SCHEMAS, database_bytes, open_readonly, table_names
from trajforge.formats.tool_calls import format_tool_call, parse_tool_calls
from trajforge.schema import Message, Role, Task
from trajforge.schema.evidence import Evidence

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


def _run(task: Task, reply: Reply) -> tuple[float, list[Message]]:
    return asyncio.run(_episode(sql_env.make_env(), task, reply))


def _said(content: str) -> list[Message]:
    return [Message(role=Role.USER, content="?"), Message(role=Role.ASSISTANT, content=content)]


def test_databases_are_seeded_and_sized() -> None:
    for schema in SCHEMAS:
        assert database_bytes(schema, 1) == database_bytes.__wrapped__(schema, 1)
        assert database_bytes(schema, 1) != database_bytes(schema, 2)
        con = open_readonly(schema, 1)
        counts = [con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in table_names(con)]
        con.close()
        assert len(counts) == 3 and sum(counts) >= 300 and min(counts) >= 15


def test_tasks_are_seeded_and_splits_disjoint() -> None:
    train = sql_env.generate_tasks(60, seed=7)
    assert [t.id for t in train] == [t.id for t in sql_env.generate_tasks(60, seed=7)]
    test_ids = {t.id for t in sql_env.generate_tasks(20, seed=7, split="test")}
    assert not test_ids & {t.id for t in train}
    assert {t.data["schema"] for t in train} == set(SCHEMAS)
    assert all(t.answer and t.data["gold_sql"].startswith("SELECT") for t in train)


def test_expert_solves_100_tasks() -> None:
    tasks = sql_env.generate_tasks(100, seed=0)
    rewards = [_run(task, sql_env.expert)[0] for task in tasks]
    assert rewards == [1.0] * 100


def test_expert_trajectory_lists_describes_queries_then_answers() -> None:
    task = sql_env.generate_tasks(1, seed=3)[0]
    reward, messages = _run(task, sql_env.expert)
    calls = [c.name for m in messages for c in m.tool_calls]
    assert calls == ["list_tables"] + ["describe"] * len(task.data["tables"]) + ["query"]
    assert reward == 1.0
    tool_texts = [m.content for m in messages if m.role is Role.TOOL]
    assert all(t in tool_texts[0].split() for t in task.data["tables"])
    assert "CREATE TABLE" in tool_texts[1] and "rows. First rows:" in tool_texts[1]


def test_empty_and_unrelated_answers_score_zero() -> None:
    tasks = sql_env.generate_tasks(30, seed=4)
    assert sum(_run(t, lambda task, m: "")[0] for t in tasks) == 0.0
    wrong = "```sql\nSELECT 1 WHERE 0\n```"
    assert sum(_run(t, lambda task, m: wrong)[0] for t in tasks) == 0.0


def test_writes_are_refused_with_a_tool_error() -> None:
    task = next(t for t in sql_env.generate_tasks(20, seed=5) if t.data["schema"] == "shop")
    writes = [
        "INSERT INTO customers VALUES (999, 'Eve', 'Oslo', 2020)",
        "DROP TABLE orders",
        "UPDATE products SET price = 0",
        "PRAGMA query_only = OFF",
        "ATTACH DATABASE '/tmp/tf-evil.db' AS evil",
        "CREATE TABLE t (x)",
    ]

    def reply(t: Task, messages: list[Message]) -> str | None:
        turn = sum(m.role is Role.ASSISTANT for m in messages)
        if turn < len(writes):
            return format_tool_call("query", {"sql": writes[turn]})
        return (
            format_tool_call("query", {"sql": "SELECT COUNT(*) FROM orders"})
            if turn == len(writes)
            else "```sql\nSELECT 1\n```"
        )

    env = sql_env.make_env()
    _, messages = asyncio.run(_episode(env, task, reply))
    tool_texts = [m.content for m in messages if m.role is Role.TOOL]
    for text in tool_texts[: len(writes)]:
        assert text.startswith("Error:") and "read-only" in text, text
    assert tool_texts[-1].startswith("COUNT(*)\n500\n")


def test_bad_queries_come_back_as_tool_errors() -> None:
    task = sql_env.generate_tasks(1, seed=6)[0]
    env = sql_env.make_env()

    async def calls() -> list[str]:
        await env.reset(task)
        return [
            await env.call_tool("query", {"sql": "SELEC nonsense"}),
            await env.call_tool("query", {"sql": "SELECT 1; SELECT 2"}),
            await env.call_tool(
                "query",
                {
                    "sql": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                    "SELECT COUNT(*) FROM c"
                },
            ),
            await env.call_tool("query", {"sql": "SELECT zeroblob(500000000)"}),
            await env.call_tool("describe", {"table": "nope"}),
            await env.call_tool(
                "query",
                {
                    "sql": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                    "SELECT x FROM c"
                },
            ),
        ]

    syntax, two, endless, huge, missing, many = asyncio.run(calls())
    assert syntax.startswith("Error: SQL error:") and "syntax error" in syntax
    assert "one statement" in two
    assert "ran longer than 2 s" in endless
    assert "too big" in huge
    assert "no table named 'nope'" in missing and "the tables are" in missing
    assert f"only the first {sql_env.MAX_ROWS} rows" in many


def test_result_set_comparison() -> None:
    gold = [["Ann", 2.0], ["Ben", 1.5]]
    assert sql_env.same_result([("Ben", 1.5000000001), ("Ann", 2)], gold, ordered=False)
    assert not sql_env.same_result([("Ben", 1.5), ("Ann", 2)], gold, ordered=True)
    assert not sql_env.same_result([("Ann", 2.0)], gold, ordered=False)
    assert not sql_env.same_result([("Ann", 2.0, 1), ("Ben", 1.5, 1)], gold, ordered=False)
    assert not sql_env.same_result([("Ann", 2.1), ("Ben", 1.5)], gold, ordered=False)


def test_verifier_uses_the_last_sql_block() -> None:
    task = next(t for t in sql_env.generate_tasks(30, seed=8) if not t.data["ordered"])
    gold = task.data["gold_sql"]
    assert sql_env.verify(Evidence(task, _said(f"```sql\n{gold}\n```"))) == 1.0
    assert (
        sql_env.verify(Evidence(task, _said(f"```sql\n{gold}\n```\nor\n```sql\nSELECT 0\n```")))
        == 0.0
    )
    assert sql_env.verify(Evidence(task, _said(gold))) == 0.0
    assert sql_env.verify(Evidence(task, _said("```sql\nDROP TABLE books\n```"))) == 0.0
    values = ", ".join("(" + ", ".join(repr(v) for v in row) + ")" for row in reversed(task.answer))
    literal = f"```sql\nSELECT * FROM (VALUES {values})\n```"
    assert sql_env.verify(Evidence(task, _said(literal))) == 1.0
