"""The algorithms' names, as configs write them. Nothing here imports torch, so a config can be
checked (and the CLI can start) without loading it."""

from __future__ import annotations

from enum import StrEnum


class Estimator(StrEnum):
    GRPO = "grpo"
    DR_GRPO = "dr_grpo"
    RLOO = "rloo"
    REINFORCE_PP = "reinforce_pp"
    TURN_RETURNS = "turn_returns"
    GIGPO = "gigpo"


class LossName(StrEnum):
    PPO_CLIP = "ppo_clip"
    GSPO = "gspo"
    CISPO = "cispo"
    REINFORCE = "reinforce"


class Aggregation(StrEnum):
    TOKEN_MEAN = "token-mean"
    SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"
    SEQ_MEAN_TOKEN_SUM_NORM = "seq-mean-token-sum-norm"


class KLKind(StrEnum):
    K1 = "k1"
    K2 = "k2"
    K3 = "k3"


class RolloutCorrection(StrEnum):
    """How RL corrects for rollouts sampled by other weights than the trained ones
    (``trajforge.algos.off_policy``)."""

    TOKEN_TIS = "token_tis"
    SEQ_MIS = "seq_mis"
    ICEPOP = "icepop"
    NONE = "none"
