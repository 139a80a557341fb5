"""The triage page: the stored failure table per run, each count linking to its trajectories."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from trajforge.store import TrajectoryStore
from trajforge.triage import triage_store
from trajforge.viewer.app import create_app
from trajforge.viewer.service import ViewerData
from triage.conftest import GOOD, episode

BAD = ("calculator", {"expression": "6*"}, "Error: invalid syntax")


def test_the_failure_table_links_each_count_to_its_trajectories(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with TrajectoryStore(path) as st:
        st.add_many(
            [
                episode([GOOD], run_id="alpha"),
                episode([BAD, GOOD], run_id="alpha"),
                episode([GOOD, GOOD, GOOD], "The answer is 41", reward=0.0, run_id="beta"),
            ]
        )
    data = ViewerData(path)
    with TestClient(create_app(data)) as client:
        before = client.get("/triage")
        assert before.status_code == 200
        assert "has been triaged yet" in before.text
        with TrajectoryStore(path) as st:
            list(triage_store(st))
        page = client.get("/triage").text
        api = client.get("/api/triage").json()
        one = client.get("/api/triage", params={"run": "bet"}).json()
        missing = client.get("/triage", params={"run": "gamma"})
        listed = client.get("/trajectories", params={"score": "triage.tool_error"}).text
    assert [r["run"] for r in api["rows"]] == ["alpha", "beta", "all"]
    assert [s["name"] for s in api["signals"]] == ["tool_error", "loop", "wrong_answer"]
    assert [(r["run"], r["failed"]) for r in one["rows"]] == [("beta", 1)]
    assert 'href="/trajectories?score=triage.tool_error&amp;run=alpha">1</a>' in page
    assert 'href="/trajectories?score=triage&amp;max_score=0&amp;run=beta">1</a>' in page
    assert missing.status_code == 404 and "gamma" in missing.text
    assert ">alpha<" in listed and ">beta<" not in listed
    data.close()
