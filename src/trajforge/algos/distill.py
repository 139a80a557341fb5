"""On-policy distillation: the student samples, a teacher scores each sampled token.

For a token ``y_t`` the student sampled from ``pi_s`` after context ``x_{<t}``, the teacher
``pi_t`` scores the same token in the same context. The per-token reverse KL,

    ``KL(pi_s || pi_t) = E_{y ~ pi_s}[ log pi_s(y) - log pi_t(y) ]``,

has the single-sample estimate ``log pi_s(y_t) - log pi_t(y_t)`` (Schulman's k1) on the
student's own tokens, and minimising it is a policy gradient with per-token advantage

    ``A_t = -coef * (log pi_s(y_t) - log pi_t(y_t))``:

positive where the teacher likes the token more than the student did, negative where less. The
policy loss (PPO-clip, importance sampling) then pushes the student toward the teacher on the
states the student itself visits, which SFT on the teacher's samples never does.

Agarwal et al. 2024, "On-Policy Distillation of Language Models: Learning from Self-Generated
Mistakes" (GKD), arXiv:2306.13649, with the reverse KL (their ``beta = 1``, ``lambda = 1``:
student samples only); Thinking Machines' tinker-cookbook ``on_policy_distillation`` recipe
(Lu et al. 2025, "On-Policy Distillation"), which uses exactly this advantage, no discount,
one sample's log-ratio per token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trajforge.algos.types import AlgosInputError

if TYPE_CHECKING:
    from torch import Tensor


def reverse_kl_advantages(
    student_logprobs: Tensor, teacher_logprobs: Tensor, mask: Tensor, *, coef: float = 1.0
) -> Tensor:
    """Per-token advantage ``-coef * (log pi_s - log pi_t)`` on ``mask``, exactly 0 elsewhere.

    Args:
        student_logprobs: ``[B, T]`` log-probabilities of the sampled tokens under the student
            (the policy that sampled them).
        teacher_logprobs: ``[B, T]`` the same tokens' log-probabilities under the teacher, in
            the same layout (position ``t`` is token ``t``).
        mask: ``[B, T]`` the tokens the student sampled (the loss mask).
        coef: weight of the term (tinker-cookbook's ``kl_penalty_coef``).

    Returns:
        ``[B, T]`` float advantages, no gradient.
    """
    if student_logprobs.shape != teacher_logprobs.shape or student_logprobs.shape != mask.shape:
        raise AlgosInputError(
            f"reverse_kl_advantages: student {list(student_logprobs.shape)}, teacher "
            f"{list(teacher_logprobs.shape)} and mask {list(mask.shape)} differ in shape"
        )
    m = mask.bool()
    gap = (student_logprobs.detach().float() - teacher_logprobs.detach().float()).masked_fill(
        ~m, 0.0
    )
    return -coef * gap


def reverse_kl_mean(student_logprobs: Tensor, teacher_logprobs: Tensor, mask: Tensor) -> float:
    """The mean over ``mask`` of ``log pi_s - log pi_t``: the estimate of the per-token reverse
    KL the distillation drives down (0 for an empty mask)."""
    m = mask.bool()
    n = int(m.sum())
    if n == 0:
        return 0.0
    return float((student_logprobs.float() - teacher_logprobs.float())[m].sum()) / n
