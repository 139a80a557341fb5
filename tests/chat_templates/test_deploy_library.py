"""Real templates of other model families, saved by trajforge: the saved folder's
``apply_chat_template`` gives, for every template-check shape, the text trajforge renders
with the model's own template, whichever tool protocol that template gets."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from template_doubles import needs_library
from trajforge.chat_templates.library import LIBRARY, library_template
from trajforge.chat_templates.shapes import SHAPES
from trajforge.formats.openai_chat import messages_from_openai
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.renderer import ChatRenderer, RenderError
from trajforge.policy.saved import save_tokenizer
from trajforge.schema import ToolSpec


@needs_library
@pytest.mark.parametrize("entry", LIBRARY, ids=[e.family for e in LIBRARY])
def test_a_saved_library_template_renders_what_trajforge_renders(
    entry: Any, tmp_path: Path
) -> None:
    tokenizer = copy.deepcopy(load_tokenizer())
    tokenizer.chat_template = library_template(entry).text
    renderer = ChatRenderer(tokenizer)
    save_tokenizer(tokenizer, tmp_path)
    saved = AutoTokenizer.from_pretrained(str(tmp_path))
    compared = 0
    for shape in SHAPES.values():
        tools = [ToolSpec.model_validate(t) for t in shape.tools]
        messages = messages_from_openai(shape.messages)
        hf_tools: list[Any] | None = list(shape.tools) or None
        for upto in range(1, len(messages) + 1):
            for gen in (True, False):
                try:
                    expected = renderer.render_text(
                        messages[:upto], tools, add_generation_prompt=gen
                    )
                except RenderError:  # the template refuses the shape: so must the saved one
                    with pytest.raises(Exception):  # noqa: B017 - the template's own error
                        saved.apply_chat_template(
                            shape.messages[:upto],
                            tools=hf_tools,
                            tokenize=False,
                            add_generation_prompt=gen,
                        )
                    continue
                got = saved.apply_chat_template(
                    shape.messages[:upto],
                    tools=hf_tools,
                    tokenize=False,
                    add_generation_prompt=gen,
                )
                assert got == expected, (entry.name, shape.name, upto, gen)
                compared += 1
    assert compared > 0
