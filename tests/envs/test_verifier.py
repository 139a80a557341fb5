"""The verifier contract: ``(evidence) -> float | Score`` sees the task, the messages and the
tools' per-episode state; the older ``(task, messages)`` still works."""

from __future__ import annotations

import asyncio

import pytest

from episodes import play, reward
from trajforge.envs.tool import ToolContext, tool
from trajforge.envs.tool_env import EnvError, ToolEnv, exact_match_verifier
from trajforge.errors import ConfigError
from trajforge.formats.tool_calls import format_tool_call
from trajforge.rollout import EndReason
from trajforge.schema import (
    Evaluator,
    EvaluatorKind,
    ExpertFn,
    Fault,
    Message,
    OutcomeStatus,
    Role,
    Score,
    Task,
    ToolCall,
)
from trajforge.schema.evidence import Evidence, check_verifier, run_verifier

pytestmark = pytest.mark.timeout(60)


@tool
def add_to_cart(item: str, quantity: int, ctx: ToolContext) -> str:
    """Put items in the cart.

    Args:
        item: What to buy.
        quantity: How many.
    """
    cart: dict[str, int] = ctx.state.setdefault("cart", {})
    cart[item] = cart.get(item, 0) + quantity
    return "ok"  # says nothing about the cart: the verifier must read the state


def cart_verifier(evidence: Evidence) -> Score:
    """1.0 when the cart holds exactly the task's order."""
    cart = evidence.state.get("cart", {})
    ok = cart == evidence.task.answer
    evaluator = Evaluator(kind=EvaluatorKind.ENV, name="cart")
    return Score(name="cart", value=float(ok), evaluator=evaluator, explanation=f"cart {cart}")


ORDER = Task(id="shop1", prompt="Buy 3 apples and a pear.", answer={"apple": 3, "pear": 1})


def shopper(*buys: tuple[str, int]) -> ExpertFn:
    """A reply function that makes ``buys`` one per turn, then says it is done."""

    def reply(task: Task, messages: list[Message]) -> str:
        done = sum(m.role is Role.TOOL for m in messages)
        if done < len(buys):
            item, quantity = buys[done]
            return format_tool_call("add_to_cart", {"item": item, "quantity": quantity})
        return "Done."

    return reply


def shop_reward(*buys: tuple[str, int]) -> float:
    return reward(
        play(lambda: ToolEnv([add_to_cart], verifier=cart_verifier), ORDER, shopper(*buys))
    )


def test_verifier_reads_the_state_the_tools_wrote() -> None:
    assert shop_reward(("apple", 2), ("pear", 1), ("apple", 1)) == 1.0
    assert shop_reward(("apple", 3)) == 0.0
    assert shop_reward(("apple", 3), ("pear", 2)) == 0.0


def test_async_evidence_verifier_sees_the_whole_conversation() -> None:
    seen: list[Evidence] = []

    async def verifier(evidence: Evidence) -> float:
        seen.append(evidence)
        return 1.0 if evidence.answer == "Done." else 0.0

    episode = play(lambda: ToolEnv([add_to_cart], verifier=verifier), ORDER, shopper(("pear", 1)))
    assert reward(episode) == 1.0
    (evidence,) = seen
    assert evidence.task is ORDER and evidence.state == {"cart": {"pear": 1}}
    assert [m.role for m in evidence.messages] == [
        Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT,
    ]  # fmt: skip


def test_a_verifier_takes_evidence_and_the_older_form_is_refused_with_the_fix() -> None:
    def old(task: Task, messages: list[Message]) -> float:
        return 0.5

    check_verifier(cart_verifier)
    check_verifier(lambda evidence, strict=True: 1.0)
    evidence = Evidence(ORDER, [Message(role=Role.USER, content="hi")])
    assert asyncio.run(run_verifier(lambda e: 0.5, evidence)) == 0.5
    with pytest.raises(
        ConfigError,
        match=r"^verifier 'old' takes \(task, messages\); a verifier takes one argument, the "
        r"episode's evidence: def old\(evidence\) and read evidence\.task and evidence\.messages$",
    ):
        check_verifier(old)
    with pytest.raises(EnvError, match=r"^env 'tool_env': verifier 'old' takes \(task, messages\)"):
        ToolEnv([add_to_cart], verifier=old)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"it must take one, \(evidence\)"):
        check_verifier(lambda a, b, c: 1.0)
    with pytest.raises(EnvError, match="env 'tool_env': verifier '<lambda>' takes 3 arguments"):
        ToolEnv([add_to_cart], verifier=lambda a, b, c: 1.0)  # type: ignore[arg-type]


def test_a_failed_score_from_the_verifier_is_an_env_error() -> None:
    def broken(evidence: Evidence) -> Score:
        return Score(name="x", error="database gone", evaluator=Evaluator(kind=EvaluatorKind.ENV))

    # Through the rollout path the env's error ends the episode as the infrastructure's fault.
    episode = play(lambda: ToolEnv([add_to_cart], verifier=broken), ORDER, shopper())
    assert episode.outcome.status is OutcomeStatus.ERROR
    assert episode.outcome.reason == EndReason.ENV_ERROR and episode.outcome.fault is Fault.INFRA
    assert "EnvError: env 'tool_env': the verifier failed: database gone" in (
        episode.outcome.error or ""
    )


def test_default_verifier_needs_an_answer_not_a_tool_call() -> None:
    task = Task(id="t", prompt="2+3?", answer="5")
    answered = [Message(role=Role.ASSISTANT, content="The answer is 5.")]
    assert exact_match_verifier(Evidence(task, answered)) == 1.0
    # A conversation cut off while calling a tool never answered, whatever the call's prose says.
    call = ToolCall(id="call_0_0", name="add_to_cart", arguments={})
    cut = [Message(role=Role.ASSISTANT, content="The answer is 5.", tool_calls=[call])]
    assert exact_match_verifier(Evidence(task, cut)) == 0.0
