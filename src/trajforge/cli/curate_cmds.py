"""``trajforge curate repair``: revision trajectories from failed episodes (their prefix up to
the first error, a note naming it, a successful episode's ending), stored as a new run."""

from __future__ import annotations

from typing import Annotated

import typer

from trajforge.cli.common import JsonOption, StoreOption, console, print_json
from trajforge.cli.store_options import open_store
from trajforge.cli.triage_cmds import run_filter
from trajforge.curate import repair_run
from trajforge.errors import ConfigError
from trajforge.policy import ChatRenderer, tokenizer_for

curate_app = typer.Typer(
    name="curate", help="Curated training data from stored trajectories.", no_args_is_help=True
)


@curate_app.command("repair")
def repair_cmd(
    run: Annotated[
        str, typer.Option("--run", help="The run whose failed trajectories are repaired.")
    ],
    out_run: Annotated[
        str, typer.Option("--out-run", help="The run the repair trajectories are stored as.")
    ],
    good_run: Annotated[
        str | None,
        typer.Option(
            "--good-run", help="Take successful endings from this run only (default: any run)."
        ),
    ] = None,
    model: Annotated[
        str,
        typer.Option(
            "--model", metavar="SPEC", help="The policy whose tokenizer rendered the episodes."
        ),
    ] = "embedded",
    as_json: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """Repair data (Agent-R): each failed trajectory of --run cut after its first error (as
    `trajforge triage` finds it), a short turn naming the mistake, then a successful episode of
    the same task from where the two parted; token exact, the loss on the recovery only."""
    tokenizer = tokenizer_for(model)
    if tokenizer is None:
        raise ConfigError(f"--model: {model!r} has no local tokenizer to encode the note with")
    renderer = ChatRenderer(tokenizer)
    with open_store(store, create=False) as st:
        where = run_filter(st, run)
        good_where = None if good_run is None else run_filter(st, good_run).run
        if st.count(run=out_run):
            raise ConfigError(f"--out-run: run {out_run!r} already holds trajectories")
        made = repair_run(st, where, good_where, out_run, renderer)
    built, skipped = made.built, made.skipped
    if as_json:
        print_json({"run": out_run, "built": len(built), "skipped": dict(skipped)})
        return
    console.print(f"{len(built)} repair trajectories stored as run {out_run}")
    for why, n in skipped.most_common():
        console.print(f"[dim]skipped {n}: {why}[/dim]")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.add_typer(curate_app)
