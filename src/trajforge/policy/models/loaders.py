"""Policies over local weights (``HFPolicy``): the embedded model, the tiny test model and a
transformers model folder. Importing this module loads torch; ``naming`` imports it only when
such a policy is asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.embedded import load_embedded
from trajforge.policy.models.tiny import tiny_model_and_tokenizer


def embedded_policy(name: str, kw: dict[str, Any]) -> HFPolicy:
    """SmolLM2-135M-Instruct (``dtype`` in ``kw``, float32 by default)."""
    model, tokenizer = load_embedded(kw.pop("dtype", None) or torch.float32)
    return HFPolicy(model, tokenizer, name=kw.pop("name", name), **kw)


def tiny_policy(name: str, kw: dict[str, Any]) -> HFPolicy:
    """The tiny random model (``seed`` in ``kw`` picks its weights)."""
    model, tokenizer = tiny_model_and_tokenizer(seed=kw.pop("seed", 0))
    dtype = kw.pop("dtype", None)
    if dtype is not None:
        model = model.to(dtype)
    return HFPolicy(model, tokenizer, name=kw.pop("name", name), **kw)


def folder_policy(folder: Path, kw: dict[str, Any]) -> HFPolicy:
    """The transformers model and tokenizer saved in ``folder``."""
    dtype = kw.pop("dtype", None) or torch.float32
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return HFPolicy(model, tokenizer, name=kw.pop("name", str(folder)), **kw)
