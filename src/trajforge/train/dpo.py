"""DPO on trajectory pairs (Rafailov et al., 2023, "Direct Preference Optimization").

For a pair (chosen c, rejected r) sharing a task, with ``log pi(y)`` the summed logprob of the
assistant tokens of trajectory y under the policy and ``log ref(y)`` under the reference::

    z    = beta * [(log pi(c) - log ref(c)) - (log pi(r) - log ref(r))]
    loss = -(1 - eps) * log sigmoid(z) - eps * log sigmoid(-z)      (eps = label smoothing)

averaged over pairs. Both members of a pair always share a micro-batch, so the loss of each
micro-batch is exact and gradient accumulation sums pair losses.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from trajforge.curate import PreferencePair
from trajforge.errors import DataError
from trajforge.train.base import StepCallback
from trajforge.train.batch import TokenBatch, TokenSequence, encode_trajectory, plan_micro_batches
from trajforge.train.config import DPOConfig, masks_rendered
from trajforge.train.parts import TrainParts
from trajforge.train.reference import ReferenceModel
from trajforge.train.sft import EpochTrainer


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    *,
    beta: float,
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-pair DPO losses and logits ``z`` from summed sequence logprobs (all ``[P]``)."""
    z = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))
    losses = -(1 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)
    return losses, z


class DPOTrainer(EpochTrainer):
    """Direct preference optimisation over ``PreferencePair``s of trajectories."""

    description = "dpo"
    metric_weight = "pairs"
    items = "pairs"

    def __init__(
        self,
        cfg: DPOConfig,
        pairs: Sequence[PreferencePair],
        *,
        parts: TrainParts | None = None,
        callbacks: Sequence[StepCallback] = (),
    ) -> None:
        if not pairs:
            raise DataError("DPO needs at least one preference pair")
        self.dpo_cfg = cfg
        masked = masks_rendered(cfg.data)
        self.pairs: list[tuple[TokenSequence, TokenSequence]] = []
        for p in pairs:
            if p.chosen.task.id != p.rejected.task.id:
                raise DataError(
                    f"pair {p.chosen.id} / {p.rejected.id}: chosen and rejected are on different "
                    f"tasks ({p.chosen.task.id!r} vs {p.rejected.task.id!r})"
                )
            self.pairs.append(
                (
                    encode_trajectory(p.chosen, max_length=cfg.max_seq_len, mask_rendered=masked),
                    encode_trajectory(p.rejected, max_length=cfg.max_seq_len, mask_rendered=masked),
                )
            )
        super().__init__(cfg, len(self.pairs), parts=parts, callbacks=callbacks)
        self.reference = ReferenceModel(self.parts)

    def _pair_batches(self, pairs: list[tuple[TokenSequence, TokenSequence]]) -> list[TokenBatch]:
        widths = [max(len(c), len(r)) for c, r in pairs]
        plan = plan_micro_batches(
            widths,
            max_tokens=max(2, self.cfg.micro_batch_tokens // 2),
            max_rows=None
            if self.cfg.micro_batch_rows is None
            else max(1, self.cfg.micro_batch_rows // 2),
        )
        pad = self.parts.pad_token_id
        self.refuse_unseen_images(seq for pair in pairs for seq in pair)
        return [
            TokenBatch.collate(
                [pairs[i][0] for i in idx] + [pairs[i][1] for i in idx],
                pad_token_id=pad,
                pixels=self.parts.pixels,
            )
            for idx in plan
        ]

    def run_step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        step_pairs = [self.pairs[i] for i in self.data.next_batch()]
        pairs = self.shard(step_pairs, [len(c) + len(r) for c, r in step_pairs])
        divisor = self.global_mean_divisor(len(pairs))
        batches = self._pair_batches(pairs)
        passes = self.even_passes(batches, lambda: self._pair_batches(step_pairs[:1])[0])
        cfg = self.dpo_cfg
        loss_sum, zs, chosen_r, rejected_r, n_tokens = 0.0, [], [], [], 0
        for k, (mb, counted) in enumerate(passes):
            mb = mb.to(self.parts.device)
            n = mb.input_ids.shape[0] // 2
            ref = self.reference.logprobs(mb).sum(-1)
            with self.parts.accelerator.autocast():
                lp, _ = self.parts.logprob_model(
                    mb.input_ids, mb.attention_mask, mb.loss_mask, vision=mb.vision
                )
            seq = (lp * mb.loss_mask).sum(-1)
            losses, z = dpo_loss(
                seq[:n],
                seq[n:],
                ref[:n],
                ref[n:],
                beta=cfg.beta,
                label_smoothing=cfg.label_smoothing,
            )
            last = k == len(passes) - 1
            if not counted:  # a pass that only keeps the processes in step: a zero gradient
                self.backward(losses.sum() * 0.0, last=last)
                continue
            self.backward(losses.sum() / divisor, last=last)
            loss_sum += float(losses.detach().sum())
            zs.append(z.detach())
            chosen_r.append(cfg.beta * (seq[:n].detach() - ref[:n]))
            rejected_r.append(cfg.beta * (seq[n:].detach() - ref[n:]))
            n_tokens += mb.num_loss_tokens
        metrics = self.optimizer_step()
        elapsed = time.perf_counter() - t0
        metrics["loss"] = loss_sum / max(len(pairs), 1)
        if zs:  # a process without pairs this step (a batch smaller than the processes) has none
            z_all = torch.cat(zs)
            metrics.update(
                reward_accuracy=float((z_all > 0).float().mean()),
                reward_margin=float(z_all.mean()),
                chosen_reward=float(torch.cat(chosen_r).mean()),
                rejected_reward=float(torch.cat(rejected_r).mean()),
            )
        metrics.update(
            loss_tokens=float(n_tokens),
            tokens_per_s=n_tokens / elapsed,
            step_time_s=elapsed,
            pairs=float(len(pairs)),
        )
        return metrics
