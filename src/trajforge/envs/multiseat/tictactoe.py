"""tictactoe: two seats, ``x`` and ``o``, on a 3x3 board, in a few tokens a move.

Each seat reads the board as three rows of ``x``, ``o`` and ``.`` and its own mark, and
replies with the number of an empty cell (1-9, row by row):

    x.o .x. ..o you x      (the view)
    6                      (the reply)

A task is an opening (0 to 3 moves already played, drawn at random) and the seat an agent
plays in it, so seeds give different games and a held-out split exists. Zero-sum: a win is
+1, a loss -1, a draw 0; a reply that is no empty cell loses the game.

Opponents: ``random`` (any empty cell) and ``heuristic`` (win if it can, else block, else
the centre, a corner, a side); the heuristic is also the env's scripted expert.
"""

from __future__ import annotations

import random

from trajforge.envs.multiseat.base import (
    GameKit,
    MultiSeatEnv,
    SeatStep,
    seeded_rng,
)
from trajforge.errors import ConfigError
from trajforge.schema import Task

NAME = "tictactoe"
DESCRIPTION = "tic-tac-toe for two seats (x, o): read the board, reply a cell 1-9."
SEATS = ("x", "o")
EMPTY = "."
LINES = (
    (0, 1, 2),
    (3, 4, 5),
    (6, 7, 8),
    (0, 3, 6),
    (1, 4, 7),
    (2, 5, 8),
    (0, 4, 8),
    (2, 4, 6),
)
CENTRE, CORNERS, SIDES = (4,), (0, 2, 6, 8), (1, 3, 5, 7)
MAX_OPENING = 3


def winner(cells: str) -> str | None:
    """The mark that holds a full line, if one does."""
    for a, b, c in LINES:
        if cells[a] != EMPTY and cells[a] == cells[b] == cells[c]:
            return cells[a]
    return None


def place(cells: str, cell: int, mark: str) -> str:
    return cells[:cell] + mark + cells[cell + 1 :]


def render(cells: str) -> str:
    return " ".join(cells[i : i + 3] for i in (0, 3, 6))


def parse_view(view: str) -> tuple[str, str]:
    """The cells and the mark of a seat's view (``x.o .x. ..o you x``)."""
    words = view.split()
    if len(words) != 5 or words[3] != "you":
        raise ConfigError(f"{NAME}: not a board view: {view!r}")
    return "".join(words[:3]), words[4]


def parse_cell(reply: str) -> int | None:
    """The cell index (0-8) a reply names, else None."""
    text = reply.strip()
    if len(text) == 1 and text in "123456789":
        return int(text) - 1
    return None


def to_move(cells: str) -> str:
    return SEATS[0] if cells.count(SEATS[0]) == cells.count(SEATS[1]) else SEATS[1]


class TicTacToe(MultiSeatEnv):
    name = NAME
    seats = SEATS
    zero_sum = True
    max_moves = 9

    def __init__(self) -> None:
        self.cells = EMPTY * 9

    def reset(self, task: Task) -> None:
        self.cells = EMPTY * 9
        for i, cell in enumerate(task.data["opening"]):
            self.cells = place(self.cells, cell, SEATS[i % 2])

    @property
    def to_move(self) -> str:
        return to_move(self.cells)

    def system_prompt(self, seat: str) -> str:
        return "Tic-tac-toe. Cells 1-9 row by row. Reply the number of an empty cell."

    def observe(self, seat: str) -> str:
        return f"{render(self.cells)} you {seat}"

    def state_key(self) -> str:
        return f"{self.cells}:{self.to_move}"

    def step(self, reply: str) -> SeatStep:
        mover = self.to_move
        cell = parse_cell(reply)
        if cell is None or self.cells[cell] != EMPTY:
            return SeatStep(True, self.forfeit(mover), invalid=True)
        self.cells = place(self.cells, cell, mover)
        won = winner(self.cells)
        if won is not None:
            return SeatStep(True, {s: (1.0 if s == won else -1.0) for s in SEATS})
        if EMPTY not in self.cells:
            return SeatStep(True, dict.fromkeys(SEATS, 0.0))
        return SeatStep(False)


def _empty(cells: str) -> list[int]:
    return [i for i, c in enumerate(cells) if c == EMPTY]


def random_move(task: Task, view: str) -> str:
    cells, _ = parse_view(view)
    return str(seeded_rng(task, view).choice(_empty(cells)) + 1)


def _completing(cells: str, mark: str) -> list[int]:
    """Empty cells that would complete a line of ``mark``."""
    return [i for i in _empty(cells) if winner(place(cells, i, mark)) == mark]


def heuristic_move(task: Task, view: str) -> str:
    cells, mark = parse_view(view)
    other = SEATS[1] if mark == SEATS[0] else SEATS[0]
    rng = seeded_rng(task, view)
    for options in (
        _completing(cells, mark),
        _completing(cells, other),
        *([i for i in group if cells[i] == EMPTY] for group in (CENTRE, CORNERS, SIDES)),
    ):
        if options:
            return str(rng.choice(options) + 1)
    raise ConfigError(f"{NAME}: no empty cell on {view!r}")


def _make_one(rng: random.Random) -> Task:
    """An opening (0 to 3 moves played) with the seat the agent takes."""
    cells = list(range(9))
    rng.shuffle(cells)
    opening = cells[: rng.randint(0, MAX_OPENING)]
    seat = rng.choice(SEATS)
    board = EMPTY * 9
    for i, cell in enumerate(opening):
        board = place(board, cell, SEATS[i % 2])
    return Task(id="draft", prompt=render(board), data={"opening": opening, "seat": seat})


GAME = GameKit(NAME, TicTacToe, _make_one, random=random_move, heuristic=heuristic_move)
