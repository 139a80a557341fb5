"""What a synthesis made and dropped, and the task file it writes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trajforge.formats import write_jsonl_lines
from trajforge.schema import Task


@dataclass
class SynthesisReport:
    """What one synthesis made and what it dropped, by reason."""

    env: str
    run_id: str
    explored: int = 0
    """Exploration episodes run, or blueprints proposed."""
    source: str = "exploration episodes"
    tasks: list[Task] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "run_id": self.run_id,
            "explored": self.explored,
            "kept": len(self.tasks),
            "dropped": dict(self.dropped.most_common()),
        }

    @property
    def text(self) -> str:
        why = "; ".join(f"{n} {reason}" for reason, n in self.dropped.most_common())
        return f"{len(self.tasks)} tasks from {self.explored} {self.source}" + (
            f" (dropped: {why})" if why else ""
        )


def write_tasks(out: Path, tasks: list[Task]) -> None:
    """``tasks`` as a task file (one ``Task`` per line), written atomically."""
    write_jsonl_lines(out, (t.model_dump_json(exclude_defaults=True).encode() for t in tasks))
