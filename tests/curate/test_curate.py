"""Curation: filters, void turns, best-of-group, preference pairs, SFT sets."""

from __future__ import annotations

from trajforge.curate import best_of_group, is_void_turn_free, keep, preference_pairs, sft_set
from trajforge.schema import (
    Evaluator,
    EvaluatorKind,
    Message,
    Outcome,
    OutcomeStatus,
    Role,
    Score,
    Task,
    ToolCall,
    Trajectory,
)


def traj(
    task: str,
    reward: float | None,
    *,
    group: str | None = None,
    answer: str = "The answer is 4.",
    status: OutcomeStatus = OutcomeStatus.OK,
    score: float | None = None,
    void: bool = False,
    tokens: bool = True,
) -> Trajectory:
    ids = (lambda n: list(range(n))) if tokens else (lambda n: None)
    msgs = [Message(role=Role.USER, content="q", token_ids=ids(3))]
    if void:
        msgs += [
            Message(role=Role.ASSISTANT, content="  ", token_ids=ids(1)),
            Message(role=Role.USER, content="go on", token_ids=ids(2)),
        ]
    msgs += [
        Message(
            role=Role.ASSISTANT, tool_calls=[ToolCall(id="call_0_0", name="calc")], token_ids=ids(2)
        ),
        Message(role=Role.TOOL, content="4", tool_call_id="call_0_0", token_ids=ids(2)),
        Message(role=Role.ASSISTANT, content=answer, token_ids=ids(len(answer))),
    ]
    scores = (
        []
        if score is None
        else [Score(name="judge", value=score, evaluator=Evaluator(kind=EvaluatorKind.LLM))]
    )
    return Trajectory(
        task=Task(id=task, prompt="q"),
        group_id=group,
        messages=msgs,
        outcome=Outcome(status=status, reward=reward),
        scores=scores,
    )


def test_keep_by_status_reward_score_and_void() -> None:
    a = traj("t1", 1.0, score=0.9)
    b = traj("t1", 0.0, score=0.2)
    c = traj("t2", 1.0, status=OutcomeStatus.TRUNCATED)
    d = traj("t2", None)
    e = traj("t3", 1.0, void=True)
    all_ = [a, b, c, d, e]
    assert keep(all_, status="ok") == [a, b, d, e]
    assert keep(all_, min_reward=0.5) == [a, c, e]
    assert keep(all_, max_reward=0.5) == [b]
    assert keep(all_, score="judge", min_score=0.5) == [a]
    assert keep(all_, drop_void_turns=True) == [a, b, c, d]
    assert not is_void_turn_free(e) and is_void_turn_free(a)


def test_best_of_group_and_pairs_with_margin() -> None:
    g1 = [traj("t1", r, group="g1") for r in (0.0, 1.0, 0.5)]
    g2 = [traj("t2", r, group="g2") for r in (0.7, 0.6)]
    g3 = [traj("t3", None, group="g3")]
    best = best_of_group(g1 + g2 + g3)
    assert best == [g1[1], g2[0]]
    pairs = preference_pairs(g1 + g2 + g3, min_margin=0.5)
    assert len(pairs) == 1
    assert pairs[0].chosen is g1[1] and pairs[0].rejected is g1[0] and pairs[0].margin == 1.0
    assert len(preference_pairs(g1 + g2, min_margin=0.05)) == 2


def test_pairs_by_score_and_grouped_by_task_without_group_id() -> None:
    x, y = traj("t9", 0.0, score=0.9), traj("t9", 0.0, score=0.1)
    pairs = preference_pairs([x, y], score="judge", min_margin=0.5)
    assert len(pairs) == 1 and pairs[0].chosen is x and pairs[0].task_id == "t9"
    assert preference_pairs([x, y], min_margin=0.0) == []  # equal rewards: nothing to prefer


def test_sft_set_keeps_successful_tokenized_void_free_and_dedupes() -> None:
    good = traj("t1", 1.0)
    dup = traj("t1", 1.0)
    other = traj("t2", 1.0, answer="The answer is 55.")
    failed = traj("t3", 0.0)
    void = traj("t4", 1.0, void=True)
    text_only = traj("t5", 1.0, tokens=False)
    assert sft_set([good, dup, other, failed, void, text_only]) == [good, other]
    assert len(sft_set([good, dup], dedupe=False)) == 2
