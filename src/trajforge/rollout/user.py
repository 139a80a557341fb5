"""A policy as the simulated user of a ``UserSimEnv``, and the user side's own trajectory.

``PolicyUser`` is the ``UserResponder`` the rollout binds to an env with a simulated user: it
keeps its own ``ChatSession`` of the user's role-swapped view (the simulator's instructions as
system, the agent's words as user messages), so the user simulator's sampled turns are
assistant messages with their exact ids and logprobs, and its trajectory is as trainable as the
agent's. Both trajectories share the episode's ``group_id``, task and sample; the user side is
stored under the run id ``<run_id>.user`` (so the agent run's statistics, resume and
demonstrations never mix the two), and each names the other in ``metadata["linked"]``, with
``metadata["side"]`` saying which side it is. The user side carries no reward of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field, replace

from trajforge.envs import UserResponder
from trajforge.errors import TrajforgeError
from trajforge.policy import ChatSession, Policy, SamplingParams
from trajforge.rollout.seeding import derive_seed
from trajforge.schema import Message, Outcome, OutcomeStatus, Role, Task, Trajectory, Usage

USER_RUN_SUFFIX = ".user"


class UserSessionError(TrajforgeError):
    """The env handed the simulated user a view that does not extend its session."""


def user_run_id(run_id: str) -> str:
    """The run id the user side of run ``run_id`` is stored under."""
    return run_id + USER_RUN_SUFFIX


@dataclass(eq=False)
class PolicyUser(UserResponder):
    """Drives ``policy`` as the user of one episode.

    Args:
        policy: The user simulator (any trajforge policy; the scripted one for tests).
        task: The episode's task (a scripted user plans from it).
        sampling: Base sampling of the user's turns; seeds derive per user turn.
        seed: The run's seed.
        sample_index: The episode's sample.
    """

    policy: Policy
    task: Task
    sampling: SamplingParams
    _: KW_ONLY
    seed: int
    sample_index: int
    session: ChatSession | None = field(default=None, init=False)
    usage: Usage = field(default_factory=Usage, init=False)

    async def respond(self, view: Sequence[Message]) -> Message:
        if self.session is None:
            self.session = self.policy.start_session(view, [], task=self.task)
        else:
            known = len(self.session.messages)
            new = list(view[known:])
            if len(view) < known or any(m.role is Role.ASSISTANT for m in new):
                raise UserSessionError(
                    f"task {self.task.id!r}: the user's view ({len(view)} messages) does not "
                    f"extend its session ({known} messages) by the agent's words"
                )
            self.session.add_observations(new)
        turn = self.usage.turns
        seed = derive_seed(self.seed, f"user:{self.task.id}", self.sample_index, turn)
        params = replace(self.sampling, seed=seed)
        prompt_tokens = self.session.num_tokens
        message = await self.policy.respond(self.session, params, turn=turn)
        self.usage.prompt_tokens += prompt_tokens
        self.usage.completion_tokens += len(message.token_ids or [])
        self.usage.turns += 1
        return message

    def trajectory(self, agent: Trajectory, env_name: str, traj_id: str) -> Trajectory:
        """The user side (id ``traj_id``) of the episode ``agent`` records."""
        if self.session is None:
            raise UserSessionError(f"task {self.task.id!r}: the simulated user never spoke")
        status = agent.outcome.status
        return Trajectory(
            id=traj_id,
            task=agent.task,
            env=env_name,
            group_id=agent.group_id,
            sample_index=agent.sample_index,
            run_id=user_run_id(agent.run_id or ""),
            model=self.policy.name,
            messages=list(self.session.messages),
            outcome=Outcome(
                status=status,
                reason=agent.outcome.reason,
                error=agent.outcome.error if status is not OutcomeStatus.OK else None,
                fault=agent.outcome.fault,
            ),
            usage=self.usage,
            metadata={"side": "user", "linked": agent.id, "seed": self.seed},
        )
