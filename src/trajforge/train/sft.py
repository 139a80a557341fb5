"""Supervised fine-tuning: masked next-token loss over multi-turn trajectories.

The loss of an optimizer step is the mean negative log-likelihood over every assistant token of
the step's trajectories (``sum / count``), however they are split into micro-batches, so
gradient accumulation gives the same update as one large batch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from trajforge.errors import DataError
from trajforge.schema import Trajectory
from trajforge.train.base import StepCallback, Trainer
from trajforge.train.batch import TokenBatch, TokenSequence, encode_trajectory
from trajforge.train.config import DPOConfig, LossOn, SFTConfig, masks_rendered
from trajforge.train.parts import TrainParts


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The shuffled order of ``n`` items in ``epoch``: a pure function of seed and epoch."""
    gen = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return torch.randperm(n, generator=gen).tolist()


class EpochCursor:
    """A resumable position in a shuffled, epoch-based stream of item indices."""

    def __init__(self, n: int, batch_size: int, seed: int) -> None:
        if n == 0:
            raise DataError("no training examples")
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.epoch, self.index = 0, 0

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.n // self.batch_size)

    def next_batch(self) -> list[int]:
        if self.index >= self.n:
            self.epoch, self.index = self.epoch + 1, 0
        order = epoch_order(self.n, self.seed, self.epoch)
        batch = order[self.index : self.index + self.batch_size]
        self.index += len(batch)
        return batch

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index}

    def load(self, state: dict[str, Any]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])


class EpochTrainer(Trainer):
    """A trainer that passes over its examples in shuffled epochs (SFT, DPO): the run's steps,
    its plan and its resumable cursor all come from one ``EpochCursor``."""

    items = "examples"
    """What the examples are called in the plan."""

    def __init__(
        self,
        cfg: SFTConfig | DPOConfig,
        n: int,
        *,
        parts: TrainParts | None = None,
        callbacks: Sequence[StepCallback] = (),
    ) -> None:
        self.data = EpochCursor(n, cfg.batch_size, cfg.seed)
        self._epochs, self._max_steps = cfg.epochs, cfg.max_steps
        super().__init__(cfg, parts=parts, callbacks=callbacks)

    def total_steps(self) -> int:
        """``max_steps`` when set (the data cycled as often as it takes), else ``epochs`` passes
        over the data."""
        return self._max_steps if self._max_steps else self._epochs * self.data.steps_per_epoch

    def plan(self) -> str:
        """``12 trajectories loaded, 4 per step: 8 steps (2.7 epochs)``."""
        data, steps = self.data, self.total_steps()
        epochs = steps * data.batch_size / data.n
        shown = f"{epochs:.0f}" if epochs == int(epochs) else f"{epochs:.1f}"
        return (
            f"{data.n} {self.items} loaded, {data.batch_size} per step: {steps} steps "
            f"({shown} epoch{'' if epochs == 1 else 's'})"
        )

    def cursor(self) -> dict[str, Any]:
        return self.data.state()

    def set_cursor(self, cursor: dict[str, Any]) -> None:
        self.data.load(cursor)


def observations_too(seq: TokenSequence) -> list[bool]:
    """``seq``'s loss mask with every token outside the assistant turns added but the first
    (nothing predicts it); assistant tokens the mask leaves out (a rendered or context-only
    turn) stay out."""
    mask = [m or turn < 0 for m, turn in zip(seq.loss_mask, seq.turn_index, strict=True)]
    return [False, *mask[1:]]


class SFTTrainer(EpochTrainer):
    """Behaviour cloning on trajectories: the assistant-sampled tokens are in the loss (with
    ``loss_on: all``, the observations too)."""

    description = "sft"
    metric_weight = "loss_tokens"
    items = "trajectories"

    def __init__(
        self,
        cfg: SFTConfig,
        trajectories: Sequence[Trajectory],
        *,
        parts: TrainParts | None = None,
        callbacks: Sequence[StepCallback] = (),
    ) -> None:
        self.sft_cfg = cfg
        self.seqs: list[TokenSequence] = [
            encode_trajectory(t, max_length=cfg.max_seq_len, mask_rendered=masks_rendered(cfg.data))
            for t in trajectories
        ]
        if cfg.loss_on is LossOn.ALL:
            for seq in self.seqs:
                seq.loss_mask = observations_too(seq)
        super().__init__(cfg, len(self.seqs), parts=parts, callbacks=callbacks)

    def run_step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        step_seqs = [self.seqs[i] for i in self.data.next_batch()]
        seqs = self.shard(step_seqs, [len(s) for s in step_seqs])
        n_loss = sum(s.num_loss_tokens for s in seqs)
        divisor = self.global_mean_divisor(n_loss)
        batches = self.micro_batches(seqs)
        pad = self.parts.pad_token_id
        passes = self.even_passes(
            batches,
            lambda: TokenBatch.collate(step_seqs[:1], pad_token_id=pad, pixels=self.parts.pixels),
        )
        nll_sum = 0.0
        device = self.parts.device
        for k, (mb, counted) in enumerate(passes):
            mb = mb.to(device)
            with self.parts.accelerator.autocast():
                lp, _ = self.parts.logprob_model(
                    mb.input_ids, mb.attention_mask, mb.loss_mask, vision=mb.vision
                )
            total = -(lp * mb.loss_mask).sum()
            # A pass that only keeps the processes in step contributes a zero gradient.
            self.backward(total / divisor if counted else total * 0.0, last=k == len(passes) - 1)
            nll_sum += float(total.detach()) if counted else 0.0
        metrics = self.optimizer_step()
        elapsed = time.perf_counter() - t0
        n_tokens = sum(len(s) for s in seqs)
        cells = sum(b.input_ids.numel() for b in batches)
        metrics.update(
            loss=nll_sum / max(n_loss, 1),
            tokens=float(n_tokens),
            loss_tokens=float(n_loss),
            tokens_per_s=n_loss / elapsed,
            step_time_s=elapsed,
            padding_fraction=1.0 - n_tokens / max(cells, 1),
            micro_batches=float(len(batches)),
            epoch=float(self.data.epoch),
        )
        return metrics
