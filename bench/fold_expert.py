"""keydoor-compact's expert for an agent that folds its own context (``context.strategy: fold``):
a shortest path, and every ``FOLD_EVERY`` moves a ``fold`` call whose summary is the board's
current compact observation: the one thing the agent needs after the fold, since the opening it
keeps shows the start square. A demonstrations stage plays it as
``policy: script:bench/fold_expert.py:fold_expert``.

After a fold the history no longer holds the earlier moves, so the board cannot be replayed from
the task: the expert keeps the board each of its folds left, by task and summary, and replays
the moves made since.
"""

from __future__ import annotations

from collections.abc import Sequence

from trajforge.envs.builtin.gridworld import Status
from trajforge.envs.builtin.keydoor import KeyBoard
from trajforge.envs.builtin.keydoor_compact import LETTERS, observe, parse_move
from trajforge.formats.tool_calls import format_tool_call
from trajforge.rollout.context import FOLD, FOLD_HEADER
from trajforge.schema import Message, Role, Task

FOLD_EVERY = 3
"""Moves between folds: with a 48-token turn, 3 moves after a fold (~30 tokens each) still leave room for the
next fold call within the fold arm's budget (bench/context.py)."""

_FOLDED: dict[tuple[str, str], KeyBoard] = {}


def _board(task: Task, messages: Sequence[Message]) -> tuple[KeyBoard, int]:
    """The board now and the moves made since the last fold (or the start)."""
    start, board = 0, KeyBoard.from_task(task)
    for i, message in enumerate(messages):
        if message.role is Role.USER and message.text.startswith(FOLD_HEADER):
            key = (task.id, message.text.removeprefix(FOLD_HEADER))
            if key not in _FOLDED:
                raise ValueError(f"fold_expert: task {task.id}: a fold this expert did not make")
            start, board = i + 1, _FOLDED[key]
    moves = 0
    for message in messages[start:]:
        if message.role is not Role.ASSISTANT:
            continue
        moves += 1
        direction = parse_move(message.text)
        if direction is not None and board.status is Status.PLAYING:
            board, _ = board.move(direction)
    return board, moves


def fold_expert(task: Task, messages: list[Message]) -> str | None:
    """The next reply: a fold every ``FOLD_EVERY`` moves, else a shortest path's first move
    (None once the goal is reached)."""
    board, moves = _board(task, messages)
    path = board.shortest_path() if board.status is Status.PLAYING else None
    if not path:
        return None
    if moves >= FOLD_EVERY:
        summary = observe(board)
        _FOLDED[(task.id, summary)] = board
        return format_tool_call(FOLD, {"summary": summary})
    return next(letter for letter, word in LETTERS.items() if word == path[0])
