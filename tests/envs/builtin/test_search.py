"""search: two-hop questions; the expert solves 100 seeded tasks, an empty policy scores 0."""

from __future__ import annotations

import asyncio

import pytest

from episodes import rewards
from trajforge.envs.builtin import search
from trajforge.envs.builtin.search_corpus import build_corpus
from trajforge.schema import ExpertFn, Message, Role, Task
from trajforge.schema.evidence import Evidence

pytestmark = pytest.mark.timeout(120)


def run_all(tasks: list[Task], reply: ExpertFn) -> list[float]:
    return rewards(search.make_env, tasks, reply)


def test_expert_solves_100_seeded_tasks_with_two_searches() -> None:
    tasks = search.generate_tasks(100, seed=0)
    assert run_all(tasks, search.expert) == [1.0] * 100


def test_empty_policy_scores_zero() -> None:
    assert sum(run_all(search.generate_tasks(100, seed=2), lambda t, m: "I don't know.")) == 0.0


def test_each_hop_document_is_found_by_its_search() -> None:
    for task in search.generate_tasks(60, seed=4):
        for query, doc_id in task.data["hops"]:
            assert f"[{doc_id}]" in search.search(query)


def test_the_answer_is_only_in_the_second_hop_document() -> None:
    corpus = build_corpus()
    for task in search.generate_tasks(30, seed=5):
        (_, first), (_, second) = task.data["hops"]
        assert str(task.answer) not in corpus.by_id[first].text
        assert str(task.answer) in corpus.by_id[second].text
        assert str(task.answer) not in task.prompt


def test_corpus_is_deterministic() -> None:
    build_corpus.cache_clear()
    first = [d.text for d in build_corpus().documents]
    build_corpus.cache_clear()
    assert [d.text for d in build_corpus().documents] == first


def test_tools_report_bad_input() -> None:
    env = search.make_env()

    async def go() -> tuple[str, str, str]:
        await env.reset(search.generate_tasks(1)[0])
        return (
            await env.call_tool("open", {"doc_id": "no-such-doc"}),
            await env.call_tool("search", {"query": "   "}),
            await env.call_tool("search", {"query": "zzzqqq"}),
        )

    missing, empty, nothing = asyncio.run(go())
    assert missing == "Error: no document with id 'no-such-doc'; use an id from the search results"
    assert empty == "Error: empty query; give some keywords"
    assert nothing == "No results."


def test_verifier_normalises() -> None:
    task = Task(id="t", prompt="p", answer="New Brebeia")
    reply = lambda text: [Message(role=Role.ASSISTANT, content=text)]  # noqa: E731
    assert search.verify(Evidence(task, reply("The answer is new brebeia."))) == 1.0
    assert search.verify(Evidence(task, reply("The answer is: The New Brebeia!"))) == 1.0
    assert search.verify(Evidence(task, reply("New Brebeia"))) == 1.0
    assert search.verify(Evidence(task, reply("The answer is Old Brebeia."))) == 0.0
