"""What a verifier judges: the episode's evidence, and the verifier contract over it.

An environment's verifier is a scorer of the live episode. It is called once, when the episode
ends, with an ``Evidence``: the task, the whole conversation, and the per-episode ``state`` the
tools wrote (``ToolContext.state``), so a verifier reads what the tools did (a cart, a board)
instead of re-deriving it from tool messages. It returns a reward in [0, 1], or a ``Score``
whose ``value`` is that reward; sync or async.

The older contract ``verifier(task, messages)`` still works: a callable taking two positional
arguments is called that way.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from trajforge.errors import ConfigError
from trajforge.schema.answers import final_answer
from trajforge.schema.trajectory import Message, Score, Task, Trajectory

Verdict = float | Score
EvidenceVerifier = Callable[["Evidence"], Verdict | Awaitable[Verdict]]
TaskVerifier = Callable[[Task, list[Message]], float | Awaitable[float]]
Verifier = EvidenceVerifier | TaskVerifier


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


def takes_evidence(verifier: Callable[..., Any]) -> bool:
    """True for ``verifier(evidence)``, False for the older ``verifier(task, messages)``.

    Raises:
        ConfigError: the callable fits neither (it needs more than two arguments).
    """
    try:
        params = inspect.signature(verifier).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: assume the current contract
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in params if p.kind in positional and p.default is p.empty]
    if len(required) > 2:
        name = getattr(verifier, "__name__", type(verifier).__name__)
        raise ConfigError(
            f"verifier {name!r} takes {len(required)} arguments; it must take (evidence) "
            "or (task, messages)"
        )
    return len(required) < 2


async def run_verifier(verifier: Verifier, evidence: Evidence) -> Verdict:
    """Call ``verifier`` on ``evidence`` by its contract and await it if needed."""
    if takes_evidence(verifier):
        result: Any = cast(EvidenceVerifier, verifier)(evidence)
    else:
        result = cast(TaskVerifier, verifier)(evidence.task, list(evidence.messages))
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, Score):
        return result
    return float(result)
