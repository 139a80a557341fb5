"""gridworld: a FrozenLake-like text game. Walk ``@`` to ``G`` with ``move``; holes end the game.

The board is rendered as text after every move. ``state_key`` is a hash of the board and the
agent's position, so the same state reached in different episodes of a task groups together.
The expert walks a shortest path found by breadth-first search.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, Self, TypeVar

from trajforge.envs.builtin.plan import accepted_results
from trajforge.envs.taskset import TRAIN, generate_unique
from trajforge.envs.tool import ToolContext, ToolError, tool
from trajforge.envs.tool_env import ToolEnv
from trajforge.formats import format_tool_call
from trajforge.schema import Evidence, Message, Task

NAME = "gridworld"
# Reaching the goal is seen on the board, never read from an answer key: best-of-N may choose by it.
ANSWER_FREE_VERIFIER = True
DESCRIPTION = "FrozenLake-like text game: walk to the goal, avoid holes; one move tool."
SYSTEM_PROMPT = "Reach G with the move tool, one move per turn. When you reach G, say so."
MOVES: dict[str, tuple[int, int]] = {
    "up": (-1, 0),
    "down": (1, 0),
    "left": (0, -1),
    "right": (0, 1),
}
FLOOR, WALL, HOLE, GOAL, START, AGENT = ".", "#", "H", "G", "S", "@"
MAX_PATH = 12
HIT_WALL = "You hit a wall and did not move."
State = TypeVar("State", bound=Hashable)


class Status(StrEnum):
    PLAYING = "playing"
    WON = "won"
    FELL = "fell"


@dataclass(frozen=True)
class Board:
    """An immutable game state: the layout, the agent's position and whether the game is over."""

    rows: tuple[str, ...]
    pos: tuple[int, int]
    status: Status = Status.PLAYING

    @classmethod
    def from_task(cls, task: Task) -> Self:
        rows = tuple(task.data["rows"])
        start = next(
            (r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == START
        )
        return cls(rows=rows, pos=start)

    def cell(self, r: int, c: int) -> str:
        if 0 <= r < len(self.rows) and 0 <= c < len(self.rows[0]):
            return self.rows[r][c]
        return WALL

    def ahead(self, direction: str) -> tuple[int, int, str]:
        """The square one move away in ``direction``, and what is on it."""
        dr, dc = MOVES[direction]
        r, c = self.pos[0] + dr, self.pos[1] + dc
        return r, c, self.cell(r, c)

    def move(self, direction: str) -> tuple[Board, str]:
        """The state after one move, and what happened in words."""
        r, c, target = self.ahead(direction)
        if target == WALL:
            return self, HIT_WALL
        if target == HOLE:
            return Board(self.rows, (r, c), Status.FELL), "You fell into a hole. Game over."
        if target == GOAL:
            return Board(self.rows, (r, c), Status.WON), "You reached the goal!"
        return Board(self.rows, (r, c)), f"You moved {direction}."

    def render(self) -> str:
        lines = []
        for r, row in enumerate(self.rows):
            chars = [FLOOR if ch == START else ch for ch in row]
            if r == self.pos[0] and self.status is not Status.FELL:
                chars[self.pos[1]] = AGENT
            lines.append("".join(chars))
        return "\n".join(lines)

    def key(self) -> str:
        payload = "|".join((*self.rows, f"{self.pos[0]},{self.pos[1]}", self.status.value))
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def shortest_path(self) -> list[str] | None:
        """Moves from the agent to the goal avoiding holes and walls (None if unreachable)."""

        def moves(cur: tuple[int, int]) -> Iterator[tuple[str, tuple[int, int]]]:
            for direction, (dr, dc) in MOVES.items():
                nxt = (cur[0] + dr, cur[1] + dc)
                if self.cell(*nxt) not in (WALL, HOLE):
                    yield direction, nxt

        return shortest_moves(self.pos, lambda cur: self.cell(*cur) == GOAL, moves)


def shortest_moves(
    start: State,
    is_goal: Callable[[State], bool],
    moves: Callable[[State], Iterable[tuple[str, State]]],
) -> list[str] | None:
    """Breadth-first search: the moves of a shortest path from ``start`` to a goal state
    (None if no goal is reachable); ``moves`` gives each state's moves and where they lead."""
    came: dict[State, tuple[State, str] | None] = {start: None}
    queue: deque[State] = deque([start])
    while queue:
        state = queue.popleft()
        if is_goal(state):
            path: list[str] = []
            step = came[state]
            while step is not None:
                state, direction = step
                path.append(direction)
                step = came[state]
            return path[::-1]
        for direction, nxt in moves(state):
            if nxt not in came:
                came[nxt] = (state, direction)
                queue.append(nxt)
    return None


@tool
async def move(direction: Literal["up", "down", "left", "right"], ctx: ToolContext) -> str:
    """Move one square; returns what happened and the board.

    Args:
        direction: One of up, down, left, right.
    """
    # Async with no await inside: the moves of one turn run on the event loop, one after
    # another in call order, never racing on the board (a sync tool would run in threads).
    board: Board = ctx.state["board"]
    if board.status is Status.WON:
        raise ToolError("the game is over: you already reached the goal")
    if board.status is Status.FELL:
        raise ToolError("the game is over: you fell into a hole")
    board, what = board.move(direction)
    ctx.state["board"] = board
    return f"{what}\n{board.render()}"


def replay(task: Task, messages: list[Message], board_type: type[Board] = Board) -> Board:
    """The board (a ``board_type``) after the moves in ``messages`` that the environment
    accepted (no error)."""
    accepted = {m.tool_call_id for m in accepted_results(messages)}
    board = board_type.from_task(task)
    for msg in messages:
        for call in msg.tool_calls:
            if call.id in accepted and call.name == "move" and board.status is Status.PLAYING:
                board, _ = board.move(str(call.arguments["direction"]))
    return board


def verify(evidence: Evidence) -> float:
    """1.0 when the accepted moves reach the goal, else 0.0."""
    won = replay(evidence.task, list(evidence.messages)).status is Status.WON
    return 1.0 if won else 0.0


def expert(task: Task, messages: list[Message]) -> str | None:
    """The first move of a shortest path from the current square; a short reply once done."""
    board = replay(task, messages)
    if board.status is Status.WON:
        return "I reached the goal."
    path = board.shortest_path() if board.status is Status.PLAYING else None
    if not path:
        return "I cannot reach the goal."
    return format_tool_call("move", {"direction": path[0]})


def _make_one(rng: random.Random) -> Task:
    while True:
        height, width = rng.randint(4, 6), rng.randint(4, 6)
        cells = [
            [rng.choices((FLOOR, HOLE, WALL), weights=(70, 20, 10))[0] for _ in range(width)]
            for _ in range(height)
        ]
        free = [(r, c) for r in range(height) for c in range(width)]
        start, goal = rng.sample(free, 2)
        cells[start[0]][start[1]], cells[goal[0]][goal[1]] = START, GOAL
        rows = tuple("".join(row) for row in cells)
        path = Board(rows=rows, pos=start).shortest_path()
        if path is not None and 4 <= len(path) <= MAX_PATH:
            break
    board = Board(rows=rows, pos=start)
    prompt = f"Walk @ to G. H is a hole, # is a wall. Row 1 is the top.\n{board.render()}"
    return Task(id="draft", prompt=prompt, data={"rows": list(rows), "shortest": len(path)})


def generate_tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
    """``n`` distinct solvable boards (4 to 12 moves from start to goal)."""
    return generate_unique(NAME, _make_one, n, seed, split)


class GridWorldEnv(ToolEnv):
    """A ``ToolEnv`` whose state is the board, so ``state_key`` hashes the board itself.

    ``board_type`` is the game's rules (a ``Board`` subclass brings its own moves and key)."""

    board_type: type[Board] = Board

    async def setup(self, context: ToolContext) -> None:
        context.state["board"] = self.board_type.from_task(context.task)
        await super().setup(context)

    def state_key(self) -> str:
        if self.context is None or "board" not in self.context.state:
            return super().state_key()
        board: Board = self.context.state["board"]
        return board.key()


BoardEnv = TypeVar("BoardEnv", bound=GridWorldEnv)


def board_env(
    env_class: type[BoardEnv],
    verifier: Callable[[Evidence], float],
    expert: Callable[[Task, list[Message]], str | None],
    *,
    max_path: int,
    **options: Any,
) -> BoardEnv:
    """A board game's env: the ``move`` tool, two turns per move of the longest path, and
    ``options`` (name, description, system prompt, overrides) passed on."""
    defaults: dict[str, Any] = {"max_turns": 2 * max_path, "tool_timeout": 5.0}
    return env_class([move], verifier=verifier, expert=expert, **(defaults | options))


def make_env(**kwargs: Any) -> GridWorldEnv:
    return board_env(
        GridWorldEnv,
        verify,
        expert,
        max_path=MAX_PATH,
        **({"name": NAME, "description": DESCRIPTION, "system_prompt": SYSTEM_PROMPT} | kwargs),
    )
