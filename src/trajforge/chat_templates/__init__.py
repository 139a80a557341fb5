"""Chat templates tested before they are trusted: are they prefix-safe turn by turn?

Contract:

- ``check_template(template, tokenizer, tokenizer_name, shapes) -> TemplateReport``: each
  conversation shape of the battery (``shapes.SHAPES``: system message or not, several turns,
  tool calls and results, parallel calls, empty and whitespace content, reasoning) is rendered
  at every point a model meets it (the prompt before each reply, the conversation after each
  reply, the whole) and each rendering is compared with the next. A shape is ``prefix-safe``
  when every rendering is a prefix of the next in text and in tokens; otherwise each break
  names the two points, whether the text or only the tokens differ, and the first differing
  tokens and characters. A template that raises on a shape leaves it ``unsupported``.
- Templates render exactly as transformers' ``apply_chat_template`` renders them (its Jinja
  sandbox and helpers), with the template's own BOS and EOS tokens where known.
- ``source.load(ref, tokenizer)`` finds a template: a model trajforge loads (its tokenizer's
  template and tokens), a GGUF file's metadata, a tokenizer_config.json, or a Jinja file
  (counted in a named tokenizer, else SmolLM2's as a stand-in).
- ``library``: real templates of other model families (Qwen, DeepSeek R1, Llama, Mistral,
  Gemma, Phi, gpt-oss), read from the llama.cpp sources that the ``llama-cpp-python`` sdist
  ships: fetched once at setup into the user cache, never copied into the repository, never
  fetched at run time.
- ``trajforge template-check MODEL|TEMPLATE_FILE`` prints the report (``--json``), exiting 0
  only if every shape asked for is prefix-safe.

Nothing here imports torch; transformers' tokenizer and template code are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trajforge.chat_templates.prefix import (
    BreakKind,
    ChatTemplate,
    PrefixBreak,
    ShapeResult,
    TemplateReport,
    Verdict,
    check_shape,
    check_template,
)
from trajforge.chat_templates.shapes import SHAPES, Shape, ShapeName, shapes_named
from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.chat_templates.source import load
    from trajforge.chat_templates.table import library_reports, markdown

__all__ = [
    "SHAPES",
    "BreakKind",
    "ChatTemplate",
    "PrefixBreak",
    "Shape",
    "ShapeName",
    "ShapeResult",
    "TemplateReport",
    "Verdict",
    "check_shape",
    "check_template",
    "library_reports",
    "load",
    "markdown",
    "shapes_named",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "library_reports": "table",
        "load": "source",
        "markdown": "table",
    },
)
