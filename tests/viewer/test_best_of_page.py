"""The group page of a best-of-N run: the N candidates, the selector's value for each and the
chosen one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from trajforge.judge.best_of import marked, select_best
from trajforge.judge.selectors import parse_selector
from trajforge.schema import Message, Outcome, Role, Task, Trajectory
from trajforge.store import TrajectoryStore
from trajforge.viewer.app import create_app
from trajforge.viewer.service import ViewerData

GROUP = "bo/task-0"


def candidate(index: int, confidence: float) -> Trajectory:
    return Trajectory(
        id=f"cand-{index}",
        task=Task(id="task-0", prompt="Reach G."),
        group_id=GROUP,
        sample_index=index,
        run_id="bo",
        messages=[
            Message(role=Role.USER, content="Reach G."),
            Message(role=Role.ASSISTANT, content="R", token_ids=[5], logprobs=[confidence]),
        ],
        outcome=Outcome(reward=float(index == 2)),
    )


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    selector = parse_selector("logprob")
    (choice,) = select_best(selector, [candidate(i, c) for i, c in enumerate([-1.0, -2.0, -0.5])])
    with TrajectoryStore(tmp_path / "store.db") as db:
        db.add_many(marked(selector, choice))
    with TestClient(create_app(ViewerData(tmp_path / "store.db", tmp_path))) as c:
        yield c


def test_group_api_names_the_selector_and_the_chosen_candidate(client: TestClient) -> None:
    group = client.get(f"/api/groups/{GROUP}").json()
    assert group["selector"] == "logprob"
    assert [m["best_of"]["chosen"] for m in group["members"]] == [False, False, True]
    assert [m["best_of"]["value"] for m in group["members"]] == [-1.0, -2.0, -0.5]


def test_group_page_shows_the_candidates_and_marks_the_chosen_one(client: TestClient) -> None:
    page = client.get(f"/groups/{GROUP}")
    assert page.status_code == 200
    assert "best-of-3 candidates, chosen by <b>logprob</b>" in page.text
    assert '<a id="chosen-link" href="/trajectories/cand-2">2</a>' in page.text
    assert page.text.count('class="member chosen"') == 1
    assert 'class="member chosen" data-id="cand-2"' in page.text


def test_a_plain_group_page_has_no_selection(tmp_path: Path) -> None:
    with TrajectoryStore(tmp_path / "store.db") as db:
        db.add(candidate(0, -1.0))
    with TestClient(create_app(ViewerData(tmp_path / "store.db", tmp_path))) as c:
        assert c.get(f"/api/groups/{GROUP}").json()["selector"] is None
        assert 'id="best-of"' not in c.get(f"/groups/{GROUP}").text
