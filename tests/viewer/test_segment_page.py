"""A segment's trajectory page names its episode and index and marks a segment the agent's
fold opened."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from trajforge.rollout import FOLD_REASON
from trajforge.schema import Exactness, ExactnessKind, Segment
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore
from trajforge.viewer.advantages import group_advantages
from trajforge.viewer.app import create_app
from trajforge.viewer.service import ViewerData


def test_a_segment_page_links_its_episode_and_marks_the_fold(tmp_path: Path) -> None:
    first, last = synthetic_trajectory(0, run_id="r"), synthetic_trajectory(1, run_id="r")
    label = Exactness(
        kind=ExactnessKind.SPLIT,
        reason=f"context rewritten by {FOLD_REASON} at 600 tokens (budget 650)",
        split_from=first.id,
        rendered_prefix=2,
    )
    with TrajectoryStore(tmp_path / "store.db") as st:
        st.add_many(
            [
                first.model_copy(update={"segment": Segment(episode_id=last.id, index=0)}),
                last.model_copy(
                    update={"segment": Segment(episode_id=last.id, index=1), "exactness": label}
                ),
            ]
        )
    data = ViewerData(tmp_path / "store.db")
    with TestClient(create_app(data)) as client:
        folded = client.get(f"/trajectories/{last.id}").text
        before = client.get(f"/trajectories/{first.id}").text
    data.close()
    assert f'<dd id="segment">1 of episode <a href="/trajectories/{last.id}">' in folded
    assert 'id="fold-mark"' in folded
    assert f'<dd id="segment">0 of episode <a href="/trajectories/{last.id}">' in before
    assert 'id="fold-mark"' not in before


def test_a_groups_advantages_count_an_episode_once_whatever_its_segments() -> None:
    first, last = synthetic_trajectory(0, run_id="r"), synthetic_trajectory(1, run_id="r")
    other = synthetic_trajectory(2, run_id="r")
    group = {"group_id": "g"}
    chain = [
        first.model_copy(update={**group, "segment": Segment(episode_id=last.id, index=0)}),
        last.model_copy(update={**group, "segment": Segment(episode_id=last.id, index=1)}),
    ]
    rewarded = [
        t.model_copy(update={"outcome": t.outcome.model_copy(update={"reward": r})})
        for t, r in ((chain[0], 1.0), (chain[1], 1.0), (other.model_copy(update=group), 0.0))
    ]
    result = group_advantages(rewarded, "grpo")
    means = [row["mean"] for row in result["trajectories"]]
    assert means[0] is None
    assert means[1] == pytest.approx(2**-0.5, abs=1e-5)
    assert means[2] == pytest.approx(-(2**-0.5), abs=1e-5)
    assert result["metrics"]["groups"] == 1.0
