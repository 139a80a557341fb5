"""Model loading by spec, LoRA or full fine-tuning, AdamW with a warmup schedule, accelerate.

``accelerate.Accelerator`` places the model and optimizer, so the same trainer runs on a CPU,
one GPU or several (DDP/FSDP) without code changes. bf16 mixed precision is used where the
hardware computes bf16 natively (``precision: auto``, see ``trajforge.precision``).
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from peft import LoraConfig, get_peft_model
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer

from trajforge.errors import ConfigError
from trajforge.policy.models.embedded import load_embedded
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.precision import Precision, Resolved, resolve_precision
from trajforge.train.config import CommonSettings, ModelSettings, OptimSettings, Schedule
from trajforge.train.logprobs import TokenLogprobModel


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def load_base_model(settings: ModelSettings) -> tuple[nn.Module, Any]:
    """``(model, tokenizer)`` for ``tiny``, ``embedded`` or a local Hugging Face folder, in fp32."""
    spec = settings.spec
    if spec == "tiny":
        return tiny_model_and_tokenizer(seed=settings.tiny_seed)
    if spec == "embedded":
        return load_embedded(dtype=torch.float32)
    path = Path(spec)
    if not path.is_dir():
        raise ConfigError(
            f"model.spec: {spec!r} is not 'tiny', 'embedded' or an existing model folder"
        )

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model, AutoTokenizer.from_pretrained(path)


def apply_lora(model: nn.Module, settings: ModelSettings) -> nn.Module:
    """Wrap ``model`` with a PEFT LoRA adapter when configured; otherwise train every weight."""
    if settings.lora is None:
        return model

    lora = settings.lora
    cfg = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        layers_to_transform=lora.layers,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, cfg)


def mixed_precision(precision: Precision, field: str = "model.precision") -> str:
    """accelerate's mixed-precision mode for ``precision``: ``"bf16"`` (autocast) where it
    resolves to bf16, else ``"no"``."""
    return "bf16" if resolve_precision(precision, field) is Resolved.BF16 else "no"


def lr_lambda(schedule: Schedule, warmup: int, total: int) -> Any:
    """Multiplier of the base learning rate at optimizer step ``s`` (0-based)."""

    def fn(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        if schedule is Schedule.CONSTANT or total <= warmup:
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        if schedule is Schedule.LINEAR:
            return max(0.0, 1.0 - progress)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return fn


def make_optimizer(model: nn.Module, optim: OptimSettings) -> torch.optim.AdamW:
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ConfigError("model: nothing to train (no parameter requires a gradient)")
    # The fused kernel updates all parameters in one pass (CPU and CUDA); it matters for full
    # fine-tuning, where the per-tensor loop otherwise costs as much as a small model's forward.
    return torch.optim.AdamW(
        params,
        lr=optim.lr,
        betas=optim.betas,
        eps=optim.eps,
        weight_decay=optim.weight_decay,
        fused=True,
    )


@dataclass
class TrainParts:
    """Everything a trainer steps: the (possibly LoRA-wrapped) model and its optimizer state."""

    model: nn.Module
    logprob_model: nn.Module
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    accelerator: Any
    is_lora: bool

    @property
    def device(self) -> torch.device:
        return torch.device(self.accelerator.device)

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id or 0)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The trainable parameters (the adapter under LoRA), detached on the CPU."""
        unwrapped = self.accelerator.unwrap_model(self.logprob_model).model
        return {
            name: p.detach().cpu().clone()
            for name, p in unwrapped.named_parameters()
            if p.requires_grad
        }

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        unwrapped = self.accelerator.unwrap_model(self.logprob_model).model
        params = dict(unwrapped.named_parameters())
        missing = [n for n, p in params.items() if p.requires_grad and n not in state]
        if missing:
            raise ConfigError(f"checkpoint does not match the model: missing {missing[:3]}")
        with torch.no_grad():
            for name, value in state.items():
                params[name].copy_(value.to(params[name].device))

    def unwrapped_model(self) -> nn.Module:
        model: nn.Module = self.accelerator.unwrap_model(self.logprob_model).model
        return model


def make_accelerator(mode: str) -> Any:
    """An ``Accelerator`` in mixed-precision ``mode`` ("no" or "bf16")."""
    # accelerate keeps one process-wide state and refuses a second precision, but one process
    # may train in several (tests, a notebook); the precision part is reset, the distributed
    # part (PartialState) kept.
    shared = AcceleratorState._shared_state
    if shared and shared.get("_mixed_precision") != mode:
        AcceleratorState._reset_state()
    return Accelerator(mixed_precision=mode)


def build_train_parts(cfg: CommonSettings, total_steps: int) -> TrainParts:
    """Load the model, apply LoRA, build AdamW and the schedule, and place them with accelerate."""
    seed_everything(cfg.seed)
    base, tokenizer = load_base_model(cfg.model)
    model = apply_lora(base, cfg.model)
    model.train()
    wrapper = TokenLogprobModel(model)
    optimizer = make_optimizer(wrapper, cfg.optim)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(cfg.optim.schedule, cfg.optim.warmup_steps, total_steps)
    )
    accelerator = make_accelerator(mixed_precision(cfg.model.precision))
    wrapper, optimizer = accelerator.prepare(wrapper, optimizer)
    return TrainParts(
        model=accelerator.unwrap_model(wrapper).model,
        logprob_model=wrapper,
        tokenizer=tokenizer,
        optimizer=optimizer,
        scheduler=scheduler,
        accelerator=accelerator,
        is_lora=cfg.model.lora is not None,
    )


def clip_and_step(parts: TrainParts, max_grad_norm: float | None) -> float:
    """Clip gradients (if configured), step optimizer and schedule; return the gradient norm."""
    params = [p for p in parts.logprob_model.parameters() if p.requires_grad]
    if max_grad_norm is not None:
        norm = parts.accelerator.clip_grad_norm_(params, max_grad_norm)
    else:
        grads = [p.grad.detach().norm() for p in params if p.grad is not None]
        norm = torch.stack(grads).norm() if grads else torch.tensor(0.0)
    parts.optimizer.step()
    parts.scheduler.step()
    parts.optimizer.zero_grad(set_to_none=True)
    return float(norm)


def save_final(parts: TrainParts, out: Path) -> Path:
    """Save the trained model and tokenizer with ``save_pretrained``.

    Under LoRA the adapter alone goes to ``out/adapter`` and ``out`` holds the base weights with
    the adapter merged in, so the result loads like any model folder (an eval or the next
    training stage needs no PEFT). The merge is computed on a copy: the trained module keeps
    its adapter.
    """
    out.mkdir(parents=True, exist_ok=True)
    if parts.accelerator.is_main_process:
        model: Any = parts.unwrapped_model()
        if callable(getattr(model, "merge_and_unload", None)):
            model.save_pretrained(out / "adapter")
            copy.deepcopy(model).merge_and_unload().save_pretrained(out)
        else:
            model.save_pretrained(out)
        parts.tokenizer.save_pretrained(out)
    return out
