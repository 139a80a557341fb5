"""The viewer tells the policy's failures from episodes lost to the infrastructure: a run's
failures split in two, and a trajectory page that says whose failure it was."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from trajforge.schema import Fault, Outcome, OutcomeStatus
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore
from trajforge.viewer.app import create_app
from trajforge.viewer.service import ViewerData

OUTCOMES = {
    "solved": Outcome(status=OutcomeStatus.OK, reward=1.0),
    "wrong": Outcome(status=OutcomeStatus.OK, reward=0.0),
    "cut": Outcome(status=OutcomeStatus.TRUNCATED, reason="max_turns", fault=Fault.POLICY),
    "crashed": Outcome(
        status=OutcomeStatus.ERROR,
        error="MCP server 'db' failed to start",
        reason="env_error",
        fault=Fault.INFRA,
    ),
    "survived": Outcome(
        status=OutcomeStatus.OK,
        reward=0.0,
        error="tool 'query': MCP server 'db' is not running: the connection closed",
        fault=Fault.INFRA,
    ),
}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TrajectoryStore(tmp_path / "store.db") as st:
        st.add_many(
            synthetic_trajectory(i, run_id="mixed").model_copy(update={"id": key, "outcome": o})
            for i, (key, o) in enumerate(OUTCOMES.items())
        )
    data = ViewerData(tmp_path / "store.db")
    with TestClient(create_app(data)) as c:
        yield c
    data.close()


def test_a_runs_failures_are_split_into_the_policys_and_the_infrastructures(
    client: TestClient,
) -> None:
    run = client.get("/api/runs/mixed").json()
    assert (run["policy_failures"], run["infra_failures"]) == (2, 2)
    page = client.get("/runs/mixed").text
    assert '<dd id="run-failures">policy 2 · infra 2</dd>' in page


def test_a_trajectory_lost_to_the_infrastructure_says_so(client: TestClient) -> None:
    survived = client.get("/trajectories/survived")
    assert 'id="infra-banner"' in survived.text
    assert "MCP server &#39;db&#39; is not running" in survived.text
    assert '<dd id="fault">infra</dd>' in survived.text
    crashed = client.get("/api/trajectories/crashed").json()
    assert crashed["fault"] == "infra" and crashed["infra"] is True
    cut = client.get("/trajectories/cut")
    assert 'id="infra-banner"' not in cut.text and '<dd id="fault">policy</dd>' in cut.text
    solved = client.get("/trajectories/solved")
    assert 'id="infra-banner"' not in solved.text and '<dd id="fault">-</dd>' in solved.text


def test_a_groups_advantages_leave_out_the_episode_lost_to_the_infrastructure(
    tmp_path: Path,
) -> None:
    rewards = [1.0, 0.0, 0.5]
    with TrajectoryStore(tmp_path / "store.db") as st:
        trajs = [synthetic_trajectory(i, run_id="g", samples_per_task=4) for i in range(4)]
        for t, r in zip(trajs, rewards, strict=False):
            t.outcome = Outcome(status=OutcomeStatus.OK, reward=r)
        trajs[3].outcome = Outcome(status=OutcomeStatus.ERROR, error="crash", fault=Fault.INFRA)
        st.add_many(trajs)
        group = trajs[0].group_id
    data = ViewerData(tmp_path / "store.db")
    with TestClient(create_app(data)) as client:
        view = client.get(f"/api/groups/{group}", params={"estimator": "rloo"}).json()
        page = client.get(f"/groups/{group}", params={"estimator": "rloo"}).text
    data.close()
    means = {m["sample_index"]: m["advantage"]["mean"] for m in view["members"]}
    # RLOO over the three that are left: R_i - mean of the other two.
    assert means[0] == pytest.approx(1.0 - 0.25)
    assert means[1] == pytest.approx(0.0 - 0.75)
    assert means[2] == pytest.approx(0.5 - 0.5)
    assert means[3] is None and view["metrics"]["groups"] == 1.0
    assert '<td class="n advantage">-</td>' in page
