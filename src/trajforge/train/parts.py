"""What a trainer steps and saves: ``TrainParts`` (the model, its optimizer and schedule, placed
by accelerate), its state whole at any world size, the optimizer step and the final weights.

``trajforge.train.model`` builds the parts (``build_train_parts``); checkpoints read and load
their state through the methods here.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor

from trajforge.errors import ConfigError
from trajforge.policy import pixel_inputs, save_tokenizer
from trajforge.train.batch import PixelInputs
from trajforge.train.distributed import barrier


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
    sharded: bool = False
    """Weights, gradients and optimizer state are sharded over the processes (FSDP2)."""
    base: dict[str, Any] | None = None
    """The base model as a checkpoint records it (``spec``, ``tiny_seed``; a folder by its
    absolute path), so that any checkpoint loads as a model (``checkpoint_model``)."""
    template: nn.Module | None = None
    """Under FSDP: an unsharded copy of the initial model on the CPU, the skeleton that gathered
    weights are loaded into (final weights, rollout weights, the frozen reference)."""
    processor: Any = None
    """A vision-language model's processor (``tokenizer`` is its tokenizer); ``None`` for a
    text model."""

    @property
    def pixels(self) -> PixelInputs | None:
        """Images -> the model's pixel tensors (``None`` for a text model)."""
        processor = self.processor
        if processor is None:
            return None
        return lambda images: pixel_inputs(processor, images)

    @property
    def device(self) -> torch.device:
        return torch.device(self.accelerator.device)

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id or 0)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The trainable parameters (the adapter under LoRA), whole and detached on the CPU.

        Under FSDP the shards are gathered (every process must call this) and only the main
        process gets them; the others get an empty dict.
        """
        unwrapped = self.accelerator.unwrap_model(self.logprob_model).model
        trainable = [name for name, p in unwrapped.named_parameters() if p.requires_grad]
        if self.sharded:
            full = self.full_state(on_all=False)
            return {name: full[name] for name in trainable if name in full}
        params = dict(unwrapped.named_parameters())
        return {name: params[name].detach().cpu().clone() for name in trainable}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        """Load whole trainable parameters (from ``trainable_state``, at any world size)."""
        unwrapped = self.accelerator.unwrap_model(self.logprob_model).model
        params = dict(unwrapped.named_parameters())
        missing = [n for n, p in params.items() if p.requires_grad and n not in state]
        if missing:
            raise ConfigError(f"checkpoint does not match the model: missing {missing[:3]}")
        if self.sharded:
            set_model_state_dict(
                self.logprob_model,
                {f"model.{name}": value for name, value in state.items()},
                options=StateDictOptions(full_state_dict=True, strict=False),
            )
            return
        with torch.no_grad():
            for name, value in state.items():
                params[name].copy_(value.to(params[name].device))

    def full_state(self, *, on_all: bool) -> dict[str, torch.Tensor]:
        """Every weight of the model, gathered whole (a collective under FSDP), keyed by the
        model's own names; with ``on_all`` false only the main process gets them (on the CPU)."""
        wrapper = self.accelerator.unwrap_model(self.logprob_model)
        options = StateDictOptions(full_state_dict=True, cpu_offload=not on_all)
        state = get_model_state_dict(wrapper, options=options)
        return {name.removeprefix("model."): torch.as_tensor(v) for name, v in state.items()}

    def optimizer_state(self) -> dict[str, Any]:
        """The optimizer state keyed by parameter names with whole tensors: the same at every
        world size and strategy (a collective under FSDP; the main process gets it)."""
        wrapper = self.accelerator.unwrap_model(self.logprob_model)
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return dict(get_optimizer_state_dict(wrapper, self._torch_optimizer(), options=options))

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """Load an ``optimizer_state`` saved at any world size, sharding it where needed."""
        if not state.get("state"):
            # Saved before the optimizer first stepped: it has no state yet (its settings come
            # from the config, the learning rate from the schedule's own checkpoint).
            return
        wrapper = self.accelerator.unwrap_model(self.logprob_model)
        options = StateDictOptions(full_state_dict=True)
        set_optimizer_state_dict(wrapper, self._torch_optimizer(), state, options=options)

    def _torch_optimizer(self) -> torch.optim.Optimizer:
        """The torch optimizer inside accelerate's wrapper (which the state functions need)."""
        inner: torch.optim.Optimizer = getattr(self.optimizer, "optimizer", self.optimizer)
        return inner

    def gathered_model(self, *, on_all: bool = False) -> nn.Module | None:
        """The trained model as one plain module: itself when unsharded; under FSDP a copy of
        the template holding the gathered weights (a collective), on the main process only
        unless ``on_all`` (``None`` elsewhere)."""
        if not self.sharded:
            return self.unwrapped_model()
        state = self.full_state(on_all=on_all)
        if not on_all and not self.accelerator.is_main_process:
            return None
        assert self.template is not None  # set with sharded by build_train_parts
        model = copy.deepcopy(self.template)
        model.load_state_dict(state)
        return model.to(self.device)

    def unwrapped_model(self) -> nn.Module:
        model: nn.Module = self.accelerator.unwrap_model(self.logprob_model).model
        return model


def clip_and_step(parts: TrainParts, max_grad_norm: float | None) -> float:
    """Clip gradients (if configured), step optimizer and schedule; return the gradient norm."""
    params = [p for p in parts.logprob_model.parameters() if p.requires_grad]
    if max_grad_norm is not None:
        norm = parts.accelerator.clip_grad_norm_(params, max_grad_norm)
    else:
        grads = [p.grad.detach() for p in params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads) if grads else torch.tensor(0.0)
    parts.optimizer.step()
    parts.scheduler.step()
    parts.optimizer.zero_grad(set_to_none=True)
    # Under FSDP the norm is a DTensor over the shards; its whole value is the global norm.
    return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)


def save_final(parts: TrainParts, out: Path) -> Path:
    """Save the trained model and tokenizer with ``save_pretrained``, the tokenizer with the
    chat template that renders what training rendered (``policy.saved.save_tokenizer``).

    Under LoRA the adapter alone goes to ``out/adapter`` and ``out`` holds the base weights with
    the adapter merged in, so the result loads like any model folder (an eval or the next
    training stage needs no PEFT). The merge is computed on a copy: the trained module keeps
    its adapter.
    """
    out.mkdir(parents=True, exist_ok=True)
    model: Any = parts.gathered_model()  # under FSDP a collective: every process calls it
    if parts.accelerator.is_main_process:
        if callable(getattr(model, "merge_and_unload", None)):
            model.save_pretrained(out / "adapter")
            copy.deepcopy(model).merge_and_unload().save_pretrained(out)
        else:
            model.save_pretrained(out)
        save_processing(parts, out)
    barrier()
    return out


def save_processing(parts: TrainParts, out: Path) -> None:
    """The tokenizer, with the chat template training rendered with, into ``out``; before it a
    vision-language model's processor (the folder then loads as one, ``AutoProcessor``)."""
    if parts.processor is not None:
        parts.processor.save_pretrained(str(out))
    save_tokenizer(parts.tokenizer, out)
