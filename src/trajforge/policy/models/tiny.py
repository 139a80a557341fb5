"""Small Llamas with SmolLM2's tokenizer, initialised from scratch in code.

- ``tiny`` (~3.3M parameters, mostly the tied embedding): the tests' model. Same architecture
  family and vocabulary (49152) as the embedded model, so everything that works with it works
  with SmolLM2, at a fraction of the cost.
- ``pocket`` (~7.3M parameters, four layers of width 128): a policy small enough to train from
  scratch on two CPU cores by trajforge's own SFT, then RL, on a compact task
  (``keydoor-compact``); the CPU arm of the credit-assignment experiment.

Both start from random weights fixed by a seed; neither is downloaded.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel

from trajforge.policy.models.smollm2 import load_tokenizer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


M = TypeVar("M", bound=PreTrainedModel)


class ScratchSize(NamedTuple):
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    max_positions: int = 4096


SCRATCH_SIZES: dict[str, ScratchSize] = {
    "tiny": ScratchSize(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128),
    "pocket": ScratchSize(hidden=128, layers=4, heads=4, kv_heads=2, intermediate=512),
}
"""The models built from scratch, by name (what ``model:`` and ``--model`` accept)."""

_MODELS: dict[tuple[str, int], LlamaForCausalLM] = {}


def _build(size: ScratchSize, seed: int, tokenizer: PreTrainedTokenizerBase) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        max_position_embeddings=size.max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return from_seed(LlamaForCausalLM, config, tokenizer, seed)


def from_seed(model_class: Callable[[Any], M], config: Any, tokenizer: Any, seed: int) -> M:
    """``model_class(config)`` at the random weights of ``seed``, ending its generations at
    ``tokenizer``'s end of sequence, in eval mode."""
    # A private RNG stream: building the model must not disturb the caller's torch seed.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model


def scratch_model_and_tokenizer(
    name: str, seed: int = 0
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    """A fresh copy of scratch model ``name`` (``tiny`` or ``pocket``) for ``seed`` (equal seeds
    give equal weights) and SmolLM2's tokenizer. The model is built once per name, seed and
    process; each call returns its own deep copy, so training one copy never changes another."""
    tokenizer = load_tokenizer()
    model = _MODELS.get((name, seed))
    if model is None:
        model = _build(SCRATCH_SIZES[name], seed, tokenizer)
        _MODELS[(name, seed)] = model
    return copy.deepcopy(model), tokenizer


def tiny_model_and_tokenizer(seed: int = 0) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    """The tiny test model for ``seed`` and SmolLM2's tokenizer (see ``scratch_model_and_tokenizer``)."""
    return scratch_model_and_tokenizer("tiny", seed)
