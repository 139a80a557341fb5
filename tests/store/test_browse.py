"""Paged reads for browsing a store: sorted pages, the rows after a cursor, reward totals and
the model and text filters."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajforge.errors import StoreError
from trajforge.schema import Outcome, is_success
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore

N = 30


@pytest.fixture
def store(tmp_path: Path) -> TrajectoryStore:
    trajs = [synthetic_trajectory(i, run_id="a" if i % 3 else "b") for i in range(N)]
    trajs[4] = trajs[4].model_copy(update={"outcome": Outcome(reward=None), "model": "other"})
    trajs[7].messages[1].content = "A Needle in the haystack"
    trajs[8].messages[1].content = 'say "50%_off" \\ now\nplease'
    st = TrajectoryStore(tmp_path / "s.db", compress=True)
    st.add_many(trajs)
    return st


def test_pages_follow_the_sort_with_unscored_last_and_ties_by_insertion(
    store: TrajectoryStore,
) -> None:
    everything = store.page(order_by="reward", descending=True, limit=N)
    rewards = [r["reward"] for r in everything]
    assert rewards[-1] is None and None not in rewards[:-1]
    assert rewards[:-1] == sorted(rewards[:-1], reverse=True)
    pages = [store.page(order_by="reward", limit=7, offset=o) for o in range(0, N, 7)]
    assert [r["id"] for p in pages for r in p] == [r["id"] for r in everything]
    ascending = store.page(order_by="reward", descending=False, limit=N)
    assert ascending[-1]["reward"] is None  # unscored last either way
    by_run = store.page(order_by="run_id", descending=False, limit=N)
    firsts = [r["rowid"] for r in by_run if r["run_id"] == "a"]
    assert firsts == sorted(firsts)


def test_pages_filter_and_carry_the_model(store: TrajectoryStore) -> None:
    rows = store.page(run="a", min_reward=0.5, limit=N)
    assert rows and all(r["run_id"] == "a" and r["reward"] >= 0.5 for r in rows)
    assert len(rows) == store.count(run="a", min_reward=0.5)
    assert {r["model"] for r in rows} == {"synthetic"}
    assert [r["id"] for r in store.page(model="other")] == ["a-0000004"]
    assert store.count(model="othe") == 0  # the pre-check's substring is not the filter
    assert store.count(model='a "quoted" model') == 0
    (hit,) = store.page(text="needle IN THE")
    assert hit["id"].endswith("0000007")
    assert store.count(text="no such words anywhere") == 0
    assert store.count(score="correct", max_score=0.5) == store.count(max_reward=0.5)


@pytest.mark.parametrize(
    ("text", "hits"),
    [
        ('"50%_off"', 1),  # quotes inside the phrase
        ("50%_off", 1),  # LIKE's wildcards taken literally
        ("50%x", 0),
        ("5_%_off", 0),
        ("\\ now\nplease", 1),  # a backslash and a newline
        ('"role"', 0),  # in every body's JSON, in no message
        ("role", 0),
    ],
)
def test_text_search_matches_message_text_only(
    store: TrajectoryStore, text: str, hits: int
) -> None:
    assert store.count(text=text) == hits


def test_rows_after_a_cursor_and_the_last_cursor(store: TrajectoryStore) -> None:
    last = store.last_rowid()
    assert last == N
    assert store.summaries_after(last) == []
    newer = store.summaries_after(last - 5, run="a")
    assert [r["rowid"] for r in newer] == [i + 1 for i in range(N - 5, N) if i % 3]
    assert store.last_rowid(run="nobody") == 0


def test_reward_totals_per_run_and_status(store: TrajectoryStore) -> None:
    totals = store.reward_totals(0.5)
    assert sum(t["episodes"] for t in totals) == N
    assert sum(t["scored"] for t in totals) == N - 1
    rows = store.page(limit=N)
    rewards = [r["reward"] for r in rows if r["reward"] is not None]
    assert sum(t["reward_sum"] for t in totals) == pytest.approx(sum(rewards))
    succeeded = sum(is_success(r["status"], r["reward"], 0.5) for r in rows)
    assert 0 < succeeded < N - 1
    assert sum(t["successes"] for t in totals) == succeeded


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"order_by": "body"}, "order_by: 'body' is not one of"),
        ({"limit": 0}, "limit: 0 is not between 1 and 500"),
        ({"offset": -3}, "offset: -3 is negative"),
    ],
)
def test_bad_pages_are_named(store: TrajectoryStore, kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(StoreError, match=words):
        store.page(**kwargs)  # type: ignore[arg-type]
