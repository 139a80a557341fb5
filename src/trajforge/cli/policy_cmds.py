"""Policy commands: ``trajforge check`` (token exactness of stored trajectories)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import Progress
from rich.table import Table

from trajforge.cli.common import JsonOption, StoreOption, console, print_json, resolve_store_path
from trajforge.errors import ConfigError, StoreError
from trajforge.policy import (
    RENDERED_WITH,
    ChatRenderer,
    ToolProtocol,
    chat_renderer_for,
    check_trajectories,
)
from trajforge.store import TrajectoryStore

if TYPE_CHECKING:
    from trajforge.policy import CheckReport
    from trajforge.schema import Trajectory

_SHOWN = 50
_IMAGES_WHY = (
    "their renderer is text only, so the image placeholder tokens in their ids cannot be "
    "rendered again (a vision-language model's tokenizer checks them)"
)


def check(
    run: Annotated[str | None, typer.Option("--run", help="Only this run id.")] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            help="Check with this tokenizer (a policy name or a local model folder) instead of "
            "each trajectory's own model's.",
        ),
    ] = None,
    protocol: Annotated[
        str, typer.Option("--protocol", help="Tool protocol the trajectories were rendered with.")
    ] = "auto",
    as_json: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """Verify token exactness: stored ids replay to the rendered conversation, the loss mask
    covers exactly the sampled tokens. Exits 1 if any trajectory differs or none could be checked."""
    path = resolve_store_path(store)
    if not path.exists():
        raise StoreError(f"no store at {path} (collect trajectories first, or pass --store)")
    try:
        tool_protocol = ToolProtocol(protocol)
    except ValueError:
        known = ", ".join(p.value for p in ToolProtocol)
        raise ConfigError(f"--protocol: {protocol!r} is not one of {known}") from None
    renderers: dict[str | None, ChatRenderer | None] = {}

    def renderer_for(traj: Trajectory) -> ChatRenderer | None:
        key = tokenizer or traj.metadata.get(RENDERED_WITH) or traj.model
        if key not in renderers:
            renderers[key] = chat_renderer_for(key, tool_protocol)
        return renderers[key]

    with TrajectoryStore(Path(path), create=False) as st:
        total = st.count(run=run)
        with Progress(console=console, transient=True, disable=as_json) as progress:
            bar = progress.add_task("checking", total=total)
            report = check_trajectories(
                st.iter_query(run=run),
                renderer_for,
                on_checked=lambda _t: progress.advance(bar),
            )
    if as_json:
        print_json(report.model_dump(mode="json"))
    else:
        _print_report(report)
    if report.checked == 0:
        raise StoreError(f"check: {_why_none_checked(report, total, run)}")
    if not report.ok:
        # SystemExit, not typer.Exit: the entry point runs click in non-standalone mode,
        # where an Exit's code is returned and lost rather than raised.
        raise SystemExit(1)


def _why_none_checked(report: CheckReport, total: int, run: str | None) -> str:
    """Why no trajectory could be checked: "all token-exact" would claim what was not seen."""
    if total == 0:
        return "no trajectories to check" + (f" in run {run!r}" if run else " in the store")
    reasons = []
    if report.skipped_text_only:
        reasons.append(
            f"{report.skipped_text_only} carry no token ids (text only: imported, or recorded "
            "from a server that reports none; import --render-with MODEL gives them ids)"
        )
    if report.skipped_no_tokenizer:
        reasons.append(
            f"{report.skipped_no_tokenizer} have no tokenizer here for their model "
            "(--tokenizer names one)"
        )
    if report.skipped_images:
        reasons.append(f"{report.skipped_images} hold images: {_IMAGES_WHY}")
    return f"none of the {total} trajectories could be checked: {'; '.join(reasons)}"


def _print_report(report: CheckReport) -> None:
    if report.mismatches:
        table = Table("trajectory", "msg", "role", "kind", "pos", "expected", "stored", "detail")
        for m in report.mismatches[:_SHOWN]:
            table.add_row(
                m.trajectory_id[:12],
                _text(m.message_index),
                m.role or "",
                m.kind.value,
                _text(m.position),
                repr(m.expected),
                repr(m.actual),
                m.detail,
            )
        console.print(table)
        if len(report.mismatches) > _SHOWN:
            console.print(f"... and {len(report.mismatches) - _SHOWN} more (use --json for all)")
    skipped = (
        f", {report.skipped} skipped ({report.skipped_text_only} without token ids, "
        f"{report.skipped_no_tokenizer} without a tokenizer here, "
        f"{report.skipped_images} with images)"
    )
    verdict = (
        "[yellow]none could be checked[/yellow]"
        if report.checked == 0
        else "[green]all token-exact[/green]"
        if report.ok
        else f"[red]{len(report.mismatches)} mismatch(es) in {report.bad_trajectories} "
        "trajectory(ies)[/red]"
    )
    console.print(
        f"checked {report.checked} trajectories{skipped if report.skipped else ''}: {verdict}"
    )
    if report.skipped_images:
        console.print(f"{report.skipped_images} trajectories with images skipped: {_IMAGES_WHY}")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("check")(check)
