"""Real templates of several model families, as llama.cpp ships them: what the check finds.

They are fetched by ``make setup`` into the user cache; where they are missing, these tests
skip and say how to fetch them."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from template_doubles import needs_library
from trajforge.chat_templates import SHAPES, ShapeName, ShapeResult, Verdict, check_shape
from trajforge.chat_templates.library import (
    LIBRARY,
    extract,
    is_fetched,
    library_template,
)
from trajforge.chat_templates.table import Handling, handling, library_reports, markdown
from trajforge.errors import ConfigError
from trajforge.policy.models.smollm2 import load_tokenizer

_BY_NAME = {entry.name: entry for entry in LIBRARY}


def _check(name: str, shape: ShapeName) -> ShapeResult:
    template = library_template(_BY_NAME[name])
    return check_shape(template, load_tokenizer(), SHAPES[shape], own_tokenizer=False)


def test_extract_takes_only_the_templates_folders_jinja_files(tmp_path: Path) -> None:
    sdist = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for name, text in (
            ("pkg-1.0/vendor/llama.cpp/models/templates/A-b.jinja", "{{ messages }}"),
            ("pkg-1.0/vendor/llama.cpp/models/templates/README.md", "no"),
            ("pkg-1.0/vendor/llama.cpp/other/C.jinja", "no"),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    folder = tmp_path / "lib"
    assert extract(sdist, folder) == 1
    assert sorted(p.name for p in folder.iterdir()) == [".complete", "A-b.jinja"]
    assert is_fetched(folder)
    with pytest.raises(ConfigError, match=r"holds no llama\.cpp chat templates"):
        extract(_empty(tmp_path), tmp_path / "none")


def _empty(tmp_path: Path) -> Path:
    path = tmp_path / "empty.tar.gz"
    with tarfile.open(path, "w:gz"):
        pass
    return path


def test_a_missing_template_says_how_to_fetch_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"python -m trajforge\.chat_templates\.library"):
        library_template(LIBRARY[0], tmp_path)


@needs_library
def test_every_library_template_is_there_and_renders_a_single_turn() -> None:
    for entry in LIBRARY:
        assert _check(entry.name, ShapeName.SINGLE_TURN).verdict is not Verdict.UNSUPPORTED


@needs_library
@pytest.mark.parametrize("shape", list(ShapeName))
def test_qwen25_is_prefix_safe_on_every_shape(shape: ShapeName) -> None:
    assert _check("Qwen-Qwen2.5-7B-Instruct", shape).verdict is Verdict.SAFE


@needs_library
def test_qwen3_drops_a_past_replys_thinking_once_a_new_user_turn_exists() -> None:
    result = _check("Qwen-Qwen3-0.6B", ShapeName.REASONING)
    first = result.breaks[0]
    assert (first.earlier, first.later) == ("after reply 1", "prompt for reply 2")
    assert first.earlier_text.startswith("<think>\nTwo plus two")
    assert first.later_text.startswith("4<|im_end|>")
    # Within one user turn the reasoning of a tool-calling reply is kept.
    assert _check("Qwen-Qwen3-0.6B", ShapeName.REASONING_TOOLS).verdict is Verdict.SAFE


@needs_library
def test_deepseek_r1_opens_thinking_in_the_prompt_that_its_history_does_not_keep() -> None:
    result = _check("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ShapeName.REASONING)
    first = result.breaks[0]
    assert (first.earlier, first.later) == ("prompt for reply 1", "after reply 1")
    assert first.earlier_text.startswith("<think>")
    assert first.later_text.startswith("4<｜end▁of▁sentence｜>")


@needs_library
def test_mistral_writes_its_own_tool_call_syntax_and_moves_the_system_prompt() -> None:
    name = "mistralai-Mistral-Nemo-Instruct-2407"
    template = library_template(_BY_NAME[name])
    shape = SHAPES[ShapeName.TOOL_CALL]
    text = template.render(shape.messages, shape.tools, generation_prompt=False)
    assert '[TOOL_CALLS][{"name": "get_weather"' in text
    moved = _check(name, ShapeName.SYSTEM_MULTI_TURN).breaks[0]
    assert moved.earlier_text.startswith("You are a terse assistant")
    assert _check(name, ShapeName.MULTI_TURN).verdict is Verdict.SAFE


@needs_library
def test_templates_that_refuse_a_shape_say_why() -> None:
    llama = _check("meta-llama-Llama-3.1-8B-Instruct", ShapeName.PARALLEL_CALLS)
    assert llama.verdict is Verdict.UNSUPPORTED
    assert llama.error is not None and "single tool-calls" in llama.error
    gemma = _check("google-gemma-2-2b-it", ShapeName.SYSTEM_MULTI_TURN)
    assert gemma.error is not None and "System role not supported" in gemma.error


@needs_library
def test_docs_templates_md_is_what_the_command_writes_today() -> None:
    page = Path(__file__).parents[2] / "docs" / "templates.md"
    assert page.read_text() == markdown(library_reports()), (
        "docs/templates.md is out of date: run "
        "trajforge template-check --library --markdown docs/templates.md"
    )


def test_each_outcome_is_handled_as_the_renderer_does() -> None:
    safe = ShapeResult(shape=ShapeName.MULTI_TURN, verdict=Verdict.SAFE)
    assert handling(safe) is Handling.EXACT
    refused = ShapeResult(shape=ShapeName.MULTI_TURN, verdict=Verdict.UNSUPPORTED, error="x")
    assert handling(refused) is Handling.UNSUPPORTED


@needs_library
def test_a_rewritten_history_is_split_and_a_rewritten_reply_keeps_its_samples() -> None:
    qwen3 = _check("Qwen-Qwen3-0.6B", ShapeName.REASONING)
    assert handling(qwen3) is Handling.SPLITS
    r1 = _check("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ShapeName.SINGLE_TURN)
    assert handling(r1) is Handling.KEEPS_SAMPLED
