"""The multi-seat game contract: turn-based games where every seat is played by a policy.

A ``MultiSeatEnv`` is a game between named seats (``x``/``o``, ``p1``/``p2``, ``a``/``b``).
``to_move`` says whose turn it is; ``observe(seat)`` is that seat's private view of the game
now (a hidden card stays hidden), written compactly enough for a small model to read; the
seat answers with one text reply and ``step`` applies it. When the game ends ``SeatStep``
carries every seat's reward (for a zero-sum game they add up to 0). A reply that is no legal
move ends the game: the offender is penalised, as SPIRAL scores an invalid move (so a policy
learns the rules from the reward alone).

The game itself is synchronous and pure (no I/O): the rollout plays its seats with any
policies (``trajforge.rollout.multiseat``), and ``SeatEnv`` turns one seat into an ordinary
single-agent ``Env`` against scripted opponents, so every existing runner, ``eval`` and RL
trainer plays a game unchanged.

A game module declares ``GAME``, a ``GameKit`` of its game, task drawing and two scripted
opponents, and the env registry reads everything else from it.

Scripted opponents are ``Opponent`` functions of the task and the seat's observation text;
a random one draws from a generator seeded by both, so the same position on the same task
always gets the same reply (runs are reproducible).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from trajforge.envs.base import Env, StepResult
from trajforge.envs.taskset import TRAIN, generate_unique
from trajforge.errors import ConfigError
from trajforge.schema import Message, Role, Task

Opponent = Callable[[Task, str], str]
"""A scripted seat: ``(task, observation) -> reply``."""

INVALID_PENALTY = -1.0


class GameResult(StrEnum):
    """How a game ended for one seat, judged on the rewards of all seats."""

    WIN = "win"
    DRAW = "draw"
    LOSS = "loss"


def result_of(rewards: Mapping[str, float], seat: str) -> GameResult:
    """Win when ``seat``'s reward beats every other seat's, loss when another's beats it,
    draw otherwise (a negotiation's equal split, a drawn board)."""
    mine = rewards[seat]
    best_other = max(r for s, r in rewards.items() if s != seat)
    if mine > best_other:
        return GameResult.WIN
    if mine < best_other:
        return GameResult.LOSS
    return GameResult.DRAW


@dataclass
class SeatStep:
    """What one move did. ``rewards`` (every seat's) is set once the game is ``done``."""

    done: bool
    rewards: dict[str, float] | None = None
    invalid: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class MultiSeatEnv(ABC):
    """A turn-based game of several seats. Subclasses set ``name``, ``seats``, ``zero_sum``
    and ``max_moves`` (every game ends within that many moves)."""

    name: str
    seats: tuple[str, ...]
    zero_sum: bool
    max_moves: int

    @abstractmethod
    def reset(self, task: Task) -> None:
        """Start the game ``task`` describes."""

    @property
    @abstractmethod
    def to_move(self) -> str:
        """The seat whose reply ``step`` takes next."""

    @abstractmethod
    def system_prompt(self, seat: str) -> str:
        """The rules as ``seat`` reads them (one short line)."""

    @abstractmethod
    def observe(self, seat: str) -> str:
        """``seat``'s private view of the game now."""

    @abstractmethod
    def state_key(self) -> str:
        """The state the mover acts from, as the mover knows it (its private view and its
        seat): GiGPO's anchor state, never revealing what the mover cannot see."""

    @abstractmethod
    def step(self, reply: str) -> SeatStep:
        """Apply the mover's reply."""

    def forfeit(self, seat: str) -> dict[str, float]:
        """The rewards when ``seat`` makes an illegal move: it loses; in a zero-sum game the
        others share what it loses, elsewhere they get nothing."""
        others = [s for s in self.seats if s != seat]
        share = -INVALID_PENALTY / len(others) if self.zero_sum else 0.0
        return {s: (INVALID_PENALTY if s == seat else share) for s in self.seats}


class TakingTurns(MultiSeatEnv):
    """A game whose seats move one after the other, in the order of ``seats``, one move each
    turn: ``moves`` counts the moves made, and says whose turn it is."""

    moves: int

    @property
    def to_move(self) -> str:
        return self.seats[self.moves % len(self.seats)]


def seeded_rng(task: Task, observation: str) -> random.Random:
    """The generator a random opponent draws from: the same for the same task and view."""
    return random.Random(f"{task.id}|{observation}")


def last_observation(messages: Sequence[Message]) -> str:
    """The newest observation in a seat's conversation (what a scripted seat replies to)."""
    for message in reversed(messages):
        if message.role is Role.USER:
            return message.text
    raise ConfigError("a scripted seat was asked to move before it saw the game")


def opponent_by_name(opponents: Mapping[str, Opponent], name: str, game: str) -> Opponent:
    """The scripted opponent ``name`` of ``game``; an unknown name names the known ones."""
    if name not in opponents:
        known = ", ".join(sorted(opponents))
        raise ConfigError(f"env {game!r}: no opponent {name!r}; it has {known}")
    return opponents[name]


class SeatEnv(Env):
    """One seat of a game as a single-agent ``Env``; scripted opponents play the others.

    Args:
        game: The game (a fresh one per episode).
        opponent: Plays every other seat.
        seat: The seat the agent plays (``None``: the task's ``data["seat"]``, so a task set
            covers every seat).
    """

    def __init__(self, game: MultiSeatEnv, opponent: Opponent, seat: str | None = None) -> None:
        super().__init__()
        if seat is not None and seat not in game.seats:
            raise ConfigError(f"env {game.name!r}: seat {seat!r} is not one of {game.seats}")
        self.name = game.name
        self.game = game
        self.opponent = opponent
        self.seat = seat
        self.task: Task | None = None
        self.playing: str | None = None

    def _seat_of(self, task: Task) -> str:
        seat = self.seat or task.data.get("seat")
        if seat not in self.game.seats:
            raise ConfigError(
                f"env {self.name!r}: task {task.id!r} names no seat of {self.game.seats}"
            )
        return str(seat)

    def _play_others(self) -> SeatStep | None:
        """Opponents move until it is the agent's turn; the final step if the game ends."""
        assert self.task is not None
        while self.game.to_move != self.playing:
            mover = self.game.to_move
            result = self.game.step(self.opponent(self.task, self.game.observe(mover)))
            if result.done:
                return result
        return None

    async def reset(self, task: Task) -> list[Message]:
        self.task, self.playing = task, self._seat_of(task)
        self.game.reset(task)
        if self._play_others() is not None:
            raise ConfigError(
                f"env {self.name!r}: task {task.id!r} ends before {self.playing} moves"
            )
        return [
            Message(role=Role.SYSTEM, content=self.game.system_prompt(self.playing)),
            Message(role=Role.USER, content=self.game.observe(self.playing)),
        ]

    async def step(self, action: Message) -> StepResult:
        if self.task is None or self.playing is None:
            raise ConfigError(f"env {self.name!r}: step() needs a running game; call reset(task)")
        key = self.game.state_key()
        result = self.game.step(action.text)
        final = result if result.done else self._play_others()
        info: dict[str, Any] = {"invalid": result.invalid, "seat": self.playing}
        if final is not None:
            assert final.rewards is not None, "a finished game rewards every seat"
            info.update(truncated=False, rewards=final.rewards)
            info["result"] = result_of(final.rewards, self.playing).value
            return StepResult([], final.rewards[self.playing], True, info, key)
        observation = Message(role=Role.USER, content=self.game.observe(self.playing))
        return StepResult([observation], 0.0, False, info, key)


Game = TypeVar("Game", bound=MultiSeatEnv)


def play_out(game: Game, task: Task, move: Callable[[Game], str], opponent: Opponent) -> GameResult:
    """How ``task``'s seat fares in ``game`` replying ``move(game)`` on its turns while
    ``opponent`` plays every other seat."""
    seat = task.data["seat"]
    game.reset(task)
    while True:
        mover = game.to_move
        reply = move(game) if mover == seat else opponent(task, game.observe(mover))
        result = game.step(reply)
        if result.done:
            assert result.rewards is not None
            return result_of(result.rewards, seat)


def seat_expert(opponent: Opponent) -> Callable[[Task, list[Message]], str | None]:
    """``opponent`` as an env's scripted expert: its reply to the seat's newest view."""

    def expert(task: Task, messages: list[Message]) -> str | None:
        return opponent(task, last_observation(messages))

    return expert


@dataclass(frozen=True)
class GameKit:
    """What the env registry reads of a game module, made from the game's parts: a fresh
    game, one seat of it against a scripted opponent, task generation and the expert (the
    heuristic opponent's reply to the seat's view).

    Args:
        name: The game's registry name.
        game: Makes a fresh game.
        draw_task: Draws one task (a position and the agent's seat) from a generator.
        random: The opponent that plays any legal move.
        heuristic: The opponent of fixed strength, the default one and the expert.
    """

    name: str
    game: Callable[[], MultiSeatEnv]
    draw_task: Callable[[random.Random], Task]
    random: Opponent
    heuristic: Opponent

    @property
    def opponents(self) -> dict[str, Opponent]:
        """The scripted seats by name."""
        return {"random": self.random, "heuristic": self.heuristic}

    def make_game(self) -> MultiSeatEnv:
        return self.game()

    def make_env(self, seat: str | None = None, opponent: str = "heuristic") -> SeatEnv:
        """One seat (the task's, or ``seat``) against a scripted ``opponent``."""
        return SeatEnv(self.game(), opponent_by_name(self.opponents, opponent, self.name), seat)

    def generate_tasks(self, n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
        """``n`` distinct tasks of ``split``, deterministic in ``seed``."""
        return generate_unique(self.name, self.draw_task, n, seed, split)

    def expert(self, task: Task, messages: list[Message]) -> str | None:
        return self.heuristic(task, last_observation(messages))
