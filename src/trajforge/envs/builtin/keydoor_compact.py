"""keydoor-compact: keydoor's boards in a few tokens a turn, for credit assignment on a CPU.

The same boards, keys, doors, rewards and anchor states as ``keydoor``, but the agent never sees
the board. Each turn it reads where things are relative to it and answers with one letter:

    a D2 L1 A R3 G D1 R5 + D L     (key a 2 down 1 left, door A 3 right, the goal, and the
                                    moves down and left are open)
    R                              (the reply: U, D, L or R)

An observation names each key not yet held, each door and the goal with the moves that lead
there (a direction letter and a count per axis, ``0`` when the agent stands on it), then the
open moves after ``+``; after a move it opens with what happened when it was not a plain step
(``wall``, ``locked``, ``key``, ``?`` for a reply that is no move). The open moves are listed,
not the blocked ones, because a small policy copies a letter it sees more readily than it avoids
one: with the blocked sides listed, an SFT'd 7M policy bumped on half its moves. That is ~15
tokens a turn where keydoor's rendered board costs ~100, so an episode of 6 to 16 moves fits in a few
hundred tokens: small enough to train GRPO, turn-level returns and GiGPO side by side on two
cores, and with states (board, square, keys) that recur across the samples of a task, so
GiGPO's anchor groups form.

Rewards are keydoor's: 1.0 for reaching ``G`` (the episode ends there), ``KEY_REWARD`` on the
turn a key is picked up, nothing else. The expert plays a shortest path.
"""

from __future__ import annotations

import random
from typing import Any

from trajforge.envs.base import Env, StepResult
from trajforge.envs.builtin.gridworld import GOAL, MOVES, START, Status
from trajforge.envs.builtin.keydoor import DOORS, KEY_REWARD, KEYS, KeyBoard, draw_board
from trajforge.envs.taskset import TRAIN, generate_unique
from trajforge.errors import ConfigError
from trajforge.schema import Message, Role, Task

NAME = "keydoor-compact"
# Reaching the goal is seen on the board, never read from an answer key: best-of-N may choose by it.
ANSWER_FREE_VERIFIER = True
DESCRIPTION = "keydoor in a few tokens a turn: offsets of keys, doors and goal; reply U, D, L or R."
SYSTEM_PROMPT = "Reach G. Get key a for door A, b for B. Reply U, D, L or R."
LETTERS: dict[str, str] = {"U": "up", "D": "down", "L": "left", "R": "right"}
MIN_PATH, MAX_PATH = 6, 12
MAX_TURNS = 16
INVALID = "?"


def _offset(dr: int, dc: int) -> str:
    """Rows then columns to go, as a direction letter and a count each (``D2 L1``); ``0`` when
    the agent stands on it."""
    parts = [
        f"{letter}{abs(d)}"
        for d, letter in ((dr, "D" if dr > 0 else "U"), (dc, "R" if dc > 0 else "L"))
        if d
    ]
    return " ".join(parts) or "0"


def observe(board: KeyBoard) -> str:
    """The compact view of ``board``: where each unheld key, each door and the goal lie, then
    the open moves after ``+`` (a square is never closed in: the agent came from somewhere)."""
    r0, c0 = board.pos
    things: dict[str, tuple[int, int]] = {}
    for r, row in enumerate(board.rows):
        for c, ch in enumerate(row):
            if (ch in KEYS and ch not in board.keys) or ch in DOORS or ch == GOAL:
                things[ch] = (r - r0, c - c0)
    order = [ch for ch in (*KEYS, *DOORS, GOAL) if ch in things]
    parts = [f"{ch} {_offset(*things[ch])}" for ch in order]
    open_moves = [
        letter
        for letter, direction in LETTERS.items()
        if board.passable(r0 + MOVES[direction][0], c0 + MOVES[direction][1], board.keys)
    ]
    return " ".join([*parts, "+", *open_moves])


def parse_move(text: str) -> str | None:
    """The direction a reply names (``U``/``D``/``L``/``R``, any case, or the word), else None."""
    word = text.strip().lower()
    if word in MOVES:
        return word
    return LETTERS.get(word.upper())


