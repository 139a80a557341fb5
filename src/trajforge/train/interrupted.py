"""What a stopped training run says: where it stopped and where it resumes (torch-free, so the
CLI can catch it without loading torch)."""

from __future__ import annotations

from pathlib import Path


def checkpoint_step(path: Path) -> int:
    """The step of checkpoint folder ``path`` (``step-0000004`` -> 4)."""
    return int(path.name.removeprefix("step-"))


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a training run: where it stopped and where it can resume from.

    A ``KeyboardInterrupt`` still (the CLI exits 130); ``hint`` is the command that resumes,
    added by whoever started the run."""

    def __init__(
        self, description: str, step: int, total: int, checkpoint: Path | None, output_dir: Path
    ) -> None:
        super().__init__()
        self.description, self.step, self.total = description, step, total
        self.checkpoint, self.output_dir = checkpoint, output_dir
        self.hint: str | None = None

    @property
    def checkpoint_step(self) -> int | None:
        return None if self.checkpoint is None else checkpoint_step(self.checkpoint)

    def __str__(self) -> str:
        where = f"{self.description} stopped at step {self.step} of {self.total}; "
        if self.checkpoint is None:
            where += f"no checkpoint was saved yet in {self.output_dir}"
            return where + (f"; start again with: {self.hint}" if self.hint else "")
        where += f"the last checkpoint is step {self.checkpoint_step} ({self.checkpoint})"
        return where + (f"; resume with: {self.hint}" if self.hint else "")
