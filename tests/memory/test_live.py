"""A memory in a run: top-k items in the opening system message, the retrieval in the
trajectory's metadata, and the memory growing from finished episodes."""

from __future__ import annotations

from pathlib import Path

from trajforge.envs.registry import get_env
from trajforge.memory.items import MemoryItem, MemoryKind, read_memory, write_memory
from trajforge.memory.live import HEADER, MEMORY_KEY, Memory, MemoryUpdate
from trajforge.retrieval import BM25, EmbeddingIndex
from trajforge.rollout import RolloutSpec, run_rollout

ENV = "keydoor-compact"


def lesson(i: int, applies: str, env: str = ENV) -> MemoryItem:
    return MemoryItem(
        id=f"m{i}",
        env=env,
        title=f"lesson {i}",
        applies_when=applies,
        lesson=f"do thing {i}",
        kind=MemoryKind.SUCCESS,
        sources=[f"t{i}"],
    )


def test_retrieval_uses_only_the_env_items_best_first(tmp_path: Path) -> None:
    path = tmp_path / "mem.jsonl"
    task = get_env(ENV).tasks(1, seed=0, split="test")[0]
    write_memory(
        path,
        [
            lesson(1, "nothing alike"),
            lesson(2, task.prompt),
            lesson(3, task.prompt, env="calculator"),
        ],
    )
    memory = Memory.load(path, ENV, k=2)
    assert memory.ignored == 1
    assert [i.id for i, _ in memory.retrieve(task)] == ["m2"]


def test_an_env_named_by_its_factory_file_matches_the_items_its_episodes_made(
    tmp_path: Path,
) -> None:
    # An experiment names its env by a file; its trajectories (and so the items distilled from
    # them) carry the env's own name, as the web job's carry miniwob:...
    (tmp_path / "my_env.py").write_text(
        f"from trajforge.envs.registry import get_env\n\ndef make():\n    return get_env({ENV!r})\n"
    )
    spec = f"{tmp_path / 'my_env.py'}:make"
    path = tmp_path / "mem.jsonl"
    task = get_env(ENV).tasks(1, seed=0, split="test")[0]
    write_memory(path, [lesson(1, task.prompt)])
    memory = Memory.load(path, spec, k=2)
    assert (memory.env, memory.ignored) == (ENV, 0)
    assert [i.id for i, _ in memory.retrieve(task)] == ["m1"]


def test_a_rollout_reads_records_and_grows_the_memory(tmp_path: Path) -> None:
    path = tmp_path / "mem.jsonl"
    tasks = get_env(ENV).tasks(2, seed=0, split="train")
    write_memory(path, [lesson(1, tasks[0].prompt)])
    memory = Memory.load(path, ENV, k=3)
    grow = MemoryUpdate(memory)
    spec = RolloutSpec(env=ENV, policy={"name": "expert"}, tasks=tasks, n=1, concurrency=1)
    trajs = run_rollout(spec, wrap_env=memory.wrap, hooks=[grow])
    by_task = {t.task.id: t for t in trajs}
    first = by_task[tasks[0].id]
    record = first.metadata[MEMORY_KEY]
    assert record["path"] == str(path) and record["k"] == 3
    assert record["items"][0]["id"] == "m1" and record["items"][0]["score"] > 0
    assert HEADER in (first.messages[0].content or "")
    assert "lesson 1: do thing 1" in (first.messages[0].content or "")
    # Both episodes were learnt: the file holds them after the first item, with provenance.
    assert grow.learnt == 2
    stored = read_memory(path)
    assert stored[0].id == "m1" and len(stored) == 3
    assert {i.sources[0] for i in stored[1:]} == {t.id for t in trajs}


def test_retrieval_by_embeddings_records_its_model_and_learns(tmp_path: Path) -> None:
    from trajforge.policy.embed import TextEmbedder  # lazy: only this test needs torch

    path = tmp_path / "mem.jsonl"
    tasks = get_env(ENV).tasks(2, seed=0, split="test")
    write_memory(path, [lesson(1, "nothing alike"), lesson(2, tasks[0].prompt)])
    memory = Memory.load(path, ENV, k=1, embed=TextEmbedder.load("tiny"))
    assert isinstance(memory.index, EmbeddingIndex) and memory.retriever == "embedding:tiny"
    _, record = memory.lessons(tasks[0])
    assert record["retriever"] == "embedding:tiny"
    assert [i["id"] for i in record["items"]] == ["m2"]
    # Cosine keeps the k nearest whatever they score, so an unrelated task still gets one.
    assert len(memory.retrieve(tasks[1])) == 1
    memory.add(lesson(3, tasks[1].prompt))
    assert len(memory.index) == 3
    assert [i.id for i, _ in memory.retrieve(tasks[1])] == ["m3"]


def test_without_an_embedder_retrieval_is_bm25(tmp_path: Path) -> None:
    path = tmp_path / "mem.jsonl"
    task = get_env(ENV).tasks(1, seed=0, split="test")[0]
    write_memory(path, [lesson(1, task.prompt)])
    memory = Memory.load(path, ENV)
    assert isinstance(memory.index, BM25)
    assert memory.lessons(task)[1]["retriever"] == "bm25"
