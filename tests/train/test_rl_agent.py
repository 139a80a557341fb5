"""RL on an agent program: its model calls go through a gateway over the policy being
trained, and its recorded trajectories are the RL rollouts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from train_helpers import small_rl_config, token_id_rubric

from trajforge.agent_programs import agent_runners
from trajforge.errors import ConfigError, EpisodeError
from trajforge.store import TrajectoryStore
from trajforge.train.rl import RLTrainer

sys.path.insert(0, str(Path(__file__).parents[1] / "train"))

AGENT = f"{sys.executable} {Path(__file__).parents[2] / 'examples' / 'agent_rl' / 'agent.py'}"


def test_an_rl_step_on_an_agent_programs_runs(tmp_path: Path) -> None:
    store = tmp_path / "rl.db"
    cfg = small_rl_config(tmp_path / "out", agent=AGENT, agent_timeout_s=120, store=store)
    trainer = RLTrainer(
        cfg, rubric=token_id_rubric(), agent_runner=agent_runners(cfg.agent, cfg.env)
    )
    before = {n: p.detach().clone() for n, p in trainer.parts.model.named_parameters()}
    result = trainer.train()
    (step,) = result.history
    assert step["reward_mean"] > 0 and "loss" in step
    changed = any(not torch.equal(p, before[n]) for n, p in trainer.parts.model.named_parameters())
    assert changed
    with TrajectoryStore(store) as db:
        trajs = db.query(run="rl-out-step1")
    assert len(trajs) == 4  # 2 tasks x 2 runs, each one session
    assert all(t.metadata["gateway"]["weights_versions"] == [0] for t in trajs)
    # The program sampled at the temperature it was told, the config's.
    assert all(t.metadata["gateway"]["temperatures"] == [cfg.temperature] for t in trajs)
    assert len({t.group_id for t in trajs}) == 2


def test_an_agent_config_needs_the_gateway(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="agent"):
        RLTrainer(small_rl_config(tmp_path, agent=AGENT))


def test_an_agent_sampling_at_another_temperature_is_refused(tmp_path: Path) -> None:
    # The program overrides what it is told: its calls are sampled at 0.3, the trainer's
    # log-probabilities would be of the policy at 1.
    hot = f"env TRAJFORGE_TEMPERATURE=0.3 {AGENT}"
    cfg = small_rl_config(tmp_path / "out", agent=hot, agent_timeout_s=120)
    trainer = RLTrainer(
        cfg, rubric=token_id_rubric(), agent_runner=agent_runners(cfg.agent, cfg.env)
    )
    with pytest.raises(
        ConfigError, match=r"rl.temperature is 1 but the agent program sampled at 0.3"
    ):
        trainer.train()


def test_a_step_whose_every_episode_failed_stops_the_run_naming_the_error(tmp_path: Path) -> None:
    broken = f"{sys.executable} -c \"raise SystemExit('ModuleNotFoundError: no openai here')\""
    cfg = small_rl_config(tmp_path / "out", agent=broken, agent_timeout_s=60)
    trainer = RLTrainer(
        cfg, rubric=token_id_rubric(), agent_runner=agent_runners(cfg.agent, cfg.env)
    )
    with pytest.raises(
        EpisodeError, match=r"RL step 1: all 4 episodes failed; the first: .*no openai here"
    ):
        trainer.train()


def test_confine_and_harness_go_with_one_agent_program(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="harness: the runs are the agent command's"):
        small_rl_config(tmp_path, agent=AGENT, harness="codex")
    with pytest.raises(ValueError, match="confine: confines an agent program's runs"):
        small_rl_config(tmp_path, confine=True)
    assert small_rl_config(tmp_path, harness="codex").plays_program
