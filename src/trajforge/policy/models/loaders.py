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
from transformers import (
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
)

from trajforge.errors import ConfigError
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.checkpoint import is_checkpoint, resolve_checkpoint
from trajforge.policy.models.embedded import load_embedded
from trajforge.policy.models.kinds import TINY_VLM, is_vision_folder
from trajforge.policy.models.tiny import SCRATCH_SIZES, scratch_model_and_tokenizer
from trajforge.policy.models.tiny_vlm import tiny_vlm_and_processor, tiny_vlm_processor
from trajforge.policy.renderer import ToolProtocol
from trajforge.policy.vision import VisionPolicy
from trajforge.policy.vision_render import VisionRenderer
from trajforge.policy.vllm_loader import vllm_policy as vllm_policy  # for naming, with the rest


def causal_lm(
    spec: str, *, dtype: torch.dtype | None = None, seed: int = 0
) -> tuple[nn.Module, Any]:
    """``(model, tokenizer)`` of the causal LM that ``spec`` names, float32 unless ``dtype``
    says otherwise: the embedded model, a scratch model (``tiny``, ``pocket``; ``seed`` picks
    its weights), a training checkpoint or a transformers model folder. The one loader of
    weights by name: the policies below and the text embedder (``policy.embed``) use it."""
    if spec == "embedded":
        return load_embedded(dtype or torch.float32)
    if spec in SCRATCH_SIZES:
        scratch, tokenizer = scratch_model_and_tokenizer(spec, seed=seed)
        return _cast(scratch, dtype), tokenizer
    return _saved_model(spec, dtype, AutoModelForCausalLM, AutoTokenizer)


def _cast(model: nn.Module, dtype: torch.dtype | None) -> nn.Module:
    """A model built here in ``dtype`` (``None``: as built, float32)."""
    # nn.Module's own ``to``: transformers' wrapper of it confuses mypy.
    return nn.Module.to(model, dtype) if dtype is not None else model


def _saved_model(
    spec: str, dtype: torch.dtype | None, model_class: Any, processing_class: Any
) -> tuple[nn.Module, Any]:
    """``(model, tokenizer or processor)`` saved at ``spec``: a training checkpoint, else a
    transformers folder that ``model_class`` and ``processing_class`` load."""
    folder = Path(spec).expanduser()
    if is_checkpoint(folder):
        model, processing = checkpoint_model(folder)
        return model.to(dtype or torch.float32), processing
    model = model_class.from_pretrained(str(folder), dtype=dtype or torch.float32)
    return model, processing_class.from_pretrained(str(folder))


def embedded_policy(name: str, kw: dict[str, Any]) -> HFPolicy:
    """SmolLM2-135M-Instruct (``dtype`` in ``kw``, float32 by default)."""
    model, tokenizer = causal_lm("embedded", dtype=kw.pop("dtype", None))
    return HFPolicy(model, tokenizer, name=kw.pop("name", name), **kw)


def scratch_policy(name: str, kw: dict[str, Any]) -> HFPolicy:
    """Scratch model ``name``, ``tiny``, ``pocket`` or ``tiny-vlm``, at random weights
    (``seed`` in ``kw`` picks them)."""
    if name == TINY_VLM:
        return vision_policy(name, kw)
    model, tokenizer = causal_lm(name, dtype=kw.pop("dtype", None), seed=kw.pop("seed", 0))
    return HFPolicy(model, tokenizer, name=kw.pop("name", name), **kw)


def folder_policy(folder: Path, kw: dict[str, Any]) -> HFPolicy:
    """The transformers model and tokenizer saved in ``folder``, or a training checkpoint's;
    a vision-language model's folder (it has a processor) as a ``VisionPolicy``."""
    if is_vision_folder(folder):
        return vision_policy(str(folder), kw)
    model, tokenizer = causal_lm(str(folder), dtype=kw.pop("dtype", None))
    return HFPolicy(model, tokenizer, name=kw.pop("name", str(folder)), **kw)


def vision_model(
    spec: str, *, dtype: torch.dtype | None = None, seed: int = 0
) -> tuple[nn.Module, Any]:
    """``(model, processor)`` of the vision-language model ``spec`` names, float32 unless
    ``dtype`` says otherwise: ``tiny-vlm`` (``seed`` picks its weights), a transformers
    folder (``AutoModelForImageTextToText`` and ``AutoProcessor``) or a training checkpoint of
    either."""
    if spec == TINY_VLM:
        scratch, processor = tiny_vlm_and_processor(seed)
        return _cast(scratch, dtype), processor
    return _saved_model(spec, dtype, AutoModelForImageTextToText, AutoProcessor)


def vision_policy(spec: str, kw: dict[str, Any]) -> VisionPolicy:
    """``tiny-vlm`` or a vision-language model folder as a ``VisionPolicy``."""
    model, processor = vision_model(spec, dtype=kw.pop("dtype", None), seed=kw.pop("seed", 0))
    # It decodes one sequence at a time: a batch size asked of local models does not apply.
    kw.pop("max_batch_size", None)
    return VisionPolicy(model, processor, name=kw.pop("name", spec), **kw)


def checkpoint_model(folder: Path) -> tuple[nn.Module, Any]:
    """``(model, tokenizer)`` of training checkpoint ``folder`` (a vision-language model's:
    ``(model, processor)``), in fp32: the base model its
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
    seed = int(base.get("tiny_seed", 0))
    vision = spec == TINY_VLM or is_vision_folder(Path(spec))
    model: nn.Module
    if spec in SCRATCH_SIZES:
        model, _ = scratch_model_and_tokenizer(spec, seed=seed)
    elif vision:
        model, _ = vision_model(spec, seed=seed)
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
    if vision:
        return merged, AutoProcessor.from_pretrained(str(folder))
    return merged, AutoTokenizer.from_pretrained(str(folder))


def saved_tokenizer(spec: str) -> Any:
    """The tokenizer of ``tiny-vlm`` or of model folder ``spec`` (a vision-language model's:
    its processor's)."""
    folder = resolve_checkpoint(Path(spec).expanduser())
    if spec == TINY_VLM or is_vision_folder(folder):
        return saved_processor(spec).tokenizer
    return AutoTokenizer.from_pretrained(str(folder))


def saved_processor(spec: str) -> Any:
    """The processor of ``tiny-vlm`` or of vision-language model folder ``spec``."""
    if spec == TINY_VLM:
        return tiny_vlm_processor()
    return AutoProcessor.from_pretrained(str(resolve_checkpoint(Path(spec).expanduser())))


def vision_renderer(spec: str, tool_protocol: ToolProtocol) -> VisionRenderer:
    """The renderer of vision-language model ``spec`` (``tiny-vlm`` or a folder), without
    its weights."""
    return VisionRenderer(saved_processor(spec), tool_protocol)
