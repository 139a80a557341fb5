"""Figures over seeds shared by the benches that run one arm per seed (credit assignment,
context management): a rate's mean over seeds with its interval, and a curve's mean per step."""

from __future__ import annotations

from typing import Any

from trajforge.judge.stats import mean_ci95


def over_seeds(rates: list[float]) -> dict[str, Any]:
    """The mean of per-seed success rates and its 95% Student-t interval across seeds (the
    spread a new seed would show, which pooling episodes hides)."""
    ci = mean_ci95(rates)
    return {"mean": round(ci.mean, 4), "ci95": (round(ci.low, 4), round(ci.high, 4))}


def step_curve(histories: list[list[dict[str, Any]]], key: str) -> list[float | None]:
    """The mean over seeds of metric ``key`` at each step (None at a step some seed lacks it)."""
    curve: list[float | None] = []
    for i in range(min(len(h) for h in histories)):
        values = [h[i].get(key) for h in histories]
        present = [float(v) for v in values if v is not None]
        curve.append(round(sum(present) / len(present), 3) if len(present) == len(values) else None)
    return curve
