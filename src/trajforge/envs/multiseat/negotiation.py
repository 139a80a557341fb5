"""negotiation: two seats, ``a`` and ``b``, split a pool of items; each values them privately.

The pool holds three kinds of item (1 to 3 of each). Each seat has its own values per kind,
seen by it alone, that make the whole pool worth 10 to it. Seats take turns, ``a`` first, for
at most ``MAX_MOVES`` moves: a move proposes what the mover takes (a count per kind, the rest
going to the other seat) or accepts the standing proposal (``a``):

    pool 3 1 2 worth 1 3 2 offer 1 0 2 left 3     (the view: ``offer`` is what this seat
                                                   gets if it accepts, ``-`` when none stands)
    2 1 0                                         (the reply: take 2, 1 and 0, leave the rest)

The deal is checked (every count between 0 and the pool's), and each seat's reward is what its
share is worth to it, over 10: general-sum, so both gain from a deal. No deal by the last move
rewards nothing; a reply that is no valid move ends the game, the offender at -1.

Opponents: ``random`` (accepts one time in three, else proposes a random split) and
``heuristic`` (accepts an offer worth at least its demand, which falls from 7 to 1 as the
moves run out, else takes its most valued items until they are worth 7); the heuristic is
also the env's scripted expert.

After Lewis et al. 2017, "Deal or No Deal? End-to-End Learning for Negotiation Dialogues",
arXiv:1706.05125 (three kinds of item, private values, a pool worth 10 to each side).
"""

from __future__ import annotations

import itertools
import random

from trajforge.envs.multiseat.base import (
    GameKit,
    SeatStep,
    TakingTurns,
    seeded_rng,
)
from trajforge.errors import ConfigError
from trajforge.schema import Task

NAME = "negotiation"
DESCRIPTION = "split three kinds of item with private values (a, b): propose counts or accept."
SEATS = ("a", "b")
ACCEPT = "a"
KINDS = 3
POOL_WORTH = 10
MAX_MOVES = 6
DEMAND = 7
ACCEPT_CHANCE = 1 / 3

Counts = tuple[int, ...]


def worth(values: Counts, share: Counts) -> int:
    return sum(v * n for v, n in zip(values, share, strict=True))


def parse_counts(text: str, pool: Counts) -> Counts | None:
    """The share a proposal names (a count per kind within the pool), else None."""
    words = text.split()
    if len(words) != KINDS or not all(w.isdigit() for w in words):
        return None
    share = tuple(int(w) for w in words)
    return share if all(n <= p for n, p in zip(share, pool, strict=True)) else None


def _numbers(words: list[str]) -> Counts:
    return tuple(int(w) for w in words)


def parse_view(view: str) -> tuple[Counts, Counts, Counts | None, int]:
    """Pool, values, the offer (None: none stands) and moves left of a seat's view."""
    words = view.split()
    if len(words) < 11 or words[0] != "pool" or words[4] != "worth" or words[8] != "offer":
        raise ConfigError(f"{NAME}: not a negotiation view: {view!r}")
    offer = None if words[9] == "-" else _numbers(words[9 : 9 + KINDS])
    return _numbers(words[1:4]), _numbers(words[5:8]), offer, int(words[-1])


def _show(counts: Counts) -> str:
    return " ".join(str(n) for n in counts)


class Negotiation(TakingTurns):
    name = NAME
    seats = SEATS
    zero_sum = False
    max_moves = MAX_MOVES

    def __init__(self) -> None:
        self.pool: Counts = ()
        self.values: dict[str, Counts] = {}
        self.proposal: tuple[str, Counts] | None = None
        """Who proposed, and what they take."""
        self.moves = 0

    def reset(self, task: Task) -> None:
        self.pool = tuple(task.data["pool"])
        self.values = {s: tuple(v) for s, v in task.data["values"].items()}
        for seat in SEATS:
            if worth(self.values[seat], self.pool) != POOL_WORTH:
                raise ConfigError(f"{NAME}: task {task.id!r}: the pool is not worth 10 to {seat}")
        self.proposal, self.moves = None, 0

    def system_prompt(self, seat: str) -> str:
        return "Split the pool. Reply counts you take (e.g. 2 0 1) or a to accept the offer."

    def _offer_to(self, seat: str) -> Counts | None:
        if self.proposal is None or self.proposal[0] == seat:
            return None
        taken = self.proposal[1]
        return tuple(p - n for p, n in zip(self.pool, taken, strict=True))

    def observe(self, seat: str) -> str:
        offer = self._offer_to(seat)
        shown = "-" if offer is None else _show(offer)
        left = MAX_MOVES - self.moves
        return f"pool {_show(self.pool)} worth {_show(self.values[seat])} offer {shown} left {left}"

    def state_key(self) -> str:
        return f"{self.to_move}:{self.observe(self.to_move)}"

    def step(self, reply: str) -> SeatStep:
        mover = self.to_move
        text = reply.strip().lower()
        offer = self._offer_to(mover)
        self.moves += 1
        if text == ACCEPT and offer is not None:
            assert self.proposal is not None
            proposer, taken = self.proposal
            shares = {mover: offer, proposer: taken}
            rewards = {s: worth(self.values[s], shares[s]) / POOL_WORTH for s in SEATS}
            return SeatStep(True, rewards, info={"deal": {s: list(v) for s, v in shares.items()}})
        share = parse_counts(text, self.pool)
        if share is None:
            return SeatStep(True, self.forfeit(mover), invalid=True)
        self.proposal = (mover, share)
        if self.moves >= MAX_MOVES:
            return SeatStep(True, dict.fromkeys(SEATS, 0.0), info={"deal": None})
        return SeatStep(False)


def random_move(task: Task, view: str) -> str:
    pool, _, offer, _ = parse_view(view)
    rng = seeded_rng(task, view)
    if offer is not None and rng.random() < ACCEPT_CHANCE:
        return ACCEPT
    return _show(tuple(rng.randint(0, p) for p in pool))


def demand(left: int) -> int:
    """What the heuristic holds out for with ``left`` moves to go (this one included)."""
    return max(1, DEMAND - (MAX_MOVES - left))


def heuristic_move(task: Task, view: str) -> str:
    pool, values, offer, left = parse_view(view)
    if offer is not None and worth(values, offer) >= demand(left):
        return ACCEPT
    kinds = sorted(range(KINDS), key=lambda k: -values[k])
    share = [0] * KINDS
    for k in kinds:
        while share[k] < pool[k] and worth(values, tuple(share)) < DEMAND and values[k] > 0:
            share[k] += 1
    return _show(tuple(share))


def valuations(pool: Counts) -> list[Counts]:
    """Every value per kind that makes ``pool`` worth exactly 10 (none for some pools)."""
    return [
        values
        for values in itertools.product(*(range(POOL_WORTH // n + 1) for n in pool))
        if worth(values, pool) == POOL_WORTH
    ]


def _make_one(rng: random.Random) -> Task:
    """A pool with both seats' values and the seat the agent takes."""
    pool: Counts = ()
    options: list[Counts] = []
    while not options:  # a pool such as 3 3 3 cannot be worth exactly 10
        pool = tuple(rng.randint(1, 3) for _ in range(KINDS))
        options = valuations(pool)
    values = {s: list(rng.choice(options)) for s in SEATS}
    seat = rng.choice(SEATS)
    data = {"pool": list(pool), "values": values, "seat": seat}
    return Task(id="draft", prompt=f"pool {_show(pool)}", data=data)


GAME = GameKit(NAME, Negotiation, _make_one, random=random_move, heuristic=heuristic_move)
