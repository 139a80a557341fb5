"""Shared CLI pieces: the console, store-path resolution, JSON output, and the reward figures of
store summary rows (``ls``, ``stats``, ``rollout``)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence, Set
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trajforge.errors import StoreError
from trajforge.judge import (
    FailureSplit,
    RewardSummary,
    split_failures,
    summarize_rewards,
    summarize_rewards_by,
)
from trajforge.train import TrainingInterrupted, launch_local, launched_rank

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

DEFAULT_STORE = Path("runs") / "trajforge.db"

StoreOption = Annotated[
    Path | None,
    typer.Option(
        "--store",
        help="SQLite store path (default: $TRAJFORGE_STORE, else ./runs/trajforge.db).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
EnvArgument = Annotated[
    str,
    typer.Argument(
        help="Environment: a built-in name, module:factory, file.py:factory or env.yaml."
    ),
]
"""The env a serving command serves (``mcp serve``, ``openenv serve``)."""


NumProcessesOption = Annotated[
    int,
    typer.Option(
        "--num-processes",
        min=1,
        help="Train as N processes on this machine (gloo on CPUs, nccl on GPUs; "
        "distributed.strategy picks ddp or fsdp). Several machines: accelerate launch "
        "(docs/scaling.md).",
    ),
]

_LAUNCH_GRACE_S = 60.0
"""How long the other processes may take to report their own error after one failed."""


def launched_as_processes(num_processes: int) -> bool:
    """With N > 1 in the process the user started: run this same command as N processes over
    127.0.0.1 and return true once they all finished (each of them sees ``RANK`` and runs it)."""
    if num_processes == 1 or "RANK" in os.environ:
        return False
    argv = sys.argv[1:]
    for k, arg in enumerate(argv):
        if arg == "--num-processes":
            argv = argv[:k] + argv[k + 2 :]
            break
        if arg.startswith("--num-processes="):
            argv = argv[:k] + argv[k + 1 :]
            break
    launch_local([sys.executable, "-m", "trajforge", *argv], num_processes, grace_s=_LAUNCH_GRACE_S)
    return True


def stop_interrupted(exc: TrainingInterrupted, hint: list[str]) -> NoReturn:
    """Say where an interrupted training run stopped and the command ``hint`` that goes on from
    there, then exit 130 as an interrupted command does."""
    exc.hint = shlex.join(hint)
    if launched_rank() == 0:  # one line per run, from the main process
        err_console.print(f"[red]interrupted:[/red] {escape(str(exc))}", soft_wrap=True)
    raise typer.Exit(130) from None


def resolve_store_path(store: Path | None) -> Path:
    if store is not None:
        return store
    env = os.environ.get("TRAJFORGE_STORE")
    return Path(env) if env else DEFAULT_STORE


def existing_store_path(store: Path | None) -> Path:
    """The store ``--store`` names (or the default one), which must exist already."""
    path = resolve_store_path(store)
    if not path.exists():
        raise StoreError(f"no store at {path} (pass --store or set TRAJFORGE_STORE)")
    return path


def print_json(data: Any) -> None:
    """JSON on stdout, bypassing Rich so that it stays machine-readable."""
    typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


SummaryRow = Mapping[str, Any]


def rewards_of(rows: Iterable[SummaryRow]) -> RewardSummary:
    """The ``RewardSummary`` of store summary rows (``TrajectoryStore.summaries``)."""
    return summarize_rewards((r["status"], r["reward"]) for r in rows)


def listing_reward_line(rows: Sequence[SummaryRow], total: int) -> str:
    """The caption under a listing: success and mean reward of the rows shown."""
    line = rewards_of(rows).line()
    return line if len(rows) >= total else f"{line} (of the {len(rows)} shown)"


def add_reward_figures(
    result: dict[str, Any], rows: Sequence[SummaryRow], infra_ids: Set[str] = frozenset()
) -> dict[str, Any]:
    """``TrajectoryStore.stats`` output with ``success``, ``scored`` and the mean reward stated
    by ``RewardSummary``, and the failures split into ``policy_failures`` and
    ``infra_failures`` (``infra_ids``: the rows lost to the infrastructure), overall and in its
    ``by_run`` and ``by_env`` groups."""
    result.update(rewards_of(rows).as_dict())
    result.update(_failures_of(rows, infra_ids).as_dict())
    for group, column in (("by_run", "run_id"), ("by_env", "env")):
        keyed = ((r[column] or "", r["status"], r["reward"]) for r in rows)
        for key, summary in summarize_rewards_by(keyed).items():
            result[group].setdefault(key, {}).update(summary.as_dict())
        members: dict[str, list[SummaryRow]] = {}
        for r in rows:
            members.setdefault(r[column] or "", []).append(r)
        for key, group_rows in members.items():
            result[group].setdefault(key, {}).update(_failures_of(group_rows, infra_ids).as_dict())
    return result


def _failures_of(rows: Iterable[SummaryRow], infra_ids: Set[str]) -> FailureSplit:
    return split_failures((r["status"], r["reward"], r["id"] in infra_ids) for r in rows)


def metric_table(title: str, rows: Sequence[tuple[str, str]]) -> Table:
    """A table of ``(metric, value)`` rows, the values right-aligned."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    return table
