"""The repair stage: failures of one stage repaired with another's successes, then SFT on both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from trajforge.errors import ConfigError
from trajforge.pipeline.config import load_experiment
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.policy.check import check_trajectory
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.store import TrajectoryStore

# A teacher whose second turn is a failing calculator call and whose final answer is wrong.
FAULTY = """
from trajforge.envs.builtin.calculator import expert
from trajforge.schema import Role

BAD_CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": [[0]]}}</tool_call>'


def faulty(task, messages):
    turn = sum(1 for m in messages if m.role is Role.ASSISTANT)
    reply = BAD_CALL if turn == 1 else expert(task, messages)
    return reply if reply is None or "<tool_call>" in reply else "The answer is -1."
"""

SFT_TRAIN = {"batch_size": 4, "epochs": 1, "tensorboard": False, "progress": False}


def _experiment(tmp_path: Path, stages: list[dict[str, object]]) -> Path:
    (tmp_path / "faulty.py").write_text(FAULTY)
    path = tmp_path / "experiment.yaml"
    data = {
        "name": "fix",
        "env": "calculator",
        "model": "tiny",
        "eval": {"tasks": 2, "max_turns": 2, "max_new_tokens": 8},
        "out_dir": str(tmp_path / "runs"),
        "stages": stages,
    }
    path.write_text(yaml.safe_dump(data))
    return path


def _stages(tmp_path: Path) -> list[dict[str, object]]:
    teacher = f"script:{tmp_path / 'faulty.py'}:faulty"
    return [
        {"kind": "demonstrations", "name": "attempts", "policy": teacher, "tasks": 6},
        {"kind": "demonstrations", "tasks": 6},
        {"kind": "repair", "failed": "attempts", "good": "demonstrations"},
        {"kind": "sft", "demonstrations": ["demonstrations", "repair"], "train": SFT_TRAIN},
    ]


@pytest.mark.slow
def test_repairs_are_stored_as_a_run_and_sft_trains_on_them_beside_the_demonstrations(
    tmp_path: Path,
) -> None:
    path = _experiment(tmp_path, _stages(tmp_path))
    runner = ExperimentRunner(load_experiment(path), console=Console(quiet=True))
    runner.run()
    results = json.loads((runner.run_dir / "results.json").read_text())
    rec = {s["name"]: s for s in results["stages"]}
    assert all(s["status"] == "done" for s in results["stages"])
    assert rec["attempts"]["solved"] == 0 and rec["demonstrations"]["solved"] == 6
    # Every failed attempt parts from the expert's episode of its task at the failing call.
    assert (rec["repair"]["run_id"], rec["repair"]["count"]) == ("fix.repair", 6)
    assert rec["repair"]["skipped"] == {}
    assert sorted(rec["repair"]["inputs"]) == ["attempts", "demonstrations"]
    assert sorted(rec["sft"]["inputs"]) == ["demonstrations", "repair"]
    assert rec["sft"]["config"]["train"]["data"]["run"] == ["fix.demonstrations", "fix.repair"]
    with TrajectoryStore(runner.store_path) as st:
        repairs = st.query(run="fix.repair")
        attempts = {t.id: t for t in st.query(run="fix.attempts")}
    tokenizer = load_tokenizer()
    for fixed in repairs:
        failed = attempts[fixed.metadata["repair"]["failed"]]
        cut = fixed.metadata["loss_from_message"]
        assert fixed.messages[:cut] == failed.messages[:cut]
        assert fixed.messages[cut].content.startswith("My previous step was a mistake")
        assert fixed.outcome.reward == 1.0
        assert check_trajectory(fixed, tokenizer) == []
    # One epoch in batches of 4 over 6 demonstrations and 6 repairs.
    assert rec["sft"]["steps"] == 3
    # Unchanged inputs: nothing is made again, and the repairs are not stored twice.
    again = ExperimentRunner(load_experiment(path), console=Console(quiet=True)).run()
    assert {s["name"]: s["attempt"] for s in again["stages"]}["repair"] == 0
    with TrajectoryStore(runner.store_path) as st:
        assert st.count(run="fix.repair") == 6


def test_a_repair_stage_reads_earlier_stages_and_never_held_out_episodes(tmp_path: Path) -> None:
    stages = _stages(tmp_path)
    late = [stages[0], stages[2], stages[1]]
    with pytest.raises(ConfigError, match="good 'demonstrations' is not an earlier"):
        load_experiment(_experiment(tmp_path, late))
    held_out = [{"kind": "eval", "name": "base"}, {"kind": "repair", "failed": "base"}]
    runner = ExperimentRunner(
        load_experiment(_experiment(tmp_path, held_out)), console=Console(quiet=True)
    )
    with pytest.raises(ConfigError, match=r"failed: 'base' evaluates held-out tasks"):
        runner.run()
    with pytest.raises(ConfigError, match="reads demonstrations 'repair', which is not an earlier"):
        load_experiment(_experiment(tmp_path, [{**stages[3], "demonstrations": ["repair"]}]))
