"""A stage's fingerprint covers the code it runs: an edited verifier, env file, script policy or
agent program makes the stages that run it again; a skipped stage says what its fingerprint
covers and what it cannot see. An env of the user's own is stored under one name, whichever
stage or command stored it."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from trajforge.pipeline.config import load_experiment
from trajforge.pipeline.fingerprint import what_changed
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.pipeline.stage_code import code_hashes, covered
from trajforge.store import TrajectoryStore

AGENT = f"{sys.executable} {Path(__file__).parents[2] / 'examples' / 'agent_rl' / 'agent.py'}"

UNITS_ENV = '''
import sys
from pathlib import Path

from trajforge.envs import ToolEnv, tool
from trajforge.schema import Task

sys.path.insert(0, str(Path(__file__).parent))
from units_verifier import grams


@tool
def to_grams(kg: float) -> str:
    """Convert kilograms to grams.

    Args:
        kg: Kilograms.
    """
    return f"{kg * 1000:g}"


TASKS = [Task(id=f"kg{k}", prompt=f"{k} kg in g?", answer=f"{k * 1000}") for k in range(1, 9)]


def make_env() -> ToolEnv:
    return ToolEnv([to_grams], tasks=TASKS, name="units", verifier=grams, max_turns=2)
'''
VERIFIER = """
def grams(evidence):
    return 0.0
"""


@pytest.fixture(autouse=True)
def _own_verifier_module() -> Iterator[None]:
    """Each test's env folder is a project of its own: Python caches a module by name, so the
    next test's env file would import this test's ``units_verifier`` (its folder gone)."""
    yield
    sys.modules.pop("units_verifier", None)


def _project(tmp_path: Path) -> Path:
    """A user's env folder: the env file, and its verifier in a module beside it."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "units_env.py").write_text(UNITS_ENV)
    (mine / "units_verifier.py").write_text(VERIFIER)
    return mine


def _experiment(tmp_path: Path, stages: list[dict[str, Any]]) -> Path:
    path = tmp_path / "experiment.yaml"
    data = {"name": "units", "env": str(tmp_path / "mine" / "units_env.py") + ":make_env",
            "model": "tiny", "eval": {"tasks": 2, "max_turns": 1, "max_new_tokens": 8},
            "stages": stages, "out_dir": str(tmp_path / "runs")}  # fmt: skip
    path.write_text(yaml.safe_dump(data))
    return path


def _run(experiment: Path) -> str:
    out = io.StringIO()
    runner = ExperimentRunner(load_experiment(experiment), console=Console(file=out, width=400))
    runner.run()
    return out.getvalue()


def test_the_files_a_config_names_are_hashed_with_their_folder(tmp_path: Path) -> None:
    mine = _project(tmp_path)
    script = tmp_path / "teacher.py"
    script.write_text("def teach(task, messages):\n    return None\n")
    config = {
        "env": f"{mine / 'units_env.py'}:make_env",
        "stage": {"policy": f"script:{script}:teach", "agent": f"python {script} --fast"},
        "model": "tiny",
    }
    code = code_hashes(config, env=config["env"])
    assert sorted(Path(p).name for p in code) == ["teacher.py", "units_env.py", "units_verifier.py"]
    before = dict(code)
    (mine / "units_verifier.py").write_text(VERIFIER.replace("0.0", "1.0"))
    after = code_hashes(config, env=config["env"])
    assert [Path(p).name for p in after if after[p] != before[p]] == ["units_verifier.py"]
    # trajforge's own code is covered by its version; a built-in env names no file.
    assert code_hashes({"env": "calculator", "scorer": "trajforge.judge:x"}, env="calculator") == {}
    said = covered({"trajforge": "1.2", "code": after})
    assert (
        "trajforge 1.2" in said and "units_verifier.py" in said and "not: modules imported" in said
    )


def test_what_changed_names_the_edited_files_first() -> None:
    rec = {"config": {"code": {"a.py": "1", "b.py": "2"}, "x": 1}, "inputs": {}}
    edited = {"code": {"a.py": "1", "b.py": "3"}, "x": 2}
    assert what_changed(rec, edited, {}) == "its code changed: b.py"
    older = {"config": {"x": 2}, "inputs": {}}
    assert what_changed(older, edited, {}) == (
        "its record has no hash of its code (a.py and b.py; an earlier trajforge made it)"
    )


def test_an_edited_verifier_remakes_the_stages_that_run_it_and_one_env_name_is_stored(
    tmp_path: Path,
) -> None:
    mine = _project(tmp_path)
    stages = [
        {"kind": "eval", "name": "base"},
        {"kind": "collect", "agent": AGENT, "tasks": 1, "timeout_s": 120},
        {"kind": "triage"},
    ]
    experiment = _experiment(tmp_path, stages)
    _run(experiment)
    said = _run(experiment)
    assert said.count("done, unchanged") == 3
    assert "fingerprint covers its settings" in said and "mine/units_verifier.py" in said
    assert "not: modules imported from outside those folders" in said

    (mine / "units_verifier.py").write_text(VERIFIER.replace("0.0", "0.5"))
    said = _run(experiment)
    assert said.count("done, unchanged") == 0
    verifier = str(mine / "units_verifier.py")
    assert f"base: made again: its code changed: {verifier}" in said
    assert f"collect: made again: its code changed: {verifier}" in said
    assert "triage: made again: base and collect, which it uses, changed" in said
    results = json.loads((tmp_path / "runs" / "units" / "results.json").read_text())
    by_name = {s["name"]: s for s in results["stages"]}
    assert by_name["base"]["attempt"] == by_name["collect"]["attempt"] == 1

    # An eval and a collect of the same env store it under the env's own name.
    with TrajectoryStore(tmp_path / "runs" / "units" / "store.db") as db:
        envs = {(t.run_id, t.env) for t in db.query()}
        found = db.query(env="units")
    assert {env for _, env in envs} == {"units"}
    assert {t.run_id for t in found} == {"units.base", "units.base.1", "units.collect",
                                         "units.collect.1"}  # fmt: skip
