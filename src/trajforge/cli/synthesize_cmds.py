"""``trajforge synthesize``: new training tasks of an env from exploration, checked by
execution, written as a task file (``--tasks-file``, or ``--env FILE.jsonl``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from trajforge.cli.common import JsonOption, StoreOption, console, print_json, resolve_store_path
from trajforge.configfile import first_problem
from trajforge.envs import REPO_ENV, write_harbor_tasks
from trajforge.errors import ConfigError
from trajforge.rollout import RolloutProgress, new_run_id
from trajforge.synthesis import RANDOM_EXPLORER, SynthesisSettings, synthesize

TASK_FILE_SUFFIX = ".jsonl"


def option_name(key: str) -> str:
    """The command-line option of setting ``key``."""
    return "--" + key.replace("_", "-")


def settings_from(options: dict[str, Any]) -> SynthesisSettings:
    """The settings the options ask for; a bad value is one ``ConfigError`` naming its option."""
    try:
        return SynthesisSettings.model_validate(options)
    except ValidationError as exc:
        field, message = first_problem(exc, "options")
        # A validator's own message reads better without pydantic's "Value error, " before it.
        message = message.removeprefix("Value error, ")
        raise ConfigError(f"{option_name(field.split('.')[0])}: {message}") from None


def check_out(out: Path) -> None:
    """Refuse an output that is not a new ``.jsonl`` file."""
    if out.suffix != TASK_FILE_SUFFIX:
        raise ConfigError(f"--out {out}: a task file ends in {TASK_FILE_SUFFIX}")
    if out.exists():
        raise ConfigError(f"--out {out}: it exists; remove it or choose another file")


def check_sources(env: str | None, bugs: Path | None, harbor: Path | None) -> str:
    """The env the tasks are for: ``--env``, or ``repo`` for ``--bugs``; a missing, clashing
    or misplaced option is one ``ConfigError``."""
    if env is None and bugs is None:
        raise ConfigError("give --env ENV, or --bugs PACKAGE_DIR for repository tasks")
    if harbor is not None:
        if bugs is None:
            raise ConfigError("--harbor: Harbor task folders are written for --bugs tasks only")
        if harbor.exists():
            raise ConfigError(f"--harbor {harbor}: it exists; remove it or choose another folder")
    return env or REPO_ENV


def synthesize_command(
    out: Annotated[
        Path, typer.Option("--out", metavar="FILE.jsonl", help="The task file to write (new).")
    ],
    env: Annotated[
        str | None, typer.Option("--env", help="The environment to synthesize tasks for.")
    ] = None,
    bugs: Annotated[
        Path | None,
        typer.Option(
            "--bugs",
            metavar="PACKAGE_DIR",
            help="Inject bugs into this Python package (source and tests): tasks of env repo.",
        ),
    ] = None,
    harbor: Annotated[
        Path | None,
        typer.Option("--harbor", metavar="DIR", help="Also write --bugs tasks as Harbor folders."),
    ] = None,
    bug_policy: Annotated[
        str | None,
        typer.Option("--bug-policy", help="With --bugs: a policy writes the bugs, not the rules."),
    ] = None,
    episodes: Annotated[
        int,
        typer.Option(
            "--episodes",
            help="Exploration episodes (one per training task); blueprints for retail, sql; "
            "changes tried for --bugs.",
        ),
    ] = 50,
    explorer: Annotated[
        str,
        typer.Option(
            "--explorer", help="random (the env's scripted explorer) or a policy at temperature 1."
        ),
    ] = RANDOM_EXPLORER,
    min_steps: Annotated[
        int, typer.Option("--min-steps", help="A state fewer steps away gives no task.")
    ] = 3,
    difficulty_policy: Annotated[
        str | None,
        typer.Option("--difficulty-policy", help="Keep tasks whose pass rate by it is in --band."),
    ] = None,
    samples: Annotated[
        int, typer.Option("--samples", help="Episodes per task of --difficulty-policy.")
    ] = 4,
    band: Annotated[
        tuple[float, float],
        typer.Option("--band", metavar="LOW HIGH", help="Pass rates a kept task may have."),
    ] = (0.0, 1.0),
    match_difficulty: Annotated[
        str | None,
        typer.Option(
            "--match-difficulty",
            metavar="train|FILE.jsonl",
            help="Keep tasks so the expert's solution lengths mix as the env's training split's "
            "(train) or a task file's do.",
        ),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option(
            "--user", help="Simulated user of blueprint conversations (retail): a policy."
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of exploration and sampling.")] = 0,
    run: Annotated[
        str | None, typer.Option("--run", help="Run id of the stored exploration episodes.")
    ] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Explore ENV, turn each reached state into a task its verifier checks, keep those whose
    checker accepts the exploration's own solution and rejects a wrong answer (and, with
    --difficulty-policy, whose pass rate is in --band; with --match-difficulty, as many as
    mix by the expert's solution length as the reference does), and write them to --out. The
    exploration episodes are stored (each task names its source trajectory).

    For retail and sql: propose --episodes blueprints (a task and its ground-truth actions),
    keep those whose actions the env accepts and whose conversation with the simulated user
    passes the verifier.

    With --bugs PACKAGE_DIR (env repo): change one function of the package at a time by a rule
    (an operator flipped, a condition dropped, an off-by-one), keep the changes some of its
    tests catch (all passing before), and with --harbor also write them as Harbor folders."""
    env = check_sources(env, bugs, harbor)
    settings = settings_from(
        {"episodes": episodes, "seed": seed, "explorer": explorer, "min_steps": min_steps,
         "difficulty_policy": difficulty_policy, "samples": samples, "band": band, "user": user,
         "match_difficulty": match_difficulty,
         "bugs": None if bugs is None else str(bugs), "bug_policy": bug_policy}
    )  # fmt: skip
    settings.check_names(env, option_name)
    check_out(out)
    run_id = run or new_run_id()
    hooks = [] if as_json else [RolloutProgress(transient=True)]
    report = synthesize(
        env, settings, run_id=run_id, store=resolve_store_path(store), out=out, hooks=hooks
    )
    if harbor is not None:
        try:
            write_harbor_tasks(report.tasks, harbor)
        except BaseException:
            out.unlink(missing_ok=True)
            raise
    if as_json:
        written = {} if harbor is None else {"harbor": str(harbor)}
        print_json({**report.summary(), "out": str(out), **written})
        return
    where = f"exploration: run {run_id}" if bugs is None else f"package {bugs}"
    also = "" if harbor is None else f" and as Harbor folders in {harbor}"
    console.print(f"{report.text}; written to {out}{also} ({where})")


def register(app: typer.Typer) -> None:
    """Add ``trajforge synthesize``."""
    app.command("synthesize")(synthesize_command)
