"""Multi-seat episodes: every seat of a game played by a policy, one trajectory per seat.

``SeatGame`` plays one game of a ``MultiSeatEnv``: each seat keeps its own ``ChatSession`` of
its private view (the game's rules as system, each view before its move as a user message),
so every seat's sampled turns are assistant messages with their exact ids and logprobs and
its trajectory is as trainable as a single agent's. The same policy may sit in every seat
(self-play) or each seat its own (a scripted opponent, an earlier checkpoint).

The seats' trajectories are linked as the simulated user's is to the agent's (M2.7): they
share the task, the sample and ``metadata["episode"]``; ``metadata["seat"]`` says which seat,
``metadata["linked"]`` names the other seats' trajectories, ``metadata["seats"]`` who played
each seat and ``metadata["rewards"]`` every seat's reward. Each seat's ``group_id`` is the
task's group plus the seat, so the samples of one task are compared within a role (a baseline
per seat, as SPIRAL's role-conditioned estimator asks). The episode's own trajectory (the
one the run counts and resumes by) is the ``primary`` seat's; the others are stored under
``<run_id>.<seat>``.

``MultiSeatRunner`` is the ``EpisodeRunner`` that plays a run's episodes this way.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from trajforge.envs import EnvEntry, MultiSeatEnv, opponent_by_name, result_of, seat_expert
from trajforge.policy import ChatSession, Policy, SamplingParams, load_policy
from trajforge.rollout.engine import EpisodeRunner, PlayedEpisode, as_they_finish, run_rollout
from trajforge.rollout.episode import describe_error
from trajforge.rollout.episode_key import EpisodeKey
from trajforge.rollout.hooks import RolloutRun
from trajforge.rollout.limits import EndReason, fault_of
from trajforge.rollout.seeding import derive_seed, group_id_for, new_run_id
from trajforge.rollout.spec import RolloutError, RolloutSpec, Sampling
from trajforge.schema import (
    Message,
    Outcome,
    OutcomeStatus,
    Role,
    Task,
    Trajectory,
    Usage,
    new_id,
)

GameFactory = Callable[[], MultiSeatEnv]


def scripted_seat(entry: EnvEntry, name: str) -> Policy:
    """Game ``entry``'s scripted opponent ``name`` (``random``, ``heuristic``) as a policy."""
    if entry.game is None:
        raise RolloutError(f"env {entry.name!r} is no multi-seat game")
    opponent = opponent_by_name(entry.opponents, name, entry.name)
    return load_policy("expert", expert=seat_expert(opponent), name=f"{entry.name}:{name}")


def seat_run_id(run_id: str, seat: str) -> str:
    """The run id a non-primary seat of run ``run_id`` is stored under."""
    return f"{run_id}.{seat}"


def seat_group_id(group_id: str, seat: str) -> str:
    """The group of ``seat``'s samples of one task: compared within the role only."""
    return f"{group_id}:{seat}"


