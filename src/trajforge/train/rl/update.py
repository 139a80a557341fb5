"""RL's optimisation pass, a plain function over a step's batch: the trajectories to advantages
(the estimator, or self-play's role-conditioned ones, weighted by sign), tokens sampled by
weights older than ``max_staleness`` left out of the loss, then ``epochs_per_step`` epochs of
the policy loss over this process's micro-batches, with the KL to the reference, the old
logprobs from the first epoch's own forward, and the off-policy correction for a sampler that
is not the trained weights (``rollout_correction``), its mismatch measured per step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

import torch

from trajforge.algos import (
    AdvantageInput,
    AdvantageOutput,
    RolloutCorrection,
    compute_advantages,
    correction_weights,
    kl_estimate,
    mismatch_metrics,
    policy_loss,
    weight_by_sign,
    within_staleness,
)
from trajforge.curate import group_key
from trajforge.schema import Trajectory
from trajforge.train.base import Trainer
from trajforge.train.batch import TokenBatch, TokenSequence, encode_trajectory
from trajforge.train.config import RLConfig
from trajforge.train.rl.segments import episode_chains, episode_input, row_advantages
from trajforge.train.rl.staleness import token_staleness

if TYPE_CHECKING:
    from trajforge.train.reference import ReferenceModel

RoleAdvantages = Callable[[Sequence[Trajectory], AdvantageInput], AdvantageOutput]
"""Advantages that replace the estimator's (self-play's RAE)."""

_COUNTED_BY_THE_STEP = frozenset(
    {"groups", "zero_adv_groups", "zero_adv_group_frac", "reward_mean", "reward_std"}
)
# The loss's per-micro-batch advantage moments and token count repeat the step's own.
_LOSS_REPEATS = frozenset({"adv_mean", "adv_std", "loss_tokens"})


def update(
    ops: Trainer,
    cfg: RLConfig,
    trajs: list[Trajectory],
    *,
    reference: ReferenceModel | None = None,
    role_advantages: RoleAdvantages | None = None,
    trained_version: int | None = None,
    replays: Collection[str] = (),
) -> dict[str, float]:
    """Train on a step's ``trajs`` (each rewarded by its ``episode_reward``); the update's
    metrics.

    Args:
        ops: The trainer whose model is updated (its parts, micro-batches, backward, steps).
        cfg: The run's config (estimator, loss, epochs, weights, filters).
        trajs: The step's trajectories to train on, whole groups, an episode's earlier
            segments among them.
        reference: The reference model of the KL penalty (``kl_coef`` > 0).
        role_advantages: Advantages used instead of the estimator's (self-play's RAE).
        trained_version: The version of the weights trained (the updates made so far): tokens
            sampled by weights more than ``max_staleness`` updates older leave the loss.
        replays: Ids of replayed past successes, off-policy by design and never left out.
    """
    # A split or re-rendered episode's rendered prefix is context: its turns were not
    # sampled in it, so only the turns after it take the episode's advantage.
    seqs = [
        encode_trajectory(t, max_length=cfg.max_seq_len, mask_rendered=True, through_last_turn=True)
        for t in trajs
    ]
    full = TokenBatch.collate(seqs, pad_token_id=ops.parts.pad_token_id)
    # Advantages per episode, each segment's row taking its episode's (``segments``).
    chains = episode_chains(trajs)
    inp, row_turns = episode_input(trajs, seqs, chains)
    if role_advantages is not None:
        adv = role_advantages([trajs[c[-1]] for c in chains], inp)
    else:
        adv = compute_advantages(cfg.estimator, inp, **cfg.estimator_kwargs)
    token_adv = row_advantages(adv.token_advantages, chains, row_turns, full.input_ids.shape[1])
    token_adv = weight_by_sign(
        token_adv,
        positive=cfg.positive_advantage_weight,
        negative=cfg.negative_advantage_weight,
    )
    for row, s in enumerate(seqs):
        s.advantages = token_adv[row, : len(s)].tolist()
    # The step's rewards and zero-advantage groups are counted over every episode (by the
    # step) and after the sign weights (here): the estimator's own counts would repeat them.
    metrics = {k: float(v) for k, v in adv.metrics.items() if k not in _COUNTED_BY_THE_STEP}
    zero, metrics["zero_adv_frac"] = zero_advantage_groups(trajs, token_adv, full.loss_mask)
    rows = list(zip(trajs, seqs, strict=True))
    if cfg.filter_zero_advantage:
        rows = [(t, s) for t, s in rows if group_key(t) not in zero]
    if trained_version is not None:
        fresh = [(t, s) for t, s in rows if t.id not in replays]
        metrics |= mask_stale_tokens(fresh, trained_version, cfg.staleness_bound)
    seqs = [s for _, s in rows]
    metrics["trained_trajectories"] = float(len(seqs))
    if not seqs:
        return metrics
    return metrics | optimize(ops, cfg, seqs, reference)


def zero_advantage_groups(
    trajs: Sequence[Trajectory], token_adv: torch.Tensor, mask: torch.Tensor
) -> tuple[set[str], float]:
    """The groups none of whose trained tokens has an advantage, and their share of groups."""
    nonzero: dict[str, bool] = {}
    for row, t in enumerate(trajs):
        key = group_key(t)
        moving = bool((token_adv[row].abs() * mask[row]).sum() > 1e-8)
        nonzero[key] = nonzero.get(key, False) or moving
    zero = {k for k, v in nonzero.items() if not v}
    return zero, len(zero) / max(1, len(nonzero))


def mask_stale_tokens(
    pairs: Sequence[tuple[Trajectory, TokenSequence]], trained: int, bound: int
) -> dict[str, float]:
    """Leave out of each sequence's loss the tokens sampled by weights more than ``bound``
    updates older than version ``trained``; the share of loss tokens left out
    (``stale_token_frac``)."""
    total = masked = 0
    for traj, seq in pairs:
        mask = torch.tensor(seq.loss_mask, dtype=torch.bool)
        lag = torch.tensor(token_staleness(traj, seq.turn_index, trained), dtype=torch.long)
        keep = within_staleness(lag, mask, bound)
        total += int(mask.sum())
        masked += int((mask & ~keep).sum())
        seq.loss_mask = keep.tolist()
    return {"stale_token_frac": masked / total if total else 0.0}


def optimize(
    ops: Trainer, cfg: RLConfig, seqs: list[TokenSequence], reference: ReferenceModel | None
) -> dict[str, float]:
    """Update on this process's share of the step's ``seqs`` (all of them in one process)."""
    device = ops.parts.device
    pad = ops.parts.pad_token_id
    mine = ops.shard(seqs, [len(s) for s in seqs])
    passes = ops.even_passes(
        ops.micro_batches(mine),
        lambda: TokenBatch.collate(seqs[:1], pad_token_id=pad, pixels=ops.parts.pixels),
    )
    batches = [b.to(device) for b, _ in passes]
    counted = [c for _, c in passes]
    # Logprobs of the tempered policy the rollouts sampled from (greedy rollouts: T = 1).
    temperature = cfg.temperature if cfg.temperature > 0 else 1.0
    # The first epoch trains the weights that just rolled out, so the trainer's own old
    # logprobs are that epoch's forward values (ratio 1, its gradient the policy gradient),
    # kept for the later epochs: no separate no-grad pass over the batch. The reference
    # path keeps that pass whenever there are later epochs.
    own_old = cfg.recompute_old_logprobs or not all(b.has_old_logprobs for b in batches)
    one_on_policy = cfg.recompute_old_logprobs and cfg.epochs_per_step == 1
    separate_pass = own_old and cfg.reference_path and not one_on_policy
    from_first_epoch = own_old and not separate_pass
    # What the rollout policy reported, kept before any recompute: the gap to the training
    # forward shows drift between the two (a stale rollout copy, a precision mismatch).
    sampled = [b.old_logprobs if b.has_old_logprobs else None for b in batches]
    if separate_pass:
        with torch.no_grad(), ops.parts.accelerator.autocast():
            for b in batches:
                b.old_logprobs = ops.parts.logprob_model(
                    b.input_ids, b.attention_mask, b.loss_mask, False, temperature, vision=b.vision
                )[0].float()
    refs = [reference.logprobs(b, temperature) for b in batches] if reference else None
    n_tokens = sum(b.num_loss_tokens for b, c in zip(batches, counted, strict=True) if c)
    n_rows = sum(len(b.lengths) for b, c in zip(batches, counted, strict=True) if c)
    token_weighted = cfg.aggregation == "token-mean"
    # This process's part of the global mean (the local count alone in one process).
    divisor = ops.global_mean_divisor(n_tokens if token_weighted else n_rows)
    sums: dict[str, float] = {}
    # Per micro-batch of the first epoch: its share, then the mismatch and correction figures.
    seen: list[tuple[float, dict[str, float]]] = []
    kind = cfg.rollout_correction
    # Truncated importance sampling corrects old logprobs that are the trainer's own; the
    # sampler's (recompute_old_logprobs off) already put the PPO ratio against the sampler.
    # The masking corrections leave out what the two disagree on, whichever the old ones are.
    correct = kind is not RolloutCorrection.TOKEN_TIS or own_old

    def share_of(k: int) -> float:
        b = batches[k]
        size = b.num_loss_tokens if token_weighted else len(b.lengths)
        return size / max(n_tokens if token_weighted else n_rows, 1)

    t0 = time.perf_counter()
    for epoch in range(cfg.epochs_per_step):
        for k, b in enumerate(batches):
            with ops.parts.accelerator.autocast():
                lp, ent = ops.parts.logprob_model(
                    b.input_ids, b.attention_mask, b.loss_mask, True, temperature, vision=b.vision
                )
            lp = lp.float()
            if from_first_epoch and epoch == 0:
                b.old_logprobs = lp.detach()
            mask = b.loss_mask.float()
            denom = mask.sum().clamp(min=1)
            rollout_lp = sampled[k]
            if epoch == 0 and rollout_lp is not None and counted[k]:
                figures = mismatch_metrics(lp.detach(), rollout_lp, mask)
                weights = None
                if correct:
                    weights = correction_weights(
                        kind,
                        b.old_logprobs if own_old else lp.detach(),
                        rollout_lp,
                        mask,
                        cap=cfg.rollout_is_cap,
                        band=cfg.rollout_is_band,
                    )
                if weights is not None:  # kept by the later epochs, which reuse the advantages
                    b.advantages = b.advantages * weights
                    figures |= _weight_stats(kind, weights, mask, cfg.rollout_is_cap)
                seen.append((share_of(k), figures))
            loss, info = policy_loss(
                cfg.loss,
                lp,
                b.old_logprobs,
                b.advantages,
                mask,
                aggregation=cfg.aggregation,
                **cfg.loss_kwargs,
            )
            size = b.num_loss_tokens if token_weighted else len(b.lengths)
            if not counted[k]:  # a pass that only keeps the processes in step
                ops.backward(loss * 0.0, last=k == len(batches) - 1)
                continue
            share = share_of(k)
            if refs is not None:
                kl = (kl_estimate(cfg.kl_kind, lp, refs[k]) * mask).sum() / mask.sum().clamp(min=1)
                loss = loss + cfg.kl_coef * kl
                info = {**info, "kl_ref": float(kl.detach())}
            assert ent is not None
            info = {**info, "entropy": float((ent * mask).sum() / denom)}
            info = {key: v for key, v in info.items() if key not in _LOSS_REPEATS}
            ops.backward(loss * (size / divisor), last=k == len(batches) - 1)
            for key, value in {"loss": float(loss.detach()), **info}.items():
                sums[key] = sums.get(key, 0.0) + share * float(value) / cfg.epochs_per_step
        sums.update(ops.optimizer_step())
    elapsed = time.perf_counter() - t0
    for name in sorted({name for _, f in seen for name in f}):
        pairs = [(w, f[name]) for w, f in seen if name in f]
        top = name == "log_ratio_max"
        sums[_MISMATCH_NAMES.get(name, name)] = (
            max(v for _, v in pairs) if top else _weighted_mean(pairs)
        )
    sums["tokens_per_s"] = n_tokens * cfg.epochs_per_step / elapsed
    sums["loss_tokens"] = float(n_tokens)
    return sums


def _weighted_mean(pairs: Sequence[tuple[float, float]]) -> float:
    """The mean of ``(weight, value)`` pairs' values by weight (a plain mean if all weigh 0)."""
    total = sum(w for w, _ in pairs)
    if total <= 0:
        return sum(v for _, v in pairs) / len(pairs)
    return sum(w * v for w, v in pairs) / total


