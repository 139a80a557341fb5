"""Chat templates for the tests of what trajforge does where a template is not prefix-safe: a
modified ChatML that rewrites the history, one that opens thinking in its generation prompt,
and the llama.cpp library's real templates (skipped where ``make setup`` has not fetched them)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from trajforge.chat_templates.library import LIBRARY, is_fetched, library_dir, library_template
from trajforge.policy.models.smollm2 import load_tokenizer

_TURN = "<|im_start|>{{ m.role }}\n"
_GEN = "{% if add_generation_prompt %}<|im_start|>assistant\n{{ opening }}{% endif %}"
REWRITES_HISTORY = (
    "{% for m in messages %}" + _TURN + "{% if m.role == 'assistant' and not loop.last %}"
    "(earlier reply){% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    + _GEN.replace("{{ opening }}", "")
)
"""Past replies are shortened once a later message exists, as reasoning templates drop
thinking."""
OPENS_IN_PROMPT = (
    "{% for m in messages %}"
    + _TURN
    + "{{ m.content }}<|im_end|>\n{% endfor %}"
    + _GEN.replace("{{ opening }}", "<think>\n")
)
"""The generation prompt opens a thinking block that the reply's rendering never shows."""

needs_library = pytest.mark.skipif(
    not is_fetched(),
    reason=f"llama.cpp's chat templates are not in {library_dir()} "
    "(make setup fetches them: python -m trajforge.chat_templates.library)",
)


def library_text(name: str) -> str:
    """The Jinja text of the library template called ``name``."""
    return library_template(next(e for e in LIBRARY if e.name == name)).text


def smollm2_with(template: str) -> Any:
    """SmolLM2's tokenizer (ChatML special tokens) with ``template`` as its chat template."""
    tokenizer = copy.deepcopy(load_tokenizer())
    tokenizer.chat_template = template
    return tokenizer
