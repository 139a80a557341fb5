"""``trajforge train sft|dpo|rl|distill --config FILE.yaml [--resume] [KEY=VALUE ...]``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from trajforge.cli.common import (
    JsonOption,
    NumProcessesOption,
    console,
    launched_as_processes,
    print_json,
    stop_interrupted,
)
from trajforge.curate import preference_pairs
from trajforge.errors import DataError
from trajforge.pipeline import StandaloneRun
from trajforge.report import build_report
from trajforge.train import (
    ConfigT,
    DistillConfig,
    DPOConfig,
    RLConfig,
    SFTConfig,
    TrainingInterrupted,
    launched_rank,
    load_source,
    load_train_config,
)

if TYPE_CHECKING:
    from trajforge.train import Trainer, TrainResult

ConfigOption = Annotated[
    Path, typer.Option("--config", "-c", help="YAML config file (validated; errors name the key).")
]
ResumeOption = Annotated[
    bool, typer.Option("--resume", help="Continue from the latest checkpoint in output_dir.")
]
OverwriteOption = Annotated[
    bool,
    typer.Option(
        "--overwrite", help="Clear output_dir of another run's checkpoints, metrics and weights."
    ),
]
OverridesArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="KEY=VALUE",
        help="Set config keys over the file's: dotted keys, YAML values (optim.lr=1e-4).",
        show_default=False,
    ),
]


def _train(trainer: Trainer, kind: str, config: Path, overrides: list[str], resume: bool,
           overwrite: bool) -> dict[str, Any]:  # fmt: skip
    """``trainer.train``, its ``results.json`` and report written in ``output_dir`` (on Ctrl-C
    too: the steps made so far), and the summary the command prints. On Ctrl-C the
    interruption names the command that resumes it."""
    from trajforge.train import leave_process_group  # lazy: imports torch

    # A distillation is an RL run with a teacher: recorded and reported as one.
    run = StandaloneRun("rl" if kind == "distill" else kind, trainer.cfg)
    main = launched_rank() == 0  # only the main process writes the run folder's files
    try:
        result = trainer.train(resume=resume, overwrite=overwrite)
    except TrainingInterrupted as exc:
        if main:
            run.interrupted(exc, trainer.precision())
            build_report(trainer.cfg.output_dir)
        words = ["trajforge", "train", kind, "--config", str(config), *overrides]
        stop_interrupted(exc, [*words, "--resume" if exc.checkpoint else "--overwrite"])
    report = None
    if main:
        run.finished(result)
        report = build_report(trainer.cfg.output_dir)
    leave_process_group()
    return _summary(result, trainer.cfg.output_dir, report)


def _summary(result: TrainResult, output_dir: Path, report: Path | None) -> dict[str, Any]:
    last = result.history[-1] if result.history else {}
    return {
        "plan": result.plan,
        "precision": result.precision,
        "steps": result.steps,
        "resumed_from": result.resumed_from,
        "output_dir": str(output_dir),
        "final": str(result.final_dir) if result.final_dir else None,
        "report": str(report) if report else None,
        "last": last,
    }


def _report(summary: dict[str, Any], as_json: bool) -> None:
    if launched_rank() != 0:
        return  # one summary per run, from the main process
    if as_json:
        print_json(summary)
        return
    last = summary["last"]
    shown = ", ".join(
        f"{k}={last[k]:.4g}"
        for k in ("loss", "reward_mean", "kl_ref", "tokens_per_s")
        if isinstance(last.get(k), float)
    )
    console.print(f"[green]done[/green] {summary['steps']} steps -> {summary['final']}  {shown}")
    console.print(f"report: [bold]{escape(summary['report'])}[/bold]", soft_wrap=True)


def _train_command(
    kind: str, config_type: type[ConfigT], build: Callable[[ConfigT, Path], Trainer]
) -> Callable[..., None]:
    """The command ``trajforge train <kind>``: ``build`` makes the trainer from the loaded
    config (and the config file's path, for its errors); the rest is the same for every kind."""

    def command(
        config: ConfigOption,
        overrides: OverridesArgument = None,
        resume: ResumeOption = False,
        overwrite: OverwriteOption = False,
        json_out: JsonOption = False,
        num_processes: NumProcessesOption = 1,
    ) -> None:
        if launched_as_processes(num_processes):
            return
        cfg = load_train_config(config, config_type, overrides or [])
        trainer = build(cfg, config)
        _report(_train(trainer, kind, config, overrides or [], resume, overwrite), json_out)

    command.__doc__ = build.__doc__
    return command


def _sft(cfg: SFTConfig, config: Path) -> Trainer:
    """Supervised fine-tuning on the assistant tokens of stored trajectories."""
    from trajforge.train import SFTTrainer  # lazy: torch loads only when a command trains

    assert cfg.data is not None  # load_train_config refuses a config without data
    return SFTTrainer(cfg, load_source(cfg.data))


def _dpo(cfg: DPOConfig, config: Path) -> Trainer:
    """DPO on preference pairs built from groups of stored trajectories."""
    from trajforge.train import DPOTrainer  # lazy: torch loads only when a command trains

    assert cfg.data is not None  # load_train_config refuses a config without data
    pairs = preference_pairs(load_source(cfg.data), score=cfg.score, min_margin=cfg.min_margin)
    if not pairs:
        raise DataError(
            f"{config}: no preference pairs (no group has two trajectories whose "
            f"{cfg.score or 'reward'} differs by at least {cfg.min_margin})"
        )
    return DPOTrainer(cfg, pairs)


def _rl(cfg: RLConfig, config: Path) -> Trainer:
    """On-policy RL: roll out groups, compute advantages, update, repeat."""
    # lazy: the agent runners load uvicorn (0.4 s), the trainer torch
    from trajforge.agent_programs import agent_runners
    from trajforge.train import RLTrainer  # lazy: as the import above

    runners = agent_runners(cfg.agent, cfg.env, harness=cfg.harness, confine=cfg.confine)
    return RLTrainer(cfg, agent_runner=runners)


def _distill(cfg: DistillConfig, config: Path) -> Trainer:
    """On-policy distillation: the student samples, a teacher scores every token, update."""
    from trajforge.train import RLTrainer  # lazy: torch loads only when a command trains

    return RLTrainer(cfg)


sft = _train_command("sft", SFTConfig, _sft)
dpo = _train_command("dpo", DPOConfig, _dpo)
rl = _train_command("rl", RLConfig, _rl)
distill = _train_command("distill", DistillConfig, _distill)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    train_app = typer.Typer(
        help="Train on trajectories: SFT, DPO, RL, on-policy distillation.", no_args_is_help=True
    )
    train_app.command("sft")(sft)
    train_app.command("dpo")(dpo)
    train_app.command("rl")(rl)
    train_app.command("distill")(distill)
    app.add_typer(train_app, name="train")
