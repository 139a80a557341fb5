"""The half of an ``Episode`` that keeps its context within a ``ContextSpec``'s budget: the
tools it offers (``fold`` beside the env's), each turn's token cap, the rewrite before a turn
that would not fit, the agent's fold, and the end of an episode whose prompt cannot fit
(``context_budget``). The strategies themselves are ``trajforge.rollout.context``; the
segments, ``resplit.Pieces``."""

from __future__ import annotations

from abc import abstractmethod
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import TYPE_CHECKING

from trajforge.envs import ERROR_PREFIX, Env
from trajforge.policy import ChatSession, Policy, SamplingParams
from trajforge.rollout.context import (
    FOLD,
    FOLD_REASON,
    FOLD_TOOL,
    SUMMARISE_PROMPT,
    ContextSpec,
    ContextStrategy,
    SummaryBy,
    fold_summary,
    rewritten,
    transcript,
)
from trajforge.rollout.limits import EndReason, EpisodeEnd, Limits, TurnCap, next_turn_cap
from trajforge.rollout.resplit import Pieces
from trajforge.schema import Message, OutcomeStatus, Role, ToolSpec, Usage

if TYPE_CHECKING:
    from trajforge.rollout.episode_key import EpisodeKey


def describe_error(exc: BaseException) -> str:
    """``TypeName: message`` (the form recorded in ``Outcome.error``)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class ContextFitting(EpisodeEnd):
    """Mixed into ``Episode``, whose state and phases it uses."""

    context: ContextSpec | None
    opening: int
    env: Env | None
    session: ChatSession | None
    policy: Policy
    pieces: Pieces
    sampling: SamplingParams
    limits: Limits
    turn: int
    pending: Message | None
    key: EpisodeKey
    usage: Usage

    @abstractmethod
    def _phase(
        self, failure: EndReason, step_budget: float | None = None
    ) -> AbstractAsyncContextManager[None]: ...

    def _tools(self) -> list[ToolSpec]:
        """The tools the model is offered: the env's, and ``fold`` where the agent folds."""
        assert self.env is not None
        folds = self.context is not None and self.context.strategy is ContextStrategy.FOLD
        return [*self.env.tools, FOLD_TOOL] if folds else list(self.env.tools)

    def _per_turn(self) -> int:
        per_turn = self.sampling.max_new_tokens
        if self.limits.max_new_tokens is not None:
            per_turn = min(per_turn, self.limits.max_new_tokens)
        return per_turn

    def _context_limit(self) -> int | None:
        # A local model's own window (HFPolicy.max_context_tokens) bounds the context too, so a
        # full window truncates the episode instead of failing the generation.
        limits = [self.limits.max_context_tokens, self.policy.max_context_tokens]
        if self.context is not None:
            limits.append(self.context.budget)
        known = [n for n in limits if n is not None]
        return min(known) if known else None

    def _token_cap(self) -> TurnCap | None:
        """The most tokens the next turn may sample and the limit that sets it; None (and the
        episode ended) when a budget is already spent."""
        assert self.session is not None
        cap = next_turn_cap(
            self.limits,
            self._per_turn(),
            self._context_limit(),
            self.session.num_tokens,
            self.usage.completion_tokens,
        )
        if cap.tokens <= 0:
            self._end(OutcomeStatus.TRUNCATED, cap.binding, f"no token budget left ({cap.binding})")
            return None
        return cap

    async def _folds(self, message: Message) -> bool:
        """Whether ``message`` folds the context (the fold done, or the episode ended): its
        other calls are not run."""
        folds = self.context is not None and self.context.strategy is ContextStrategy.FOLD
        summary = fold_summary(message) if folds else None
        if summary is None:
            return folds and self._answer_stray_calls(message)
        self.pending = None
        await self._fit_context(fold=summary)
        self._check_turn_limit()
        return True

    def _answer_stray_calls(self, message: Message) -> bool:
        """In an env without tools of its own, ``fold`` is the only tool: a reply's other calls
        (or a fold it could not parse) are answered with an error, as a tool env answers an
        unknown call, and the env is not stepped (it would leave them unanswered)."""
        assert self.env is not None and self.session is not None
        if self.env.tools or not message.tool_calls:
            return False
        answers = [
            Message(
                role=Role.TOOL,
                content=f"{ERROR_PREFIX} could not parse the tool call: {call.parse_error}"
                if call.parse_error
                else f"{ERROR_PREFIX} unknown tool {call.name!r}; available tools: {FOLD}",
                tool_call_id=call.id,
                name=call.name or None,
            )
            for call in message.tool_calls
        ]
        self.pending = None
        try:
            self.session = self.pieces.add_observations(self.policy, self.session, answers)
        except Exception as exc:
            self._end(OutcomeStatus.ERROR, EndReason.POLICY_ERROR, describe_error(exc))
            return True
        self._check_turn_limit()
        return True

    def _check_turn_limit(self) -> None:
        if self.live and self.turn >= self.limits.turn_limit:
            self._end(OutcomeStatus.TRUNCATED, EndReason.MAX_TURNS, f"{self.turn} turns")

    async def _fit_context(self, fold: str | None = None) -> None:
        """Keep the next turn within the context budget: rewrite the history (a new segment)
        where the strategy does, or where the agent folds (``fold``: its summary); end the
        episode where it still does not fit."""
        assert self.context is not None and self.session is not None
        spec, budget, per_turn = self.context, self.context.budget, self._per_turn()
        held = self.session.num_tokens
        if fold is None and (held + per_turn <= budget or not spec.rewrites):
            if held + per_turn > budget:
                unfolded = (
                    ", and the agent did not fold" if spec.strategy is ContextStrategy.FOLD else ""
                )
                self._end_over_budget(f"the prompt holds {held} tokens{unfolded}")
            return
        summary = fold
        if (
            fold is None
            and spec.summary_by is SummaryBy.POLICY
            and spec.strategy is ContextStrategy.SUMMARY
        ):
            summary = await self._policy_summary()
            if summary is None:
                return
        history = rewritten(self.session.messages, self.opening, spec, summary)
        what = FOLD_REASON if fold is not None else spec.strategy.value
        try:
            opened = self.policy.start_session(history, self.session.tools, task=self.key.task)
        except Exception as exc:
            self._end(OutcomeStatus.ERROR, EndReason.POLICY_ERROR, describe_error(exc))
            return
        if opened.num_tokens + per_turn > budget:
            self.policy.end_session(opened)
            self._end_over_budget(
                f"rewritten by {what}, the prompt still holds {opened.num_tokens} tokens"
            )
            return
        reason = f"context rewritten by {what} at {held} tokens (budget {budget})"
        self.pieces.rewrite(self.policy, self.session, opened, reason)
        self.session = opened

    def _end_over_budget(self, held: str) -> None:
        assert self.context is not None
        self._end(
            OutcomeStatus.TRUNCATED,
            EndReason.CONTEXT_BUDGET,
            f"{held}; with a turn's {self._per_turn()} it passes the context budget of "
            f"{self.context.budget} ({EndReason.CONTEXT_BUDGET})",
        )

    async def _policy_summary(self) -> str | None:
        """The rollout policy's summary of the turns after the opening, sampled in a session
        of its own that is not recorded (``None``: the policy failed, the episode ended)."""
        assert self.context is not None and self.session is not None
        prompt = [
            Message(role=Role.SYSTEM, content=SUMMARISE_PROMPT),
            Message(role=Role.USER, content=transcript(self.session.messages[self.opening :])),
        ]
        params = replace(self.sampling, max_new_tokens=self.context.summary_tokens, temperature=0.0)
        reply: Message | None = None
        async with self._phase(EndReason.POLICY_ERROR):
            session = self.policy.start_session(prompt, [], task=None)
            try:
                reply = await self.policy.respond(session, params, turn=0)
            finally:
                self.policy.end_session(session)
        return None if reply is None else reply.text
