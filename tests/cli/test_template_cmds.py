"""``trajforge template-check``: a table or JSON per shape, exit 0 only when all are prefix-safe."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from cli_runner import RunCli

# Drops the reasoning of every reply but the last.
STRIPS_THINKING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and m.reasoning_content and loop.last %}"
    "<think>{{ m.reasoning_content }}</think>{% endif %}"
    "{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_the_embedded_models_template_passes_every_shape(run_cli: RunCli) -> None:
    code, out, err = run_cli("template-check", "embedded", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["tokens_checked"] is True
    assert {r["verdict"] for r in report["results"]} == {"prefix-safe"}
    assert len(report["results"]) == 10


def test_a_break_is_shown_with_its_tokens_and_exits_1(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "strips.jinja"
    path.write_text(STRIPS_THINKING)
    code, out, _ = run_cli("template-check", path, "--shape", "reasoning", "--shape", "multi-turn")
    assert code == 1
    assert "reasoning" in out and "breaks" in out
    assert "after reply 1 -> prompt for reply 2: text" in out
    assert "'think'" in out
    assert "1/2 shapes prefix-safe" in out and "stand-in" in out


def test_asking_only_for_safe_shapes_exits_0(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "strips.jinja"
    path.write_text(STRIPS_THINKING)
    code, out, err = run_cli("template-check", path, "--shape", "multi-turn", "--json")
    assert code == 0, err
    assert json.loads(out)["results"][0]["verdict"] == "prefix-safe"


def test_an_unknown_shape_is_one_clear_error(run_cli: RunCli) -> None:
    code, _, err = run_cli("template-check", "embedded", "--shape", "sideways")
    assert code != 0
    assert "sideways not among the shapes" in err


def test_library_and_a_template_are_not_asked_for_together(run_cli: RunCli) -> None:
    code, _, err = run_cli("template-check", "embedded", "--library")
    assert code == 1 and "not both" in err
    code, _, err = run_cli("template-check", "embedded", "--markdown", "x.md")
    assert code == 1 and "--markdown writes the --library table" in err
