"""nim: the one-pile subtraction game for two seats, ``p1`` and ``p2``, nothing hidden.

A pile of stones (5 to 24, drawn per task) lies between the seats; ``p1`` moves first. A move
takes 1, 2 or 3 stones, never more than remain, and whoever takes the last stone wins. Both
seats read the same view, the pile and the takes open to them:

    pile 13 take 1/2/3           (13 stones left; take one, two or three)
    1                            (the reply: leaves 12)

Zero-sum: the winner gets +1 and the loser -1; a reply that is no legal take (``4``, ``0``, a
word, more than remain) loses the game. A task is a pile, a seat for the agent and a seed for the
opponents' chance moves.

The mover wins exactly when the pile is not a multiple of 4: it leaves one (takes ``pile % 4``),
and from a multiple of 4 every take leaves another non-multiple (Bouton 1901, "Nim, a game with a
complete mathematical theory"; the subtraction game S = {1, 2, 3}).

Opponents: ``random`` (any legal take) and ``heuristic``, of fixed strength by design, so that a
learned policy has room to beat it: it takes the whole pile when it can (3 stones or fewer) and
otherwise a random legal take, drawn from the task's seed (it never plans ahead; against it
random play wins about one game in four and the best greedy player most). The heuristic is also
the env's scripted expert. ``best_response`` finds the most any greedy policy (a take for each
pile) wins against an opponent on given tasks.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence

from trajforge.envs.multiseat.base import (
    GameKit,
    GameResult,
    Opponent,
    SeatStep,
    TakingTurns,
    play_out,
    seeded_rng,
)
from trajforge.errors import ConfigError
from trajforge.schema import Task

NAME = "nim"
DESCRIPTION = "One-pile Nim for two seats (p1, p2): take 1-3 stones, the last stone wins."
SEATS = ("p1", "p2")
MAX_TAKE = 3
# From 5 stones up the agent moves at least once in either seat, and 20 piles x 2 seats x
# 1,000 seeds give far more distinct tasks than a run draws in either split.
MIN_PILE, MAX_PILE = 5, 24
SEEDS_PER_TASK = 1000
PERIOD = MAX_TAKE + 1
"""Leaving a multiple of this wins."""


def legal(pile: int) -> list[int]:
    """The takes open to the mover at ``pile``."""
    return list(range(1, min(MAX_TAKE, pile) + 1))


def parse_view(view: str) -> tuple[int, list[int]]:
    """The pile and legal takes of a view (``pile 13 take 1/2/3``)."""
    words = view.split()
    takes = words[3].split("/") if len(words) == 4 else []
    if (
        words[:1] != ["pile"]
        or words[2:3] != ["take"]
        or not all(map(str.isdigit, [*words[1:2], *takes]))
        or not takes
    ):
        raise ConfigError(f"{NAME}: not a nim view: {view!r}")
    return int(words[1]), [int(w) for w in takes]


def winning_take(pile: int) -> int | None:
    """The take that leaves a multiple of 4, or ``None`` at a multiple of 4 (a lost pile)."""
    return pile % PERIOD or None


class Nim(TakingTurns):
    name = NAME
    seats = SEATS
    zero_sum = True
    max_moves = MAX_PILE  # every legal move takes a stone

    def __init__(self) -> None:
        self.pile = 0
        self.moves = 0

    def reset(self, task: Task) -> None:
        pile = task.data["pile"]
        if not isinstance(pile, int) or pile < 1 or pile > MAX_PILE:
            raise ConfigError(f"{NAME}: task {task.id!r} has pile {pile!r}, not 1..{MAX_PILE}")
        self.pile, self.moves = pile, 0

    def system_prompt(self, seat: str) -> str:
        return "Nim: take 1, 2 or 3 stones; taking the last stone wins. Reply one digit."

    def observe(self, seat: str) -> str:
        return f"pile {self.pile} take {'/'.join(map(str, legal(self.pile)))}"

    def state_key(self) -> str:
        return f"{self.to_move}:{self.pile}"

    def step(self, reply: str) -> SeatStep:
        mover = self.to_move
        text = reply.strip()
        if not text.isdigit() or int(text) not in legal(self.pile):
            return SeatStep(True, self.forfeit(mover), invalid=True)
        self.pile -= int(text)
        self.moves += 1
        if self.pile == 0:
            return SeatStep(True, {s: (1.0 if s == mover else -1.0) for s in SEATS})
        return SeatStep(False)


def random_action(task: Task, view: str) -> str:
    _, takes = parse_view(view)
    return str(seeded_rng(task, view).choice(takes))


def heuristic_action(task: Task, view: str) -> str:
    pile, takes = parse_view(view)
    if pile <= MAX_TAKE:  # the last stone is in reach
        return str(pile)
    return str(seeded_rng(task, view).choice(takes))


def play_task(task: Task, policy: Mapping[int, int], opponent: Opponent) -> GameResult:
    """How ``task``'s seat fares taking ``policy[pile]`` against ``opponent``."""
    return play_out(Nim(), task, lambda game: str(policy[game.pile]), opponent)


def best_response(tasks: Sequence[Task], opponent: Opponent) -> tuple[float, dict[int, int]]:
    """The most of ``tasks`` any greedy policy wins against ``opponent``, and that policy.

    A greedy policy maps each pile to a take (the view shows nothing else, so both seats share
    it). At a pile that is no multiple of 4, leaving one wins every game that gets there, against
    any opponent, so no other take wins more; only the takes at the multiples of 4 are open, and
    every combination of them is played on every task (3^6 = 729 policies up to 24 stones). The
    opponent's replies are a function of the task and the view, so each is computed once."""
    replies: dict[tuple[str, int], str] = {}

    def cached(task: Task, view: str) -> str:
        key = (task.id, parse_view(view)[0])
        if key not in replies:
            replies[key] = opponent(task, view)
        return replies[key]

    top = max((t.data["pile"] for t in tasks), default=0)
    lost = list(range(PERIOD, top + 1, PERIOD))
    sure = {p: take for p in range(1, top + 1) if (take := winning_take(p)) is not None}
    best_wins, best_policy = -1, sure
    for takes in itertools.product(*map(legal, lost)):
        policy = sure | dict(zip(lost, takes, strict=True))
        wins = sum(play_task(t, policy, cached) is GameResult.WIN for t in tasks)
        if wins > best_wins:
            best_wins, best_policy = wins, policy
    return best_wins / len(tasks), best_policy


def _make_one(rng: random.Random) -> Task:
    """A pile, the agent's seat and a seed for chance moves."""
    pile = rng.randint(MIN_PILE, MAX_PILE)
    seat = rng.choice(SEATS)
    data = {"pile": pile, "seat": seat, "seed": rng.randrange(SEEDS_PER_TASK)}
    return Task(id="draft", prompt=f"{seat}, pile {pile}", data=data)


GAME = GameKit(NAME, Nim, _make_one, random=random_action, heuristic=heuristic_action)
