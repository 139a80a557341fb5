"""Game evaluation: win/draw/loss tallies with Wilson intervals, Elo ratings, the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajforge.errors import ConfigError
from trajforge.judge.stats import wilson_ci95
from trajforge.report.games import GamesSummary, GameTally, elo_ratings, tally
from trajforge.report.html import build_report
from trajforge.schema import Outcome, OutcomeStatus, Task, Trajectory


def game(result: str | None) -> Trajectory:
    metadata = {"result": result} if result is not None else {}
    return Trajectory(
        task=Task(id="t", prompt=""),
        messages=[],
        outcome=Outcome(status=OutcomeStatus.OK),
        metadata=metadata,
    )


def record(player: str, opponent: str, wins: int, draws: int, losses: int) -> GameTally:
    return tally(
        [game("win")] * wins + [game("draw")] * draws + [game("loss")] * losses, player, opponent
    )


def test_tally_counts_results_with_a_wilson_interval() -> None:
    t = record("step-10", "heuristic", 6, 3, 1)
    assert (t.games, t.wins, t.draws, t.losses, t.win_rate) == (10, 6, 3, 1, 0.6)
    assert (t.win_low, t.win_high) == wilson_ci95(6, 10)
    with pytest.raises(ConfigError, match=r"no metadata\.result"):
        tally([game(None)], "a", "b")
    with pytest.raises(ConfigError, match="no games of a against b"):
        tally([], "a", "b")


def test_elo_orders_players_and_averages_1000() -> None:
    rows = elo_ratings(
        [
            record("step-20", "heuristic", 30, 10, 10),
            record("step-0", "heuristic", 5, 5, 40),
            record("step-20", "step-0", 40, 0, 10),
        ]
    )
    assert [r.player for r in rows] == ["step-20", "heuristic", "step-0"]
    assert sum(r.rating for r in rows) / 3 == pytest.approx(1000.0)
    assert {r.player: r.games for r in rows} == {"step-20": 100, "heuristic": 100, "step-0": 100}


def test_elo_reads_ten_to_one_odds_as_about_400_points_and_ignores_order() -> None:
    ten_to_one = [record("a", "b", 1000, 0, 100)]
    a, b = elo_ratings(ten_to_one)
    assert a.rating - b.rating == pytest.approx(400.0, abs=5.0)
    even = elo_ratings([record("a", "b", 10, 0, 10)])
    assert even[0].rating == pytest.approx(even[1].rating)
    tallies = [record("a", "b", 7, 1, 2), record("b", "c", 5, 0, 5), record("a", "c", 9, 0, 1)]
    assert elo_ratings(tallies) == elo_ratings(tallies[::-1])
    # A player who never lost still gets a finite rating.
    assert all(abs(r.rating) < 1e4 for r in elo_ratings([record("a", "b", 10, 0, 0)]))


def test_the_report_shows_the_games(tmp_path: Path) -> None:
    tallies = [record("after", "heuristic", 7, 2, 1), record("before", "heuristic", 1, 2, 7)]
    summary = GamesSummary(env="tictactoe", tallies=tallies, elo=elo_ratings(tallies))
    results = {"name": "sp", "stages": [], "store": None, "games": summary.model_dump()}
    (tmp_path / "results.json").write_text(json.dumps(results))
    html = build_report(tmp_path).read_text()
    assert "Games (tictactoe)" in html and 'id="elo"' in html
    assert "70.0% (39.7–89.2)" in html
    elo = html[html.index('id="elo"') :]
    assert elo.index("<td>after</td>") < elo.index("<td>before</td>")  # best first