class SeatGame:
    """One game, every seat played by its policy.

    Args:
        game: A fresh game.
        key: Which task and sample.
        policies: The policy of every seat.
        sampling: Base sampling; each move's seed derives from ``seed``, the task, the seat,
            the sample and the seat's turn.
        run_id: The run (the primary seat's run id).
        seed: The run's seed.
        primary: The seat whose trajectory is the episode's own.
    """

    def __init__(
        self,
        game: MultiSeatEnv,
        key: EpisodeKey,
        policies: Mapping[str, Policy],
        sampling: SamplingParams,
        *,
        run_id: str,
        seed: int,
        primary: str,
    ) -> None:
        missing = set(game.seats) - policies.keys()
        if missing or primary not in game.seats:
            raise RolloutError(
                f"env {game.name!r}: seats {sorted(game.seats)} need a policy each "
                f"(missing {sorted(missing)}) and a primary seat (got {primary!r})"
            )
        self.game = game
        self.key = key
        self.policies = dict(policies)
        self.sampling = sampling
        self.run_id = run_id
        self.seed = seed
        self.primary = primary
        self.sessions: dict[str, ChatSession] = {}
        self.usage = {seat: Usage() for seat in game.seats}
        self.rewards: dict[str, float] | None = None
        self.invalid: str | None = None
        self.error: tuple[EndReason, str] | None = None

    def _view(self, seat: str) -> ChatSession:
        """``seat``'s session with its current view appended (opened on its first move)."""
        view = Message(role=Role.USER, content=self.game.observe(seat))
        session = self.sessions.get(seat)
        if session is None:
            system = Message(role=Role.SYSTEM, content=self.game.system_prompt(seat))
            session = self.policies[seat].start_session([system, view], [], task=self.key.task)
            self.sessions[seat] = session
        else:
            session.add_observations([view])
        return session

    async def _move(self, seat: str) -> Message:
        session = self._view(seat)
        usage = self.usage[seat]
        turn = usage.turns
        seed = derive_seed(self.seed, f"{self.key.task.id}:{seat}", self.key.sample_index, turn)
        prompt_tokens, t0 = session.num_tokens, time.monotonic()
        message = await self.policies[seat].respond(
            session, replace(self.sampling, seed=seed), turn=turn
        )
        usage.generation_time_s += time.monotonic() - t0
        usage.prompt_tokens += prompt_tokens
        usage.completion_tokens += len(message.token_ids or [])
        usage.turns += 1
        return message

    async def play(self) -> None:
        """Play to the end; a failure ends the game for every seat, recorded, never raised."""
        phase = EndReason.ENV_ERROR
        try:
            self.game.reset(self.key.task)
            for _ in range(self.game.max_moves):
                seat = self.game.to_move
                phase = EndReason.POLICY_ERROR
                message = await self._move(seat)
                phase = EndReason.ENV_ERROR
                message.state_key = self.game.state_key()
                result = self.game.step(message.text)
                if result.done:
                    self.rewards = result.rewards
                    self.invalid = seat if result.invalid else None
                    for idle in self.game.seats:
                        if idle not in self.sessions:  # it never moved: record what it saw
                            self._view(idle)
                    return
            raise RolloutError(f"env {self.game.name!r} ran past its {self.game.max_moves} moves")
        except Exception as exc:  # one game's failure must not end the run
            self.error = (phase, describe_error(exc))

    def trajectories(self, group_id: str) -> list[Trajectory]:
        """Every seat's trajectory, the primary seat's first."""
        seats = [self.primary, *(s for s in self.game.seats if s != self.primary)]
        ids = {seat: new_id() for seat in seats}
        episode = new_id()
        names = {seat: self.policies[seat].name for seat in seats}
        return [
            self._trajectory(seat, ids, episode, names, group_id, self.key.task) for seat in seats
        ]

    def _outcome(self, seat: str) -> Outcome:
        if self.error is not None:
            reason, error = self.error
            return Outcome(
                status=OutcomeStatus.ERROR, error=error, reason=reason, fault=fault_of(reason)
            )
        assert self.rewards is not None, "a game that did not fail has rewards"
        return Outcome(status=OutcomeStatus.OK, reward=self.rewards[seat])

    def _trajectory(
        self,
        seat: str,
        ids: Mapping[str, str],
        episode: str,
        names: Mapping[str, str],
        group_id: str,
        task: Task,
    ) -> Trajectory:
        session = self.sessions.get(seat)
        metadata: dict[str, Any] = {
            "seed": self.seed,
            "episode": episode,
            "seat": seat,
            "side": seat,
            "linked": [ids[s] for s in ids if s != seat],
            "seats": dict(names),
        }
        if self.rewards is not None:
            metadata["rewards"] = dict(self.rewards)
            metadata["result"] = result_of(self.rewards, seat).value
            metadata["invalid"] = self.invalid == seat
        return Trajectory(
            id=ids[seat],
            task=task,
            env=self.game.name,
            group_id=seat_group_id(group_id, seat),
            sample_index=self.key.sample_index,
            run_id=self.run_id if seat == self.primary else seat_run_id(self.run_id, seat),
            model=names[seat],
            messages=list(session.messages) if session is not None else [],
            outcome=self._outcome(seat),
            usage=self.usage[seat],
            metadata=metadata,
        )


