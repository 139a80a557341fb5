"""What every environment's synthesizer gives: where exploration starts, how the explorer
acts, and how a reached state becomes a task with a solution and a wrong answer.

A ``Synthesizer`` is the per-environment part of reverse task synthesis (OS-Genesis): the
explorer acts with no task in mind, and ``relabel`` describes what one exploration episode
achieved as a new task of the same environment, checked by the environment's own verifier.
``relabel`` also returns the replies that solve the new task (the exploration's own actions,
cut where the state was first reached) and replies that must fail it, so the checker is
re-checked by executing both.
"""

from __future__ import annotations

import hashlib
import json
import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trajforge.errors import ConfigError
from trajforge.schema import ExpertFn, Task, Trajectory

SYNTH_PREFIX = "synth"
STOP_REPLY = "I stop here."
"""A reply that is no action in any synthesizing env: it ends a tool env's episode with a final
answer and is an invalid move in a compact one."""


@dataclass(frozen=True)
class Candidate:
    """A task drawn from one exploration episode, before it is checked.

    Attributes:
        task: The new task (its id a hash of its content; ``data["synthesis"]`` names its source).
        solution: Assistant replies, in order, that solve it (what the exploration did).
        wrong: Assistant replies, in order, that must not solve it.
    """

    task: Task
    solution: tuple[str, ...]
    wrong: tuple[str, ...]


class Synthesizer(ABC):
    """One environment's exploration and relabelling rules."""

    env: str
    """The registry name of the environment the tasks are for."""

    @abstractmethod
    def start_tasks(self, n: int, seed: int) -> list[Task]:
        """``n`` tasks exploration starts from; only ever from the env's training split."""

    @abstractmethod
    def explorer(self, seed: int) -> ExpertFn:
        """The scripted explorer: a reply for any task and conversation, deterministic in
        ``seed``, the task and the turn."""

    @abstractmethod
    def relabel(self, source: Trajectory, min_steps: int) -> Candidate | str:
        """The task ``source`` reached, or why it gives none (one short reason, counted)."""


Action = tuple[str, dict[str, Any]]
"""A tool's name and its arguments."""


@dataclass(frozen=True)
class Blueprint:
    """A proposed task and the tool calls that carry it out, in order (APIGen-MT).

    A proposer draws one the way an imperfect task writer would: the actions follow the task's
    wording, but nothing guarantees the env accepts them (an order that is not pending, a
    column of another table, a variant out of stock). Executing them decides
    (``trajforge.synthesis``); a proposer never checks. The actions are also what the env's
    expert does for the task, so a valid blueprint is played as a conversation as it is.
    """

    task: Task
    actions: tuple[Action, ...]
    settle: Callable[[Task], Task | str] = lambda task: task
    """Once the actions ran without an error: the task with what they found (the answer an
    answer-checking verifier needs), or why the blueprint is still no task."""


Proposer = Callable[[random.Random], Blueprint]
"""``propose(rng)``: one blueprint drawn with ``rng``."""


def turn_rng(seed: int, purpose: str, task: Task, turn: int) -> random.Random:
    """A generator for one ``purpose`` of an explorer's turn, the same in every process."""
    return random.Random(f"{purpose}:{seed}:{task.id}:{turn}")


def content_id(env: str, task: Task) -> str:
    """A synthesized task's id: its env and a hash of what it asks (prompt, answer, data)."""
    data = {k: v for k, v in task.data.items() if k != "synthesis"}
    key = json.dumps([task.prompt, task.answer, data], sort_keys=True, default=str)
    return f"{SYNTH_PREFIX}-{env}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def new_task(env: str, source: Trajectory, prompt: str, **fields: Any) -> Task:
    """A synthesized task of ``env`` from exploration episode ``source``: its id from its
    content, its provenance (the exploration trajectory and run) in ``data["synthesis"]``."""
    draft = Task(id="draft", prompt=prompt, env=env, split="train", **fields)
    provenance = {"source": source.id, "run": source.run_id, "start_task": source.task.id}
    data = {**draft.data, "synthesis": provenance}
    return draft.model_copy(update={"id": content_id(env, draft), "data": data})


def refuse_env(env: str, explored: list[str], proposed: list[str]) -> ConfigError:
    """The one-line error for an env no synthesizer knows."""
    return ConfigError(
        f"env {env!r}: no task synthesizer for this env; tasks are synthesized by exploring "
        f"{', '.join(explored)} and from blueprints for {', '.join(proposed)}"
    )
