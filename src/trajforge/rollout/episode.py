"""One episode as a small state machine: ``start``, then ``generate``/``act`` turns, then ``finish``.

The asynchronous engine and the lockstep baseline drive the same ``Episode``; they differ only
in when they call its phases. Each phase isolates its own failures: an exception, a hang past a
time limit, or a budget running out ends this episode (``live`` becomes False) with the status
and reason recorded, and never propagates to the other episodes of the run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from trajforge.envs import Env, UserSimEnv
from trajforge.errors import InfraError
from trajforge.policy import ChatSession, Policy, SamplingParams
from trajforge.rollout.context import ContextSpec
from trajforge.rollout.episode_key import EpisodeKey
from trajforge.rollout.episode_record import (
    WEIGHTS_VERSIONS,
    episode_outcome,
    valid_prefix,
    weights_versions,
)
from trajforge.rollout.fitting import ContextFitting, describe_error
from trajforge.rollout.limits import (
    EndReason,
    Limits,
    cut_turn,
    fault_of,
)
from trajforge.rollout.resplit import Pieces
from trajforge.rollout.seeding import derive_seed
from trajforge.rollout.user import PolicyUser
from trajforge.schema import (
    Fault,
    Message,
    OutcomeStatus,
    Timing,
    Trajectory,
    Usage,
    new_id,
)

EnvFactory = Callable[[], Env]

# How long after its own tool timeout an env that times out its tools gets to answer before the engine cuts the step.
BACKSTOP_GRACE_S = 1.0


@dataclass(eq=False, repr=False)
class Episode(ContextFitting):
    """The state of one episode and the phases that advance it.

    Args:
        key: Which task and sample this episode is.
        env_factory: Makes a fresh environment for the episode.
        policy: Answers the conversation.
        limits: The budgets the episode runs under.
        sampling: Base sampling parameters; the seed and token cap are set per turn.
        run_id: The run this episode belongs to.
        group_id: Shared by the samples of this task.
        seed: The run's seed; turn seeds derive from it, the task id, the sample and the turn.
        user_policy: Plays the simulated user of an env that has one (``None``: the env's own
            scripted user, whose side is then not recorded).
        context: How the context is kept within a budget (``None``: one growing context).
    """

    key: EpisodeKey
    _: KW_ONLY
    env_factory: EnvFactory
    policy: Policy
    limits: Limits
    sampling: SamplingParams
    run_id: str
    group_id: str
    seed: int
    user_policy: Policy | None = None
    context: ContextSpec | None = None
    opening: int = field(default=0, init=False)
    """How many messages open the conversation (kept by every rewrite)."""
    peak_tokens: int = field(default=0, init=False)
    """The most tokens a forward of the episode held (its prompt and what it sampled)."""
    user: PolicyUser | None = field(default=None, init=False)
    linked: list[Trajectory] = field(default_factory=list, init=False)
    """Trajectories recorded beside the episode's own (the simulated user's side)."""
    env: Env | None = field(default=None, init=False)
    session: ChatSession | None = field(default=None, init=False)
    pieces: Pieces = field(default_factory=Pieces, init=False)
    """Where the policy's template rewrites the history, the pieces it is split into."""
    pending: Message | None = field(default=None, init=False)
    turn: int = field(default=0, init=False)
    usage: Usage = field(default_factory=Usage, init=False)
    status: OutcomeStatus | None = field(default=None, init=False)
    reason: EndReason | None = field(default=None, init=False)
    error: str | None = field(default=None, init=False)
    fault: Fault | None = field(default=None, init=False)
    infra_fault: str | None = field(default=None, init=False)
    """What of the infrastructure failed under the episode while it went on (a tool's
    server crashed), as the env's last step said."""
    reward: float | None = field(default=None, init=False)
    _t0: float = field(default=0.0, init=False)
    _deadline: float | None = field(default=None, init=False)

    @asynccontextmanager
    async def _phase(
        self, failure: EndReason, step_budget: float | None = None
    ) -> AsyncIterator[None]:
        """Run a phase under the episode deadline (and a step budget); record how it failed."""
        episode_cm = asyncio.timeout_at(self._deadline)
        step_cm = asyncio.timeout(step_budget)
        try:
            async with episode_cm, step_cm:
                yield
        except TimeoutError as exc:
            if episode_cm.expired():
                limit = self.limits.episode_timeout_s
                # Time spent waiting on the env (a hung tool, a server that never started) is
                # the infrastructure's; time spent generating is the policy's budget.
                self._end(
                    OutcomeStatus.TIMEOUT,
                    EndReason.EPISODE_TIMEOUT,
                    f"the episode ran past episode_timeout_s={limit:g}",
                    Fault.INFRA if failure is EndReason.ENV_ERROR else Fault.POLICY,
                )
            elif step_cm.expired():
                self._end(
                    OutcomeStatus.TIMEOUT,
                    EndReason.TOOL_TIMEOUT,
                    f"env.step did not return within {step_budget:g} s "
                    f"(tool_timeout_s={self.limits.tool_timeout_s:g} per call)",
                )
            else:
                self._end(OutcomeStatus.ERROR, failure, describe_error(exc))
        except Exception as exc:
            # A policy's server that died (``vllm:``) is the infrastructure's failure too.
            fault = Fault.INFRA if isinstance(exc, InfraError) else None
            self._end(OutcomeStatus.ERROR, failure, describe_error(exc), fault)

    async def start(self) -> None:
        """Make the environment, reset it on the task and open the policy's session."""
        loop = asyncio.get_running_loop()
        self._t0 = time.monotonic()
        if self.limits.episode_timeout_s is not None:
            self._deadline = loop.time() + self.limits.episode_timeout_s
        opening: list[Message] = []
        async with self._phase(EndReason.ENV_ERROR):
            self.env = self.env_factory()
            self.env.adopt_limits(
                max_turns=self.limits.max_turns, tool_timeout_s=self.limits.tool_timeout_s
            )
            if isinstance(self.env, UserSimEnv) and self.user_policy is not None:
                self.user = PolicyUser(
                    self.user_policy,
                    self.key.task,
                    self.sampling,
                    seed=self.seed,
                    sample_index=self.key.sample_index,
                )
                self.env.bind_user(self.user)
            opening = await self.env.reset(self.key.task)
        if not self.live or self.env is None:
            return
        try:
            self.session = self.policy.start_session(opening, self._tools(), task=self.key.task)
        except Exception as exc:
            self._end(OutcomeStatus.ERROR, EndReason.POLICY_ERROR, describe_error(exc))
            return
        self.opening = len(self.session.messages)

    async def generate(self) -> None:
        """Sample the next assistant turn (one ``policy.respond``)."""
        if not self.live or self.session is None:
            return
        if self.context is not None:
            await self._fit_context()
            if not self.live:
                return
        cap = self._token_cap()
        if cap is None:
            return
        seed = derive_seed(self.seed, self.key.task.id, self.key.sample_index, self.turn)
        params = replace(self.sampling, max_new_tokens=cap.tokens, seed=seed)
        prompt_tokens = self.session.num_tokens
        started_at, t0 = time.time(), time.monotonic()
        message: Message | None = None
        async with self._phase(EndReason.POLICY_ERROR):
            message = await self.policy.respond(self.session, params, turn=self.turn)
        duration = time.monotonic() - t0
        self.usage.generation_time_s += duration
        if message is None:
            return
        message.timing = Timing(started_at=started_at, duration_s=duration)
        sampled = len(message.token_ids) if message.token_ids is not None else 0
        self.peak_tokens = max(self.peak_tokens, prompt_tokens + sampled)
        self.usage.prompt_tokens += prompt_tokens
        self.usage.completion_tokens += sampled
        self.usage.turns += 1
        self.usage.tool_calls += len(message.tool_calls)
        self.turn += 1
        self.pending = message
        cut = cut_turn(message, cap)
        if cut is not None and (
            cap.binding is not EndReason.MAX_NEW_TOKENS or self.limits.stop_on_turn_limit
        ):
            self._end(cut.status, cap.binding, cut.error)

    async def act(self) -> None:
        """Hand the pending assistant message to the environment and record what comes back."""
        message = self.pending
        if not self.live or message is None or self.env is None or self.session is None:
            return
        if await self._folds(message):
            return
        budget = None
        if self.limits.tool_timeout_s is not None:
            budget = self.limits.tool_timeout_s * max(1, len(message.tool_calls))
            if self.env.times_out_tools:
                # The env times its tools out itself (the model reads an error message); the
                # engine's limit is only a backstop behind it.
                budget += BACKSTOP_GRACE_S
        started_at, t0 = time.time(), time.monotonic()
        result = None
        async with self._phase(EndReason.ENV_ERROR, step_budget=budget):
            result = await self.env.step(message)
        duration = time.monotonic() - t0
        self.usage.tool_time_s += duration
        if result is None:
            return
        self.pending = None
        if result.infra_fault:
            self.infra_fault = result.infra_fault
        message.state_key = result.state_key
        if not result.done:
            message.reward = result.reward
        for obs in result.observations:
            if obs.timing is None:
                obs.timing = Timing(started_at=started_at, duration_s=duration)
        try:
            self.session = self.pieces.add_observations(
                self.policy, self.session, result.observations
            )
        except Exception as exc:
            self._end(OutcomeStatus.ERROR, EndReason.POLICY_ERROR, describe_error(exc))
            return
        if result.done:
            self.reward = result.reward
            if result.info.get("truncated"):
                self._end(OutcomeStatus.TRUNCATED, EndReason.ENV_TRUNCATED)
            else:
                self._end(OutcomeStatus.OK, EndReason.DONE)
        elif self.turn >= self.limits.turn_limit:
            self._end(OutcomeStatus.TRUNCATED, EndReason.MAX_TURNS, f"{self.turn} turns")

    async def run(self) -> None:
        """Drive the episode to its end on its own (the asynchronous mode)."""
        await self.start()
        while self.live:
            await self.generate()
            await self.act()

    async def play(self) -> Trajectory:
        """Run the episode to its end and build its trajectory; cancelled, it releases its
        environment and re-raises."""
        try:
            await self.run()
        except asyncio.CancelledError:
            await self.abort()
            raise
        return await self.finish()

    async def abort(self) -> None:
        """Release the environment of an episode whose run was cancelled (never raises)."""
        if self.env is not None:
            env, self.env = self.env, None
            try:
                await asyncio.wait_for(env.close(), self.limits.close_timeout_s)
            except Exception:  # the run is being torn down; nothing is left to record it on
                return

    async def finish(self) -> Trajectory:
        """Close the environment and build the trajectory (never raises)."""
        metadata: dict[str, Any] = {"seed": self.seed}
        if self.context is not None:
            metadata["context"] = {
                **self.context.model_dump(mode="json"),
                "segments": len(self.pieces.closed) + 1,
                "peak_tokens": self.peak_tokens,
            }
        if self.policy.precision is not None:
            metadata["precision"] = self.policy.precision
        if self.env is not None:
            metadata.update(self.env.episode_metadata())
            try:
                await asyncio.wait_for(self.env.close(), self.limits.close_timeout_s)
            except Exception as exc:
                metadata["close_error"] = describe_error(exc)
        self.usage.wall_time_s = time.monotonic() - self._t0 if self._t0 else 0.0
        if self.status is None:
            # Only reached when a driver stops an episode early; say so rather than claim success.
            self._end(
                OutcomeStatus.ERROR, EndReason.ENV_ERROR, "the episode was stopped before it ended"
            )
        messages = list(self.session.messages) if self.session is not None else []
        if self.session is not None and self.session.sampled_versions:
            metadata[WEIGHTS_VERSIONS] = weights_versions(self.session, messages)
        # Neither side's conversation continues: the policies' caches let them go.
        if self.session is not None:
            self.policy.end_session(self.session)
        if self.user is not None and self.user.session is not None:
            self.user.policy.end_session(self.user.session)
        user_id = new_id() if self.user is not None and self.user.session is not None else None
        if user_id is not None:
            metadata.update(side="agent", linked=user_id)
        try:
            traj = self._trajectory(messages, metadata)
        except ValidationError as exc:
            self.status, self.reason = OutcomeStatus.ERROR, EndReason.INVALID_TRAJECTORY
            self.fault = fault_of(EndReason.INVALID_TRAJECTORY)
            self.error = (
                f"the conversation breaks the trajectory contract: {exc.errors()[0]['msg']}"
            )
            self.reward = None
            traj = self._trajectory(valid_prefix(messages), metadata)
        self.linked += self.pieces.trajectories(traj)
        if self.user is not None and user_id is not None:
            try:
                self.linked.append(self.user.trajectory(traj, traj.env or "", user_id))
            except Exception as exc:  # the agent's side is still worth keeping
                traj.metadata["linked_error"] = describe_error(exc)
        return traj

    def _trajectory(self, messages: list[Message], metadata: dict[str, Any]) -> Trajectory:
        assert self.status is not None
        env = self.env
        return Trajectory(
            id=self.pieces.id,
            task=self.key.task,
            env=env.name if env is not None else self.key.task.env,
            group_id=self.group_id,
            sample_index=self.key.sample_index,
            run_id=self.run_id,
            model=self.policy.name,
            tools=self._tools() if env is not None else [],
            messages=messages,
            outcome=episode_outcome(
                self.status, self.reason, self.reward, self.error, self.fault, self.infra_fault
            ),
            usage=self.usage,
            exactness=self.pieces.exactness,
            segment=self.pieces.segment,
            metadata=metadata,
        )
