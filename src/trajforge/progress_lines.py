"""Progress as plain lines where a live bar cannot be drawn.

A Rich progress bar redraws itself in place, which a file or a pipe cannot show: Rich then keeps
quiet until the end, and a run piped to a log looks hung. Where the console is not a terminal,
the training loop and rollouts print one plain line at the first step, at the last, and at most
one every ``every_s`` seconds between them instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from rich.console import Console

EVERY_S = 10.0
"""Seconds between two progress lines at least (the first and the last step always print)."""


def draws_live(console: Console) -> bool:
    """Whether ``console`` can show a live bar (a terminal, or a notebook's output cell)."""
    return console.is_terminal or console.is_jupyter


def _clock_text(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


@dataclass(eq=False)
class ProgressLines:
    """One line per ``every_s`` seconds of a count toward ``total``: ``label done/total unit
    figures, elapsed H:MM:SS``.

    Args:
        console: Where the lines go.
        label: What progresses (``sft``, ``rollout``).
        total: The count at which it is done.
        unit: What is counted (``steps``, ``episodes``).
        every_s: The least time between two lines, the first and the last excepted.
        clock: Seconds from a fixed point (``time.monotonic``; tests pass their own).
    """

    console: Console
    label: str
    total: int
    unit: str
    _: KW_ONLY
    every_s: float = EVERY_S
    clock: Callable[[], float] = time.monotonic
    _started: float = field(init=False)
    _printed_at: float | None = field(default=None, init=False)
    _printed_done: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._started = self.clock()

    def update(self, done: int, figures: str = "") -> None:
        """Print where the count stands if a line is due: the first update, the one reaching
        ``total``, or ``every_s`` seconds after the last line."""
        now = self.clock()
        last = done >= self.total
        due = self._printed_at is None or last or now - self._printed_at >= self.every_s
        if not due or done == self._printed_done:
            return
        self._printed_at, self._printed_done = now, done
        shown = f" {figures}" if figures else ""
        self.console.print(
            f"{self.label} {done}/{self.total} {self.unit}{shown}, "
            f"elapsed {_clock_text(now - self._started)}",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
