"""The reference model for DPO and KL penalties, without a second copy of the weights under LoRA.

Under LoRA the reference is the base model itself: the adapter is switched off
(``model.disable_adapter()``) for the reference pass. Under full fine-tuning a frozen copy of the
initial weights is kept; under FSDP that copy is sharded like the trained model (its passes are
collectives, made by every process alike).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator

import torch
from torch import nn

from trajforge.train.batch import TokenBatch
from trajforge.train.distributed import shard_model
from trajforge.train.logprobs import TokenLogprobModel
from trajforge.train.parts import TrainParts


class ReferenceModel:
    """Computes reference logprobs (no gradient) for token batches."""

    def __init__(self, parts: TrainParts) -> None:
        self.parts = parts
        self._frozen: nn.Module | None = None
        if not parts.is_lora:
            # Under FSDP the template holds the initial weights whole (the trained model is sharded).
            source = parts.template if parts.sharded else parts.unwrapped_model()
            assert source is not None  # build_train_parts sets the template with sharded
            frozen = copy.deepcopy(source)
            frozen.eval()
            for p in frozen.parameters():
                p.requires_grad_(False)
            trained = parts.accelerator.unwrap_model(parts.logprob_model)
            self._frozen = TokenLogprobModel(frozen, reference_path=trained.reference_path).to(
                parts.device
            )
            if parts.sharded:
                shard_model(self._frozen, frozen, parts.device)

    @property
    def shares_weights(self) -> bool:
        """True when the reference is the base under a disabled adapter (no weight copy)."""
        return self._frozen is None

    @contextlib.contextmanager
    def _module(self) -> Iterator[nn.Module]:
        if self._frozen is not None:
            yield self._frozen
            return
        peft_model = self.parts.unwrapped_model()
        with peft_model.disable_adapter():  # type: ignore[operator]
            yield self.parts.logprob_model

    @torch.no_grad()
    def logprobs(self, batch: TokenBatch, temperature: float = 1.0) -> torch.Tensor:
        """``[B, T]`` reference logprobs of ``batch``'s loss tokens (0 elsewhere), of the
        reference's logits divided by ``temperature`` (the policy's own, for a like KL)."""
        with self._module() as module, self.parts.accelerator.autocast():
            lp, _ = module(
                batch.input_ids,
                batch.attention_mask,
                batch.loss_mask,
                False,
                temperature,
                vision=batch.vision,
            )
        return lp.float()
