"""What ``results.json`` says of a training run: a training stage of an experiment, or a
standalone ``trajforge train`` run.

A standalone run's ``output_dir`` gets a ``results.json`` of the experiment format with its one
stage (resolved config, metrics history, final model, precision, duration), so ``trajforge
report`` and ``trajforge view`` read it as they read an experiment's run folder.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajforge.errors import DataError
from trajforge.precision import describe_machine
from trajforge.report import RESULTS_FILE
from trajforge.train import CommonSettings, DPOConfig, RLConfig, SFTConfig, TrainingInterrupted
from trajforge.viewer import METRICS_FILE

if TYPE_CHECKING:
    from trajforge.train import TrainResult

STANDALONE_KIND = "train"
"""``results.json``'s ``kind`` for a standalone training run (an experiment's has none)."""


def write_results(run_dir: Path, results: dict[str, Any]) -> Path:
    """Write ``run_dir/results.json`` atomically (a reader never sees half of it)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RESULTS_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2, sort_keys=False, default=str))
    tmp.replace(path)
    return path


def read_history(output_dir: Path) -> list[dict[str, Any]] | None:
    """Every step the run in ``output_dir`` logged, resumed parts included (``metrics.jsonl``),
    or ``None`` when it has none (a process other than the main one writes no metrics)."""
    path = output_dir / METRICS_FILE
    if not path.is_file():
        return None
    history = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            history.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: invalid JSON: {exc.msg}") from None
    return history


def training_record(result: TrainResult, output_dir: Path, detail: str) -> dict[str, Any]:
    """A training stage's entry in ``results.json``: its weights, metrics and one line. The
    history is the whole run's, also when this call resumed it."""
    history = read_history(output_dir)
    return {
        "model": str(result.final_dir or output_dir),
        # MetricsLogger writes plain JSON numbers, so either history is JSON-clean already.
        "history": result.history if history is None else history,
        "steps": result.steps,
        "precision": result.precision,
        "validation": result.validation,
        "kept_step": result.kept_step,
        "text": f"{result.steps} steps{detail}",
    }


def loss_detail(result: TrainResult) -> str:
    """``, final loss X`` of an SFT or DPO run, or nothing when it logged no loss."""
    last_loss = result.history[-1].get("loss") if result.history else None
    return f", final loss {last_loss:.3f}" if last_loss is not None else ""


def rl_detail(result: TrainResult) -> str:
    """An RL run's reward from its first to its last step, validation and kept weights."""
    rewards = [h["reward_mean"] for h in result.history if "reward_mean" in h]
    detail = f", train reward {rewards[0]:.2f} -> {rewards[-1]:.2f}" if rewards else ""
    if result.validation:
        shown = " -> ".join(f"{p['success']:.0%}" for p in result.validation)
        detail += f", validation success {shown}"
    if result.kept_step is not None:
        detail += f", kept the weights of step {result.kept_step}"
    idle = sum(h.get("zero_adv_frac") == 1.0 for h in result.history)
    if idle:
        detail += (
            f", {idle} of {len(result.history)} steps trained nothing (no group had an advantage)"
        )
    return detail


def _env_and_store(cfg: CommonSettings) -> tuple[str, Path | None]:
    """The env a run trained on and the store holding its trajectories, where there are."""
    if isinstance(cfg, RLConfig):
        return cfg.env, cfg.store
    if isinstance(cfg, SFTConfig | DPOConfig) and cfg.data is not None:
        return cfg.data.env or "-", cfg.data.store
    return "-", None


class StandaloneRun:
    """The ``results.json`` of one ``trajforge train KIND`` run in ``cfg.output_dir``, begun
    when this object is made."""

    def __init__(self, kind: str, cfg: CommonSettings) -> None:
        self.kind, self.cfg = kind, cfg
        self.started = time.time()

    def finished(self, result: TrainResult) -> Path:
        """Record the finished run; returns the ``results.json`` written."""
        detail = rl_detail(result) if self.kind == "rl" else loss_detail(result)
        record = training_record(result, self.cfg.output_dir, detail)
        return self._write({**record, "status": "done"}, result.precision)

    def interrupted(self, exc: TrainingInterrupted, precision: str) -> Path:
        """Record a run Ctrl-C stopped, with the steps it logged, as failed (the report shows
        how far it got)."""
        stopped = f"stopped at step {exc.step} of {exc.total}"
        history = read_history(self.cfg.output_dir) or []
        record = {"model": None, "history": history, "steps": exc.step, "precision": precision,
                  "status": "failed", "error": f"interrupted: {stopped}",
                  "text": f"interrupted: {stopped}"}  # fmt: skip
        return self._write(record, precision)

    def _write(self, record: dict[str, Any], precision: str) -> Path:
        env, store = _env_and_store(self.cfg)
        out = self.cfg.output_dir
        stage = {
            "name": self.kind,
            "kind": self.kind,
            "attempt": 1,
            "config": self.cfg.model_dump(mode="json"),
            "duration_s": time.time() - self.started,
            **record,
        }
        results = {
            "name": out.resolve().name,
            "kind": STANDALONE_KIND,
            "env": env,
            "model": self.cfg.model.spec,
            "created_at": self.started,
            # Absolute: the report and the viewer join it to the run folder, as an experiment's.
            "store": str(store.resolve()) if store is not None else None,
            "precision": {
                "asked": str(self.cfg.model.precision),
                "resolved": precision,
                "machine": describe_machine(),
            },
            "stages": [stage],
        }
        return write_results(out, results)
