"""Model loading by spec, LoRA or full fine-tuning, AdamW with a warmup schedule, accelerate.

``accelerate.Accelerator`` places the model and optimizer and joins the process group, so the
same trainer runs on a CPU, one GPU or several processes (DDP through accelerate, FSDP2 applied
here: see ``trajforge.train.distributed``). bf16 mixed precision is used where the
hardware computes bf16 natively (``precision: auto``, see ``trajforge.precision``).
"""

from __future__ import annotations

import copy
import math
import os
import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import InitProcessGroupKwargs
from peft import LoraConfig, get_peft_model
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer

from trajforge.errors import ConfigError
from trajforge.policy import (
    SCRATCH_SIZES,
    TINY_VLM,
    checkpoint_model,
    is_checkpoint,
    is_vision_folder,
    is_vision_processor,
    load_embedded,
    scratch_model_and_tokenizer,
    vision_model,
)
from trajforge.precision import Precision, Resolved, resolve_precision
from trajforge.ram import return_freed_memory
from trajforge.registry import did_you_mean
from trajforge.train.config import (
    CommonSettings,
    DistributedSettings,
    LoraSettings,
    ModelSettings,
    OptimSettings,
    Schedule,
    Strategy,
)
from trajforge.train.distributed import on_cpu, shard_model
from trajforge.train.logprobs import TokenLogprobModel
from trajforge.train.parts import TrainParts


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def load_base_model(settings: ModelSettings) -> tuple[nn.Module, Any]:
    """``(model, tokenizer)`` for ``tiny``, ``pocket``, ``embedded`` or a local Hugging Face
    folder, in fp32; ``(model, processor)`` for a vision-language model (``tiny-vlm`` or a
    folder with a processor)."""
    return_freed_memory()
    spec = settings.spec
    if spec == TINY_VLM or is_vision_folder(Path(spec)):
        return vision_model(spec, seed=settings.tiny_seed)
    if spec in SCRATCH_SIZES:
        return scratch_model_and_tokenizer(spec, seed=settings.tiny_seed)
    if spec == "embedded":
        return load_embedded(dtype=torch.float32)
    path = Path(spec)
    if not path.is_dir():
        raise ConfigError(
            f"model.spec: {spec!r} is not 'tiny', 'pocket', 'tiny-vlm', 'embedded' or an existing "
            "model folder"
        )
    if is_checkpoint(path):
        return checkpoint_model(path)

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model, AutoTokenizer.from_pretrained(path)


def model_setting_problems(cfg: CommonSettings, model: nn.Module) -> list[str]:
    """What in ``cfg`` this loaded ``model`` cannot do, each naming the key and the valid
    range: LoRA layers it does not have, target modules that are none of its linear layers,
    sequences longer than its position embeddings."""
    problems = []
    name = cfg.model.spec
    config = getattr(model, "config", None)
    layers = getattr(config, "num_hidden_layers", None)
    positions = getattr(config, "max_position_embeddings", None)
    lora = cfg.model.lora
    if lora is not None and lora.layers is not None and layers is not None:
        bad = [i for i in lora.layers if not 0 <= i < layers]
        if bad:
            problems.append(
                f"model.lora.layers: {', '.join(map(str, bad))} "
                f"{'is not a decoder layer' if len(bad) == 1 else 'are not decoder layers'} of "
                f"model {name!r}, which has {layers} (0 to {layers - 1})"
            )
    if lora is not None:
        linear = sorted(
            {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)}
        )
        for target in lora.target_modules:
            if target not in linear:
                problems.append(
                    f"model.lora.target_modules: {target!r} is not a linear layer of model "
                    f"{name!r}{did_you_mean(target, linear)}; its linear layers: {', '.join(linear)}"
                )
    if positions is not None and cfg.max_seq_len > positions:
        problems.append(
            f"max_seq_len: {cfg.max_seq_len} is longer than model {name!r} can attend over "
            f"(max_position_embeddings {positions}); at most {positions}"
        )
    return problems


def apply_lora(model: nn.Module, settings: ModelSettings) -> nn.Module:
    """Wrap ``model`` with a PEFT LoRA adapter when configured; otherwise train every weight."""
    if settings.lora is None:
        return model

    return get_peft_model(model, lora_config(settings.lora))


def lora_config(lora: LoraSettings) -> LoraConfig:
    """PEFT's config of the adapter ``lora`` describes."""
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        layers_to_transform=lora.layers,
        task_type="CAUSAL_LM",
    )


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


