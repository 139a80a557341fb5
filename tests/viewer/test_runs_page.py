"""The runs page says what each run is: name, kind, env, model, start, episodes and success."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from trajforge.rollout import new_run_id
from trajforge.schema import Outcome
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore
from trajforge.viewer.app import create_app
from trajforge.viewer.service import ViewerData, run_labels


def test_runs_show_name_kind_env_model_and_success(tmp_path: Path) -> None:
    generated = new_run_id()
    path = tmp_path / "runs.db"
    with TrajectoryStore(path) as st:
        spec = {"env": "retail", "policy": {"name": "expert"}}
        st.set_run(generated, {"command": "eval", "spec": spec})
        st.set_run("baseline", {"kind": "collect", "env": "calculator", "model": "tiny"})
        for i, run in enumerate([generated, generated, "baseline"]):
            traj = synthetic_trajectory(i, run_id=run)
            st.add(traj.model_copy(update={"outcome": Outcome(reward=float(i % 2 == 0))}))
    data = ViewerData(path)
    runs = {r["run_id"]: r for r in data.runs()}
    assert {k: runs[generated][k] for k in ("name", "kind", "env", "model", "count")} == {
        "name": None, "kind": "eval", "env": "retail", "model": "expert", "count": 2
    }  # fmt: skip
    assert runs[generated]["success_text"] == "50.0%"
    assert (runs["baseline"]["name"], runs["baseline"]["env"]) == ("baseline", "calculator")
    with TestClient(create_app(data)) as client:
        page = client.get("/").text
    assert f'title="{generated}">{generated}</a>' in page  # no name: the id
    assert 'title="baseline">baseline</a>' in page
    for cell in ("<td>eval</td>", "<td>retail</td>", "<td>expert</td>", "<td>collect</td>"):
        assert cell in page
    data.close()


def test_a_run_without_metadata_says_nothing_it_does_not_know() -> None:
    assert run_labels("imported", {}) == {
        "name": "imported", "kind": None, "env": None, "model": None
    }  # fmt: skip
