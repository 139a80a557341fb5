"""Judge meta-evaluation: how far to trust a scorer, measured against human or gold labels.

Reports precision, recall, F1, accuracy and Cohen's kappa of a scorer's binary verdicts
(value >= threshold) against labels, overall and per environment, the way AgentRewardBench
compares rule checks and LLM judges with expert annotations.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from trajforge.errors import DataError
from trajforge.formats import read_json_objects


@dataclass(frozen=True)
class AgreementReport:
    n: int
    true_positive: int
    false_positive: int
    false_negative: int
    true_negative: int
    precision: float
    recall: float
    f1: float
    accuracy: float
    kappa: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def agreement(pairs: Iterable[tuple[bool, bool]]) -> AgreementReport:
    """Agreement of ``(predicted, label)`` pairs. Undefined ratios (0/0) are reported as 0."""
    tp = fp = fn = tn = 0
    for predicted, label in pairs:
        if predicted and label:
            tp += 1
        elif predicted:
            fp += 1
        elif label:
            fn += 1
        else:
            tn += 1
    n = tp + fp + fn + tn
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    accuracy = (tp + tn) / n if n else 0.0
    # Cohen's kappa: observed agreement corrected for the agreement expected by chance.
    p_yes = ((tp + fp) / n) * ((tp + fn) / n) if n else 0.0
    p_no = ((fn + tn) / n) * ((fp + tn) / n) if n else 0.0
    expected = p_yes + p_no
    kappa = (accuracy - expected) / (1 - expected) if n and expected < 1 else 0.0
    return AgreementReport(n, tp, fp, fn, tn, precision, recall, f1, accuracy, kappa)


@dataclass(frozen=True)
class Label:
    trajectory_id: str
    label: bool
    env: str | None = None


def read_labels(path: Path) -> list[Label]:
    """Labels as JSONL: ``{"trajectory_id": ..., "label": true|false|0|1, "env": optional}``."""
    labels: list[Label] = []
    for lineno, row in read_json_objects(path, "label"):
        where = f"{path}:{lineno}"
        tid = row.get("trajectory_id")
        if not isinstance(tid, str) or not tid:
            raise DataError(f"{where}: field 'trajectory_id' must be a non-empty string")
        value = row.get("label")
        if value not in (True, False, 0, 1):
            raise DataError(f"{where}: field 'label' must be true/false or 0/1, got {value!r}")
        env = row.get("env")
        if env is not None and not isinstance(env, str):
            raise DataError(f"{where}: field 'env' must be a string")
        labels.append(Label(tid, bool(value), env))
    return labels


@dataclass(frozen=True)
class MetaEvalReport:
    scorer: str
    threshold: float
    overall: AgreementReport
    per_env: dict[str, AgreementReport]
    missing: list[str]

    def as_dict(self) -> dict[str, object]:
        return {
            "scorer": self.scorer,
            "threshold": self.threshold,
            "overall": self.overall.as_dict(),
            "per_env": {k: v.as_dict() for k, v in self.per_env.items()},
            "missing": self.missing,
        }


def meta_evaluate(
    scorer: str,
    predictions: dict[str, tuple[float | None, str | None]],
    labels: list[Label],
    *,
    threshold: float = 0.5,
) -> MetaEvalReport:
    """Compare predictions ``{trajectory_id: (value, env)}`` with labels.

    A failed score (value None) counts as a negative verdict; labels whose trajectory has no
    prediction are listed in ``missing`` and left out of the counts.
    """
    pairs: list[tuple[bool, bool]] = []
    by_env: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    missing: list[str] = []
    for lab in labels:
        if lab.trajectory_id not in predictions:
            missing.append(lab.trajectory_id)
            continue
        value, env = predictions[lab.trajectory_id]
        pair = (value is not None and value >= threshold, lab.label)
        pairs.append(pair)
        by_env[lab.env or env or "unknown"].append(pair)
    return MetaEvalReport(
        scorer=scorer,
        threshold=threshold,
        overall=agreement(pairs),
        per_env={env: agreement(p) for env, p in sorted(by_env.items())},
        missing=missing,
    )
