from __future__ import annotations

from collections.abc import Callable, Sequence

from image_samples import image_trajectory, png_bytes
from trajforge.judge.criteria import load_criteria
from trajforge.judge.llm_judge import LLMJudge, llm_judge, parse_verdict, render_trajectory
from trajforge.policy.base import ChatSession, Completion, FinishReason, Policy, SamplingParams
from trajforge.schema import EvaluatorKind, Message, Role, Task, ToolSpec, Trajectory

Make = Callable[..., Trajectory]


class _Session(ChatSession):
    def __init__(self, messages: Sequence[Message], task: Task | None) -> None:
        self.messages = list(messages)
        self.tools: list[ToolSpec] = []
        self.task = task

    @property
    def num_tokens(self) -> int:
        return 0

    def add_observations(self, observations: Sequence[Message]) -> list[Message]:
        self.messages.extend(observations)
        return list(observations)


class CannedJudge(Policy):
    """Replies with the next canned verdict text and records the prompts it saw."""

    name = "canned-judge"

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingParams, *, messages: object = None
    ) -> Completion:
        text = self.replies.pop(0)
        return Completion(token_ids=[], logprobs=None, text=text, finish_reason=FinishReason.STOP)

    def start_session(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, task: Task | None = None
    ) -> ChatSession:
        return _Session(messages, task)

    async def respond(
        self, session: ChatSession, sampling: SamplingParams, *, turn: int = 0
    ) -> Message:
        self.prompts.append(session.messages[-1].content)
        completion = await self.generate([], sampling)
        msg = Message(role=Role.ASSISTANT, content=completion.text)
        session.messages.append(msg)
        return msg


GOOD = '{"success": 1, "side_effects": 0, "repetition": 0, "optimality": 3, "explanation": "ok"}'


async def test_judge_parses_a_good_verdict(make_traj: Make) -> None:
    judge = llm_judge("agentrewardbench", CannedJudge([GOOD]))
    score = await judge(make_traj("The answer is 42", calls=[("calculator", {"e": "6*7"}, "42")]))
    assert score.value == 1.0
    assert score.dimensions == {
        "success": 1.0,
        "side_effects": 0.0,
        "repetition": 0.0,
        "optimality": 3.0,
    }
    assert score.evaluator.kind is EvaluatorKind.LLM
    assert score.evaluator.model == "canned-judge"
    assert score.evaluator.prompt_version == "llm-judge/1;agentrewardbench@1.0"


async def test_malformed_verdicts_are_retried_then_recorded_as_failed(make_traj: Make) -> None:
    policy = CannedJudge(["I think it went well.", '{"success": 2}', '{"success": "yes"'])
    score = await LLMJudge(load_criteria(), policy, max_retries=2)(make_traj("42"))
    assert score.value is None
    assert score.error is not None
    assert "after 3 tries" in score.error
    assert "no JSON object" in score.error
    assert not policy.replies


async def test_retry_recovers_when_a_later_verdict_parses(make_traj: Make) -> None:
    policy = CannedJudge(['{"success": 1}', GOOD.replace('"success": 1', '"success": 0')])
    score = await LLMJudge(load_criteria(), policy, max_retries=1)(make_traj("41"))
    assert score.value == 0.0


def test_parse_verdict_is_strict() -> None:
    rubric = load_criteria()
    values, explanation = parse_verdict(f"Sure:\n```json\n{GOOD}\n```", rubric)
    assert values["optimality"] == 3
    assert explanation == "ok"
    for bad, reason in [
        (GOOD.replace('"optimality": 3', '"optimality": 4'), "must be one of"),
        (GOOD.replace('"repetition": 0, ', ""), "missing dimension 'repetition'"),
        (GOOD.replace('"success": 1', '"success": true'), "must be one of"),
        (GOOD.replace("}", ', "mood": 1}'), "unexpected keys"),
    ]:
        try:
            parse_verdict(bad, rubric)
        except ValueError as exc:
            assert reason in str(exc)
        else:
            raise AssertionError(f"accepted {bad}")


async def test_long_trajectories_are_condensed_and_the_cut_stated(make_traj: Make) -> None:
    calls = [("calculator", {"expression": f"{i}+1"}, "x" * 300) for i in range(40)]
    traj = make_traj("The answer is 42", calls=calls)
    text, note = render_trajectory(traj, max_chars=2000)
    assert len(text) <= 2000
    assert note is not None and "omitted" in note
    assert "The answer is 42" in text
    policy = CannedJudge([GOOD])
    await LLMJudge(load_criteria(), policy, max_chars=2000)(traj)
    assert "condensed to fit" in policy.prompts[0]


def test_the_transcript_tells_a_text_judge_where_an_image_was() -> None:
    traj = image_trajectory(png_bytes(2))
    text, cut = render_trajectory(traj, 10_000)
    image = traj.messages[0].images[0]
    assert cut is None
    assert f"[0] USER:\nWhat is shown?\n  [image image/png, {image.size} bytes, sha256 " in text
    assert image.sha256[:12] in text
