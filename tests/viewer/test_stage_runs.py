"""An experiment's runs in the viewer: each run's kind comes from the stage that made it
(``<experiment>.<stage>``), and a run's curves are its stage folder's only when that folder
holds the run's attempt."""

from __future__ import annotations

import json
from pathlib import Path

from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore
from trajforge.viewer.service import ViewerData
from trajforge.viewer.stages import is_current_attempt, kind_of, stage_kinds

RESULTS = {
    "name": "exp",
    "stages": [
        {"name": "base", "kind": "eval", "attempt": 0},
        {"name": "rl", "kind": "rl", "attempt": 2},
        {"name": "rl.x", "kind": "eval", "attempt": 0},
    ],
}


def _run_folder(tmp_path: Path) -> Path:
    (tmp_path / "results.json").write_text(json.dumps(RESULTS))
    (tmp_path / "rl").mkdir()
    (tmp_path / "rl" / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.5}\n')
    with TrajectoryStore(tmp_path / "store.db") as st:
        for i, run in enumerate(["exp.base", "exp.rl.1.step1", "exp.rl.2.step1", "other"]):
            st.add(synthetic_trajectory(i, run_id=run))
    return tmp_path


def test_a_runs_kind_is_its_stages_when_its_metadata_says_none(tmp_path: Path) -> None:
    kinds = stage_kinds(_run_folder(tmp_path))
    assert kinds == {"exp.base": "eval", "exp.rl": "rl", "exp.rl.x": "eval"}
    assert kind_of("exp.rl.2.step1", kinds) == "rl"
    assert kind_of("exp.rl.x", kinds) == "eval"  # the longest stage name that fits
    assert kind_of("exp.rlx", kinds) is None and kind_of("other", kinds) is None
    assert stage_kinds(None) == {} and stage_kinds(tmp_path / "missing") == {}
    data = ViewerData(tmp_path / "store.db", tmp_path)
    shown = {r["run_id"]: r["kind"] for r in data.runs()}
    data.close()
    assert shown == {"exp.base": "eval", "exp.rl.1.step1": "rl", "exp.rl.2.step1": "rl",
                     "other": None}  # fmt: skip


def test_curves_show_only_for_the_attempt_the_stage_folder_holds(tmp_path: Path) -> None:
    run_dir = _run_folder(tmp_path)
    assert is_current_attempt("exp.rl.2.step1", "rl", run_dir)
    assert not is_current_attempt("exp.rl.1.step1", "rl", run_dir)
    assert not is_current_attempt("exp.rl.step1", "rl", run_dir)  # attempt 0
    data = ViewerData(run_dir / "store.db", run_dir)
    assert [c.name for c in data.curves("exp.rl.2.step1")] == ["reward_mean"]
    assert data.curves("exp.rl.1.step1") == []
    data.close()
