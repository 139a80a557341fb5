"""RL across segments: an episode whose context was rewritten trains one row per segment, each
token taking the advantage its episode's turn has.

The estimator sees one row per episode, whatever its segment count: the episode's reward and
group (those of its last segment, the episode's own trajectory, which RL scores), and its turns
across every segment in order, each segment's rendered prefix left out (those turns were sampled,
and are trained, in an earlier segment). A group's baseline and spread therefore count each
episode once. Each segment row then takes, token by token, the advantage of the episode turn
the token belongs to (0 off the sampled turns), so the episode's outcome, and with a turn-level
estimator its per-turn credit, reaches every segment's tokens.

An episode that was never rewritten is one row of its own, as before: its input is exactly
``advantage_input``'s.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

from trajforge.algos import AdvantageInput
from trajforge.errors import DataError
from trajforge.rollout import RolloutHook, RolloutRun
from trajforge.schema import Message, Role, Trajectory
from trajforge.train.batch import TokenSequence
from trajforge.train.rl.advantages import advantage_input


class EarlierSegments(RolloutHook):
    """Collects the segments a rollout records beside its episodes (before each episode's
    last), which the trainer's rows need beside the episodes."""

    def __init__(self) -> None:
        self.trajectories: list[Trajectory] = []

    def on_linked_trajectory(self, run: RolloutRun, trajectory: Trajectory) -> None:
        if trajectory.is_earlier_segment:
            self.trajectories.append(trajectory)


class SegmentStash:
    """The earlier segments of episodes rolled out but not trained yet (rollouts of later
    steps are sampled on threads in the asynchronous mode), by episode."""

    def __init__(self) -> None:
        self._by_episode: dict[str, list[Trajectory]] = {}
        self._lock = threading.Lock()

    def keep(self, played: Sequence[Trajectory]) -> list[Trajectory]:
        """``played`` less the earlier segments, which are kept until their step trains."""
        episodes = []
        with self._lock:
            for traj in played:
                if traj.segment is not None and traj.is_earlier_segment:
                    self._by_episode.setdefault(traj.segment.episode_id, []).append(traj)
                else:
                    episodes.append(traj)
        return episodes

    def take(self, step: Sequence[Trajectory], trained: Sequence[Trajectory]) -> list[Trajectory]:
        """The earlier segments of the ``trained`` episodes; those of every episode of ``step``
        are let go."""
        with self._lock:
            kept = {t.id: self._by_episode.pop(t.id, []) for t in step}
        return [segment for t in trained for segment in kept.get(t.id, [])]


def episode_chains(trajs: Sequence[Trajectory]) -> list[list[int]]:
    """The rows of each episode in segment order, episodes in the order of their own rows.

    Raises:
        DataError: an earlier segment whose episode is not among ``trajs``.
    """
    earlier: dict[str, list[int]] = {}
    for row, traj in enumerate(trajs):
        if traj.segment is not None and traj.is_earlier_segment:
            earlier.setdefault(traj.segment.episode_id, []).append(row)
    chains = []
    for row, traj in enumerate(trajs):
        if not traj.is_earlier_segment:
            rows = sorted(earlier.pop(traj.id, []), key=lambda r: _index(trajs[r]))
            chains.append([*rows, row])
    if earlier:
        episode, rows = next(iter(earlier.items()))
        raise DataError(
            f"trajectory {trajs[rows[0]].id} is a segment of episode {episode}, which is not "
            "in the batch: an episode's segments train with it"
        )
    return chains


def episode_input(
    trajs: Sequence[Trajectory], seqs: Sequence[TokenSequence], chains: Sequence[Sequence[int]]
) -> tuple[AdvantageInput, list[torch.Tensor]]:
    """The estimators' input with one row per episode of ``chains``, and for each row of
    ``trajs`` (encoded as ``seqs``) its tokens' episode turns (-1 off the sampled turns)."""
    row_turns: list[torch.Tensor] = [torch.empty(0, dtype=torch.long)] * len(trajs)
    episode_turns: list[list[Message]] = []
    for chain in chains:
        turns: list[Message] = []
        for row in chain:
            traj, start = trajs[row], _sampled_from(trajs[row])
            table: list[int] = []
            for index, message in enumerate(traj.messages):
                if message.role is Role.ASSISTANT:
                    table.append(len(turns) if index >= start else -1)
                    if index >= start:
                        turns.append(message)
            # The last entry answers a token's turn index of -1 (off the assistant turns).
            lookup = torch.tensor([*table, -1], dtype=torch.long)
            row_turns[row] = lookup[torch.tensor(seqs[row].turn_index, dtype=torch.long)]
        episode_turns.append(turns)
    width = max([1, *(sum(len(row_turns[r]) for r in chain) for chain in chains)])
    layout = torch.full((len(chains), width), -1, dtype=torch.long)
    for e, chain in enumerate(chains):
        joined = torch.cat([row_turns[r] for r in chain])
        layout[e, : len(joined)] = joined
    episodes = [trajs[chain[-1]] for chain in chains]
    return advantage_input(episodes, layout, episode_turns), row_turns


def row_advantages(
    token_advantages: torch.Tensor,
    chains: Sequence[Sequence[int]],
    row_turns: Sequence[torch.Tensor],
    width: int,
) -> torch.Tensor:
    """``[rows, width]``: each row's tokens take their episode's token advantages, from
    ``token_advantages`` laid out as ``episode_input`` joins the rows (per-token signals such
    as distillation's survive)."""
    out = torch.zeros((len(row_turns), width), dtype=torch.float32)
    for e, chain in enumerate(chains):
        start = 0
        for row in chain:
            turns = row_turns[row]
            values = token_advantages[e, start : start + len(turns)].float()
            out[row, : len(turns)] = torch.where(turns >= 0, values, 0.0)
            start += len(turns)
    return out


def _index(traj: Trajectory) -> int:
    return traj.segment.index if traj.segment is not None else 0


def _sampled_from(traj: Trajectory) -> int:
    """The first message whose turns a segment sampled itself (0 for any other trajectory,
    whose rows keep every turn, as ``encode_trajectory`` numbers them)."""
    if traj.segment is None or traj.exactness.is_exact:
        return 0
    prefix = traj.exactness.rendered_prefix
    return len(traj.messages) if prefix is None else prefix
