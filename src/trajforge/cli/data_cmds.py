"""Data commands: schema, import, ls, show, stats, export (import and export in ``io_cmds``)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from trajforge.cli import io_cmds
from trajforge.cli.common import (
    JsonOption,
    StoreOption,
    add_reward_figures,
    console,
    listing_reward_line,
    print_json,
)
from trajforge.cli.render import fitted_table, render_trajectory
from trajforge.cli.store_options import (
    StoreFilterOf,
    check_limit,
    filter_options,
    open_store,
)
from trajforge.judge import format_reward, format_scored, format_success
from trajforge.schema import json_schema_text

if TYPE_CHECKING:
    from rich.console import JustifyMethod

SHORT_ID_LENGTH = 8

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


def schema() -> None:
    """Print the JSON Schema of a trajectory (with its version)."""
    typer.echo(json_schema_text())


@filter_options()
def ls(
    where: StoreFilterOf,
    limit: Annotated[int, typer.Option("--limit", help="At most this many rows.")] = 50,
    as_json: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """List stored trajectories, newest first, with short ids that any command accepts."""
    check_limit(limit)
    with open_store(store) as st:
        filters = where(st)
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


@filter_options()
def stats(
    where: StoreFilterOf,
    as_json: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """Counts, success, reward mean/std, status breakdown and failures (the policy's own, and
    those lost to the infrastructure), overall and per run and env."""
    with open_store(store) as st:
        filters = where(st)
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
    app.command("import")(io_cmds.import_)
    app.command("ls")(ls)
    app.command("show")(show)
    app.command("stats")(stats)
    app.command("export")(io_cmds.export)
