"""Summary statistics for evaluations: mean with a confidence interval, pass@k and pass^k, the
success rate (``schema.is_success``) and mean reward that every command and report states, and
the split of the failures into the policy's and the infrastructure's."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from trajforge.schema import SUCCESS_THRESHOLD, OutcomeStatus, is_success

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


_Z95 = 1.959964


def wilson_ci95(successes: float, n: int) -> tuple[float, float]:
    """The Wilson score 95% interval of a proportion (Wilson 1927, "Probable Inference, the Law
    of Succession, and Statistical Inference"): with p = successes / n and z = 1.96,

        (p + z^2 / 2n +- z sqrt(p (1 - p) / n + z^2 / 4n^2)) / (1 + z^2 / n)

    It lies in [0, 1] and has width even at p = 0 or 1, unlike p +- z sqrt(p (1 - p) / n). For a
    mean of ``n`` values in [0, 1] pass their sum: their variance is at most p (1 - p), so the
    interval is conservative."""
    if n <= 0:
        raise ValueError(f"wilson_ci95: n = {n}, needs at least one trial")
    p = successes / n
    z2 = _Z95 * _Z95
    centre = p + z2 / (2 * n)
    spread = _Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    scale = 1 + z2 / n
    return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)


def _interval(
    n: int, mean: float, var: float, lowest: float, highest: float, binary: bool
) -> MeanCI:
    """The 95% interval of a mean of ``n`` values in [``lowest``, ``highest``]: Wilson's for
    values that are all 0 or 1 (a proportion), Student's t otherwise, cut to [0, 1] when the
    values lie in it (their mean cannot leave it)."""
    if binary:
        low, high = wilson_ci95(mean * n, n)
        return MeanCI(mean, low, high, n)
    if n < 2:
        return MeanCI(mean, mean, mean, n)
    half = _T95.get(n - 1, 1.96) * math.sqrt(var / n)
    low, high = mean - half, mean + half
    if lowest >= 0.0 and highest <= 1.0:
        low, high = max(low, 0.0), min(high, 1.0)
    return MeanCI(mean, low, high, n)


def mean_ci95(values: Sequence[float]) -> MeanCI:
    """Mean and a 95% confidence interval: Wilson's when every value is 0 or 1, else Student's
    t (cut to [0, 1] for values in [0, 1]; zero width for one value)."""
    n = len(values)
    if n == 0:
        return MeanCI(math.nan, math.nan, math.nan, 0)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    binary = all(v in (0.0, 1.0) for v in values)
    return _interval(n, mean, var, min(values), max(values), binary)


def difference_ci95(differences: Sequence[float]) -> MeanCI:
    """Mean and Student's t 95% interval of paired differences (one per seed, say): never
    Wilson's, as three seeds that all gained 0 are no proportion of 0 in 3 trials, and never
    cut to [0, 1], as a difference may be negative whatever the seeds showed."""
    n = len(differences)
    if n == 0:
        return MeanCI(math.nan, math.nan, math.nan, 0)
    mean = sum(differences) / n
    if n < 2:
        return MeanCI(mean, mean, mean, n)
    var = sum((v - mean) ** 2 for v in differences) / (n - 1)
    half = _T95.get(n - 1, 1.96) * math.sqrt(var / n)
    return MeanCI(mean, mean - half, mean + half, n)


def mean_ci95_from_moments(
    n: int, total: float, total_sq: float, lowest: float, highest: float
) -> MeanCI:
    """``mean_ci95`` from the count, sum, sum of squares, least and greatest of the values (what
    SQL aggregates give), so a store's millions of rewards never need to be loaded to state
    their mean. Values in [0, 1] are all 0 or 1 exactly when their sum equals their sum of
    squares (x = x^2 only there, and x > x^2 between)."""
    if n == 0:
        return MeanCI(math.nan, math.nan, math.nan, 0)
    mean = total / n
    var = max(total_sq - n * mean * mean, 0.0) / (n - 1) if n > 1 else 0.0
    binary = lowest >= 0.0 and highest <= 1.0 and math.isclose(total, total_sq, abs_tol=1e-9)
    return _interval(n, mean, var, lowest, highest, binary)


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


def _mean_over_tasks(
    results: Iterable[tuple[str, bool]], k: int, estimate: Callable[[int, int, int], float]
) -> float:
    """``estimate(n, c, k)`` of each task averaged over tasks, from ``(task_id, success)``
    pairs; NaN without any."""
    per_task: dict[str, list[bool]] = defaultdict(list)
    for task_id, ok in results:
        per_task[task_id].append(ok)
    if not per_task:
        return math.nan
    return sum(estimate(len(v), sum(v), k) for v in per_task.values()) / len(per_task)


def mean_pass_at_k(results: Iterable[tuple[str, bool]], k: int) -> float:
    """pass@k averaged over tasks, from ``(task_id, success)`` pairs."""
    return _mean_over_tasks(results, k, pass_at_k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k of tau-bench (Yao et al. 2024, "tau-bench: A Benchmark for Tool-Agent-User
    Interaction in Real-World Domains"): the chance that ``k`` samples drawn without
    replacement from the ``n`` of one task ALL succeed, ``c`` of them being successes:

        pass^k = C(c, k) / C(n, k)

    pass^1 is the success rate; pass^k falls with k for an agent that is not reliable.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass_hat_k: need 0 <= c <= n, got c={c}, n={n}")
    if not 0 < k <= n:
        raise ValueError(f"pass_hat_k: need 0 < k <= n={n}, got k={k}")
    return math.comb(c, k) / math.comb(n, k)


def mean_pass_hat_k(results: Iterable[tuple[str, bool]], k: int) -> float:
    """pass^k averaged over tasks, from ``(task_id, success)`` pairs."""
    return _mean_over_tasks(results, k, pass_hat_k)


@dataclass(frozen=True)
class FailureSplit:
    """The episodes that did not succeed, by whose failure they are: the policy's own (a wrong
    answer, a spent budget) or the infrastructure's (``schema.is_infra_failure``)."""

    policy: int
    infra: int

    def as_dict(self) -> dict[str, int]:
        return {"policy_failures": self.policy, "infra_failures": self.infra}

    def text(self) -> str:
        return f"policy {self.policy} · infra {self.infra}"


