"""A policy that reads conversations with image parts: replies of a reply function (an env's
expert, a scripted wrong agent) as assistant turns without token ids, as a server policy gives
them. The text chat renderers refuse image parts (a model must not be shown a conversation with
its images left out), so the GUI env's episodes are played through this one."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from episodes import assistant_message
from trajforge.envs.base import Env
from trajforge.policy.base import ChatSession, Completion, Policy, SamplingParams
from trajforge.rollout import Limits, RolloutSpec, run_rollout
from trajforge.rollout.engine import LiveParts
from trajforge.schema import ExpertFn, Message, Role, Task, ToolSpec, Trajectory
from trajforge.store.sqlite import TrajectoryStore

TOKENS_PER_IMAGE = 256  # an estimate, as a server policy without token ids makes one


class _Session(ChatSession):
    def __init__(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], task: Task | None
    ) -> None:
        self.messages = []
        self.tools = list(tools)
        self.task = task
        self.add_observations(messages)

    @property
    def num_tokens(self) -> int:
        return sum(len(m.text) // 4 + TOKENS_PER_IMAGE * len(m.images) for m in self.messages)

    def add_observations(self, observations: Sequence[Message]) -> list[Message]:
        added = [m.model_copy(update={"token_ids": None, "logprobs": None}) for m in observations]
        self.messages.extend(added)
        return added


class ScreenReader(Policy):
    """``reply(task, messages)`` as the policy."""

    name = "screen-reader"

    def __init__(self, reply: ExpertFn) -> None:
        self.reply = reply

    def _text(self, task: Task | None, messages: list[Message]) -> str:
        assert task is not None, "the reply function needs the task"
        text = self.reply(task, messages)
        assert text is not None, (
            f"no reply for turn {sum(m.role is Role.ASSISTANT for m in messages)}"
        )
        return text

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        raise NotImplementedError("the screen reader answers sessions (it has no token ids)")

    def start_session(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, task: Task | None = None
    ) -> ChatSession:
        return _Session(messages, tools, task)

    async def respond(
        self, session: ChatSession, sampling: SamplingParams, *, turn: int = 0
    ) -> Message:
        message = assistant_message(self._text(session.task, session.messages), turn)
        session.messages.append(message)
        return message


def play_screens(
    make_env: Callable[[], Env],
    tasks: list[Task],
    reply: ExpertFn,
    *,
    store: TrajectoryStore | None = None,
    max_turns: int = 12,
) -> list[Trajectory]:
    """One episode per task through the rollout, with ``reply`` as the policy."""
    spec = RolloutSpec(tasks=tasks, limits=Limits(max_turns=max_turns))
    live = LiveParts(env=make_env, policy=ScreenReader(reply))
    if store is not None:
        live["store"] = store
    return run_rollout(spec, **live)
