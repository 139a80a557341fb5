"""Run an experiment: its stages in order, each stage's output kept in the run folder.

The run folder holds ``store.db`` (every trajectory of every stage), one folder per training
stage (checkpoints, metrics, the final weights) holding its current attempt (earlier ones are
moved to ``.attempts``, ``pipeline.attempts``), ``results.json`` (every stage's status and
metrics, what it was made from, rewritten atomically after each stage) and ``report.html``. A
stage that finished is skipped when the run is started again if what it is made from is
unchanged (``pipeline.fingerprint``); one whose settings or inputs changed is made again as a
new attempt, and so is everything downstream. A crashed run resumes at the stage it was in (and
rollouts and training resume inside that stage); ``only=`` makes one stage again alone and marks
what used its earlier output stale. Each stage is made by ``pipeline.dispatch.StageRunner``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from trajforge.errors import ConfigError, TrajforgeError
from trajforge.pipeline.attempts import run_folder_line, set_aside
from trajforge.pipeline.config import (
    STORE_FILE,
    Experiment,
    RLStage,
    SFTStage,
    Stage,
    check_experiment,
    data_runs,
    stage_name,
)
from trajforge.pipeline.dispatch import StageRunner
from trajforge.pipeline.fingerprint import (
    STALE,
    StageMaking,
    fingerprint,
    next_attempt,
    stage_inputs,
    what_changed,
)
from trajforge.pipeline.stage_code import covered
from trajforge.pipeline.train_results import write_results
from trajforge.precision import describe_machine, resolve_precision
from trajforge.ram import trim_freed_memory
from trajforge.report import RESULTS_FILE, build_report
from trajforge.train import (
    DistributedSettings,
    TrainingInterrupted,
    from_main,
    is_main_process,
    join_launched_processes,
)


class ExperimentRunner:
    """Runs the stages of ``experiment`` in ``run_dir`` (default ``out_dir/name``)."""

    def __init__(
        self, experiment: Experiment, run_dir: Path | None = None, console: Console | None = None
    ) -> None:
        self.exp = experiment
        self.run_dir = run_dir or experiment.out_dir / experiment.name
        # Under a launcher every process runs the experiment: the training stages over all of
        # them, the others (rollouts, judging, results.json, the report) on the main one alone.
        join_launched_processes(DistributedSettings().timeout_s)
        self.main = is_main_process()
        self.console = console or Console(stderr=True, quiet=not self.main)
        self.store_path = self.run_dir / STORE_FILE
        self.precision = resolve_precision(experiment.precision)
        self.results = from_main(self._load_results)
        self.maker = StageRunner(experiment, self.run_dir, self.console, self._record)

    # -- results.json --------------------------------------------------------------------------

    def _load_results(self) -> dict[str, Any]:
        path = self.run_dir / RESULTS_FILE
        if path.is_file():
            try:
                data: dict[str, Any] = json.loads(path.read_text())
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
            if data.get("env") != self.exp.env:
                raise ConfigError(
                    f"{path}: this run folder is for env {data.get('env')!r}, not {self.exp.env!r}; "
                    "choose another --out or experiment name"
                )
            return data
        return {
            "name": self.exp.name,
            "env": self.exp.env,
            "model": self.exp.model,
            "created_at": time.time(),
            "store": STORE_FILE,
            "stages": [],
        }

    def _save_results(self) -> None:
        if self.main:
            write_results(self.run_dir, self.results)

    def _record(self, name: str) -> dict[str, Any] | None:
        return next((s for s in self.results["stages"] if s["name"] == name), None)

    def _put_record(self, record: dict[str, Any]) -> None:
        order = [s.name for s in self.exp.stages]
        stages = [s for s in self.results["stages"] if s["name"] != record["name"]] + [record]
        stages.sort(key=lambda s: order.index(s["name"]) if s["name"] in order else len(order))
        self.results["stages"] = stages
        self._save_results()

    def model_before(self, index: int) -> str:
        """The weights stage ``index`` starts from: the last finished training stage's output."""
        model = self.exp.model
        for stage in self.exp.stages[:index]:
            rec = self._record(stage.name)
            if isinstance(stage, SFTStage | RLStage) and rec and rec.get("status") == "done":
                model = self._in_run_folder(stage.name, rec["model"])
        return model

    def weights(self, name: str) -> str:
        """Training stage ``name``'s finished weights, in this run folder wherever they were
        recorded (a copied run folder's records name the folder it was made in)."""
        rec = self._record(name)
        trains = any(s.name == name and isinstance(s, SFTStage | RLStage) for s in self.exp.stages)
        if not trains or rec is None or rec.get("status") != "done":
            raise ValueError(f"stage {name!r} has no finished weights in {self.run_dir}")
        return self._in_run_folder(name, str(rec["model"]))

    def _in_run_folder(self, stage: str, recorded: str) -> str:
        """A training stage's recorded weights, found in its folder of this run folder when
        they were recorded in its folder of another: a run folder moved, copied or given by
        ``--out`` holds the same stages (its fingerprints write the folder ``<run>``)."""
        parts = Path(recorded).parts
        if stage not in parts:
            return recorded
        at = len(parts) - 1 - parts[::-1].index(stage)
        here = self.run_dir.joinpath(*parts[at:])
        return str(here) if here.exists() else recorded

    # -- what each stage is made from ---------------------------------------------------------

    def _config(self, index: int, stage: Stage) -> dict[str, Any]:
        runs = None
        if isinstance(stage, SFTStage):
            found = [(self._record(d) or {}).get("run_id") for d in stage.data_stages]
            runs = data_runs([r for r in found if r]) if all(found) else None
        made = StageMaking(self.exp, self.run_dir, str(self.precision))
        return made.config(index, self.model_before(index), runs)

    def _passed_over(
        self, rec: dict[str, Any] | None, config: dict[str, Any], inputs: dict[str, str],
        after: bool, only: str,
    ) -> str:  # fmt: skip
        """A stage ``--stage`` passes over: one after it whose record no longer matches what
        it would be made from is marked stale (kept, never shown as current). Returns its
        fingerprint as it stands, marked when it is not done."""
        if rec is None:
            return ""
        if after and rec.get("status") == "done" and (why := what_changed(rec, config, inputs)):
            rec.update(status=STALE, stale=f"{why} (by --stage {only})")
            self._put_record(rec)
        made = str(rec.get("fingerprint", ""))
        return made if rec.get("status") == "done" else f"{rec.get('status')}:{made}"

    def _check_inputs_done(self, stage: Stage, inputs: dict[str, str]) -> None:
        """``--stage`` makes a stage from finished, current inputs only."""
        for name in inputs:
            status = (self._record(name) or {}).get("status")
            if status != "done":
                raise ConfigError(
                    f"--stage {stage.name}: it uses stage {name!r}, which is "
                    f"{status or 'not run yet'}; run without --stage first (or --stage {name})"
                )

    # -- running -------------------------------------------------------------------------------

    def run(self, *, only: str | None = None) -> dict[str, Any]:
        """Run every unfinished stage (or just ``only``), then write the report."""
        names = [s.name for s in self.exp.stages]
        if only is not None and only not in names:
            raise ConfigError(
                f"--stage: {only!r} is not a stage of {self.exp.name} ({', '.join(names)})"
            )
        # Every stage's config is checked before the first one runs: a typo in the last stage
        # must not surface after an hour of the earlier ones.
        check_experiment(self.exp, self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.results["precision"] = {
            "asked": str(self.exp.precision),
            "resolved": str(self.precision),
            "machine": describe_machine(),
        }
        self._save_results()
        self.console.print(
            f"precision: {self.precision} (asked {self.exp.precision}; this machine: {describe_machine()})"
        )
        total = len(self.exp.stages)
        made: dict[str, str] = {}  # each stage's fingerprint as this run leaves it
        for i, stage in enumerate(self.exp.stages):
            rec = self._record(stage.name)
            config = self._config(i, stage)
            inputs = {n: made[n] for n in stage_inputs(self.exp, i)}
            if only is not None and stage.name != only:
                after = i > names.index(only)
                made[stage.name] = self._passed_over(rec, config, inputs, after, only)
                continue
            attempt, why = next_attempt(rec, what_changed(rec or {}, config, inputs), only)
            if why is None:
                assert rec is not None  # only a finished record is skipped
                made[stage.name] = rec["fingerprint"]
                self.console.print(
                    f"[dim][{i + 1}/{total}] {stage.name}: done, unchanged "
                    f"({covered(rec['config'])})[/dim]"
                )
                continue
            if only is not None:
                self._check_inputs_done(stage, inputs)
            self.console.rule(f"[bold][{i + 1}/{total}] {stage.name}[/bold] ({stage.kind})")
            if why:
                self.console.print(f"{stage.name}: {why}")
            if rec is not None and attempt != rec.get("attempt", 0):
                self._set_aside(stage, int(rec.get("attempt", 0)))
            made[stage.name] = fingerprint(config, inputs, attempt)
            made_of = {"config": config, "inputs": inputs, "fingerprint": made[stage.name]}
            start = time.time()
            self._put_record(
                {"name": stage.name, "kind": stage.kind, "status": "running", "attempt": attempt,
                 **made_of}
            )  # fmt: skip
            try:
                record = self._run_stage(i, stage, attempt)
            except BaseException as exc:
                # Whatever stops a stage (an error, Ctrl-C) is recorded, so results.json never
                # shows a stage "running" that is not; the next run starts it again.
                error = _error_text(exc)
                self._put_record(
                    {"name": stage.name, "kind": stage.kind, "status": "failed", "attempt": attempt,
                     "duration_s": time.time() - start, "error": error, "text": f"failed: {error}",
                     **made_of}
                )  # fmt: skip
                if isinstance(exc, TrainingInterrupted):
                    self.console.print(f"[yellow]{stage.name} interrupted[/yellow]")
                else:
                    self.console.print(f"[red]{stage.name} failed[/red]")
                raise
            finally:
                trim_freed_memory()
            record.update(
                name=stage.name, kind=stage.kind, status="done", attempt=attempt,
                duration_s=time.time() - start, **made_of,
            )  # fmt: skip
            self._put_record(record)
            self.console.print(
                f"[green]{stage.name} done[/green] in {record['duration_s']:.0f}s: {record.get('text', '')}"
            )
        stale = [s["name"] for s in self.results["stages"] if s.get("status") == STALE]
        if stale:
            self.console.print(
                f"[yellow]stale[/yellow] (made from what has changed since): {', '.join(stale)}; "
                "run again without --stage to make them anew"
            )

        if self.main:
            build_report(self.run_dir)
        return self.results

    def _set_aside(self, stage: Stage, attempt: int) -> None:
        """Free the stage's folder for its next attempt (``pipeline.attempts``)."""
        keep = self.exp.keep_attempts
        aside = from_main(lambda: set_aside(self.run_dir, stage.name, attempt, keep))
        if aside is not None:
            self.console.print(
                f"{stage.name}: its attempt {attempt} moved to {aside.relative_to(self.run_dir)}"
            )

    def final_model(self) -> str | None:
        """The run's final weights: the last finished training stage's (``None``: none)."""
        final = self.model_before(len(self.exp.stages))
        return None if final == self.exp.model else final

    def disk_use_line(self) -> str:
        """What the run folder takes on disk (``pipeline.attempts.run_folder_line``)."""
        return run_folder_line(self.run_dir)

    def _run_id(self, stage: Stage, attempt: int) -> str:
        return f"{self.exp.name}.{stage_name(stage, attempt)}"

    def _run_stage(self, index: int, stage: Stage, attempt: int) -> dict[str, Any]:
        return self.maker.make(index, stage, self._run_id(stage, attempt), self.model_before(index))


def _error_text(exc: BaseException) -> str:
    """What results.json says about a failed stage: our errors' own words, else the kind too."""
    if isinstance(exc, TrajforgeError | TrainingInterrupted):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
