"""The trajectory page shows the exactness label, and for one that is not exact, why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from trajforge.schema import Exactness, ExactnessKind
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore
from trajforge.viewer.app import create_app
from trajforge.viewer.service import ViewerData

SPLIT = Exactness(kind=ExactnessKind.SPLIT, reason="message 2 was edited", split_from="first")


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TrajectoryStore(tmp_path / "store.db") as st:
        st.add_many(
            [
                synthetic_trajectory(0, run_id="r").model_copy(update={"id": "first"}),
                synthetic_trajectory(1, run_id="r").model_copy(
                    update={"id": "second", "exactness": SPLIT}
                ),
            ]
        )
    data = ViewerData(tmp_path / "store.db")
    with TestClient(create_app(data)) as c:
        yield c
    data.close()


def test_an_exact_trajectory_says_so_without_a_banner(client: TestClient) -> None:
    page = client.get("/trajectories/first").text
    assert '<dd id="exactness">exact</dd>' in page
    assert 'id="exactness-banner"' not in page


def test_a_split_trajectory_says_why_and_links_where_it_broke_off(client: TestClient) -> None:
    page = client.get("/trajectories/second").text
    assert '<dd id="exactness">split</dd>' in page
    assert "split: message 2 was edited" in page
    assert '<a href="/trajectories/first">first</a>' in page
    api = client.get("/api/trajectories/second").json()
    assert api["exactness"] == {
        "kind": "split",
        "reason": "message 2 was edited",
        "split_from": "first",
        "rendered_prefix": None,
    }
