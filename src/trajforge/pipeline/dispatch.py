"""Run one stage of an experiment by its kind, from the finished stages it reads.

``ExperimentRunner`` decides which stages run and keeps their records; a ``StageRunner`` makes
one: it rolls out, judges, curates or trains and returns the stage's record (its figures and
what it made). The stages other than training run on the main process alone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from trajforge.agent_programs import agent_runners
from trajforge.errors import ConfigError
from trajforge.memory import Memory
from trajforge.pipeline.config import (
    STORE_FILE,
    CollectStage,
    DemonstrationStage,
    EvalStage,
    Experiment,
    MemoryStage,
    RepairStage,
    RLStage,
    SFTStage,
    Stage,
    SynthesizeStage,
    TriageStage,
    data_runs,
    memory_stage_of,
    rl_config,
    sft_config,
)
from trajforge.pipeline.curation import repair_stage, triage_stage
from trajforge.pipeline.eval_stage import eval_stage
from trajforge.pipeline.fingerprint import stage_inputs
from trajforge.pipeline.memory_stage import MEMORY_FILE, eval_memory, memory_stage
from trajforge.pipeline.rollout_stages import collect_stage, demonstrations_stage
from trajforge.pipeline.synthesis_stage import synthesize_stage, synthesized_tasks
from trajforge.pipeline.train_results import loss_detail, rl_detail, training_record
from trajforge.rollout import PolicyRef
from trajforge.train import RLTrainer, SFTTrainer, from_main, latest_checkpoint, load_source

if TYPE_CHECKING:
    from trajforge.train import Trainer, TrainResult

StageRecord = Callable[[str], "dict[str, Any] | None"]
"""The record of a stage by its name in results.json (``None``: it has none yet)."""


class StageRunner:
    """Makes the stages of ``experiment`` in ``run_dir``, reading earlier stages' records
    through ``record``."""

    def __init__(
        self, experiment: Experiment, run_dir: Path, console: Console, record: StageRecord
    ) -> None:
        self.exp = experiment
        self.run_dir = run_dir
        self.console = console
        self.store_path = run_dir / STORE_FILE
        self._record = record

    def make(self, index: int, stage: Stage, run_id: str, model: str) -> dict[str, Any]:
        """Make stage ``index`` as run ``run_id`` from the weights ``model``: its record."""
        if isinstance(stage, EvalStage):
            return from_main(lambda: self._eval(model, run_id, index, stage))
        if isinstance(stage, DemonstrationStage):
            teacher = self.policy_ref(stage.policy)
            tasks = None
            if stage.tasks_from is not None:
                made = self.run_dir / str(self._done_record(stage, stage.tasks_from)["path"])
                tasks = synthesized_tasks(stage, made)
            return from_main(
                lambda: demonstrations_stage(
                    self.exp, stage, teacher, run_id, self.store_path, tasks
                )
            )
        if isinstance(stage, SynthesizeStage):
            return from_main(
                lambda: synthesize_stage(self.exp, stage, run_id, self.store_path, self.run_dir)
            )
        if isinstance(stage, CollectStage):
            served = self.policy_ref(model)
            return from_main(
                lambda: collect_stage(self.exp, stage, served, run_id, self.store_path)
            )
        if isinstance(stage, SFTStage):
            return self._sft(index, stage, model)
        if isinstance(stage, TriageStage):
            return self._triage(index, stage)
        if isinstance(stage, RepairStage):
            return from_main(lambda: self._repair(stage, run_id))
        if isinstance(stage, MemoryStage):
            return from_main(lambda: self._memory(index, stage))
        assert isinstance(stage, RLStage)
        return self._rl(index, stage, model, run_id)

    def _eval(self, model: str, run_id: str, index: int, stage: EvalStage) -> dict[str, Any]:
        memory = self._eval_memory(index, stage)
        policy = self.policy_ref(model, stage.force)
        return eval_stage(self.exp, self.store_path, policy, run_id, memory, stage.memory_update)

    def _eval_memory(self, index: int, stage: EvalStage) -> Memory | None:
        """The memory eval ``stage`` reads: its memory stage's file, or the file it names."""
        if stage.memory is None:
            return None
        source = memory_stage_of(self.exp, index)
        path = Path(stage.memory)
        if source is not None:
            path = self.run_dir / str(self._done_record(stage, source.name)["path"])
        folder = self.run_dir / stage.name
        return eval_memory(path, stage, self.exp.env, folder, self.console)

    def policy_ref(self, model: str, force: str | None = None) -> PolicyRef:
        """The policy named ``model`` with the experiment's precision and the eval's batch size
        (both matter only to local models), its turns forced where ``force`` says."""
        return PolicyRef(
            name=model,
            batch_size=self.exp.eval.max_batch_size,
            precision=self.exp.precision,
            force=force,
        )

    def _triage(self, index: int, stage: TriageStage) -> dict[str, Any]:
        runs = [self._done_run(stage, n) for n in stage_inputs(self.exp, index)]
        return triage_stage(self.store_path, stage, runs)

    def _repair(self, stage: RepairStage, run_id: str) -> dict[str, Any]:
        failed = self._done_run(stage, stage.failed)
        good = None if stage.good is None else self._done_run(stage, stage.good)
        return repair_stage(self.store_path, self.exp.model, failed, good, run_id)

    def _memory(self, index: int, stage: MemoryStage) -> dict[str, Any]:
        runs = [self._done_run(stage, n) for n in stage_inputs(self.exp, index)]
        out = self.run_dir / stage.name / MEMORY_FILE
        return memory_stage(self.store_path, stage, runs, out, self.run_dir)

    def _done_record(self, stage: Stage, name: str) -> dict[str, Any]:
        """The record of finished stage ``name``, which ``stage`` reads."""
        rec = self._record(name)
        if not rec or rec.get("status") != "done":
            raise ConfigError(f"stage {stage.name!r} needs stage {name!r} to have run first")
        return rec

    def _done_run(self, stage: Stage, name: str) -> str:
        """The run id of finished stage ``name``, which ``stage`` reads."""
        return str(self._done_record(stage, name)["run_id"])

    def _sft(self, index: int, stage: SFTStage, model: str) -> dict[str, Any]:
        runs = [self._done_run(stage, d) for d in stage.data_stages]
        cfg = sft_config(
            self.exp, index, model=model, run_dir=self.run_dir, demonstrations_run=data_runs(runs)
        )
        assert cfg.data is not None  # sft_config always sets it
        result = _train(SFTTrainer(cfg, load_source(cfg.data)), cfg.output_dir)
        return training_record(result, cfg.output_dir, loss_detail(result))

    def _rl(self, index: int, stage: RLStage, model: str, run_id: str) -> dict[str, Any]:
        cfg = rl_config(self.exp, index, model=model, run_dir=self.run_dir)
        runners = agent_runners(cfg.agent, cfg.env, harness=cfg.harness, confine=cfg.confine)
        trainer = RLTrainer(cfg, run_prefix=run_id, stage=stage.name, agent_runner=runners)
        result = _train(trainer, cfg.output_dir)
        return training_record(result, cfg.output_dir, rl_detail(result))


def _train(trainer: Trainer, output_dir: Path) -> TrainResult:
    """Train a stage: from its latest checkpoint when an interrupted attempt left one, else
    afresh (whatever a failed attempt left without a checkpoint is cleared)."""
    resume = from_main(lambda: latest_checkpoint(output_dir) is not None)
    return trainer.train(resume=resume, overwrite=not resume)
