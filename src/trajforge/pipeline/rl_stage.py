"""The trainer of an experiment's RL stage: its rollouts stored as the stage's runs.

A standalone ``trajforge train rl`` names its rollouts ``rl-<output folder>-step<N>``; in an
experiment they are the stage's, ``<experiment>.<stage>[.<attempt>].step<N>`` (validation:
``.val-step<N>``) as every other stage's run ids are, so two attempts of a stage never share a
run, and each run's metadata says it is an ``rl`` stage's and which weights it started from
(the rollouts sample from the weights being trained, which have no name of their own).
"""

from __future__ import annotations

from typing import Any

from trajforge.rollout import RolloutSpec
from trajforge.schema import Task
from trajforge.store import TrajectoryStore
from trajforge.train.config import RLConfig
from trajforge.train.rl import RLTrainer

RL_RUN_KIND = "rl"
"""The ``kind`` an RL stage's runs carry in their metadata (the viewer's runs table shows it)."""


class StageRLTrainer(RLTrainer):
    """``RLTrainer`` whose rollout runs are named ``<run_id>.<step name>``."""

    def __init__(self, cfg: RLConfig, *, run_id: str, stage: str, **kwargs: Any) -> None:
        self.stage_run_id, self.stage = run_id, stage
        super().__init__(cfg, **kwargs)

    def _spec(
        self, tasks: list[Task], n: int, temperature: float, step: int, name: str
    ) -> RolloutSpec:
        spec = super()._spec(tasks, n, temperature, step, name)
        run_id = f"{self.stage_run_id}.{name}"
        named = spec.model_copy(update={"run_id": run_id})
        if spec.store is not None:
            with TrajectoryStore(spec.store) as store:
                if store.get_run(run_id) is None:  # a resumed step keeps what it had
                    store.set_run(run_id, self._run_metadata(named))
        return named

    def _run_metadata(self, spec: RolloutSpec) -> dict[str, Any]:
        return {
            "kind": RL_RUN_KIND,
            "stage": self.stage,
            "model": self.rl_cfg.model.spec,
            "spec": spec.model_dump(mode="json"),
        }