def _step(board: KeyBoard, direction: str) -> tuple[KeyBoard, str]:
    """The board after a move and the event word the next observation opens with."""
    moved, what = board.move(direction)
    if moved.pos == board.pos:
        return moved, "locked" if "locked" in what else "wall"
    return moved, "key" if moved.keys != board.keys else ""


def replay(task: Task, messages: list[Message]) -> KeyBoard:
    """The board after the moves of the assistant's replies in ``messages``."""
    board = KeyBoard.from_task(task)
    for msg in messages:
        if msg.role is Role.ASSISTANT and board.status is Status.PLAYING:
            direction = parse_move(msg.text)
            if direction is not None:
                board, _ = _step(board, direction)
    return board


def expert(task: Task, messages: list[Message]) -> str | None:
    """The first move of a shortest path, as its letter; None once the goal is reached."""
    board = replay(task, messages)
    path = board.shortest_path() if board.status is Status.PLAYING else None
    if not path:
        return None
    return next(letter for letter, word in LETTERS.items() if word == path[0])


def _make_one(rng: random.Random) -> Task:
    board, shortest = draw_board(rng, MIN_PATH, MAX_PATH)
    data = {"rows": list(board.rows), "shortest": shortest}
    return Task(id="draft", prompt=observe(board), data=data)


def generate_tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
    """``n`` distinct solvable boards whose shortest solution is 6 to 12 moves."""
    return generate_unique(NAME, _make_one, n, seed, split)


class KeyDoorCompactEnv(Env):
    """One letter a turn in, one compact observation out; keydoor's rules and rewards."""

    def __init__(self, max_turns: int = MAX_TURNS, system_prompt: str = SYSTEM_PROMPT) -> None:
        super().__init__()
        if max_turns < 1:
            raise ConfigError(f"{NAME}: max_turns must be at least 1, got {max_turns}")
        self.name = NAME
        self.description = DESCRIPTION
        self.max_turns = max_turns
        self.system_prompt = system_prompt
        self.task: Task | None = None
        self.board: KeyBoard | None = None
        self.turn = 0

    def adopt_limits(self, *, max_turns: int | None, tool_timeout_s: float | None) -> None:
        if max_turns is not None:
            self.max_turns = max_turns

    async def reset(self, task: Task) -> list[Message]:
        self.task, self.board, self.turn = task, KeyBoard.from_task(task), 0
        if START not in "".join(task.data["rows"]):
            raise ConfigError(f"{NAME}: task {task.id!r} has no start square")
        return [
            Message(role=Role.SYSTEM, content=task.system or self.system_prompt),
            Message(role=Role.USER, content=task.prompt),
        ]

    def state_key(self) -> str:
        if self.board is None:
            raise ConfigError(f"{NAME}: reset(task) must be called before the episode starts")
        return self.board.key()

    async def step(self, action: Message) -> StepResult:
        if self.board is None or self.board.status is not Status.PLAYING:
            raise ConfigError(f"{NAME}: step() needs a running episode; call reset(task)")
        key = self.state_key()
        self.turn += 1
        direction = parse_move(action.text)
        if direction is None:
            event, board = INVALID, self.board
        else:
            board, event = _step(self.board, direction)
        gained = len(board.keys - self.board.keys)
        self.board = board
        info: dict[str, Any] = {"turns": self.turn, "invalid": direction is None}
        if board.status is Status.WON:
            return StepResult([], 1.0, True, {**info, "truncated": False}, key)
        if self.turn >= self.max_turns:
            return StepResult([], 0.0, True, {**info, "truncated": True}, key)
        text = observe(board) if not event else f"{event} {observe(board)}"
        observation = Message(role=Role.USER, content=text)
        return StepResult([observation], KEY_REWARD * gained, False, info, key)

    def expert(self, task: Task, messages: list[Message]) -> str | None:
        return expert(task, messages)


def make_env(**kwargs: Any) -> KeyDoorCompactEnv:
    return KeyDoorCompactEnv(**kwargs)
