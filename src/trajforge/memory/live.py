"""A memory in use during a run: the items of the run's env indexed with BM25 (or by the
cosine similarity of a model's embeddings, ``--memory-embed``), the top-k for each task put
into the episode's opening messages, what was retrieved recorded in the
trajectory's metadata, and (``update``) each finished episode distilled into a new item that
later episodes can retrieve, appended to the memory file as it is learnt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from trajforge.envs import Env, StepResult, stored_env_name
from trajforge.memory.distil import distil_rules
from trajforge.memory.items import MemoryItem, for_env, item_line, read_memory
from trajforge.retrieval import BM25, EmbeddingIndex, Retriever
from trajforge.rollout import LiveParts, RolloutHook, RolloutRun
from trajforge.schema import Message, Task, ToolSpec, Trajectory, with_system_text

MEMORY_KEY = "memory"
"""Where a trajectory's metadata records what was retrieved for it."""
DEFAULT_K = 3
HEADER = "Lessons from earlier attempts at similar tasks:"
BM25_RETRIEVER = "bm25"
EMBEDDING_RETRIEVER = "embedding:"
"""The record's ``retriever`` is this followed by the embedding model's name."""


class Embedder(Protocol):
    """A named embedding function (``policy.embed.TextEmbedder``): ``(n, d)`` rows for ``n``
    texts."""

    name: str

    def __call__(self, texts: list[str]) -> Any: ...


@dataclass
class Memory:
    """The usable items of one env, their index, and the file they live in."""

    path: Path
    env: str
    k: int = DEFAULT_K
    items: list[MemoryItem] = field(default_factory=list)
    ignored: int = 0
    """Items of other envs in the file: warned about, never retrieved."""
    embed: Embedder | None = field(default=None, repr=False)
    """Retrieve by the cosine similarity of its embeddings; ``None``: by BM25."""

    def __post_init__(self) -> None:
        texts = [i.text() for i in self.items]
        self.index: Retriever
        if self.embed is None:
            self.index, self.retriever = BM25(texts), BM25_RETRIEVER
        else:
            self.index = EmbeddingIndex(texts, embed=self.embed)
            self.retriever = EMBEDDING_RETRIEVER + self.embed.name

    @classmethod
    def load(
        cls, path: Path, env: str, k: int = DEFAULT_K, embed: Embedder | None = None
    ) -> Memory:
        """The memory at ``path`` for ``env``: its items of ``env``; the others counted.
        With ``embed``, its items are embedded now and retrieved by cosine similarity.

        ``env`` may be given as an experiment names it (``file.py:factory``): items and
        episodes carry the name its trajectories are stored under, which is what is matched."""
        env = stored_env_name(env) or env
        mine, others = for_env(read_memory(path), env)
        return cls(path, env, k, mine, len(others), embed)

    @classmethod
    def open(cls, path: Path, env: str, k: int = DEFAULT_K, embed: str | None = None) -> Memory:
        """``load`` with the embedding model named ``embed`` (``--memory-embed``: ``embedded``,
        ``tiny``, a folder) loaded first; ``None``: BM25."""
        if embed is None:
            return cls.load(path, env, k)
        from trajforge.policy import TextEmbedder  # lazy: loads torch and the model

        return cls.load(path, env, k, TextEmbedder.load(embed))

    def ignored_warning(self) -> str | None:
        """What to warn about the file's items of other envs (``None``: it has none)."""
        if not self.ignored:
            return None
        return f"{self.path}: {self.ignored} items are of another env than {self.env!r}; not used"

    def retrieve(self, task: Task) -> list[tuple[MemoryItem, float]]:
        """The top-k items for ``task`` by its prompt, best first: by BM25 (items that share
        no term are left out) or by cosine similarity (the k nearest, whatever their score)."""
        return [(self.items[i], s) for i, s in self.index.top(task.prompt, self.k)]

    def lessons(self, task: Task) -> tuple[str | None, dict[str, Any]]:
        """What the agent reads for ``task`` (``None``: nothing matched) and the record of
        what was retrieved, kept in the trajectory's metadata under ``MEMORY_KEY``."""
        hits = self.retrieve(task)
        record = {
            "path": str(self.path),
            "k": self.k,
            "retriever": self.retriever,
            "items": [{"id": i.id, "title": i.title, "score": round(s, 4)} for i, s in hits],
        }
        return (memory_prompt(hits) if hits else None), record

    def told(self, task: Task) -> tuple[str | None, dict[str, Any]]:
        """``lessons`` as an agent program's gateway session takes them: the text and the
        trajectory metadata that records it."""
        text, record = self.lessons(task)
        return text, {MEMORY_KEY: record}

    def wrap(self, env: Env) -> Env:
        """``env`` reading this memory (what a rollout's ``wrap_env`` takes)."""
        return MemoryEnv(env, self)

    def add(self, item: MemoryItem) -> bool:
        """Learn ``item`` (appended to the file too); False when its id is already known."""
        if any(i.id == item.id for i in self.items):
            return False
        self.items.append(item)
        self.index.add(item.text())
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(item_line(item))
        return True


def memory_prompt(hits: list[tuple[MemoryItem, float]]) -> str:
    """The retrieved items as the text the agent reads."""
    lines = [HEADER]
    lines += [f"{n}. {item.title}: {item.lesson}" for n, (item, _) in enumerate(hits, 1)]
    return "\n".join(lines)


class MemoryEnv(Env):
    """``inner`` with the memory's top-k items for each task in its opening messages."""

    def __init__(self, inner: Env, memory: Memory) -> None:
        super().__init__()
        self.inner, self.memory = inner, memory
        self.name = inner.name
        self.tools = inner.tools
        self.times_out_tools = inner.times_out_tools
        self.retrieved: dict[str, Any] | None = None

    async def reset(self, task: Task) -> list[Message]:
        opening = await self.inner.reset(task)
        self.tools = self.inner.tools
        text, self.retrieved = self.memory.lessons(task)
        return with_system_text(opening, text) if text else opening

    async def step(self, action: Message) -> StepResult:
        return await self.inner.step(action)

    async def list_tools(self) -> list[ToolSpec]:
        return await self.inner.list_tools()

    def adopt_limits(self, *, max_turns: int | None, tool_timeout_s: float | None) -> None:
        self.inner.adopt_limits(max_turns=max_turns, tool_timeout_s=tool_timeout_s)

    async def close(self) -> None:
        await self.inner.close()

    def expert(self, task: Task, messages: list[Message]) -> str | None:
        return self.inner.expert(task, messages)

    def episode_metadata(self) -> dict[str, Any]:
        return {MEMORY_KEY: self.retrieved} if self.retrieved is not None else {}


class MemoryUpdate(RolloutHook):
    """Grows the memory with an item distilled (by the templates) from each finished episode
    whose trajectory belongs to the memory's env."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.learnt = 0

    def on_episode_end(self, run: RolloutRun, trajectory: Trajectory) -> None:
        if (trajectory.env or trajectory.task.env) == self.memory.env:
            self.learnt += self.memory.add(distil_rules(trajectory))


def read_with(live: LiveParts, memory: Memory | None, update: bool) -> list[RolloutHook]:
    """Have the rollout that takes ``live`` read ``memory`` (each fresh env wrapped; a runner
    in ``live`` is given it by its maker: an agent program's gateway session adds the
    lessons); returns the hooks to add, the one that grows it from every finished episode with
    ``update``."""
    if memory is None:
        return []
    if "runner" not in live:
        live["wrap_env"] = memory.wrap
    return [MemoryUpdate(memory)] if update else []
