"""keydoor: a gridworld with keys and doors, where credit across turns matters.

Walk ``@`` to ``G`` with ``move``. A lowercase letter is a key, picked up by stepping on it; the
uppercase letter of the same name is a door that the agent can only walk through while holding
that key (keys are kept). Every board is split by one or two walls whose only gap is a door, so
the goal cannot be reached without fetching a key first (a detour whose worth shows only
turns later); the shortest solution is 6 to 20 moves.

Rewards (what RL estimators read):

- the outcome, the verifier's verdict: 1.0 when the accepted moves reach ``G``, else 0.0. The
  episode ends on the turn that reaches ``G``;
- a per-turn reward ``KEY_REWARD`` (0.1) for every key picked up in that turn. Keys cannot be
  dropped, so an episode earns it at most once per key and no move sequence can farm it; the
  most a failed episode earns is 0.2 (two keys), well under a success. A turn's reward is only
  stored when the episode goes on after it (the turn that ends an episode carries the outcome
  instead). GRPO ignores per-turn rewards; ``turn_returns`` and ``gigpo`` add them to the
  outcome (see ``trajforge.algos``).

``state_key`` hashes the board, the agent's position and the keys held, so the same situation
reached by different samples of a task (or twice in one) groups together: GiGPO's anchor
states. The expert walks a shortest path found by breadth-first search over (position, keys).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from trajforge.envs.base import StepResult
from trajforge.envs.builtin.gridworld import (
    AGENT,
    FLOOR,
    GOAL,
    HIT_WALL,
    MOVES,
    START,
    WALL,
    Board,
    GridWorldEnv,
    Status,
    board_env,
    replay,
    shortest_moves,
)
from trajforge.envs.taskset import TRAIN, generate_unique
from trajforge.formats import format_tool_call
from trajforge.schema import Evidence, Message, Task

NAME = "keydoor"
# Reaching the goal is seen on the board, never read from an answer key: best-of-N may choose by it.
ANSWER_FREE_VERIFIER = True
DESCRIPTION = (
    "Gridworld with keys and doors: fetch a key, open its door, reach the goal (6-20 moves)."
)
SYSTEM_PROMPT = (
    "Reach G with the move tool, one move per turn. Step on a key (a lowercase letter) to pick "
    "it up; a door (the uppercase letter) opens only while you hold its key."
)
KEYS = "ab"
DOORS = KEYS.upper()
KEY_REWARD = 0.1
MIN_PATH, MAX_PATH = 6, 20

Cell = tuple[int, int]
KeyState = tuple[Cell, frozenset[str]]


@dataclass(frozen=True)
class KeyBoard(Board):
    """A gridworld ``Board`` plus the keys the agent holds; doors need their key."""

    keys: frozenset[str] = frozenset()

    def passable(self, r: int, c: int, keys: frozenset[str]) -> bool:
        target = self.cell(r, c)
        return target != WALL and (target not in DOORS or target.lower() in keys)

    def move(self, direction: str) -> tuple[KeyBoard, str]:
        """The state after one move, and what happened in words."""
        r, c, target = self.ahead(direction)
        if target == WALL:
            return self, HIT_WALL
        if not self.passable(r, c, self.keys):
            return (
                self,
                f"Door {target} is locked: you need key {target.lower()}. You did not move.",
            )
        if target == GOAL:
            return KeyBoard(self.rows, (r, c), Status.WON, self.keys), "You reached the goal!"
        what = f"You moved {direction}."
        keys = self.keys
        if target in KEYS and target not in keys:
            keys = keys | {target}
            what += f" You picked up key {target}."
        return KeyBoard(self.rows, (r, c), Status.PLAYING, keys), what

    def render(self) -> str:
        lines = []
        for r, row in enumerate(self.rows):
            chars = [FLOOR if ch == START or ch in self.keys else ch for ch in row]
            if r == self.pos[0]:
                chars[self.pos[1]] = AGENT
            lines.append("".join(chars))
        held = ", ".join(sorted(self.keys)) or "none"
        return "\n".join(lines) + f"\nKeys held: {held}"

    def key(self) -> str:
        where = f"{self.pos[0]},{self.pos[1]}"
        payload = "|".join((*self.rows, where, "".join(sorted(self.keys)), self.status.value))
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def shortest_path(self) -> list[str] | None:
        """Moves to the goal by breadth-first search over (position, keys held); None if none."""

        def moves(state: KeyState) -> Iterator[tuple[str, KeyState]]:
            (r, c), keys = state
            for direction, (dr, dc) in MOVES.items():
                nr, nc = r + dr, c + dc
                if self.passable(nr, nc, keys):
                    found = self.cell(nr, nc)
                    yield direction, ((nr, nc), keys | {found} if found in KEYS else keys)

        def is_goal(state: KeyState) -> bool:
            return self.cell(*state[0]) == GOAL

        return shortest_moves((self.pos, self.keys), is_goal, moves)


def verify(evidence: Evidence) -> float:
    """1.0 when the accepted moves reach the goal, else 0.0."""
    won = replay(evidence.task, list(evidence.messages), KeyBoard).status is Status.WON
    return 1.0 if won else 0.0


def expert(task: Task, messages: list[Message]) -> str | None:
    """The first move of a shortest path from the current state; a short reply once done."""
    board = replay(task, messages, KeyBoard)
    if board.status is Status.WON:
        return "I reached the goal."
    path = board.shortest_path()
    if not path:
        return "I cannot reach the goal."
    return format_tool_call("move", {"direction": path[0]})


def layout(rng: random.Random) -> list[list[str]]:
    """A board cut by one or two walls, each with a door, the keys before their doors."""
    n_doors = rng.choice((1, 2))
    height, width = rng.randint(4, 6), rng.randint(3 + 2 * n_doors, 8)
    walls = sorted(rng.sample(range(1, width - 1), n_doors))
    while n_doors == 2 and walls[1] - walls[0] < 2:
        walls = sorted(rng.sample(range(1, width - 1), n_doors))
    cells = [[FLOOR] * width for _ in range(height)]
    for i, col in enumerate(walls):
        for r in range(height):
            cells[r][col] = WALL
        cells[rng.randrange(height)][col] = DOORS[i]
    bounds = [0, *[w + 1 for w in walls], width]
    regions = [
        [(r, c) for r in range(height) for c in range(lo, hi - 1 if i < n_doors else hi)]
        for i, (lo, hi) in enumerate(pairwise(bounds))
    ]
    first = rng.sample(regions[0], 2 if n_doors == 1 else 3)
    (sr, sc), (ar, ac) = first[0], first[1]
    cells[sr][sc], cells[ar][ac] = START, KEYS[0]
    if n_doors == 2:
        br, bc = first[2] if rng.random() < 0.5 else rng.choice(regions[1])
        cells[br][bc] = KEYS[1]
    gr, gc = rng.choice(regions[-1])
    cells[gr][gc] = GOAL
    for r in range(height):
        for c in range(width):
            if cells[r][c] == FLOOR and rng.random() < 0.12:
                cells[r][c] = WALL
    if rng.random() < 0.5:
        cells = [list(col) for col in zip(*cells, strict=True)]
    if rng.random() < 0.5:
        cells = [row[::-1] for row in cells]
    if rng.random() < 0.5:
        cells = cells[::-1]
    return cells


def draw_board(rng: random.Random, min_path: int, max_path: int) -> tuple[KeyBoard, int]:
    """A random solvable board whose shortest solution is ``min_path`` to ``max_path`` moves,
    and that length."""
    while True:
        rows = tuple("".join(row) for row in layout(rng))
        board = KeyBoard.from_task(Task(id="draft", prompt="", data={"rows": list(rows)}))
        path = board.shortest_path()
        if path is not None and min_path <= len(path) <= max_path:
            return board, len(path)


def _make_one(rng: random.Random) -> Task:
    board, shortest = draw_board(rng, MIN_PATH, MAX_PATH)
    prompt = (
        "Walk @ to G. # is a wall. Step on a key (a, b) to pick it up; door A opens only while "
        f"you hold key a, door B only with key b. Row 1 is the top.\n{board.render()}"
    )
    return Task(id="draft", prompt=prompt, data={"rows": list(board.rows), "shortest": shortest})


def generate_tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
    """``n`` distinct solvable boards whose shortest solution is 6 to 20 moves."""
    return generate_unique(NAME, _make_one, n, seed, split)


class KeyDoorEnv(GridWorldEnv):
    """The gridworld env on a ``KeyBoard``: ends when the goal is reached, rewards key pickups."""

    board_type = KeyBoard

    async def step(self, action: Message) -> StepResult:
        if self.context is None:
            return await super().step(action)  # which says that reset() comes first
        before: KeyBoard = self.context.state["board"]
        result = await super().step(action)
        board: KeyBoard = self.context.state["board"]
        if result.done:
            if board.status is Status.WON:  # the turn limit fell on the winning turn: a win
                result.info["truncated"] = False
            return result
        if board.status is Status.WON:
            assert result.state_key is not None  # a GridWorldEnv always names its state
            return await self._finish(
                result.state_key, result.observations, truncated=False, info=result.info
            )
        result.reward = KEY_REWARD * len(board.keys - before.keys)
        return result


def make_env(**kwargs: Any) -> KeyDoorEnv:
    return board_env(
        KeyDoorEnv,
        verify,
        expert,
        max_path=MAX_PATH,
        **({"name": NAME, "description": DESCRIPTION, "system_prompt": SYSTEM_PROMPT} | kwargs),
    )