def split_failures(
    outcomes: Iterable[tuple[OutcomeStatus | str, float | None, bool]],
    threshold: float = SUCCESS_THRESHOLD,
) -> FailureSplit:
    """The ``FailureSplit`` of episodes given as ``(status, reward, lost_to_infra)``."""
    policy = infra = 0
    for status, reward, lost in outcomes:
        if is_success(status, reward, threshold):
            continue
        if lost:
            infra += 1
        else:
            policy += 1
    return FailureSplit(policy, infra)


def format_rate(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.1f}%"


def format_success(success: float | None, scored: int, episodes: int) -> str:
    """A success rate as a table shows it: ``-`` without episodes, ``n/a`` when none of them
    was scored (nothing says whether one succeeded), else a percentage."""
    if not episodes:
        return "-"
    return "n/a" if not scored else format_rate(success)


def format_reward(mean: float | None, low: float | None = None, high: float | None = None) -> str:
    """``0.812``, or ``0.812 [0.700, 0.925]`` with an interval; ``-`` when nothing was scored."""
    if mean is None:
        return "-"
    if low is None or high is None:
        return f"{mean:.3f}"
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def format_scored(scored: int, episodes: int) -> str:
    return f"{scored}/{episodes}"


@dataclass(frozen=True)
class RewardSummary:
    """Success and mean reward of a set of episodes, as every trajforge report states them.

    Success is over all episodes, an unscored one counting as a failure; the mean reward (and
    its 95% interval) is over the scored episodes only, and ``scored`` says how many those are,
    so a run whose episodes mostly crashed cannot pass for a good one.
    """

    episodes: int
    scored: int
    successes: int
    reward: MeanCI

    @property
    def success(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    @property
    def reward_mean(self) -> float | None:
        return self.reward.mean if self.scored else None

    @property
    def reward_ci(self) -> tuple[float | None, float | None]:
        """The 95% interval of the mean reward; ``(None, None)`` when nothing was scored."""
        return (self.reward.low, self.reward.high) if self.scored else (None, None)

    def as_dict(self) -> dict[str, float | int | None]:
        """The figures for JSON (the episode count is the caller's: it names it differently)."""
        low, high = self.reward_ci
        return {
            "scored": self.scored,
            "success": self.success,
            "reward_mean": self.reward_mean,
            "reward_ci_low": low,
            "reward_ci_high": high,
        }

    def success_text(self) -> str:
        return format_success(self.success, self.scored, self.episodes)

    def reward_text(self, *, ci: bool = False) -> str:
        low, high = self.reward_ci if ci else (None, None)
        return format_reward(self.reward_mean, low, high)

    def scored_text(self) -> str:
        return format_scored(self.scored, self.episodes)

    def line(self) -> str:
        """One line for a caption: success, mean reward and how many were scored."""
        return (
            f"success {self.success_text()} · mean reward {self.reward_text()} · "
            f"scored {self.scored_text()}"
        )


def summarize_rewards(
    outcomes: Iterable[tuple[OutcomeStatus | str, float | None]],
    threshold: float = SUCCESS_THRESHOLD,
) -> RewardSummary:
    """The ``RewardSummary`` of episodes given as ``(status, reward)`` pairs."""
    episodes = successes = 0
    rewards: list[float] = []
    for status, reward in outcomes:
        episodes += 1
        successes += is_success(status, reward, threshold)
        if reward is not None:
            rewards.append(reward)
    return RewardSummary(episodes, len(rewards), successes, mean_ci95(rewards))


def summarize_rewards_by(
    rows: Iterable[tuple[str, OutcomeStatus | str, float | None]],
    threshold: float = SUCCESS_THRESHOLD,
) -> dict[str, RewardSummary]:
    """A ``RewardSummary`` per group, from ``(group, status, reward)`` rows; sorted by group."""
    groups: dict[str, list[tuple[OutcomeStatus | str, float | None]]] = defaultdict(list)
    for group, status, reward in rows:
        groups[group].append((status, reward))
    return {g: summarize_rewards(groups[g], threshold) for g in sorted(groups)}


RewardTotals = tuple[OutcomeStatus | str, int, int, float, float, int, float | None, float | None]
"""``(status, episodes, scored, reward_sum, reward_sq, successes, reward_min, reward_max)`` of a
group of episodes, as ``TrajectoryStore.reward_totals`` aggregates them (``successes`` counted
in SQL by ``schema.success_sql``)."""


def summarize_reward_totals(totals: Iterable[RewardTotals]) -> RewardSummary:
    """The ``RewardSummary`` of aggregated episodes (``RewardTotals`` rows): the same figures as
    ``summarize_rewards`` without the rewards."""
    episodes = scored = successes = 0
    total = total_sq = 0.0
    lowest, highest = math.inf, -math.inf
    for _status, n, n_scored, rsum, rsq, n_successes, rmin, rmax in totals:
        episodes += n
        scored += n_scored
        successes += n_successes
        total += rsum
        total_sq += rsq
        if rmin is not None and rmax is not None:
            lowest, highest = min(lowest, rmin), max(highest, rmax)
    return RewardSummary(
        episodes,
        scored,
        successes,
        mean_ci95_from_moments(scored, total, total_sq, lowest, highest),
    )
