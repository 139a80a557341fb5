"""The prefix check finds where a template rewrites earlier turns, and passes those that do not."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from trajforge.chat_templates import (
    SHAPES,
    BreakKind,
    ChatTemplate,
    ShapeName,
    Verdict,
    check_shape,
    check_template,
    shapes_named,
)
from trajforge.chat_templates.prefix import compare, render_points
from trajforge.chat_templates.source import load
from trajforge.errors import ConfigError
from trajforge.policy.models.smollm2 import SMOLLM2_CHAT_TEMPLATE, gguf_path, load_tokenizer

if TYPE_CHECKING:
    from pathlib import Path

    from transformers import PreTrainedTokenizerBase as Tokenizer

CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
GEN = "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"

# Drops the reasoning of every reply but the last, as reasoning models' templates do.
STRIPS_THINKING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and m.reasoning_content and loop.last %}"
    "<think>{{ m.reasoning_content }}</think>{% endif %}"
    "{{ m.content }}<|im_end|>\n{% endfor %}" + GEN
)
# Moves the system prompt into the last user turn, as Mistral's templates do.
SYSTEM_LAST = (
    "{% set ns = namespace(last=-1) %}{% for m in messages %}"
    "{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}"
    "{% for m in messages if m.role != 'system' %}<|im_start|>{{ m.role }}\n"
    "{% if loop.index0 + 1 == ns.last and messages[0].role == 'system' %}"
    "{{ messages[0].content }} {% endif %}{{ m.content }}<|im_end|>\n{% endfor %}" + GEN
)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


def test_the_render_points_are_each_prompt_each_reply_and_the_whole() -> None:
    points = render_points(SHAPES[ShapeName.TOOL_CALL].messages)
    assert [(p.label, p.count, p.generation_prompt) for p in points] == [
        ("prompt for reply 1", 2, True),
        ("after reply 1", 3, False),
        ("prompt for reply 2", 4, True),
        ("after reply 2", 5, False),
    ]
    ends_with_user = [{"role": "user", "content": "a"}]
    assert [p.label for p in render_points(ends_with_user)] == ["whole"]


def test_smollm2s_template_is_prefix_safe_on_every_shape(tokenizer: Tokenizer) -> None:
    template = ChatTemplate("smollm2", SMOLLM2_CHAT_TEMPLATE)
    report = check_template(template, tokenizer, "embedded", shapes_named([]))
    assert [r.shape for r in report.results] == list(SHAPES)
    assert report.ok, [r for r in report.results if r.verdict is not Verdict.SAFE]
    assert all(r.renderings >= 2 for r in report.results)


def test_a_template_that_strips_past_reasoning_breaks_where_a_later_turn_exists(
    tokenizer: Tokenizer,
) -> None:
    template = ChatTemplate("strips", STRIPS_THINKING)
    result = check_shape(template, tokenizer, SHAPES[ShapeName.REASONING])
    assert result.verdict is Verdict.BREAKS
    first = result.breaks[0]
    assert (first.earlier, first.later, first.kind) == (
        "after reply 1",
        "prompt for reply 2",
        BreakKind.TEXT,
    )
    assert first.earlier_text.startswith("<think>Two plus two")
    assert first.later_text.startswith("4<|im_end|>")
    assert first.earlier_tokens[0] == "<" and first.later_tokens[0] == "4"
    # Without reasoning fields nothing is stripped: the same template is safe there.
    assert check_shape(template, tokenizer, SHAPES[ShapeName.MULTI_TURN]).verdict is Verdict.SAFE


def test_a_template_that_moves_the_system_prompt_breaks_at_the_first_reply(
    tokenizer: Tokenizer,
) -> None:
    template = ChatTemplate("system-last", SYSTEM_LAST)
    result = check_shape(template, tokenizer, SHAPES[ShapeName.SYSTEM_MULTI_TURN])
    assert result.verdict is Verdict.BREAKS
    # The system prompt leaves the first user turn once a second one exists.
    assert result.breaks[0].earlier == "after reply 1"
    assert result.breaks[0].later == "prompt for reply 2"
    assert result.breaks[0].earlier_text.startswith("You are a terse")


def test_a_template_that_raises_leaves_the_shape_unsupported(tokenizer: Tokenizer) -> None:
    refuses_tools = (
        "{% for m in messages %}{% if m.role == 'tool' %}"
        "{{ raise_exception('no tool role') }}{% endif %}{{ m.content }}{% endfor %}"
    )
    result = check_shape(ChatTemplate("t", refuses_tools), tokenizer, SHAPES[ShapeName.TOOL_CALL])
    assert result.verdict is Verdict.UNSUPPORTED
    assert result.error is not None and "no tool role" in result.error
    assert result.error.startswith("prompt for reply 2")


def test_a_token_only_break_counts_with_the_models_tokenizer_only(tokenizer: Tokenizer) -> None:
    # The text extends, but "wor" and "world" are different tokens.
    earlier, later = ("k", "hello wor"), ("k+1", "hello world")
    assert tokenizer.encode("hello wor") != tokenizer.encode("hello world")[:2]
    found = compare(tokenizer, earlier, later)
    assert found is not None and found.kind is BreakKind.TOKENS
    assert found.char == len("hello wor") and found.earlier_text == ""
    assert compare(tokenizer, earlier, later, own_tokenizer=False) is None


def test_shapes_are_picked_by_name_and_unknown_names_are_refused() -> None:
    assert [s.name for s in shapes_named(["reasoning", "single-turn", "reasoning"])] == [
        ShapeName.REASONING,
        ShapeName.SINGLE_TURN,
    ]
    with pytest.raises(ConfigError, match="nope"):
        shapes_named(["nope"])


def test_the_gguf_files_template_and_special_tokens_are_read_from_its_metadata() -> None:
    loaded = load(str(gguf_path()), None)
    assert loaded.template.text == load_tokenizer().chat_template
    assert (loaded.template.bos_token, loaded.template.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert not loaded.own_tokenizer and "stand-in" in loaded.tokenizer_name


def test_a_model_brings_its_own_template_and_tokenizer() -> None:
    loaded = load("embedded", None)
    assert loaded.own_tokenizer and loaded.tokenizer_name == "embedded"
    assert loaded.template.eos_token == "<|im_end|>"


def test_a_jinja_file_is_read_and_a_missing_one_is_named(tmp_path: Path) -> None:
    path = tmp_path / "chatml.jinja"
    path.write_text(CHATML + GEN)
    loaded = load(str(path), "embedded", eos_token="</s>")
    assert loaded.template.text == CHATML + GEN and loaded.own_tokenizer
    assert loaded.template.eos_token == "</s>"
    with pytest.raises(ConfigError, match=r"missing\.jinja does not exist"):
        load(str(tmp_path / "missing.jinja"), None)
    with pytest.raises(ConfigError, match="neither a template file nor a model"):
        load("no-such-model", None)
