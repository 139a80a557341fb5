"""search: two-hop questions over a small generated corpus, with BM25 ``search`` and ``open``.

Each question needs two lookups: the company's document names a person or a city, whose own
document holds the answer. The expert searches, opens, searches, opens, then answers.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Any

from trajforge.envs.builtin.plan import PlannedCall, follow_plan
from trajforge.envs.builtin.search_corpus import Corpus, build_corpus
from trajforge.envs.taskset import TRAIN, generate_unique
from trajforge.envs.tool import ToolError, tool
from trajforge.envs.tool_env import ToolEnv
from trajforge.retrieval import BM25, TWO_OR_MORE
from trajforge.schema import Evidence, Message, Task, answer_span, normalize_answer

NAME = "search"
DESCRIPTION = "Two-hop questions over a generated corpus; BM25 search and open tools."
SYSTEM_PROMPT = (
    "Answer the question by searching the corpus and opening documents, one tool call per turn. "
    "When done, reply: The answer is X."
)
TOP_K = 3
SNIPPET_CHARS = 80

QUESTIONS = {
    "founder_city": "In which city was the founder of {company} born?",
    "founder_profession": "What is the profession of the founder of {company}?",
    "hq_country": "In which country is {company} headquartered?",
}


class _Index:
    """BM25 over the corpus (title and text), built once per process and shared read-only."""

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus
        self.bm25 = BM25(
            [f"{d.title}. {d.text}" for d in corpus.documents],
            token_pattern=TWO_OR_MORE,
            stopwords="en",
        )

    def search(self, query: str, k: int = TOP_K) -> list[tuple[str, float]]:
        return [(self.corpus.documents[i].doc_id, s) for i, s in self.bm25.top(query, k)]


@cache
def get_index() -> _Index:
    return _Index(build_corpus())


@tool
def search(query: str) -> str:
    """Search the corpus; returns the best matching documents with their ids.

    Args:
        query: Keywords, e.g. a name.
    """
    if not query.strip():
        raise ToolError("empty query; give some keywords")
    index = get_index()
    hits = index.search(query)
    if not hits:
        return "No results."
    lines = []
    for rank, (doc_id, _score) in enumerate(hits, start=1):
        doc = index.corpus.by_id[doc_id]
        first = doc.text.split(". ", 1)[0]
        snippet = first if len(first) <= SNIPPET_CHARS else first[: SNIPPET_CHARS - 3] + "..."
        lines.append(f"{rank}. [{doc_id}] {doc.title}: {snippet}")
    return "\n".join(lines)


@tool(name="open")
def open_document(doc_id: str) -> str:
    """Open a document by its id and return its full text.

    Args:
        doc_id: An id shown in square brackets by search.
    """
    doc = get_index().corpus.by_id.get(doc_id.strip().strip("[]"))
    if doc is None:
        raise ToolError(f"no document with id {doc_id!r}; use an id from the search results")
    return f"{doc.title}\n{doc.text}"


def _make_one(rng: random.Random) -> Task:
    corpus = build_corpus()
    company = rng.choice(corpus.companies)
    kind = rng.choice(sorted(QUESTIONS))
    if kind == "hq_country":
        second = (company.city, company.city_doc)
    else:
        second = (company.founder, company.founder_doc)
    hops = [[company.name, company.doc_id], list(second)]
    return Task(
        id="draft",
        prompt=QUESTIONS[kind].format(company=company.name),
        answer=corpus.facts[company.name][kind],
        data={"kind": kind, "hops": hops},
    )


def generate_tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
    """``n`` distinct two-hop questions; train and test never share one."""
    return generate_unique(NAME, _make_one, n, seed, split)


def verify(evidence: Evidence) -> float:
    """1.0 when the final answer (after "answer is", if present) matches the gold, normalised."""
    gold = evidence.task.answer
    reply = normalize_answer(answer_span(evidence.answer or ""))
    return 1.0 if gold is not None and reply == normalize_answer(str(gold)) else 0.0


def expert(task: Task, messages: list[Message]) -> str | None:
    """Search then open each hop's document (counting successful results), then answer."""
    plan: list[PlannedCall] = []
    for query, doc_id in task.data["hops"]:
        plan += [("search", {"query": query}), ("open", {"doc_id": doc_id})]
    return follow_plan(plan, messages, f"The answer is {task.answer}.")


def make_env(**kwargs: Any) -> ToolEnv:
    options: dict[str, Any] = {"max_turns": 10, "system_prompt": SYSTEM_PROMPT}
    options.update(kwargs)
    return ToolEnv(
        [search, open_document],
        verifier=verify,
        name=NAME,
        description=DESCRIPTION,
        expert=expert,
        **options,
    )
