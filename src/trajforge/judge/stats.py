"""Summary statistics for evaluations: mean with a confidence interval, and pass@k."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Two-sided 95% quantiles of Student's t for small samples; the normal 1.96 beyond 30.
_T95 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
    10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
    18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060,
    26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042,
}  # fmt: skip


@dataclass(frozen=True)
class MeanCI:
    mean: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def mean_ci95(values: Sequence[float]) -> MeanCI:
    """Mean and a 95% Student-t confidence interval (zero width for fewer than two values)."""
    n = len(values)
    if n == 0:
        return MeanCI(math.nan, math.nan, math.nan, 0)
    mean = sum(values) / n
    if n < 2:
        return MeanCI(mean, mean, mean, n)
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    t = _T95.get(n - 1, 1.96)
    half = t * math.sqrt(var / n)
    return MeanCI(mean, mean - half, mean + half, n)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. 2021 ("Evaluating Large Language Models Trained on Code"):

        pass@k = 1 - C(n - c, k) / C(n, k)

    for one task with ``n`` samples of which ``c`` are correct.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got c={c}, n={n}")
    if k > n:
        raise ValueError(f"pass_at_k: k={k} exceeds the {n} samples per task")
    if n - c < k:
        return 1.0
    # The product form avoids huge binomials: C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i).
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_pass_at_k(results: Iterable[tuple[str, bool]], k: int) -> float:
    """pass@k averaged over tasks, from ``(task_id, success)`` pairs."""
    per_task: dict[str, list[bool]] = defaultdict(list)
    for task_id, ok in results:
        per_task[task_id].append(ok)
    if not per_task:
        return math.nan
    return sum(pass_at_k(len(v), sum(v), k) for v in per_task.values()) / len(per_task)
