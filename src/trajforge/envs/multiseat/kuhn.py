"""kuhn-poker: Kuhn's three-card poker for two seats, ``p1`` and ``p2``, cards hidden.

The deck is J < Q < K; each seat antes one chip and is dealt one card it alone sees. ``p1``
acts first. A seat not facing a bet checks (``c``) or bets one chip (``b``); a seat facing a
bet calls (``c``) or folds (``f``). Check-check, bet-call and check-bet-call go to a showdown,
the higher card taking the pot. Each seat reads only its own card and the actions so far:

    card K seen cb reply c/f     (holding K; p1 checked, p2 bet; call or fold)
    c                            (the reply)

Zero-sum: a seat's reward is the chips it wins (+1 or +2) or loses; a reply that is no legal
action loses the game (-1). A task is a deal, a seat for the agent and a seed for the
opponents' chance moves.

Opponents: ``random`` (any legal action) and ``heuristic`` (bets or calls with K; with Q
checks, or bets after a check, and calls a bet one time in three; checks and folds with J); the heuristic is also the env's
scripted expert. ``best_response`` finds the most any greedy policy wins against an opponent
on given deals: against the heuristic, 11 deals in 18 on average (bluff with the jack, check or
call with the rest), where checking and calling always wins half.

Kuhn 1950, "A simplified two-person poker", Contributions to the Theory of Games I.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence

from trajforge.envs.multiseat.base import (
    GameKit,
    GameResult,
    MultiSeatEnv,
    Opponent,
    SeatStep,
    play_out,
    seeded_rng,
)
from trajforge.errors import ConfigError
from trajforge.schema import Task

NAME = "kuhn-poker"
DESCRIPTION = "Kuhn poker for two seats (p1, p2), cards hidden: reply c, b or f."
SEATS = ("p1", "p2")
RANKS = "JQK"
CHECK, BET, FOLD = "c", "b", "f"
SHOWDOWN_STAKES = {"cc": 1.0, "bc": 2.0, "cbc": 2.0}
FOLDS = {"bf": "p2", "cbf": "p1"}
SEEDS_PER_DEAL = 1000
QUEEN_CALLS = 1 / 3
DECISIONS = {"p1": ("", "cb"), "p2": ("c", "b")}
"""The histories at which each seat acts: with its card, all a seat can tell apart."""


def legal(history: str) -> str:
    """The actions open to the mover after ``history``."""
    return CHECK + FOLD if history.endswith(BET) else CHECK + BET


def parse_view(view: str) -> tuple[str, str, str]:
    """The card, history and legal actions of a view (``card K seen cb reply c/f``)."""
    words = view.split()
    if len(words) != 6 or words[0] != "card" or words[2] != "seen":
        raise ConfigError(f"{NAME}: not a poker view: {view!r}")
    history = "" if words[3] == "-" else words[3]
    return words[1], history, words[5].replace("/", "")


class KuhnPoker(MultiSeatEnv):
    name = NAME
    seats = SEATS
    zero_sum = True
    max_moves = 3

    def __init__(self) -> None:
        self.cards: dict[str, str] = {}
        self.history = ""

    def reset(self, task: Task) -> None:
        cards = task.data["cards"]
        if sorted(cards) != sorted(SEATS) or len(set(cards.values())) != len(SEATS):
            raise ConfigError(f"{NAME}: task {task.id!r} deals {cards}, not one card a seat")
        self.cards, self.history = dict(cards), ""

    @property
    def to_move(self) -> str:
        return SEATS[len(self.history) % 2]

    def system_prompt(self, seat: str) -> str:
        return "Kuhn poker, J<Q<K. c=check/call b=bet f=fold. Reply one letter."

    def observe(self, seat: str) -> str:
        seen = self.history or "-"
        return f"card {self.cards[seat]} seen {seen} reply {'/'.join(legal(self.history))}"

    def state_key(self) -> str:
        return f"{self.to_move}:{self.cards[self.to_move]}:{self.history}"

    def _showdown(self, stake: float) -> dict[str, float]:
        high = max(SEATS, key=lambda s: RANKS.index(self.cards[s]))
        return {s: (stake if s == high else -stake) for s in SEATS}

    def step(self, reply: str) -> SeatStep:
        mover = self.to_move
        action = reply.strip().lower()
        if len(action) != 1 or action not in legal(self.history):
            return SeatStep(True, self.forfeit(mover), invalid=True)
        self.history += action
        if self.history in SHOWDOWN_STAKES:
            return SeatStep(True, self._showdown(SHOWDOWN_STAKES[self.history]))
        if self.history in FOLDS:
            folder = FOLDS[self.history]
            return SeatStep(True, {s: (-1.0 if s == folder else 1.0) for s in SEATS})
        return SeatStep(False)


def random_action(task: Task, view: str) -> str:
    _, _, actions = parse_view(view)
    return seeded_rng(task, view).choice(actions)


def heuristic_action(task: Task, view: str) -> str:
    card, history, _ = parse_view(view)
    facing = history.endswith(BET)
    if card == "K":
        return CHECK if facing else BET
    if card == "Q":
        if not facing:  # second to act after a check, a queen bets against the jack
            return BET if history == CHECK else CHECK
        return CHECK if seeded_rng(task, view).random() < QUEEN_CALLS else FOLD
    return FOLD if facing else CHECK


def play_deal(task: Task, replies: Mapping[str, str], opponent: Opponent) -> GameResult:
    """How ``task``'s seat fares answering ``replies[history]`` against ``opponent``."""
    return play_out(KuhnPoker(), task, lambda game: replies[game.history], opponent)


def best_response(tasks: Sequence[Task], opponent: Opponent) -> tuple[float, dict[str, str]]:
    """The most of ``tasks`` any greedy policy wins against ``opponent``, and that policy.

    A greedy policy answers each card and history its seat sees with one action, and the deals
    of one seat and card share nothing else, so each (seat, card) picks the best of its four
    answer pairs alone. The policy maps ``"<seat> <card> <history>"`` (``-`` for none) to its
    action."""
    wins = 0
    policy: dict[str, str] = {}
    for (seat, histories), card in itertools.product(DECISIONS.items(), RANKS):
        dealt = [t for t in tasks if t.data["seat"] == seat and t.data["cards"][seat] == card]
        pairs = [
            dict(zip(histories, a, strict=True)) for a in itertools.product(*map(legal, histories))
        ]
        won = [sum(play_deal(t, pair, opponent) is GameResult.WIN for t in dealt) for pair in pairs]
        best = max(range(len(pairs)), key=won.__getitem__)
        wins += won[best]
        policy |= {f"{seat} {card} {h or '-'}": a for h, a in pairs[best].items()}
    return wins / len(tasks), policy


def _make_one(rng: random.Random) -> Task:
    """A deal, the agent's seat and a seed for chance moves."""
    dealt = rng.sample(RANKS, len(SEATS))
    cards = dict(zip(SEATS, dealt, strict=True))
    seat = rng.choice(SEATS)
    data = {"cards": cards, "seat": seat, "seed": rng.randrange(SEEDS_PER_DEAL)}
    return Task(id="draft", prompt=f"{seat} holds {cards[seat]}", data=data)


GAME = GameKit(NAME, KuhnPoker, _make_one, random=random_action, heuristic=heuristic_action)
