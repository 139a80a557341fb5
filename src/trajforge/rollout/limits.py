"""``Limits``: the budgets an episode runs under, why an episode ended (``EpisodeEnd`` records
it once), and when a turn was cut short (``cut_turn``: rollouts, eval and the gateway decide it
alike)."""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from trajforge.policy import FinishReason
from trajforge.schema import Fault, Message, Outcome, OutcomeStatus

# With ``max_turns=None`` the environment decides when an episode ends; this backstop still
# stops an environment that never says ``done``.
TURN_BACKSTOP = 256


class EndReason(StrEnum):
    """Why an episode ended; stored in ``Outcome.reason``.

    ``env_error`` (the env raised), ``policy_error`` (the policy backend raised) and
    ``tool_timeout`` (``env.step`` never returned) are the infrastructure's failures
    (``INFRA_REASONS``); a spent budget or a broken conversation is the policy's.
    """

    DONE = "done"
    ENV_TRUNCATED = "env_truncated"
    MAX_TURNS = "max_turns"
    MAX_NEW_TOKENS = "max_new_tokens"
    MAX_EPISODE_TOKENS = "max_episode_tokens"
    MAX_CONTEXT_TOKENS = "max_context_tokens"
    CONTEXT_BUDGET = "context_budget"
    TOOL_TIMEOUT = "tool_timeout"
    EPISODE_TIMEOUT = "episode_timeout"
    ENV_ERROR = "env_error"
    POLICY_ERROR = "policy_error"
    INVALID_TRAJECTORY = "invalid_trajectory"


INFRA_REASONS = frozenset({EndReason.ENV_ERROR, EndReason.POLICY_ERROR, EndReason.TOOL_TIMEOUT})


def fault_of(reason: EndReason) -> Fault | None:
    """Whose failure an episode ending for ``reason`` is (``None``: it ended as it should)."""
    if reason is EndReason.DONE:
        return None
    return Fault.INFRA if reason in INFRA_REASONS else Fault.POLICY


class EpisodeEnd:
    """How an episode ended: the first end recorded stands. Both halves of an ``Episode`` (its
    phases and the context fitting mixed into it) end it through ``_end``."""

    status: OutcomeStatus | None
    reason: EndReason | None
    error: str | None
    fault: Fault | None

    @property
    def live(self) -> bool:
        """True until the episode has ended (for any reason)."""
        return self.status is None

    def _end(
        self,
        status: OutcomeStatus,
        reason: EndReason,
        error: str | None = None,
        fault: Fault | None = None,
    ) -> None:
        """Record how the episode ended (the first end only); ``fault`` overrides the one
        ``reason`` implies."""
        if self.status is None:
            self.status, self.reason, self.error = status, reason, error
            self.fault = fault or fault_of(reason)


class TurnCap(NamedTuple):
    """The most tokens a turn may sample and the limit that sets it."""

    tokens: int
    binding: EndReason = EndReason.MAX_NEW_TOKENS


def cut_turn(
    reply: Message, cap: TurnCap | None, finish: FinishReason | None = None
) -> Outcome | None:
    """The outcome of an episode whose assistant turn ``reply`` was cut at its token cap
    (``truncated``, the cap's limit as its reason), or ``None`` where the turn ended itself.

    A turn is cut when it sampled every token ``cap`` allowed. Where that cannot be counted (a
    server that returns no token ids, or a cap left to the server: ``None``), the server's own
    ``finish`` says.
    """
    if reply.token_ids is not None and cap is not None:
        cut = len(reply.token_ids) >= cap.tokens
    else:
        cut = finish is FinishReason.LENGTH
    if not cut:
        return None
    binding = EndReason.MAX_NEW_TOKENS if cap is None else cap.binding
    at = "the server's token limit" if cap is None else f"{cap.tokens} tokens"
    return Outcome(
        status=OutcomeStatus.TRUNCATED,
        reason=binding,
        error=f"the turn was cut at {at} ({binding})",
        fault=fault_of(binding),
    )


class Limits(BaseModel):
    """Budgets for one episode. ``None`` means no limit (or: the environment decides).

    Hitting a token, context or turn limit ends the episode with status ``truncated``; running
    past a time limit ends it with status ``timeout``. Either way everything produced so far is
    kept, and ``Outcome.reason`` names the limit.

    Attributes:
        max_turns: Assistant turns per episode (``None``: the environment decides, with a
            backstop of ``TURN_BACKSTOP``). Also handed to a ``ToolEnv`` so its verifier scores a
            cut-off conversation.
        max_new_tokens: Tokens one assistant turn may sample (``None``: the sampling params'
            ``max_new_tokens``).
        stop_on_turn_limit: When a turn is cut at ``max_new_tokens``, end the episode
            (``truncated``, reason ``max_new_tokens``). False hands the cut message to the
            environment like any other.
        max_episode_tokens: Tokens all assistant turns of an episode may sample together.
        max_context_tokens: Tokens the model context (prompt plus completion) may hold.
        tool_timeout_s: Seconds one tool call may run. Enforced around ``env.step``
            (``timeout``, reason ``tool_timeout``): a step answering k calls may take k times
            this. A ``ToolEnv`` gets it as its own ``tool_timeout`` (a slow tool becomes an
            error message the model reads) and the engine's limit backs it up a second later.
        episode_timeout_s: Wall-clock seconds for a whole episode (``timeout``, reason
            ``episode_timeout``).
        close_timeout_s: Seconds ``env.close()`` may take before it is abandoned.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_turns: int | None = Field(default=None, ge=1)
    max_new_tokens: int | None = Field(default=None, ge=1)
    stop_on_turn_limit: bool = True
    max_episode_tokens: int | None = Field(default=None, ge=1)
    max_context_tokens: int | None = Field(default=None, ge=1)
    tool_timeout_s: float | None = Field(default=None, gt=0)
    episode_timeout_s: float | None = Field(default=None, gt=0)
    close_timeout_s: float = Field(default=10.0, gt=0)

    @property
    def turn_limit(self) -> int:
        """The number of turns after which the engine stops an episode."""
        return self.max_turns if self.max_turns is not None else TURN_BACKSTOP


def next_turn_cap(
    limits: Limits, per_turn: int, context: int | None, held: int, sampled: int
) -> TurnCap:
    """The cap of an episode's next turn: ``per_turn`` tokens, fewer where the ``context``
    limit (``held`` tokens in it already) or the episode's token budget (``sampled`` spent)
    leaves less. Ties go to the episode-wide budgets: running into them always ends the
    episode."""
    caps: list[TurnCap] = []
    if context is not None:
        caps.append(TurnCap(context - held, EndReason.MAX_CONTEXT_TOKENS))
    if limits.max_episode_tokens is not None:
        caps.append(TurnCap(limits.max_episode_tokens - sampled, EndReason.MAX_EPISODE_TOKENS))
    caps.append(TurnCap(per_turn, EndReason.MAX_NEW_TOKENS))
    return min(caps, key=lambda c: c.tokens)
