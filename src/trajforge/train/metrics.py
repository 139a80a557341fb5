"""Per-step training metrics to JSONL and TensorBoard, with a Rich progress bar on the console
(plain progress lines where stderr is not a terminal)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from trajforge.progress_lines import ProgressLines, draws_live

_SHOWN = ("loss", "reward_mean", "kl_ref", "tokens_per_s")


class MetricsLogger:
    """Appends one JSON object per step to ``metrics.jsonl`` and mirrors scalars to TensorBoard.

    On resume the JSONL file is cut back to the resumed step so each step appears once.
    """

    def __init__(
        self,
        output_dir: Path,
        *,
        total_steps: int,
        start_step: int = 0,
        tensorboard: bool = True,
        progress: bool = True,
        enabled: bool = True,
        description: str = "train",
    ) -> None:
        self.enabled = enabled
        self.path = output_dir / "metrics.jsonl"
        self.history: list[dict[str, Any]] = []
        self._writer: Any = None
        self._progress: Progress | None = None
        self._lines: ProgressLines | None = None
        if not enabled:
            return
        output_dir.mkdir(parents=True, exist_ok=True)
        self._truncate_after(start_step)
        if tensorboard:
            # lazy: tensorboard costs 1.4 s to import and most runs log without it
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(output_dir / "tensorboard"))
        console = Console(stderr=True)
        if progress and not draws_live(console):
            self._lines = ProgressLines(console, description, total_steps, "steps")
        elif progress:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[shown]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
            )
            self._task = self._progress.add_task(
                description, total=total_steps, completed=start_step, shown=""
            )
            self._progress.start()

    def _truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            if line.strip() and json.loads(line).get("step", 0) <= step:
                kept.append(line)
        self.path.write_text("".join(k + "\n" for k in kept))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        self.history.append(record)
        if not self.enabled:
            return
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self._writer is not None:
            for key, value in metrics.items():
                if isinstance(value, int | float) and math.isfinite(value):
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()
        shown = " ".join(f"{k}={metrics[k]:.4g}" for k in _SHOWN if k in metrics)
        if self._progress is not None:
            self._progress.update(self._task, completed=step, shown=shown)
        if self._lines is not None:
            self._lines.update(step, shown)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
