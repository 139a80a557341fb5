"""Best-of-N over a run: the candidates of each task (one group), the one a selector keeps,
marked in each candidate's metadata, and the figures with 95% intervals: pass@1 (one sample),
pass@N (any of the N: what a perfect selector would reach) and selected@N (the chosen one).

Each interval is Wilson's over the tasks (``wilson_ci95``); for pass@1, a mean of per-task
success fractions, that interval is conservative."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from trajforge.judge.selectors import Selector, choose, selection_values
from trajforge.judge.stats import wilson_ci95
from trajforge.schema import SUCCESS_THRESHOLD, Trajectory, is_success

BEST_OF_KEY = "best_of"
"""Where each candidate's metadata records its selection."""


@dataclass(frozen=True)
class Rate:
    """A success rate over tasks with its Wilson 95% interval."""

    value: float
    low: float
    high: float

    @classmethod
    def of(cls, total: float, n: int) -> Rate:
        low, high = wilson_ci95(total, n)
        return cls(total / n, low, high)

    def text(self) -> str:
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}]"


@dataclass(frozen=True)
class GroupChoice:
    """One task's candidates (in sample order) and the index of the one kept."""

    group: str
    candidates: list[Trajectory]
    chosen: int
    values: list[float | None]

    @property
    def chosen_trajectory(self) -> Trajectory:
        return self.candidates[self.chosen]


@dataclass(frozen=True)
class BestOfSummary:
    """Best-of-N figures over ``tasks`` tasks of ``n`` samples each."""

    n: int
    selector: str
    tasks: int
    pass_at_1: Rate
    pass_at_n: Rate
    selected_at_n: Rate
    chosen: dict[str, str]
    """Per group, the id of the chosen trajectory."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The figures as (metric, value) rows for a table."""
        return [
            ("pass@1 (95% CI)", self.pass_at_1.text()),
            (f"pass@{self.n} (95% CI)", self.pass_at_n.text()),
            (f"selected@{self.n} by {self.selector} (95% CI)", self.selected_at_n.text()),
        ]


def candidate_groups(trajectories: Sequence[Trajectory]) -> dict[str, list[Trajectory]]:
    """The trajectories by group (their group id, else their task's id), each in sample
    order."""
    groups: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault(t.group_id or t.task.id, []).append(t)
    return {g: sorted(members, key=lambda t: t.sample_index or 0) for g, members in groups.items()}


def select_best(selector: Selector, trajectories: Sequence[Trajectory]) -> list[GroupChoice]:
    """Each group's choice (a ``judge`` selector reads the ``select_judge`` scores given
    beforehand)."""
    return [
        GroupChoice(group, members, choose(selector, members), selection_values(selector, members))
        for group, members in candidate_groups(trajectories).items()
    ]


def _succeeded(t: Trajectory, threshold: float) -> bool:
    return is_success(t.outcome.status, t.outcome.reward, threshold)


def best_of_summary(
    selector: Selector, choices: Sequence[GroupChoice], threshold: float = SUCCESS_THRESHOLD
) -> BestOfSummary:
    """pass@1, pass@N and selected@N over the groups, with Wilson 95% intervals."""
    if not choices:
        raise ValueError("best_of_summary: no groups")
    tasks = len(choices)
    per_task = [[_succeeded(t, threshold) for t in c.candidates] for c in choices]
    return BestOfSummary(
        n=max(len(c.candidates) for c in choices),
        selector=selector.text,
        tasks=tasks,
        pass_at_1=Rate.of(sum(sum(s) / len(s) for s in per_task), tasks),
        pass_at_n=Rate.of(sum(any(s) for s in per_task), tasks),
        selected_at_n=Rate.of(
            sum(s[c.chosen] for s, c in zip(per_task, choices, strict=True)), tasks
        ),
        chosen={c.group: c.chosen_trajectory.id for c in choices},
    )


def marked(selector: Selector, choice: GroupChoice) -> list[Trajectory]:
    """The group's candidates with their selection in ``metadata["best_of"]``: the selector,
    N, the value it ranked them by, whether each was chosen and the chosen one's id."""
    chosen_id = choice.chosen_trajectory.id
    return [
        t.model_copy(
            update={
                "metadata": {
                    **t.metadata,
                    BEST_OF_KEY: {
                        "selector": selector.text,
                        "n": len(choice.candidates),
                        "value": value,
                        "chosen": i == choice.chosen,
                        "chosen_id": chosen_id,
                    },
                }
            }
        )
        for i, (t, value) in enumerate(zip(choice.candidates, choice.values, strict=True))
    ]
