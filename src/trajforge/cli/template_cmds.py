"""``trajforge template-check``: is a chat template prefix-safe turn by turn?"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from trajforge.cli.common import JsonOption, console, print_json
from trajforge.errors import ConfigError

if TYPE_CHECKING:
    from trajforge.chat_templates import ShapeResult, TemplateReport


def template_check(
    ref: Annotated[
        str | None,
        typer.Argument(
            metavar="MODEL|TEMPLATE_FILE",
            help="A model (embedded, tiny, a model folder) or a template file (.jinja, .gguf, "
            "tokenizer_config.json).",
        ),
    ] = None,
    shape: Annotated[
        list[str] | None,
        typer.Option("--shape", help="Check only this shape (repeatable; default: all)."),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            help="Count tokens with this model's tokenizer (a template file is otherwise "
            "counted in SmolLM2's as a stand-in, and only text breaks count).",
        ),
    ] = None,
    bos_token: Annotated[
        str, typer.Option("--bos-token", help="BOS token text for a template file.")
    ] = "",
    eos_token: Annotated[
        str, typer.Option("--eos-token", help="EOS token text for a template file.")
    ] = "",
    library: Annotated[
        bool,
        typer.Option(
            "--library",
            help="Check the embedded model's template and the library's (llama.cpp's, fetched "
            "by make setup) instead of one.",
        ),
    ] = False,
    markdown: Annotated[
        Path | None,
        typer.Option("--markdown", help="With --library: write the table page to this file."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Render conversation shapes turn by turn and whole with a chat template and show where an
    earlier rendering is not a prefix of the next. Exits 1 unless every shape asked for is
    prefix-safe (--markdown writes the page whatever it finds)."""
    # lazy: the template check loads transformers' tokenizer and Jinja code; the CLI starts light
    from trajforge.chat_templates import check_template, library_reports, load, shapes_named

    # lazy: as the import above
    from trajforge.chat_templates import markdown as table_markdown

    if library and ref is not None:
        raise ConfigError("template-check: give MODEL|TEMPLATE_FILE or --library, not both")
    if not library and ref is None:
        raise ConfigError("template-check: give MODEL|TEMPLATE_FILE (or --library)")
    if markdown is not None and not library:
        raise ConfigError("template-check: --markdown writes the --library table")
    if ref is None:
        reports = library_reports()
    else:
        loaded = load(ref, tokenizer, bos_token, eos_token)
        reports = [
            check_template(
                loaded.template,
                loaded.tokenizer,
                loaded.tokenizer_name,
                shapes_named(shape or []),
                own_tokenizer=loaded.own_tokenizer,
            )
        ]
    if markdown is not None:
        markdown.write_text(table_markdown(reports))
        console.print(f"wrote {markdown}")
    elif as_json:
        print_json(
            [r.model_dump(mode="json") for r in reports]
            if library
            else reports[0].model_dump(mode="json")
        )
    else:
        for report in reports:
            print_report(report)
    if not all(r.ok for r in reports) and markdown is None:
        # SystemExit, not typer.Exit: click in non-standalone mode returns an Exit's code.
        raise SystemExit(1)


def _where(result: ShapeResult) -> tuple[str, str]:
    """The first break of a shape (or why it is unsupported) and its first differing tokens."""
    if result.error is not None:
        return result.error, ""
    if not result.breaks:
        return "", ""
    first = result.breaks[0]
    more = f" (+{len(result.breaks) - 1} more)" if len(result.breaks) > 1 else ""
    where = f"{first.earlier} -> {first.later}: {first.kind.value} at token {first.token}{more}"
    return where, f"{first.earlier_tokens!r} became {first.later_tokens!r}"


def print_report(report: TemplateReport) -> None:
    table = Table("shape", "verdict", "first break", "first differing tokens")
    for result in report.results:
        colour = {"prefix-safe": "green", "breaks": "red"}.get(result.verdict.value, "yellow")
        where, tokens = _where(result)
        table.add_row(
            result.shape.value,
            f"[{colour}]{result.verdict.value}[/{colour}]",
            escape(where),
            escape(tokens),
        )
    console.print(table)
    counted = "text and tokens" if report.tokens_checked else "text only"
    safe = sum(1 for r in report.results if r.verdict.value == "prefix-safe")
    console.print(
        escape(
            f"{report.template}: {safe}/{len(report.results)} shapes prefix-safe "
            f"(tokenizer {report.tokenizer}; {counted})"
        )
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("template-check")(template_check)
