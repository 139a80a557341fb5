"""Whose failure an episode's end is: a tool whose server crashed (``InfraError``), an env or a
policy backend that raised, and a tool that hung are the infrastructure's; a spent turn budget
and a tool failing on the model's arguments are the policy's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from rollout_doubles import FakePolicy, run_live

from trajforge.envs.tool import ToolError, tool
from trajforge.envs.tool_env import ToolEnv
from trajforge.errors import InfraError
from trajforge.formats.tool_calls import format_tool_call
from trajforge.policy.naming import load_policy
from trajforge.rollout import EndReason, Limits, RolloutSpec, run_rollout
from trajforge.schema import Fault, Message, OutcomeStatus, Role, Task, Trajectory, is_infra_failure


def lookup(key: str) -> str:
    """Look a key up in the backing service.

    Args:
        key: What to look up.
    """
    if key == "crash":
        raise InfraError("the lookup server crashed (exit status 3)")
    if key == "bad":
        raise ToolError(f"no entry named {key!r}")
    return key.upper()


def calls_then_answer(task: Task, messages: list[Message]) -> str | None:
    """One ``lookup`` per key of the task, then the answer."""
    keys: list[str] = task.data["keys"]
    made = sum(1 for m in messages if m.role is Role.TOOL)
    if made < len(keys):
        return format_tool_call("lookup", {"key": keys[made]})
    return "The answer is 42."


def episodes(
    *keys: list[str], max_turns: int = 8, env_cls: type[ToolEnv] = ToolEnv
) -> list[Trajectory]:
    tasks = [
        Task(id=f"t{i}", prompt="Look it up.", answer="42", data={"keys": k})
        for i, k in enumerate(keys)
    ]
    return run_rollout(
        RolloutSpec(tasks=tasks, run_id="infra"),
        env=lambda: env_cls([lookup], max_turns=max_turns, expert=calls_then_answer),
        policy=load_policy("expert", expert=calls_then_answer),
    )


def tool_texts(traj: Trajectory) -> list[str]:
    return [m.content for m in traj.messages if m.role is Role.TOOL]


def test_a_tool_raising_infra_error_marks_the_episode_and_it_goes_on() -> None:
    crashed, failed, fine = episodes(["crash", "ok"], ["bad", "ok"], ["ok"])
    # The model read the crash as a tool error and went on to answer; the episode is marked.
    assert tool_texts(crashed) == [
        "Error: tool 'lookup' raised InfraError: the lookup server crashed (exit status 3)",
        "OK",
    ]
    assert crashed.outcome.status is OutcomeStatus.OK and crashed.outcome.reward == 1.0
    assert crashed.outcome.fault is Fault.INFRA and is_infra_failure(crashed)
    assert crashed.outcome.error == "tool 'lookup': the lookup server crashed (exit status 3)"
    # A tool failing on the model's own arguments is a tool message and nothing more.
    assert tool_texts(failed)[0] == "Error: no entry named 'bad'"
    for traj in (failed, fine):
        assert traj.outcome.status is OutcomeStatus.OK
        assert traj.outcome.fault is None and not is_infra_failure(traj)
        assert traj.outcome.error is None


def test_running_out_of_turns_is_the_policys_failure() -> None:
    (cut,) = episodes(["ok", "ok", "ok"], max_turns=2)
    assert cut.outcome.status is OutcomeStatus.TRUNCATED
    assert cut.outcome.fault is Fault.POLICY and not is_infra_failure(cut)


class BrokenEnv(ToolEnv):
    async def reset(self, task: Task) -> list[Message]:
        raise RuntimeError("the database behind the env is down")


def test_an_env_that_raises_is_the_infrastructures_failure() -> None:
    (lost,) = episodes(["ok"], env_cls=BrokenEnv)
    assert lost.outcome.status is OutcomeStatus.ERROR
    assert lost.outcome.reason == EndReason.ENV_ERROR
    assert lost.outcome.fault is Fault.INFRA and is_infra_failure(lost)


def scripted(task: Task | None, messages: list[Message], seed: int) -> str:
    assert task is not None
    return calls_then_answer(task, messages) or ""


async def hang(key: str) -> str:
    """Never answer.

    Args:
        key: Ignored.
    """
    await asyncio.sleep(3600)
    return key


def play(policy: FakePolicy, env: Callable[[], ToolEnv], limits: Limits) -> Trajectory:
    task = Task(id="t", prompt="Look it up.", data={"keys": ["ok"]})
    (traj,) = run_live(env, policy, [task], limits=limits)
    return traj


def test_a_policy_backend_that_raises_is_the_infrastructures_failure() -> None:
    lost = play(FakePolicy(scripted, fail_on_turn=1), lambda: ToolEnv([lookup]), Limits())
    assert lost.outcome.reason == EndReason.POLICY_ERROR
    assert lost.outcome.fault is Fault.INFRA and is_infra_failure(lost)


def test_an_episode_timeout_is_the_infrastructures_in_a_tool_and_the_policys_in_generation() -> (
    None
):
    limits = Limits(episode_timeout_s=1.0)
    hung_tool = play(
        FakePolicy(scripted), lambda: ToolEnv([tool(hang, name="lookup")], tool_timeout=600), limits
    )
    assert hung_tool.outcome.reason == EndReason.EPISODE_TIMEOUT
    assert hung_tool.outcome.fault is Fault.INFRA
    slow_model = play(FakePolicy(scripted, hang_on_turn=1), lambda: ToolEnv([lookup]), limits)
    assert slow_model.outcome.reason == EndReason.EPISODE_TIMEOUT
    assert slow_model.outcome.fault is Fault.POLICY and not is_infra_failure(slow_model)
