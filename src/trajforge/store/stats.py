"""``TrajectoryStore.stats``: counts, reward mean and spread, turns and tokens of the
trajectories a filter matches, overall and per run, env and status, from one SQL aggregation
over the summary table (no body is read)."""

from __future__ import annotations

import math
from typing import Any

from trajforge.store.filters import TrajectoryFilter, where_clause
from trajforge.store.lookup import Read


class StatsTotals:
    """Running totals for one group of the statistics."""

    def __init__(self) -> None:
        self.count = 0
        self.rewarded = 0
        self.reward_sum = 0.0
        self.reward_sq = 0.0
        self.turns = 0.0
        self.tokens = 0.0
        self.status: dict[str, int] = {}

    def add(
        self,
        status: str,
        count: int,
        rewarded: int,
        rsum: float,
        rsq: float,
        turns: float,
        tokens: float,
    ) -> None:
        self.count += count
        self.rewarded += rewarded
        self.reward_sum += rsum
        self.reward_sq += rsq
        self.turns += turns
        self.tokens += tokens
        self.status[status] = self.status.get(status, 0) + count

    def as_dict(self) -> dict[str, Any]:
        mean = self.reward_sum / self.rewarded if self.rewarded else None
        std = (
            math.sqrt(max(self.reward_sq / self.rewarded - mean * mean, 0.0))
            if mean is not None
            else None
        )
        return {
            "count": self.count,
            "rewarded": self.rewarded,
            "reward_mean": mean,
            "reward_std": std,
            "turns_mean": self.turns / self.count if self.count else None,
            "tokens_mean": self.tokens / self.count if self.count else None,
            "tokens_total": int(self.tokens),
            "status": dict(sorted(self.status.items())),
        }


def summary_stats(read: Read, where: TrajectoryFilter) -> dict[str, Any]:
    """The statistics of the trajectories ``where`` matches."""
    sql_where, params = where_clause(where)
    rows = read(
        "SELECT run_id, env, status, count(*), count(reward), total(reward), total(reward * reward), "
        f"total(turns), total(tokens) FROM trajectories t {sql_where} GROUP BY run_id, env, status",
        params,
    ).fetchall()
    overall = StatsTotals()
    by_run: dict[str, StatsTotals] = {}
    by_env: dict[str, StatsTotals] = {}
    by_status: dict[str, StatsTotals] = {}
    for run_id, env, status, *numbers in rows:
        for agg in (
            overall,
            by_run.setdefault(run_id or "", StatsTotals()),
            by_env.setdefault(env or "", StatsTotals()),
            by_status.setdefault(status, StatsTotals()),
        ):
            agg.add(status, *numbers)
    return {
        **overall.as_dict(),
        "by_run": {k: v.as_dict() for k, v in sorted(by_run.items())},
        "by_env": {k: v.as_dict() for k, v in sorted(by_env.items())},
        "by_status": {k: v.as_dict() for k, v in sorted(by_status.items())},
    }
