"""``tiny-vlm``: a LLaVA-architecture vision-language model with SmolLM2's tokenizer, initialised
from scratch in code, for the tests of the vision-language path (rollout, SFT, RL).

LLaVA because it is the plainest image-text-to-text layout transformers has: a CLIP vision
tower, a two-layer projector, and each image's features written over its ``<image>`` tokens
of an ordinary causal LM (here the ``tiny`` Llama: 2 layers, width 64), with 1-D positions and
no per-image grids. Images are resized and cropped to 28 x 28 pixels, two 14-pixel patches a
side: 4 placeholder tokens per image. The processor is assembled locally (SmolLM2's tokenizer
plus an ``<image>`` token, a CLIP image processor, a ChatML template that writes image parts),
so nothing is downloaded.
"""

from __future__ import annotations

import copy
from typing import Any

from transformers import (
    CLIPImageProcessorPil,
    CLIPVisionConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
)

from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.models.tiny import from_seed

IMAGE_TOKEN = "<image>"
IMAGE_SIDE = 28
PATCH = 14

# SmolLM2's ChatML template, with content given as parts: an image part is written as the
# placeholder the processor expands, text parts as they are.
TINY_VLM_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant.<|im_end|>\\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '" + IMAGE_TOKEN + "' }}"
    "{% else %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_MODELS: dict[int, LlavaForConditionalGeneration] = {}
_PROCESSOR: list[LlavaProcessor] = []


def tiny_vlm_processor() -> LlavaProcessor:
    """The tiny VLM's processor (built once per process; treat it as read-only)."""
    if not _PROCESSOR:
        # A copy: SmolLM2's tokenizer is shared by every text policy and must not grow.
        tokenizer = copy.deepcopy(load_tokenizer())
        tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
        tokenizer.chat_template = TINY_VLM_CHAT_TEMPLATE
        images = CLIPImageProcessorPil(
            size={"shortest_edge": IMAGE_SIDE},
            crop_size={"height": IMAGE_SIDE, "width": IMAGE_SIDE},
        )
        _PROCESSOR.append(
            LlavaProcessor(
                image_processor=images,
                tokenizer=tokenizer,
                patch_size=PATCH,
                vision_feature_select_strategy="default",
                chat_template=TINY_VLM_CHAT_TEMPLATE,
                image_token=IMAGE_TOKEN,
                num_additional_image_tokens=1,
            )
        )
    return _PROCESSOR[0]


def _build(seed: int, processor: LlavaProcessor) -> LlavaForConditionalGeneration:
    tokenizer: Any = processor.tokenizer
    text = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=IMAGE_SIDE,
        patch_size=PATCH,
        projection_dim=32,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        tie_word_embeddings=True,
    )
    return from_seed(LlavaForConditionalGeneration, config, tokenizer, seed)


def tiny_vlm_and_processor(seed: int = 0) -> tuple[LlavaForConditionalGeneration, LlavaProcessor]:
    """A fresh copy of the tiny VLM for ``seed`` (equal seeds give equal weights) and its
    processor. Built once per seed and process; each call returns its own deep copy."""
    processor = tiny_vlm_processor()
    model = _MODELS.get(seed)
    if model is None:
        model = _build(seed, processor)
        _MODELS[seed] = model
    return copy.deepcopy(model), processor
