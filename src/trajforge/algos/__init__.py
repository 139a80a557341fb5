"""Layer 3: advantage estimators, policy losses and KL estimators — pure functions over tensors.

Nothing here imports torch at module level; the functions import it when called.
"""

from __future__ import annotations

from trajforge.algos.advantages import ESTIMATORS, Estimator, compute_advantages
from trajforge.algos.kl import KLKind, apply_kl_penalty, kl_estimate
from trajforge.algos.losses import LOSSES, Aggregation, LossName, aggregate, policy_loss
from trajforge.algos.metrics import entropy_from_logits
from trajforge.algos.types import AdvantageInput, AdvantageOutput, AlgosInputError

__all__ = [
    "ESTIMATORS",
    "LOSSES",
    "AdvantageInput",
    "AdvantageOutput",
    "Aggregation",
    "AlgosInputError",
    "Estimator",
    "KLKind",
    "LossName",
    "aggregate",
    "apply_kl_penalty",
    "compute_advantages",
    "entropy_from_logits",
    "kl_estimate",
    "policy_loss",
]
