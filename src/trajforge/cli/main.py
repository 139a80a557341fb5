"""The ``trajforge`` command. Each command group lives in its own module and registers here."""

from __future__ import annotations

import os
import sys
import warnings
from typing import Annotated

import typer
from rich.markup import escape
from typer.exceptions import TyperException

from trajforge.cli import (
    collect_cmds,
    config_cmds,
    curate_cmds,
    data_cmds,
    env_cmds,
    eval_cmds,
    judge_cmds,
    mcp_cmds,
    memory_cmds,
    openenv_cmds,
    policy_cmds,
    rollout_cmds,
    run_cmds,
    serve_cmds,
    synthesize_cmds,
    template_cmds,
    train_cmds,
    triage_cmds,
    view_cmds,
)
from trajforge.cli.common import err_console
from trajforge.cli.failures import EXIT_CODES_HELP, ExitCode
from trajforge.cli.help import Command, tidy
from trajforge.errors import TrajforgeError
from trajforge.ram import start_memory_watchdog

# trajforge shows its own Rich progress; the libraries' bars and notices would interleave with it,
# and nothing is ever fetched from a hub at run time.
for _var, _value in (
    ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
    ("TRANSFORMERS_VERBOSITY", "error"),
    ("HF_HUB_OFFLINE", "1"),
    ("TOKENIZERS_PARALLELISM", "false"),
):
    os.environ.setdefault(_var, _value)
# PEFT still calls a transformers method that transformers has renamed; the notice is theirs to
# fix and says nothing to a trajforge user in the middle of a progress display.
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)

app = typer.Typer(
    name="trajforge",
    help="Collect, judge, curate and train on multi-turn LLM-agent trajectories.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    epilog=EXIT_CODES_HELP,
)

_state = {"debug": False}


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
) -> None:
    _state["debug"] = debug
    # Every command that runs long (serve, view, run, eval, train) says in its log when it
    # nears the memory it may use, before the kernel kills it.
    start_memory_watchdog()


for module in (
    data_cmds,
    env_cmds,
    policy_cmds,
    rollout_cmds,
    eval_cmds,
    judge_cmds,
    train_cmds,
    run_cmds,
    serve_cmds,
    collect_cmds,
    mcp_cmds,
    openenv_cmds,
    config_cmds,
    template_cmds,
    triage_cmds,
    curate_cmds,
    view_cmds,
    memory_cmds,
    synthesize_cmds,
):
    module.register(app)


def command() -> Command:
    """The click command tree of ``app``, its help tidied (``cli.help``)."""
    return tidy(typer.main.get_command(app))


def main() -> None:
    """Entry point: run the app, turning any error into one clear line unless --debug."""
    debug = "--debug" in sys.argv[1:]
    try:
        # Without standalone mode click returns a command's exit code instead of exiting.
        code = command()(standalone_mode=False)
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        err_console.print("[red]aborted[/red]")
        raise SystemExit(ExitCode.INTERRUPTED) from None
    except KeyboardInterrupt:
        err_console.print("[red]interrupted[/red]")
        raise SystemExit(ExitCode.INTERRUPTED) from None
    except Exception as exc:
        if debug:
            raise
        # Typer carries its own copy of click, whose usage errors (an option out of range, a
        # missing argument) derive from TyperException; they print as click formats them.
        if isinstance(exc, TyperException) and callable(getattr(exc, "show", None)):
            exc.show()  # type: ignore[attr-defined]
            raise SystemExit(exc.exit_code) from None

        name = type(exc).__name__
        text = escape(str(exc))  # messages quote data such as "[call_0_0]", not Rich markup
        err_console.print(
            f"[red]error:[/red] {text}" if _is_ours(exc) else f"[red]error ({name}):[/red] {text}",
            soft_wrap=True,
        )
        raise SystemExit(ExitCode.ERROR) from None
    if isinstance(code, int) and code != 0:
        raise SystemExit(code)


def _is_ours(exc: Exception) -> bool:
    return isinstance(exc, TrajforgeError)
