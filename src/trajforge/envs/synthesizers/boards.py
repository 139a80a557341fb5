"""Board games (gridworld, keydoor, keydoor-compact): walk at random, make a square reached the
goal.

The explorer walks from a training board's start, never into a wall, hole or locked door,
preferring squares it has not stood on and, most of the time, a key or door in reach, for a
number of moves drawn per episode. Of the floor squares it stood on, the one farthest from the
start (by the shortest solution of the new board) becomes the goal of a new board (the old goal
turned to floor): the env's own verifier, "the accepted moves reach G", is then the new task's
checker. The solution is the exploration's moves up to its first step onto that square; the
wrong answer stops one move short (the walk had never stood there before, so it cannot have
won).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trajforge.envs.builtin.gridworld import FLOOR, GOAL, HOLE, MOVES, Board, Status
from trajforge.envs.builtin.keydoor import KeyBoard
from trajforge.envs.builtin.keydoor_compact import LETTERS, observe, parse_move
from trajforge.envs.registry import get_env
from trajforge.envs.synthesizers.base import STOP_REPLY, Candidate, Synthesizer, new_task, turn_rng
from trajforge.formats import format_tool_call
from trajforge.schema import ExpertFn, Message, Role, Task, Trajectory

DONE_REPLY = "I reached the goal."
MIN_WALK, MAX_WALK = 6, 15
CURIOUS = frozenset("abAB")
"""Keys and doors (keydoor's); a gridworld board has none."""
PULL = 0.8
GRID_PROMPT = "Walk @ to G. H is a hole, # is a wall. Row 1 is the top."
KEYDOOR_PROMPT = (
    "Walk @ to G. # is a wall. Step on a key (a, b) to pick it up; door A opens only while "
    "you hold key a, door B only with key b. Row 1 is the top."
)


def _rendered(intro: str) -> Callable[[Board], str]:
    return lambda board: f"{intro}\n{board.render()}"


@dataclass(frozen=True)
class BoardSynthesizer(Synthesizer):
    """Reverse task synthesis for one board env.

    Args:
        env: The env's registry name.
        board_type: Its rules (``Board`` or ``KeyBoard``).
        prompt: The new task's instruction: the env's own wording of a board.
        tool_moves: Moves are ``move`` tool calls (else one letter a reply).
    """

    env: str
    board_type: type[Board]
    prompt: Callable[[Board], str]
    tool_moves: bool

    def start_tasks(self, n: int, seed: int) -> list[Task]:
        return get_env(self.env).tasks(n, seed=seed, split="train")

    def _reply(self, direction: str) -> str:
        if self.tool_moves:
            return format_tool_call("move", {"direction": direction})
        return next(letter for letter, word in LETTERS.items() if word == direction)

    def _direction(self, message: Message) -> str | None:
        if not self.tool_moves:
            return parse_move(message.text)
        calls = [c for c in message.tool_calls if c.name == "move"]
        return str(calls[0].arguments.get("direction")) if calls else None

    def walk(self, task: Task, messages: Sequence[Message]) -> list[tuple[str, Board]]:
        """Each move the assistant made in ``messages`` and the board after it."""
        board = self.board_type.from_task(task)
        states: list[tuple[str, Board]] = []
        for message in messages:
            if message.role is not Role.ASSISTANT or board.status is not Status.PLAYING:
                continue
            direction = self._direction(message)
            if direction in MOVES:
                board, _ = board.move(direction)
                states.append((direction, board))
        return states

    def explorer(self, seed: int) -> ExpertFn:
        def explore(task: Task, messages: list[Message]) -> str | None:
            states = self.walk(task, messages)
            rng = turn_rng(seed, "explore", task, len(states))
            length = turn_rng(seed, "walk", task, 0).randint(MIN_WALK, MAX_WALK)
            board = states[-1][1] if states else self.board_type.from_task(task)
            if len(states) >= length or board.status is not Status.PLAYING:
                return STOP_REPLY
            seen = {self.board_type.from_task(task).pos} | {b.pos for _, b in states}
            safe = [d for d in MOVES if _safe(board, d)]
            fresh = [d for d in safe if board.ahead(d)[:2] not in seen]
            # Curious: a key or a door in reach draws the walk, so walks cross doors as
            # solutions must.
            drawn = [d for d in fresh if board.ahead(d)[2] in CURIOUS]
            if drawn and rng.random() < PULL:
                return self._reply(rng.choice(drawn))
            return self._reply(rng.choice(fresh or safe)) if safe else STOP_REPLY

        return explore

    def relabel(self, source: Trajectory, min_steps: int) -> Candidate | str:
        task = source.task
        states = self.walk(task, source.messages)
        start = self.board_type.from_task(task)
        reached = {
            b.pos: i
            for i, (_, b) in reversed(list(enumerate(states)))
            if b.status is Status.PLAYING and b.pos != start.pos
        }
        squares = {pos: i for pos, i in reached.items() if start.rows[pos[0]][pos[1]] == FLOOR}
        if not squares:
            return "reached no floor square but the start"
        # The farthest square the walk reached (by the new board's shortest path) is the goal.
        boards = {pos: self._goal_at(start, pos) for pos in squares}
        lengths = {pos: len(path) for pos, (_, path) in boards.items() if path is not None}
        if not lengths or max(lengths.values()) < min_steps:
            return f"too easy: fewer than {min_steps} moves"
        target = max(lengths, key=lambda pos: (lengths[pos], squares[pos]))
        board, rows = boards[target][0], [*boards[target][0].rows]
        moves = [d for d, _ in states[: squares[target] + 1]]
        new = new_task(
            self.env, source, self.prompt(board), data={"rows": rows, "shortest": lengths[target]}
        )
        replies = [self._reply(d) for d in moves]
        return Candidate(new, (*replies, DONE_REPLY), (*replies[:-1], STOP_REPLY))

    def _goal_at(self, start: Board, pos: tuple[int, int]) -> tuple[Board, list[str] | None]:
        """The start board with the goal moved to ``pos``, and its shortest solution."""
        rows = [_relabelled(row, ri, *pos) for ri, row in enumerate(start.rows)]
        board = self.board_type.from_task(Task(id="draft", prompt="", data={"rows": rows}))
        return board, board.shortest_path()


def _safe(board: Board, direction: str) -> bool:
    """A move that changes square and cannot end the game badly."""
    moved, _ = board.move(direction)
    return (
        moved.pos != board.pos
        and moved.status is not Status.FELL
        and board.ahead(direction)[2] != HOLE
    )


def _compact(board: Board) -> str:
    """keydoor-compact's observation of a board (its boards are always ``KeyBoard``s)."""
    assert isinstance(board, KeyBoard)
    return observe(board)


def _relabelled(row: str, ri: int, r: int, c: int) -> str:
    """Row ``ri`` with the old goal turned to floor and, on row ``r``, the goal at ``c``."""
    cells = [FLOOR if ch == GOAL else ch for ch in row]
    if ri == r:
        cells[c] = GOAL
    return "".join(cells)


BOARD_SYNTHESIZERS: dict[str, BoardSynthesizer] = {
    "gridworld": BoardSynthesizer("gridworld", Board, _rendered(GRID_PROMPT), tool_moves=True),
    "keydoor": BoardSynthesizer("keydoor", KeyBoard, _rendered(KEYDOOR_PROMPT), tool_moves=True),
    "keydoor-compact": BoardSynthesizer("keydoor-compact", KeyBoard, _compact, tool_moves=False),
}
