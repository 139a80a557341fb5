"""An eval stage with forced turns: the held-out episodes start from a mistake the model did
not make; a force that names no script is refused before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from trajforge.errors import ConfigError
from trajforge.pipeline.config import check_experiment, load_experiment
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.schema import Role
from trajforge.store import TrajectoryStore

FORCE = """
from trajforge.schema import Role


def malformed_first(task, messages):
    if any(m.role is Role.ASSISTANT for m in messages):
        return None
    return '<tool_call>{"name": "calculator", "arguments": {</tool_call>'
"""


def _experiment(tmp_path: Path, force: str) -> Path:
    (tmp_path / "force.py").write_text(FORCE)
    path = tmp_path / "experiment.yaml"
    data = {
        "name": "forced",
        "env": "calculator",
        "model": "tiny",
        "eval": {"tasks": 3, "max_turns": 2, "max_new_tokens": 40},
        "out_dir": str(tmp_path / "runs"),
        "stages": [
            {"kind": "eval", "name": "plain"},
            {"kind": "eval", "name": "hurt", "force": force},
        ],
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_forced_eval_starts_every_episode_from_the_scripted_mistake(tmp_path: Path) -> None:
    path = _experiment(tmp_path, f"script:{tmp_path / 'force.py'}:malformed_first")
    runner = ExperimentRunner(load_experiment(path), console=Console(quiet=True))
    runner.run()
    results = json.loads((runner.run_dir / "results.json").read_text())
    rec = {s["name"]: s for s in results["stages"]}
    assert rec["hurt"]["config"]["force"].endswith("force.py:malformed_first")
    with TrajectoryStore(runner.store_path) as st:
        plain = st.query(run=rec["plain"]["run_id"])
        hurt = st.query(run=rec["hurt"]["run_id"])
    assert len(plain) == len(hurt) == 3
    for traj in hurt:
        first = next(m for m in traj.messages if m.role is Role.ASSISTANT)
        assert first.tool_calls[0].parse_error is not None and first.logprobs is None
    for traj in plain:
        first = next(m for m in traj.messages if m.role is Role.ASSISTANT)
        assert first.logprobs is not None


def test_a_force_that_is_no_script_is_refused_with_its_line(tmp_path: Path) -> None:
    path = _experiment(tmp_path, "expert")
    exp = load_experiment(path)
    with pytest.raises(
        ConfigError,
        match=r"experiment\.yaml:\d+: stages\.hurt\.force: .expert.: write the forced turns as script:",
    ):
        check_experiment(exp, tmp_path / "runs" / "forced")
    missing = _experiment(tmp_path, f"script:{tmp_path / 'nowhere.py'}:f")
    with pytest.raises(ConfigError, match=r"nowhere\.py"):
        check_experiment(load_experiment(missing), tmp_path / "runs" / "forced")
