"""Best-of-N figures over a run (pass@1, pass@N, selected@N with Wilson intervals) and the marks
each candidate carries."""

from __future__ import annotations

import pytest

from trajforge.judge.best_of import BEST_OF_KEY, best_of_summary, marked, select_best
from trajforge.judge.selectors import parse_selector
from trajforge.judge.stats import wilson_ci95
from trajforge.schema import Message, Outcome, OutcomeStatus, Role, Task, Trajectory


def sample(task: str, index: int, reward: float, confidence: float) -> Trajectory:
    return Trajectory(
        task=Task(id=task, prompt=task),
        group_id=f"run/{task}",
        sample_index=index,
        messages=[
            Message(role=Role.USER, content=task),
            Message(role=Role.ASSISTANT, content="R", token_ids=[1], logprobs=[confidence]),
        ],
        outcome=Outcome(status=OutcomeStatus.OK, reward=reward),
    )


# Task a: 1 of 3 succeed, the confident one; b: none; c: 2 of 3, but the failure is confident.
RUN = [
    sample("a", 1, 1.0, -0.1),
    sample("a", 0, 0.0, -1.0),
    sample("a", 2, 0.0, -2.0),
    sample("b", 0, 0.0, -0.5),
    sample("b", 1, 0.0, -0.4),
    sample("b", 2, 0.0, -0.3),
    sample("c", 0, 1.0, -0.9),
    sample("c", 1, 0.0, -0.2),
    sample("c", 2, 1.0, -0.8),
]


def test_figures_count_tasks_with_wilson_intervals() -> None:
    selector = parse_selector("logprob")
    choices = select_best(selector, RUN)
    assert [c.group for c in choices] == ["run/a", "run/b", "run/c"]
    # Candidates come back in sample order whatever order the run gave them in.
    assert [t.sample_index for t in choices[0].candidates] == [0, 1, 2]
    assert [c.chosen for c in choices] == [1, 2, 1]
    summary = best_of_summary(selector, choices)
    assert (summary.n, summary.tasks, summary.selector) == (3, 3, "logprob")
    assert summary.pass_at_1.value == pytest.approx(1 / 3)  # (1/3 + 0 + 2/3) / 3
    assert (summary.pass_at_1.low, summary.pass_at_1.high) == wilson_ci95(1.0, 3)
    assert summary.pass_at_n.value == pytest.approx(2 / 3)
    assert summary.selected_at_n.value == pytest.approx(1 / 3)
    assert (summary.selected_at_n.low, summary.selected_at_n.high) == wilson_ci95(1, 3)
    assert summary.chosen["run/a"] == choices[0].candidates[1].id
    assert [r[0] for r in summary.rows()] == [
        "pass@1 (95% CI)",
        "pass@3 (95% CI)",
        "selected@3 by logprob (95% CI)",
    ]


def test_a_truncated_candidate_never_counts_as_a_success() -> None:
    cut = sample("a", 0, 1.0, 0.0).model_copy(
        update={"outcome": Outcome(status=OutcomeStatus.TRUNCATED, reward=1.0)}
    )
    selector = parse_selector("verifier")
    summary = best_of_summary(selector, select_best(selector, [cut, sample("a", 1, 0.0, 0.0)]))
    assert (summary.pass_at_n.value, summary.selected_at_n.value) == (0.0, 0.0)


def test_every_candidate_is_marked_with_the_chosen_one() -> None:
    selector = parse_selector("logprob")
    choice = select_best(selector, RUN[:3])[0]
    marks = [t.metadata[BEST_OF_KEY] for t in marked(selector, choice)]
    assert [m["chosen"] for m in marks] == [False, True, False]
    assert {m["chosen_id"] for m in marks} == {choice.candidates[1].id}
    assert [m["value"] for m in marks] == [-1.0, -0.1, -2.0]
    assert all(m["selector"] == "logprob" and m["n"] == 3 for m in marks)


def test_no_groups_is_an_error() -> None:
    with pytest.raises(ValueError, match="no groups"):
        best_of_summary(parse_selector("logprob"), [])
