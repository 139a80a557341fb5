"""How well a policy plays a game: win/draw/loss rates against fixed opponents, and Elo ratings
across checkpoints.

``tally`` counts the results a seat's trajectories record (games played by
``trajforge.rollout.multiseat``: ``play_against`` a scripted opponent on held-out tasks), with a Wilson 95% interval on the win rate. ``elo_ratings`` fits
ratings to every pairing's results at once (Bradley-Terry by maximum likelihood, a draw
half a win to each side), so unlike a running Elo update it does not depend on the order
games were played. ``GamesSummary`` is what a run's ``results.json`` holds under ``games``
and the report shows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from trajforge.envs import GameResult
from trajforge.errors import ConfigError
from trajforge.judge import wilson_ci95
from trajforge.schema import Trajectory

ELO_SCALE = 400.0
ELO_MEAN = 1000.0
FIT_ITERATIONS = 500
# A player who won (or lost) every game has no finite maximum-likelihood rating; this many
# phantom draws against the field keep it finite (Hunter 2004, section 5's prior).
PRIOR_DRAWS = 1.0


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GameTally(_Frozen):
    """One player's results against one opponent, with the win rate's Wilson interval."""

    player: str
    opponent: str
    games: int
    wins: int
    draws: int
    losses: int
    win_rate: float
    win_low: float
    win_high: float


class EloRow(_Frozen):
    player: str
    rating: float
    games: int


class GamesSummary(_Frozen):
    """A game's evaluation: every tally and the Elo table, best first."""

    env: str
    tallies: list[GameTally]
    elo: list[EloRow]


def tally(trajs: Sequence[Trajectory], player: str, opponent: str) -> GameTally:
    """The results ``trajs`` (one seat's trajectories of finished games) record."""
    counts = dict.fromkeys(GameResult, 0)
    for t in trajs:
        result = t.metadata.get("result")
        if result is None:
            raise ConfigError(f"trajectory {t.id}: no metadata.result; the game did not finish")
        counts[GameResult(result)] += 1
    n = sum(counts.values())
    if n == 0:
        raise ConfigError(f"tally: no games of {player} against {opponent}")
    wins = counts[GameResult.WIN]
    low, high = wilson_ci95(wins, n)
    return GameTally(
        player=player,
        opponent=opponent,
        games=n,
        wins=wins,
        draws=counts[GameResult.DRAW],
        losses=counts[GameResult.LOSS],
        win_rate=wins / n,
        win_low=low,
        win_high=high,
    )


def elo_ratings(tallies: Sequence[GameTally]) -> list[EloRow]:
    """Ratings fitting every tally at once, best first, averaging ``ELO_MEAN``.

    Bradley-Terry: player ``i`` beats ``j`` with probability ``g_i / (g_i + g_j)``; the
    maximum-likelihood strengths come from the minorisation-maximisation update
    ``g_i <- W_i / sum_j n_ij / (g_i + g_j)`` (``W_i`` its wins, a draw counting half,
    ``n_ij`` the games between them), each player also given ``PRIOR_DRAWS`` drawn games
    against a phantom of strength 1. A rating is ``400 log10 g``, shifted so they average
    1000: a 400-point gap is 10:1 odds, as in Elo's scale.

    Hunter 2004, "MM algorithms for generalized Bradley-Terry models", Annals of Statistics
    32(1); Elo 1978, "The Rating of Chessplayers, Past and Present".
    """
    players = sorted({p for t in tallies for p in (t.player, t.opponent)})
    if not players:
        return []
    index = {p: i for i, p in enumerate(players)}
    size = len(players)
    games = [[0.0] * size for _ in range(size)]
    score = [PRIOR_DRAWS / 2] * size
    for t in tallies:
        i, j = index[t.player], index[t.opponent]
        games[i][j] += t.games
        games[j][i] += t.games
        score[i] += t.wins + t.draws / 2
        score[j] += t.losses + t.draws / 2
    strength = [1.0] * size
    for _ in range(FIT_ITERATIONS):
        strength = [
            score[i]
            / (
                PRIOR_DRAWS / (strength[i] + 1.0)
                + sum(games[i][j] / (strength[i] + strength[j]) for j in range(size) if j != i)
            )
            for i in range(size)
        ]
    logs = [ELO_SCALE * math.log10(g) for g in strength]
    shift = ELO_MEAN - sum(logs) / size
    played = [int(sum(row)) for row in games]
    rows = [
        EloRow(player=p, rating=logs[i] + shift, games=played[i]) for i, p in enumerate(players)
    ]
    return sorted(rows, key=lambda r: -r.rating)
