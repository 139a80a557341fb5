"""RL on an agent program's confined runs: the same program ``trajforge collect --confine``
runs, each step's run recording it as that command does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from train_helpers import small_rl_config, token_id_rubric

from trajforge.agent_programs import agent_runners
from trajforge.envs.sandbox import sandbox_available
from trajforge.store import TrajectoryStore
from trajforge.train.rl import RLTrainer

sys.path.insert(0, str(Path(__file__).parents[1] / "agent_programs"))

from confined_runs import AGENT, assert_confined_metadata, confined_tasks

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap cannot run here")


def test_rl_agent_runs_are_confined_and_each_step_run_records_how(tmp_path: Path) -> None:
    store = tmp_path / "rl.db"
    cfg = small_rl_config(
        tmp_path / "out", env=str(confined_tasks(tmp_path, 2)), agent=AGENT, confine=True,
        agent_timeout_s=120, store=store,
    )  # fmt: skip
    runners = agent_runners(cfg.agent, cfg.env, harness=cfg.harness, confine=cfg.confine)
    trainer = RLTrainer(cfg, rubric=token_id_rubric(), agent_runner=runners)
    trainer.train()
    with TrajectoryStore(store) as db:
        trajs = db.query(run="rl-out-step1")
        meta = db.get_run("rl-out-step1")
    assert len(trajs) == 4 and {t.reward for t in trajs} == {1.0}
    assert_confined_metadata(meta)
    assert meta is not None and meta["kind"] == "rl"
