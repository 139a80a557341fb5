"""Data commands: schema, import, ls, show, stats, export."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from trajforge.cli.common import (
    JsonOption,
    StoreOption,
    add_reward_figures,
    console,
    err_console,
    listing_reward_line,
    print_json,
    resolve_store_path,
)
from trajforge.cli.render import fitted_table, render_trajectory
from trajforge.curate import preference_pairs
from trajforge.curate.groups import why_no_pairs
from trajforge.errors import ConfigError, DataError, StoreError
from trajforge.formats.detect import detect_format, likely_format, readable, writable
from trajforge.formats.records import (
    FORMATS,
    RecordFormat,
    load_records,
    paused_gc,
    write_pair_records,
    write_records,
)
from trajforge.judge.stats import format_reward, format_scored, format_success
from trajforge.policy.naming import tokenizer_for
from trajforge.policy.renderer import ChatRenderer
from trajforge.policy.text_render import render_text_only
from trajforge.schema import OutcomeStatus, Trajectory, json_schema_text
from trajforge.store import TrajectoryFilter, TrajectoryStore
from trajforge.store.filters import validate_named
from trajforge.triage import Signal, signal_score_name

if TYPE_CHECKING:
    from rich.console import JustifyMethod

STATUSES = tuple(status.value for status in OutcomeStatus)
SHORT_ID_LENGTH = 8

RunFilter = Annotated[
    str | None, typer.Option("--run", help="Only this run id (or a unique prefix of it).")
]
EnvFilter = Annotated[str | None, typer.Option("--env", help="Only this environment.")]
StatusFilter = Annotated[
    str | None,
    typer.Option("--status", help=f"Only this outcome status ({', '.join(STATUSES)})."),
]
SignalFilter = Annotated[
    Signal | None,
    typer.Option("--signal", help="Only trajectories `trajforge triage` found this signal in."),
]
MinReward = Annotated[float | None, typer.Option("--min-reward", help="Only rewards >= this.")]
MaxReward = Annotated[float | None, typer.Option("--max-reward", help="Only rewards <= this.")]
Limit = Annotated[int | None, typer.Option("--limit", help="At most this many trajectories.")]

# ls columns in display order, and the order they are left out in when the terminal is narrow.
_LS_COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (
    ("id", "left"),
    ("run", "left"),
    ("env", "left"),
    ("task", "left"),
    ("sample", "right"),
    ("status", "left"),
    ("reward", "right"),
    ("turns", "right"),
    ("tokens", "right"),
    ("created", "left"),
)
_LS_DROP_ORDER = ("sample", "tokens", "created", "turns", "env", "run", "task")


def _option(field: str) -> str:
    return "--" + field.replace("_", "-")


def _filters(
    st: TrajectoryStore,
    run: str | None,
    env: str | None,
    status: str | None,
    min_reward: float | None,
    max_reward: float | None,
    signal: Signal | None = None,
) -> TrajectoryFilter:
    """The store filter the options ask for, with ``--run`` resolved from a unique prefix.

    A value that cannot match (a misspelt status or env, an empty reward range) is refused
    rather than answered with an empty listing that looks like missing data.
    """
    fields = {"status": status, "min_reward": min_reward, "max_reward": max_reward}
    if signal is not None:
        fields["score"] = signal_score_name(signal)
    found = validate_named(TrajectoryFilter, fields, _option, ConfigError)
    if env is not None:
        known = st.envs()
        if known and env not in known:
            raise ConfigError(
                f"--env: {env!r} is not one of {', '.join(known)} (the envs in {st.path})"
            )
    if run is not None:
        try:
            run = st.resolve_run_id(run)
        except StoreError as exc:
            raise StoreError(f"--run: {exc}") from None
    return found.model_copy(update={"run": run, "env": env})


def _check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit: must be at least 1, got {limit}")


def open_store(store: Path | None, *, create: bool = False) -> Any:
    """The store at ``--store`` (or the default); a read-only command never creates one."""
    path = resolve_store_path(store)
    if not create and not path.exists():
        raise StoreError(
            f"no store at {path} (import or collect trajectories first, or pass --store)"
        )
    return TrajectoryStore(path, create=create)


def schema() -> None:
    """Print the JSON Schema of a trajectory (with its version)."""
    typer.echo(json_schema_text())


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


def ls(
    run: RunFilter = None,
    env: EnvFilter = None,
    status: StatusFilter = None,
    min_reward: MinReward = None,
    max_reward: MaxReward = None,
    signal: SignalFilter = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many rows.")] = 50,
    as_json: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """List stored trajectories, newest first, with short ids that any command accepts."""
    _check_limit(limit)
    with open_store(store) as st:
        filters = _filters(st, run, env, status, min_reward, max_reward, signal)
        rows = st.summaries(filters, limit=limit)
        total = st.count(filters)
        short_ids = st.short_ids([r["id"] for r in rows], minimum=SHORT_ID_LENGTH)
    if as_json:
        print_json(rows)
        return

    cells = [
        [
            escape(short_id),
            escape(r["run_id"] or ""),
            escape(r["env"] or ""),
            escape(r["task_id"]),
            "" if r["sample_index"] is None else str(r["sample_index"]),
            _status_text(r["status"]),
            _num(r["reward"]),
            str(r["turns"]),
            str(r["tokens"]),
            time.strftime("%m-%d %H:%M", time.localtime(r["created_at"])),
        ]
        for r, short_id in zip(rows, short_ids, strict=True)
    ]
    title = f"{len(rows)} of {total} trajectories"
    table, hidden = fitted_table(console, title, _LS_COLUMNS, cells, _LS_DROP_ORDER)
    console.print(table)
    if rows:
        console.print(listing_reward_line(rows, total))
    if hidden and rows:
        _print_left_out(hidden)


def _print_left_out(hidden: list[str]) -> None:
    console.print(
        f"[dim]left out at {console.width} columns: {', '.join(hidden)} (--json has all)[/dim]"
    )


def show(
    traj_id: Annotated[
        str, typer.Argument(metavar="ID", help="The trajectory id, or a unique prefix of it.")
    ],
    as_json: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """Show one trajectory turn by turn: messages, tool calls, tool results, reward and scores."""
    with open_store(store) as st:
        traj = st.get(st.resolve_trajectory_id(traj_id))
    if as_json:
        print_json(traj.model_dump(mode="json"))
        return

    render_trajectory(traj, console)


def stats(
    run: RunFilter = None,
    env: EnvFilter = None,
    status: StatusFilter = None,
    min_reward: MinReward = None,
    max_reward: MaxReward = None,
    signal: SignalFilter = None,
    as_json: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """Counts, success, reward mean/std, status breakdown and failures (the policy's own, and
    those lost to the infrastructure), overall and per run and env."""
    with open_store(store) as st:
        filters = _filters(st, run, env, status, min_reward, max_reward, signal)
        infra_ids = {r["id"] for r in st.infra_failures(filters)}
        result = add_reward_figures(st.stats(filters), st.summaries(filters), infra_ids)
    if as_json:
        print_json(result)
        return
    for title, groups in (("run", result["by_run"]), ("env", result["by_env"])):
        rows = [
            [
                key or "-",
                str(agg["count"]),
                format_success(agg["success"], agg["scored"], agg["count"]),
                format_reward(agg["reward_mean"]),
                format_scored(agg["scored"], agg["count"]),
                _num(agg["reward_std"]),
                _num(agg["turns_mean"], 1),
                _num(agg["tokens_mean"], 0),
                _statuses(agg["status"]),
                str(agg["policy_failures"]),
                str(agg["infra_failures"]),
            ]
            for key, agg in [*groups.items(), ("all", result)]
        ]
        table, hidden = fitted_table(
            console,
            f"by {title}",
            [
                (title, "left"),
                ("episodes", "right"),
                ("success", "right"),
                ("reward", "right"),
                ("scored", "right"),
                ("std", "right"),
                ("turns", "right"),
                ("tokens", "right"),
                ("status", "left"),
                ("policy fail", "right"),
                ("infra fail", "right"),
            ],
            rows,
            drop_order=["std", "tokens", "turns", "status"],
        )
        console.print(table)
        if hidden:
            _print_left_out(hidden)


def _statuses(counts: dict[str, int]) -> str:
    """``ok 8 · truncated 2``: how many episodes ended in each status, most first."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return " · ".join(f"{name} {n}" for name, n in ranked if n)