_MISMATCH_NAMES = {
    "abs_log_ratio": "rollout_logprob_gap",
    "kl": "rollout_kl",
    "log_ratio_max": "rollout_log_ratio_max",
    "kl_turn_start": "rollout_kl_turn_start",
}
"""The step's names of ``mismatch_metrics``'s figures."""


def _weight_stats(
    kind: RolloutCorrection, weights: torch.Tensor, mask: torch.Tensor, cap: float | None
) -> dict[str, float]:
    """What a correction's weights did over ``mask``: truncated IS, the mean weight and the
    share at the cap; a masking one, the share of tokens (``seq_mis``: and of sequences) it
    left out."""
    m = mask.bool()
    n = max(int(m.sum()), 1)
    if kind is RolloutCorrection.TOKEN_TIS:
        assert cap is not None
        return {
            "rollout_is_weight_mean": float(weights[m].sum()) / n,
            "rollout_is_capped_frac": float((weights[m] >= cap * (1 - 1e-6)).sum()) / n,
        }
    out = (weights == 0) & m
    figures = {"rollout_masked_frac": float(out.sum()) / n}
    if kind is RolloutCorrection.SEQ_MIS:
        rows = m.any(dim=-1)
        figures["rollout_seq_masked_frac"] = float(out.any(dim=-1).sum()) / max(int(rows.sum()), 1)
    return figures
