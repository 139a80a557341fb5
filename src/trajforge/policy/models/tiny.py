"""A tiny randomly initialised Llama with SmolLM2's tokenizer, built in code, for tests.

Same architecture family and vocabulary (49152) as the embedded model, so everything that works
with the tiny model works with SmolLM2, at a fraction of the cost (~3.3M parameters, mostly the
tied embedding).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from trajforge.policy.models.smollm2 import load_tokenizer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

TINY_HIDDEN = 64
TINY_LAYERS = 2
TINY_HEADS = 4
TINY_KV_HEADS = 2
TINY_INTERMEDIATE = 128
TINY_MAX_POSITIONS = 4096

_MODELS: dict[int, LlamaForCausalLM] = {}


def _build(seed: int, tokenizer: PreTrainedTokenizerBase) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=TINY_HIDDEN,
        intermediate_size=TINY_INTERMEDIATE,
        num_hidden_layers=TINY_LAYERS,
        num_attention_heads=TINY_HEADS,
        num_key_value_heads=TINY_KV_HEADS,
        max_position_embeddings=TINY_MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    # A private RNG stream: building the model must not disturb the caller's torch seed.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model


def tiny_model_and_tokenizer(seed: int = 0) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    """A fresh copy of the tiny model for ``seed`` (equal seeds give equal weights) and
    SmolLM2's tokenizer. The model is built once per seed and process; each call returns its
    own deep copy, so training one copy never changes another."""
    tokenizer = load_tokenizer()
    model = _MODELS.get(seed)
    if model is None:
        model = _build(seed, tokenizer)
        _MODELS[seed] = model
    return copy.deepcopy(model), tokenizer