def export(
    out: Annotated[
        Path, typer.Option("--out", help="The JSONL file to write (replaced atomically).")
    ],
    run: RunFilter = None,
    env: EnvFilter = None,
    status: StatusFilter = None,
    min_reward: MinReward = None,
    max_reward: MaxReward = None,
    limit: Limit = None,
    fmt: ExportFormatOption = "trajforge",
    store: StoreOption = None,
) -> None:
    """Export matching trajectories to a JSONL or .parquet file (replaced atomically); a pair
    format writes each group's best and worst trajectory as one preference pair."""
    _check_limit(limit)
    record_format = FORMATS.get(fmt)
    if not writable(record_format):
        names = ", ".join(n for n in FORMATS.names() if writable(FORMATS.get(n)))
        raise ConfigError(f"--format {fmt}: read, not written (export writes {names})")
    why_none = "no trajectory matches the filters"
    with open_store(store) as st:
        filters = _filters(st, run, env, status, min_reward, max_reward)
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


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _status_text(status: str) -> str:
    color = {"ok": "green", "truncated": "yellow", "error": "red", "timeout": "magenta"}.get(
        status, "white"
    )
    return f"[{color}]{status}[/{color}]"


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("schema")(schema)
    app.command("import")(import_)
    app.command("ls")(ls)
    app.command("show")(show)
    app.command("stats")(stats)
    app.command("export")(export)