class MultiSeatRunner(EpisodeRunner):
    """Plays a run's episodes as games of ``make_game``, each seat by its policy.

    Args:
        make_game: Makes a fresh game per episode.
        policies: The policy of every seat (the same object in several seats is self-play);
            kept open by the caller.
        primary: The seat whose trajectory is each episode's own (``None``: the task's
            ``data["seat"]``, else the game's first seat).
    """

    def __init__(
        self,
        make_game: GameFactory,
        policies: Mapping[str, Policy],
        *,
        primary: str | None = None,
    ) -> None:
        self._make_game = make_game
        self._policies = dict(policies)
        self._primary = primary

    async def start(self, spec: RolloutSpec) -> str:
        if spec.policy is not None or spec.user is not None:
            raise RolloutError("spec.policy: a multi-seat run takes its seats' policies live")
        if spec.context is not None:
            raise RolloutError("spec.context: a multi-seat game's seats keep whole contexts")
        names = dict.fromkeys(p.name for p in self._policies.values())
        return "+".join(names)

    def play(self, run: RolloutRun) -> AsyncGenerator[PlayedEpisode, None]:
        spec = run.spec

        def one(key: EpisodeKey) -> Awaitable[PlayedEpisode]:
            return play_game(spec, key, self._make_game, self._policies, self._primary)

        return as_they_finish(run.todo, one, spec.concurrency)

    async def close(self) -> None:
        """The caller owns the seats' policies."""


def primary_seat(game: MultiSeatEnv, task: Task, primary: str | None = None) -> str:
    """The seat whose trajectory is the episode's own: ``primary`` when given, else the
    task's ``data["seat"]``, else the game's first seat."""
    if primary is not None:
        return primary
    seat = task.data.get("seat")
    return str(seat) if seat in game.seats else game.seats[0]


async def play_game(
    spec: RolloutSpec,
    key: EpisodeKey,
    make_game: GameFactory,
    policies: Mapping[str, Policy],
    primary: str | None = None,
) -> PlayedEpisode:
    """Episode ``key`` of the run ``spec`` describes as one game, each seat by its policy:
    the primary seat's trajectory with the other seats' linked to it. ``MultiSeatRunner``
    and the Ray rollout actors both play games through it, so the two record the same."""
    assert spec.run_id is not None, "a planned run's spec names its run"
    sampling = spec.sampling.params()
    if spec.limits.max_new_tokens is not None:
        cap = min(sampling.max_new_tokens, spec.limits.max_new_tokens)
        sampling = replace(sampling, max_new_tokens=cap)
    game = make_game()
    played = SeatGame(
        game,
        key,
        policies,
        sampling,
        run_id=spec.run_id,
        seed=spec.seed,
        primary=primary_seat(game, key.task, primary),
    )
    await played.play()
    own, *others = played.trajectories(group_id_for(spec.run_id, key.task.id))
    return PlayedEpisode(own, others)


def play_by_seat(
    spec: RolloutSpec, seats: Sequence[str], runner_for: Callable[[str], EpisodeRunner]
) -> list[Trajectory]:
    """``spec``'s listed tasks split by their seat (``data["seat"]``, else the first), each
    seat's games run by ``runner_for(seat)`` as the run ``<run_id>-<seat>``; the primary
    seats' trajectories, one per task x sample."""
    if not isinstance(spec.tasks, list):
        raise RolloutError("spec.tasks: list the tasks of a game against an opponent")
    run_id = spec.run_id or new_run_id()
    played: list[Trajectory] = []
    for seat in seats:
        tasks = [t for t in spec.tasks if t.data.get("seat", seats[0]) == seat]
        if not tasks:
            continue
        part = spec.model_copy(update={"tasks": tasks, "run_id": f"{run_id}-{seat}"})
        played.extend(run_rollout(part, runner=runner_for(seat)))
    return played


def play_facing(
    spec: RolloutSpec, make_game: GameFactory, policy: Policy, opponent: Policy
) -> list[Trajectory]:
    """``policy`` in each task's seat (``data["seat"]``) and ``opponent`` in the others, over
    ``spec``'s listed tasks; ``policy``'s trajectories, one per task x sample. Each seat's
    games run as the run ``<run_id>-<seat>``."""
    seats = make_game().seats

    def runner_for(seat: str) -> EpisodeRunner:
        policies = {s: (policy if s == seat else opponent) for s in seats}
        return MultiSeatRunner(make_game, policies, primary=seat)

    return play_by_seat(spec, seats, runner_for)


def play_against(
    entry: EnvEntry,
    policy: Policy,
    opponent: str,
    tasks: list[Task],
    *,
    sampling: Sampling,
    seed: int = 0,
    run_id: str | None = None,
) -> list[Trajectory]:
    """``policy`` in each task's seat against ``entry``'s scripted ``opponent``."""
    if entry.game is None:
        raise RolloutError(f"env {entry.name!r} is no multi-seat game")
    spec = RolloutSpec(env=entry.name, tasks=tasks, sampling=sampling, seed=seed, run_id=run_id)
    return play_facing(spec, entry.game, policy, scripted_seat(entry, opponent))