def make_optimizer(
    model: nn.Module, optim: OptimSettings, *, fused: bool = True
) -> torch.optim.AdamW:
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
        fused=fused,
    )


_FOREIGN_SHARDING = ("FSDP", "DEEPSPEED", "MEGATRON_LM")
"""accelerate's own sharding plugins, which trajforge does not use (``distributed.strategy``)."""


def make_accelerator(mode: str, distributed: DistributedSettings | None = None) -> Any:
    """An ``Accelerator`` in mixed-precision ``mode`` ("no" or "bf16"); under a launcher it
    joins the process group, whose collectives wait ``distributed.timeout_s`` at most."""
    # accelerate keeps one process-wide state and refuses a second precision, but one process
    # may train in several (tests, a notebook); the precision part is reset, the distributed
    # part (PartialState) kept.
    shared = AcceleratorState._shared_state
    if shared and shared.get("_mixed_precision") != mode:
        AcceleratorState._reset_state()
    # accelerate launch sets these from its config; trajforge shards by its own config instead.
    for plugin in _FOREIGN_SHARDING:
        if os.environ.get(f"ACCELERATE_USE_{plugin}", "").lower() == "true":
            raise ConfigError(
                f"accelerate is configured for {plugin}, which trajforge does not use: launch "
                "with distributed_type MULTI_GPU (accelerate launch --multi_gpu) and set "
                "distributed.strategy: fsdp in the training config to shard (docs/scaling.md)"
            )
    timeout = (distributed or DistributedSettings()).timeout_s
    group = InitProcessGroupKwargs(timeout=timedelta(seconds=timeout))
    # accelerate joins CPU processes (gloo) only when told to run on the CPU: without ``cpu``
    # each launched process would train alone on a machine without an accelerator.
    return Accelerator(mixed_precision=mode, cpu=on_cpu(), kwargs_handlers=[group])


def build_train_parts(cfg: CommonSettings, total_steps: int) -> TrainParts:
    """Load the model, apply LoRA, build AdamW and the schedule, and place them with accelerate."""
    seed_everything(cfg.seed)
    base, tokenizer = load_base_model(cfg.model)
    processor = tokenizer if is_vision_processor(tokenizer) else None
    if processor is not None:
        tokenizer = processor.tokenizer
    if problems := model_setting_problems(cfg, base):
        raise ConfigError("; ".join(problems))
    model = apply_lora(base, cfg.model)
    model.train()
    accelerator = make_accelerator(mixed_precision(cfg.model.precision), cfg.distributed)
    sharded = cfg.distributed.strategy is Strategy.FSDP and accelerator.num_processes > 1
    # Under FSDP every row runs whole: a shared prefix calls each sharded layer twice in one
    # forward, which no test over several processes has checked yet.
    wrapper = TokenLogprobModel(model, reference_path=cfg.reference_path or sharded)
    template = None
    if sharded:
        template = copy.deepcopy(model).eval()
        wrapper.to(accelerator.device)
        shard_model(wrapper, model, accelerator.device)
    # The fused AdamW kernel takes no sharded (DTensor) parameters.
    optimizer = make_optimizer(wrapper, cfg.optim, fused=not sharded)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(cfg.optim.schedule, cfg.optim.warmup_steps, total_steps)
    )
    if sharded:
        # accelerate would wrap a CPU process's model in DDP: the sharded one is left as it is.
        optimizer = accelerator.prepare(optimizer)
    else:
        wrapper, optimizer = accelerator.prepare(wrapper, optimizer)
    return TrainParts(
        model=accelerator.unwrap_model(wrapper).model,
        logprob_model=wrapper,
        tokenizer=tokenizer,
        optimizer=optimizer,
        scheduler=scheduler,
        accelerator=accelerator,
        is_lora=cfg.model.lora is not None,
        sharded=sharded,
        base=base_record(cfg.model),
        template=template,
        processor=processor,
    )


def base_record(settings: ModelSettings) -> dict[str, Any]:
    """What a checkpoint records of its base model: ``tiny`` and ``embedded`` by name, a folder
    by its absolute path (the checkpoint loads from any working directory)."""
    spec = settings.spec
    if spec not in ("tiny", "embedded", TINY_VLM):
        spec = str(Path(spec).expanduser().resolve())
    return {"spec": spec, "tiny_seed": settings.tiny_seed}
