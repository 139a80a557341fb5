"""The weights an RL run's rollouts sample with.

The rollout policy is an ``HFPolicy`` over the trained module itself, or over a copy of its
weights of its own (bf16, asynchronous rollouts, LoRA merged in, or gathered under FSDP)
refreshed after every update; on Ray the actors get the weights published to them. Only the
main process rolls out, so only it holds a policy.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch

from trajforge.policy.hf import HFPolicy
from trajforge.precision import Precision, resolve_precision, torch_dtype
from trajforge.train.config import RLConfig
from trajforge.train.model import TrainParts

if TYPE_CHECKING:
    from trajforge.distributed.runner import RayRunner


class RolloutWeights:
    """The rollout policy (``None`` off the main process) and the weights behind it.

    Args:
        parts: The trained model's parts.
        cfg: The run's config (``rollout_precision``, ``async_staleness``, batch size).
    """

    def __init__(self, parts: TrainParts, cfg: RLConfig) -> None:
        self.parts = parts
        self.cfg = cfg
        if cfg.rollout_precision is Precision.AUTO:
            resolved = resolve_precision(cfg.model.precision, "model.precision")
        else:
            resolved = resolve_precision(cfg.rollout_precision, "rollout_precision")
        self.dtype: torch.dtype = torch_dtype(resolved)
        self.policy: HFPolicy | None = self._make_policy()

    @property
    def precision(self) -> Precision:
        """The precision the rollouts sample at (what Ray's actors build their replica with)."""
        return Precision.BF16 if self.dtype is torch.bfloat16 else Precision.FP32

    @property
    def own_weights(self) -> bool:
        """Whether rollouts sample from weights of their own: a bf16 copy, or rollouts that
        overlap training."""
        return self.dtype is torch.bfloat16 or self.cfg.async_staleness > 0

    def _make_policy(self) -> HFPolicy | None:
        model = self.source()
        if not self.parts.accelerator.is_main_process:
            return None  # rollouts run on the main process
        if self.own_weights and model is self.parts.unwrapped_model():
            model = copy.deepcopy(model)
        if self.dtype is torch.bfloat16:
            model = model.to(torch.bfloat16)
        return HFPolicy(
            model,
            self.parts.tokenizer,
            max_batch_size=self.cfg.max_batch_size,
            share_prefixes=not self.cfg.reference_path,
        )

    def source(self) -> Any:
        """The module the rollout weights come from: the trained one, or under LoRA with weights
        of their own a copy with the adapter merged in (a plain model the lean decoder runs,
        loaded into the rollout weights after each update). Under FSDP: a plain copy of the
        gathered weights (a collective), LoRA merged in, on the main process only."""
        if self.parts.sharded:
            gathered: Any = self.parts.gathered_model()
            return gathered.merge_and_unload() if gathered and self.parts.is_lora else gathered
        model: Any = self.parts.unwrapped_model()
        if self.parts.is_lora and self.own_weights:
            return copy.deepcopy(model).merge_and_unload()
        return model

    def refresh(self) -> None:
        """The trained weights into the rollout policy (a no-op when it samples from the
        trained module itself)."""
        source = self.source()
        if self.policy is not None:
            self.policy.set_weights(source)

    def publish(self, remote: RayRunner | None, version: int) -> None:
        """On Ray, the trained weights (LoRA merged in) to the actors as ``version`` (the
        updates made so far); every process calls it, ``remote`` being the main one's."""
        if self.cfg.ray is None:
            return
        # Under FSDP the weights are gathered first, by every process (a collective).
        model: Any = self.source() if self.parts.sharded else None
        if remote is None:
            return  # not the main process
        if model is None:
            model = self.parts.unwrapped_model()
            if self.parts.is_lora:
                model = copy.deepcopy(model).merge_and_unload()
        remote.publish({k: v.detach().cpu() for k, v in model.state_dict().items()}, version)
