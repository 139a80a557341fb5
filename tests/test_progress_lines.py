"""Plain progress lines where no live bar can be drawn: the first and last update, and at most
one line per interval between them."""

from __future__ import annotations

import io

from rich.console import Console

from trajforge.progress_lines import ProgressLines, draws_live


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_at_the_first_and_last_update_and_one_per_interval_between() -> None:
    out = io.StringIO()
    clock = _Clock()
    lines = ProgressLines(Console(file=out, width=40), "sft", 100, "steps", clock=clock)
    for step in range(1, 101):
        clock.now = step * 1.5  # a step every 1.5 s: a line is due every 7th step
        lines.update(step, f"loss={1 / step:.3g}")
    printed = out.getvalue().splitlines()
    assert printed[0] == "sft 1/100 steps loss=1, elapsed 0:00:01"
    assert printed[-1] == "sft 100/100 steps loss=0.01, elapsed 0:02:30"
    steps = [int(line.split()[1].split("/")[0]) for line in printed]
    assert steps[:3] == [1, 8, 15]
    # 150 s of steps at one line per 10 s at most, plus the first and the last.
    assert len(printed) == 16
    assert all(len(line.split("\n")) == 1 for line in printed)  # never wrapped at 40 columns


def test_an_update_that_repeats_the_count_prints_nothing() -> None:
    out = io.StringIO()
    clock = _Clock()
    lines = ProgressLines(Console(file=out), "rollout", 2, "episodes", clock=clock)
    lines.update(0)
    clock.now = 60.0
    lines.update(0)
    lines.update(2, "reward 0.5")
    lines.update(2, "reward 0.5")
    assert out.getvalue().splitlines() == [
        "rollout 0/2 episodes, elapsed 0:00:00",
        "rollout 2/2 episodes reward 0.5, elapsed 0:01:00",
    ]


def test_a_file_draws_no_live_bar_and_a_terminal_does() -> None:
    assert not draws_live(Console(file=io.StringIO()))
    assert draws_live(Console(file=io.StringIO(), force_terminal=True))
