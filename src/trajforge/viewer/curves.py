"""Training curves of a run folder: each stage's ``metrics.jsonl`` as inline SVG line plots.

A run folder (``runs/<name>/``) keeps one folder per training stage (``sft/``, ``rl/``) with a
``metrics.jsonl`` of one JSON object per step; every numeric metric becomes one small plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from trajforge.formats import read_json_objects

METRICS_FILE = "metrics.jsonl"
# The metrics a reader looks for first; the rest follow in name order.
_FIRST = ("reward_mean", "loss", "success", "val_success", "kl_ref", "grad_norm", "lr")
_WIDTH, _HEIGHT, _PAD = 320.0, 120.0, 6.0


@dataclass(frozen=True)
class Curve:
    """One metric of one stage over its steps."""

    stage: str
    name: str
    steps: list[float]
    values: list[float]

    def svg(self) -> str:
        """An inline SVG polyline of the values (the y range printed beside it)."""
        lo, hi = min(self.values), max(self.values)
        x0, x1 = min(self.steps), max(self.steps)
        span_y = (hi - lo) or 1.0
        span_x = (x1 - x0) or 1.0
        points = " ".join(
            f"{_PAD + (x - x0) / span_x * (_WIDTH - 2 * _PAD):.1f},"
            f"{_HEIGHT - _PAD - (y - lo) / span_y * (_HEIGHT - 2 * _PAD):.1f}"
            for x, y in zip(self.steps, self.values, strict=True)
        )
        return (
            f'<svg class="curve" viewBox="0 0 {_WIDTH:.0f} {_HEIGHT:.0f}" role="img" '
            f'aria-label="{self.stage} {self.name}">'
            f'<rect x="0" y="0" width="{_WIDTH:.0f}" height="{_HEIGHT:.0f}" class="plot-bg"/>'
            f'<polyline fill="none" stroke-width="2" points="{points}"/></svg>'
        )

    def as_dict(self) -> dict[str, object]:
        return {"stage": self.stage, "name": self.name, "steps": self.steps, "values": self.values}


def read_curves(path: Path, stage: str) -> list[Curve]:
    """The numeric metrics of one ``metrics.jsonl``; ``DataError`` naming the line if one is not
    a JSON object."""
    series: dict[str, tuple[list[float], list[float]]] = {}
    for lineno, record in read_json_objects(path, "metrics step"):
        step = record.get("step", lineno)
        for key, value in record.items():
            if key == "step" or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if math.isfinite(value):
                xs, ys = series.setdefault(key, ([], []))
                xs.append(float(step))
                ys.append(float(value))
    order = sorted(series, key=lambda k: (_FIRST.index(k) if k in _FIRST else len(_FIRST), k))
    return [Curve(stage, k, *series[k]) for k in order]


def run_folder_curves(run_dir: Path | None, stage: str | None = None) -> list[Curve]:
    """Every stage's curves in ``run_dir`` (``<stage>/metrics.jsonl``), or one stage's; a
    standalone training run's folder is its one stage (``metrics.jsonl``, named as the folder)."""
    if run_dir is None:
        return []
    curves: list[Curve] = []
    paths = sorted(run_dir.glob(f"*/{METRICS_FILE}"))
    if (run_dir / METRICS_FILE).is_file():
        paths.insert(0, run_dir / METRICS_FILE)
    for path in paths:
        if stage is None or path.parent.name == stage:
            curves.extend(read_curves(path, path.parent.name))
    return curves


def stage_of(run_id: str, run_dir: Path | None) -> str | None:
    """The stage folder of a pipeline run id (``<name>.<stage>[.<attempt>]``), if it has one."""
    if run_dir is None:
        return None
    for part in reversed(run_id.split(".")[1:]):
        if (run_dir / part / METRICS_FILE).is_file():
            return part
    return None
