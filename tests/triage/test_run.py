from __future__ import annotations

from pathlib import Path

from trajforge.store.filters import TrajectoryFilter
from trajforge.store.sqlite import TrajectoryStore
from trajforge.triage import (
    Signal,
    TriageVerdict,
    failure_table,
    stored_failure_table,
    triage,
    triage_store,
)

from .conftest import GOOD, episode

BAD = ("calculator", {"expression": "6*"}, "Error: invalid syntax")


def _store(tmp_path: Path) -> TrajectoryStore:
    st = TrajectoryStore(tmp_path / "store.db")
    st.add_many(
        [
            episode([GOOD], run_id="r1"),
            episode([BAD, GOOD], run_id="r1"),
            episode([GOOD, GOOD, GOOD], "The answer is 41", reward=0.0, run_id="r2"),
            episode([], None, reward=None, run_id=None),
        ]
    )
    return st


def test_a_verdict_round_trips_through_its_scores() -> None:
    traj = episode([BAD, GOOD, GOOD, GOOD], "The answer is 41", reward=0.0)
    verdict = triage(traj)
    traj.scores.extend(verdict.scores())
    assert TriageVerdict.from_scores(traj) == verdict
    assert traj.score("triage.loop") is not None
    assert traj.score("triage").value == 0.0  # type: ignore[union-attr]
    assert TriageVerdict.from_scores(episode([GOOD])) is None


def test_triaging_a_store_stores_scores_that_filter_and_replace(tmp_path: Path) -> None:
    with _store(tmp_path) as st:
        verdicts = list(triage_store(st))
        assert len(verdicts) == 4
        assert st.count(score="triage") == 4
        assert st.count(score="triage.tool_error") == 1
        assert st.count(score="triage", max_score=0.0) == 3
        # Triaging again replaces the verdict instead of piling a second one beside it.
        list(triage_store(st))
        bodies = st.query()
        assert all(sum(s.name == "triage" for s in t.scores) == 1 for t in bodies)
        assert st.count(score="triage.tool_error") == 1


def test_the_failure_table_per_run_matches_the_stored_one(tmp_path: Path) -> None:
    with _store(tmp_path) as st:
        table = failure_table(list(triage_store(st)))
        stored = stored_failure_table(st)
    assert [r.run for r in table] == ["", "r1", "r2", "all"]
    assert [r.model_dump() for r in table] == [r.model_dump() for r in stored]
    by_run = {r.run: r for r in table}
    assert (by_run["r1"].trajectories, by_run["r1"].failed) == (2, 1)
    assert by_run["r1"].signals == {Signal.TOOL_ERROR: 1}
    assert by_run["r2"].signals == {Signal.LOOP: 1, Signal.WRONG_ANSWER: 1}
    assert by_run[""].signals == {Signal.NO_FINAL_ANSWER: 1}
    assert by_run["all"].trajectories == 4


def test_triage_of_one_run_leaves_the_others_alone(tmp_path: Path) -> None:
    with _store(tmp_path) as st:
        verdicts = list(triage_store(st, TrajectoryFilter(run="r2")))
        assert [v.run_id for v in verdicts] == ["r2"]
        assert st.count(score="triage") == 1
        assert [r.run for r in stored_failure_table(st)] == ["r2"]
