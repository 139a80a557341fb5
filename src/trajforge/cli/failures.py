"""What a command whose work partly failed says and how it exits: the one place that turns the
failed episodes, agent runs or scores of a run into a few lines of reasons (counts by reason, one
example each) and the exit status ``ExitCode.PARTLY_FAILED``. ``rollout``, ``eval``, ``collect`` and
``judge`` end through ``finish``, so every failure is seen without ``trajforge show``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

import typer
from rich.markup import escape

from trajforge.cli.common import err_console
from trajforge.schema import OutcomeStatus, Trajectory, is_infra_failure
from trajforge.store import TrajectoryStore


class ExitCode(IntEnum):
    """The exit statuses of every ``trajforge`` command (the CLI help's epilogue and
    docs/cli.md list them)."""

    OK = 0
    ERROR = 1
    """Refused or failed as a whole: one line says what is wrong and where."""
    USAGE = 2
    """A wrong option or argument (click's own usage errors)."""
    PARTLY_FAILED = 3
    """Ran, but some of its work failed (episodes, agent runs, scores); all is stored and the
    first reasons are printed."""
    INTERRUPTED = 130


EXIT_CODES_HELP = (
    "Exit status: 0 done; 1 refused or failed (one line says why); 2 a wrong option or "
    "argument; 3 ran, but some episodes, agent runs or scores failed (the first reasons are "
    "printed, everything is stored); 130 interrupted."
)

SHOWN_REASONS = 3
"""How many distinct reasons are printed; the rest are counted in one line."""
REASON_CHARS = 200


@dataclass(frozen=True)
class Failure:
    """One failed piece of work: why, and the trajectory (or run) that shows it."""

    reason: str
    example: str


def _one_line(text: str) -> str:
    """The first non-empty line of ``text``, cut to ``REASON_CHARS``: what groups failures.
    A traceback (or an agent's ``exit status N:`` with its stderr tail) ends with the real
    error, so its last line is kept (beside the exit status)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    if lines[0].startswith("exit status") and len(lines) > 1:
        line = f"{lines[0]} … {lines[-1]}"
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 1] + "…"


def episode_failure(trajectory: Trajectory) -> Failure | None:
    """Why the episode failed as work (it raised, or was lost to the infrastructure), or
    ``None``: an episode that ran out of turns or tokens, or failed its task, is a result."""
    outcome = trajectory.outcome
    if outcome.status is not OutcomeStatus.ERROR and not is_infra_failure(trajectory):
        return None
    why = _one_line(outcome.error or "") or outcome.reason or "no reason recorded"
    kinds = [outcome.status.value] if outcome.status is not OutcomeStatus.OK else []
    if is_infra_failure(trajectory):
        kinds.append("infra")  # lost to the infrastructure: RL leaves it out
    return Failure(f"{', '.join(kinds)}: {why}", trajectory.id)


def score_failure(trajectory: Trajectory) -> Failure | None:
    """The first score a scorer failed to give the trajectory (``Score.error``), or ``None``."""
    return next(
        (
            Failure(f"scorer {score.name}: {_one_line(score.error)}", trajectory.id)
            for score in trajectory.scores
            if score.error is not None
        ),
        None,
    )


def scored_failures(trajectories: Iterable[Trajectory], *, episodes: bool = True) -> list[Failure]:
    """One failure per trajectory whose episode failed (with ``episodes``) or that a scorer
    could not score, so that at most all of them failed."""
    failures = []
    for traj in trajectories:
        failure = (episode_failure(traj) if episodes else None) or score_failure(traj)
        if failure is not None:
            failures.append(failure)
    return failures


def episode_failures(
    trajectories: Iterable[Trajectory], unit: Callable[[Trajectory], str] | None = None
) -> list[Failure]:
    """The failed episodes; with ``unit``, one per unit (an agent run's session, whose every
    trajectory carries its failure)."""
    failures: dict[str, Failure] = {}
    for traj in trajectories:
        failure = episode_failure(traj)
        if failure is not None:
            failures.setdefault(unit(traj) if unit else traj.id, failure)
    return list(failures.values())


def work_unit(trajectory: Trajectory) -> str:
    """What failed as one: an agent run (its gateway session, whose every trajectory carries
    its failure), else the episode."""
    return str(trajectory.metadata.get("gateway", {}).get("session", trajectory.id))


def stored_failures(db: TrajectoryStore, run_id: str) -> list[Failure]:
    """The failed episodes (agent runs) of a stored run, reading only the bodies of those that
    failed."""
    errored = db.query(run=run_id, status=OutcomeStatus.ERROR.value)
    seen = {traj.id for traj in errored}
    lost = [db.get(row["id"]) for row in db.infra_failures(run=run_id) if row["id"] not in seen]
    return episode_failures([*errored, *lost], work_unit)


def failure_lines(failures: Sequence[Failure], total: int, noun: str) -> list[str]:
    """``2 of 16 episodes failed:``, then the commonest reasons with a count and an example
    (a trajectory id ``trajforge show`` takes) each."""
    by_reason: dict[str, list[Failure]] = {}
    for failure in failures:
        by_reason.setdefault(failure.reason, []).append(failure)
    ranked = sorted(by_reason.values(), key=lambda group: -len(group))
    lines = [f"{len(failures)} of {total} {noun} failed:"]
    for group in ranked[:SHOWN_REASONS]:
        lines.append(f"  {len(group)} x {group[0].reason} (e.g. {group[0].example[:12]})")
    if len(ranked) > SHOWN_REASONS:
        rest = sum(len(group) for group in ranked[SHOWN_REASONS:])
        lines.append(f"  {rest} more, for {len(ranked) - SHOWN_REASONS} other reasons")
    return lines


def finish(failures: Sequence[Failure], total: int, noun: str) -> None:
    """End a command: with no failures, normally; else print why (on stderr, so ``--json``
    output stays whole) and exit with ``ExitCode.PARTLY_FAILED``."""
    if not failures:
        return
    for line in failure_lines(failures, total, noun):
        err_console.print(f"[red]{escape(line)}[/red]", soft_wrap=True)
    raise typer.Exit(ExitCode.PARTLY_FAILED)
