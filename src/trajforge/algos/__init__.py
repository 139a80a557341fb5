"""Layer 3: advantage estimators, policy losses and KL estimators — pure functions over tensors.

``names`` holds the algorithms' names (no torch), so configs are checked without loading torch.
The functions below are this package's one lazy place: ``from trajforge.algos import
policy_loss`` imports the module that defines it (and torch) on first access, so importing
``trajforge.algos.names`` costs nothing at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trajforge.algos.names import Aggregation, Estimator, KLKind, LossName, RolloutCorrection
from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.algos._groups import drop_from_groups
    from trajforge.algos.advantages import (
        ESTIMATORS,
        compute_advantages,
        estimator_options,
        weight_by_sign,
    )
    from trajforge.algos.distill import reverse_kl_advantages, reverse_kl_mean
    from trajforge.algos.kl import apply_kl_penalty, kl_estimate
    from trajforge.algos.losses import (
        LOSSES,
        TokenLoss,
        aggregate,
        cispo,
        dro,
        importance_sampling,
        loss_options,
        policy_loss,
        ppo_clip,
    )
    from trajforge.algos.metrics import entropy_from_logits
    from trajforge.algos.off_policy import (
        correction_weights,
        icepop_weights,
        mismatch_metrics,
        sequence_mis_weights,
        truncated_is_weights,
        within_staleness,
    )
    from trajforge.algos.rae import rae_advantages
    from trajforge.algos.types import AdvantageInput, AdvantageOutput, AlgosInputError

_HOMES = {
    "drop_from_groups": "_groups",
    "ESTIMATORS": "advantages",
    "compute_advantages": "advantages",
    "estimator_options": "advantages",
    "reverse_kl_advantages": "distill",
    "reverse_kl_mean": "distill",
    "apply_kl_penalty": "kl",
    "kl_estimate": "kl",
    "LOSSES": "losses",
    "TokenLoss": "losses",
    "aggregate": "losses",
    "cispo": "losses",
    "dro": "losses",
    "importance_sampling": "losses",
    "ppo_clip": "losses",
    "loss_options": "losses",
    "policy_loss": "losses",
    "correction_weights": "off_policy",
    "icepop_weights": "off_policy",
    "mismatch_metrics": "off_policy",
    "sequence_mis_weights": "off_policy",
    "truncated_is_weights": "off_policy",
    "within_staleness": "off_policy",
    "entropy_from_logits": "metrics",
    "AdvantageInput": "types",
    "AdvantageOutput": "types",
    "AlgosInputError": "types",
    "rae_advantages": "rae",
    "weight_by_sign": "advantages",
}

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
    "RolloutCorrection",
    "TokenLoss",
    "aggregate",
    "apply_kl_penalty",
    "cispo",
    "compute_advantages",
    "correction_weights",
    "dro",
    "drop_from_groups",
    "entropy_from_logits",
    "estimator_options",
    "icepop_weights",
    "importance_sampling",
    "kl_estimate",
    "loss_options",
    "mismatch_metrics",
    "policy_loss",
    "ppo_clip",
    "rae_advantages",
    "reverse_kl_advantages",
    "reverse_kl_mean",
    "sequence_mis_weights",
    "truncated_is_weights",
    "weight_by_sign",
    "within_staleness",
]


__getattr__ = lazy_names(__name__, _HOMES)
