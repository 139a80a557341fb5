"""Policies over local weights (``HFPolicy``): the embedded model, the models built from scratch (tiny, pocket) and a
transformers model folder. Importing this module loads torch; ``naming`` imports it only when
such a policy is asked for. ``vllm_policy`` (``vllm:``) is here too: it saves and reads models
with the same code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, get_peft_model
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer

from trajforge.errors import ConfigError
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.checkpoint import is_checkpoint
from trajforge.policy.models.embedded import load_embedded
from trajforge.policy.models.tiny import SCRATCH_SIZES, scratch_model_and_tokenizer
from trajforge.policy.vllm_loader import vllm_policy as vllm_policy  # for naming, with the rest


def causal_lm(
    spec: str, *, dtype: torch.dtype | None = None, seed: int = 0
) -> tuple[nn.Module, Any]:
    """``(model, tokenizer)`` of the causal LM that ``spec`` names, float32 unless ``dtype``
    says otherwise: the embedded model, a scratch model (``tiny``, ``pocket``; ``seed`` picks
    its weights), a training checkpoint or a transformers model folder. The one loader of
    weights by name: the policies below and the text embedder (``policy.embed``) use it."""
    model: nn.Module
    if spec == "embedded":
        return load_embedded(dtype or torch.float32)
    if spec in SCRATCH_SIZES:
        scratch, tokenizer = scratch_model_and_tokenizer(spec, seed=seed)
        # nn.Module's own ``to``: transformers' wrapper of it confuses mypy.
        model = nn.Module.to(scratch, dtype) if dtype is not None else scratch
        return model, tokenizer
    folder = Path(spec).expanduser()
    if is_checkpoint(folder):
        model, tokenizer = checkpoint_model(folder)
        return model.to(dtype or torch.float32), tokenizer
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype or torch.float32)
    return model, AutoTokenizer.from_pretrained(str(folder))


def embedded_policy(name: str, kw: dict[str, Any]) -> HFPolicy:
    """SmolLM2-135M-Instruct (``dtype`` in ``kw``, float32 by default)."""
    model, tokenizer = causal_lm("embedded", dtype=kw.pop("dtype", None))
    return HFPolicy(model, tokenizer, name=kw.pop("name", name), **kw)


def scratch_policy(name: str, kw: dict[str, Any]) -> HFPolicy:
    """Scratch model ``name``, ``tiny`` or ``pocket``, at random weights (``seed`` in ``kw``
    picks them)."""
    model, tokenizer = causal_lm(name, dtype=kw.pop("dtype", None), seed=kw.pop("seed", 0))
    return HFPolicy(model, tokenizer, name=kw.pop("name", name), **kw)


def folder_policy(folder: Path, kw: dict[str, Any]) -> HFPolicy:
    """The transformers model and tokenizer saved in ``folder``, or a training checkpoint's."""
    model, tokenizer = causal_lm(str(folder), dtype=kw.pop("dtype", None))
    return HFPolicy(model, tokenizer, name=kw.pop("name", str(folder)), **kw)


def checkpoint_model(folder: Path) -> tuple[nn.Module, Any]:
    """``(model, tokenizer)`` of training checkpoint ``folder``, in fp32: the base model its
    ``state.json`` names, with the checkpoint's trained weights loaded, or its LoRA adapter
    (``adapter_config.json``) merged in, so it serves and trains like any model folder."""
    state = json.loads((folder / "state.json").read_text())
    base = state.get("base")
    if not isinstance(base, dict):
        raise ConfigError(
            f"checkpoint {folder} does not name its base model (an older trajforge wrote it); "
            "load its run's final/ instead"
        )
    spec = str(base["spec"])
    model: nn.Module
    if spec in SCRATCH_SIZES:
        model, _ = scratch_model_and_tokenizer(spec, seed=int(base.get("tiny_seed", 0)))
    elif spec == "embedded":
        model, _ = load_embedded(torch.float32)
    else:
        model = AutoModelForCausalLM.from_pretrained(spec, dtype=torch.float32)
    if state.get("lora"):
        model = get_peft_model(model, LoraConfig.from_pretrained(str(folder)))
    trained = torch.load(folder / "trainable.pt", weights_only=True)
    unexpected = model.load_state_dict(trained, strict=False).unexpected_keys
    if unexpected:
        raise ConfigError(
            f"checkpoint {folder} does not fit its base model {spec!r}: it has "
            f"{', '.join(unexpected[:3])}, which the model lacks"
        )
    merge = getattr(model, "merge_and_unload", None)
    merged: nn.Module = merge() if callable(merge) else model
    # PEFT froze the base weights; merged, they are the model's own, trainable as a folder's.
    merged.requires_grad_(True)
    return merged, AutoTokenizer.from_pretrained(str(folder))
