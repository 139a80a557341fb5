"""``TrajectoryFilter``: one filter for the store, the CLI and the viewer; its checks name the
field as each caller spells it, and its SQL reads no body."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajforge.errors import ConfigError, StoreError
from trajforge.schema import Message, Role, ToolCall
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryFilter, TrajectoryStore
from trajforge.store.filters import as_filter, validate_named, where_clause
from trajforge.store.text_index import search_text


@pytest.mark.parametrize(
    ("fields", "plain", "option"),
    [
        ({"min_reward": 0.9, "max_reward": 0.1}, "min_reward: 0.9 is above max_reward 0.1",
         "--min-reward: 0.9 is above --max-reward 0.1; nothing can match"),
        ({"min_score": 0.5}, "min_score: name the score it filters on with score",
         "--min-score: name the score it filters on with --score"),
        ({"status": "okk"}, "status: 'okk' is not one of ok, truncated, error, timeout",
         "--status: 'okk' is not one of ok, truncated, error, timeout"),
        ({"max_reward": float("nan")}, "max_reward: must be a finite number, got nan",
         "--max-reward: must be a finite number, got nan"),
        ({"colour": "red"}, "colour: not a filter", "--colour: not a filter"),
    ],
)  # fmt: skip
def test_a_filter_that_cannot_match_is_refused_naming_the_field(
    fields: dict[str, object], plain: str, option: str
) -> None:
    with pytest.raises(StoreError) as store_error:
        as_filter(None, fields)
    assert str(store_error.value).startswith(plain)
    with pytest.raises(ConfigError) as cli_error:
        validate_named(TrajectoryFilter, fields, lambda f: "--" + f.replace("_", "-"), ConfigError)
    assert str(cli_error.value).startswith(option)


def test_keywords_apply_over_a_filter() -> None:
    base = TrajectoryFilter(run="a", min_reward=0.5)
    assert as_filter(base, {}) is base
    assert as_filter(base, {"run": "b"}) == TrajectoryFilter(run="b", min_reward=0.5)
    with pytest.raises(StoreError, match=r"min_reward: 0\.3 is above max_reward 0\.2"):
        as_filter(base, {"max_reward": 0.2, "min_reward": 0.3})


def test_no_condition_reads_a_body() -> None:
    every = TrajectoryFilter(
        run="r", env="e", status="ok", task="t", group="g", model="m", min_reward=0,
        max_reward=1, score="s", min_score=0, max_score=1, text="words",
    )  # fmt: skip
    sql, params = where_clause(every)
    assert "bodies" not in sql and "json" not in sql
    assert sql.count("?") == len(params) == 12
    assert where_clause(TrajectoryFilter()) == ("", [])


def test_search_text_holds_contents_and_calls_without_joining_them() -> None:
    traj = synthetic_trajectory(0)
    call = ToolCall(id="c9", name="lookup", arguments={"q": "ß 42"}, raw="<oops>", parse_error="x")
    traj.messages.insert(2, Message(role=Role.ASSISTANT, content="ending", tool_calls=[call]))
    traj.messages.insert(3, Message(role=Role.TOOL, content="starting", tool_call_id="c9"))
    text = search_text(traj)
    assert "lookup" in text and '{"q":"ß 42"}' in text and "<oops>" in text
    assert "ending starting" not in text and "endingstarting" not in text


def test_text_matches_words_in_order_ignoring_case_and_punctuation(tmp_path: Path) -> None:
    traj = synthetic_trajectory(0)
    traj.messages[1].content = "Count to a MILLION, ok? München (50%)"
    with TrajectoryStore(tmp_path / "s.db") as store:
        store.add(traj)
        hits = ("a million", "a mil", "million ok", "ok?", "MUNCHEN", "(50", "%)")
        assert [store.count(text=q) for q in hits] == [1] * len(hits)
        misses = ("illion", "a billion", "count a", "50 percent", "?!")
        assert [store.count(text=q) for q in misses] == [0] * len(misses)
        traj.messages[1].content = "Count to a billion"
        store.put(traj)
        assert (store.count(text="a million"), store.count(text="A BILLION")) == (0, 1)
