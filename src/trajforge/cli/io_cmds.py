"""Trajectories into and out of the store: ``import`` and ``export`` in every record format."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from trajforge.cli.common import StoreOption, console, err_console
from trajforge.cli.store_options import (
    Limit,
    StoreFilterOf,
    check_limit,
    filter_options,
    open_store,
)
from trajforge.curate import preference_pairs, why_no_pairs
from trajforge.errors import ConfigError, DataError
from trajforge.formats import (
    FORMATS,
    RecordFormat,
    detect_format,
    likely_format,
    load_records,
    paused_gc,
    readable,
    writable,
    write_pair_records,
    write_records,
)
from trajforge.policy import ChatRenderer, render_text_only, tokenizer_for
from trajforge.schema import Trajectory


def _format_help(verb: str, can: Callable[[RecordFormat], bool]) -> str:
    names = [n for n in FORMATS.names() if can(FORMATS.get(n))]
    return f"Format {verb}: " + "; ".join(f"{n} ({FORMATS.get(n).summary})" for n in names)


ImportFormatOption = Annotated[
    str | None,
    typer.Option(
        "--format",
        "-f",
        help=_format_help("to read (default: detected from the file)", readable),
        show_default=False,
    ),
]
ExportFormatOption = Annotated[
    str, typer.Option("--format", "-f", help=_format_help("to write", writable))
]


def import_(
    file: Annotated[Path, typer.Argument(help="A JSONL file of trajectories, one per line.")],
    fmt: ImportFormatOption = None,
    render_with: Annotated[
        str | None,
        typer.Option(
            "--render-with",
            help="Give text-only trajectories token ids from this model's tokenizer (embedded, "
            "tiny or a model folder), marked as rendered, not sampled, so that they can be "
            "trained on; trajectories with ids are kept as they are.",
        ),
    ] = None,
    run: Annotated[
        str | None, typer.Option("--run", help="Set this run id on every imported trajectory.")
    ] = None,
    skip_existing: Annotated[
        bool,
        typer.Option(
            "--skip-existing", help="Skip trajectories already stored instead of failing."
        ),
    ] = False,
    store: StoreOption = None,
) -> None:
    """Import a JSONL file into the store: all of it, or nothing if any record is bad. Without
    --format, the format is told from the file (the summary line says which)."""
    record_format = _import_format(file, fmt)
    with paused_gc():
        with console.status(f"reading {file}"):
            trajs = _load(file, record_format, detected=fmt is None)
        if run is not None:
            trajs = [t.model_copy(update={"run_id": run}) for t in trajs]
        if render_with is not None:
            trajs = _rendered(trajs, render_with)
        with (
            open_store(store, create=True) as st,
            console.status(f"storing {len(trajs)} trajectories"),
        ):
            added = st.add_many(trajs, skip_existing=skip_existing)
    skipped = len(trajs) - added
    note = f" ({skipped} already stored, skipped)" if skipped else ""
    how = f"{record_format.name}, detected" if fmt is None else record_format.name
    console.print(
        f"imported {added} trajectories ({how}) from {file} into {st.path}{note}", soft_wrap=True
    )


def _import_format(file: Path, fmt: str | None) -> RecordFormat:
    """The format ``--format`` names (one import reads), else the one the file is in."""
    if fmt is None:
        return detect_format(file)
    try:
        chosen = FORMATS.get(fmt)
    except ConfigError as exc:
        raise ConfigError(f"--format: {exc}{_looks_like(file)}") from None
    if not readable(chosen):
        names = ", ".join(n for n in FORMATS.names() if readable(FORMATS.get(n)))
        raise ConfigError(f"--format {fmt}: written, not read (import reads {names})")
    return chosen


def _looks_like(file: Path, other_than: str | None = None) -> str:
    """`` (the file looks like openai: --format openai)``, or nothing when it looks like none."""
    likely = likely_format(file)
    if likely is None or likely == other_than:
        return ""
    return f" (the file looks like {likely}: --format {likely})"


def _load(file: Path, fmt: RecordFormat, detected: bool) -> list[Trajectory]:
    """The file's trajectories; a bad record under a given --format says which format the
    file looks like."""
    try:
        return load_records(file, fmt)
    except DataError as exc:
        if detected:
            hint = f" (read as {fmt.name}, detected from the first record; --format chooses)"
            raise DataError(f"{exc}{hint}") from None
        raise DataError(f"{exc}{_looks_like(file, other_than=fmt.name)}") from None


def _rendered(trajs: list[Trajectory], model: str) -> list[Trajectory]:
    tokenizer = tokenizer_for(model)
    if tokenizer is None:
        raise ConfigError(f"--render-with: {model!r} has no tokenizer here")
    renderer = ChatRenderer(tokenizer)
    with console.status(f"rendering with {model}"):
        return [render_text_only(t, renderer, model) for t in trajs]


@filter_options(signal=False)
def export(
    out: Annotated[
        Path, typer.Option("--out", help="The JSONL file to write (replaced atomically).")
    ],
    where: StoreFilterOf,
    limit: Limit = None,
    fmt: ExportFormatOption = "trajforge",
    store: StoreOption = None,
) -> None:
    """Export matching trajectories to a JSONL or .parquet file (replaced atomically); a pair
    format writes each group's best and worst trajectory as one preference pair."""
    check_limit(limit)
    record_format = FORMATS.get(fmt)
    if not writable(record_format):
        names = ", ".join(n for n in FORMATS.names() if writable(FORMATS.get(n)))
        raise ConfigError(f"--format {fmt}: read, not written (export writes {names})")
    why_none = "no trajectory matches the filters"
    with open_store(store) as st:
        filters = where(st)
        with console.status(f"exporting to {out}"):
            found = st.iter_query(filters, limit=limit)
            if record_format.write_pair is not None:
                found = list(found)
                pairs = [(p.chosen, p.rejected) for p in preference_pairs(found)]
                n = write_pair_records(out, pairs, record_format)
                why_none = why_no_pairs(found)
            else:
                n = write_records(out, found, record_format)
    what = "preference pairs" if record_format.write_pair is not None else "trajectories"
    console.print(f"exported {n} {what} to {out}", soft_wrap=True)
    if n == 0:
        err_console.print(f"[yellow]none exported: {escape(why_none)}[/yellow]", soft_wrap=True)
