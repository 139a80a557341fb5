"""Episodes for environment tests, played through the one rollout path: ``run_rollout`` with a
live env factory and a reply function as the scripted policy (no model, the SmolLM2 tokenizer
renders the turns)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from trajforge.envs.base import Env
from trajforge.formats.tool_calls import parse_tool_calls
from trajforge.policy.base import Policy
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.naming import load_policy
from trajforge.rollout import Limits, RolloutSpec, run_rollout
from trajforge.schema import ExpertFn, Message, Role, Task, Trajectory


@cache
def _tokenizer() -> object:
    return load_tokenizer()


def scripted_policy(reply: ExpertFn) -> Policy:
    """``reply(task, messages)`` as the policy (``None``: no reply, a policy error)."""
    return load_policy("expert", expert=reply, tokenizer=_tokenizer())


def play_all(
    make_env: Callable[[], Env], tasks: list[Task], reply: ExpertFn, limits: Limits | None = None
) -> list[Trajectory]:
    """One episode per task, a fresh env each, in task order."""
    spec = RolloutSpec(tasks=tasks, limits=limits or Limits())
    return run_rollout(spec, env=make_env, policy=scripted_policy(reply))


def play(
    make_env: Callable[[], Env], task: Task, reply: ExpertFn, limits: Limits | None = None
) -> Trajectory:
    """One episode of ``task``."""
    [trajectory] = play_all(make_env, [task], reply, limits)
    return trajectory


def reward(trajectory: Trajectory) -> float:
    """The outcome reward of an episode the env scored (one it never scored fails the test)."""
    assert trajectory.outcome.reward is not None, trajectory.outcome
    return trajectory.outcome.reward


def rewards(
    make_env: Callable[[], Env], tasks: list[Task], reply: ExpertFn, limits: Limits | None = None
) -> list[float]:
    """Each task's outcome reward, one episode each."""
    return [reward(t) for t in play_all(make_env, tasks, reply, limits)]


def assistant_turns(trajectory: Trajectory) -> list[Message]:
    return [m for m in trajectory.messages if m.role is Role.ASSISTANT]


def state_keys(trajectory: Trajectory) -> list[str | None]:
    """The env state before each assistant turn."""
    return [m.state_key for m in assistant_turns(trajectory)]


def assistant_message(text: str, turn: int) -> Message:
    """``text`` parsed into an assistant message whose call ids are ``call_{turn}_{k}`` (for
    tests that step an env by hand)."""
    parsed = parse_tool_calls(text, id_prefix=f"call_{turn}")
    return Message(role=Role.ASSISTANT, content=parsed.content, tool_calls=parsed.tool_calls)
