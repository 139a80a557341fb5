"""What a verifier judges: the episode's evidence, and the verifier contract over it.

An environment's verifier is a scorer of the live episode. It is called once, when the episode
ends, with an ``Evidence``: the task, the whole conversation, and the per-episode ``state`` the
tools wrote (``ToolContext.state``), so a verifier reads what the tools did (a cart, a board)
instead of re-deriving it from tool messages. It returns a reward in [0, 1], or a ``Score``
whose ``value`` is that reward; sync or async. The judge layer runs the same function as a
scorer of stored trajectories (``trajforge.judge.VerifierScorer``), on ``Evidence.of``.

A verifier takes that one argument. The older form ``verifier(task, messages)`` is refused
with the one-line change that fixes it (``check_verifier``).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trajforge.errors import ConfigError
from trajforge.schema.answers import final_answer
from trajforge.schema.messages import Message
from trajforge.schema.trajectory import Score, Task, Trajectory

Verdict = float | Score
Verifier = Callable[["Evidence"], Verdict | Awaitable[Verdict]]


@dataclass(frozen=True)
class Evidence:
    """One episode as its verifier sees it.

    Attributes:
        task: The task posed.
        messages: The whole conversation, opening messages included.
        state: The tools' per-episode state (``ToolContext.state``), live; empty when the
            evidence is rebuilt from a stored trajectory (state is not recorded).
    """

    task: Task
    messages: Sequence[Message]
    state: Mapping[str, Any] = field(default_factory=dict)

    @property
    def answer(self) -> str | None:
        """The final answer (``final_answer`` of the messages)."""
        return final_answer(self.messages)

    @classmethod
    def of(cls, trajectory: Trajectory) -> Evidence:
        """The evidence a stored trajectory still holds: its task and messages, no tool state."""
        return cls(task=trajectory.task, messages=list(trajectory.messages))


def check_verifier(verifier: Callable[..., Any]) -> None:
    """Refuse a callable that is not a verifier ``(evidence)``.

    Raises:
        ConfigError: it takes the older ``(task, messages)``, or more than one argument.
    """
    try:
        params = inspect.signature(verifier).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p.name for p in params if p.kind in positional and p.default is p.empty]
    if len(required) <= 1:
        return
    name = getattr(verifier, "__name__", type(verifier).__name__)
    if len(required) == 2:
        raise ConfigError(
            f"verifier {name!r} takes ({', '.join(required)}); a verifier takes one argument, "
            f"the episode's evidence: def {name}(evidence) and read evidence.task and "
            "evidence.messages"
        )
    raise ConfigError(
        f"verifier {name!r} takes {len(required)} arguments; it must take one, (evidence)"
    )


async def run_verifier(verifier: Verifier, evidence: Evidence) -> Verdict:
    """Call ``verifier`` on ``evidence`` and await it if needed."""
    result: Any = verifier(evidence)
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, Score):
        return result
    return float(result)
