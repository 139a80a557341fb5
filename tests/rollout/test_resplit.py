"""Env episodes under a chat template that rewrites the history: split into linked pieces at
each break, every piece token-exact, the reward on the last one."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rollout_doubles import make_tasks, run_live

from context_doubles import UserTurnsEnv
from template_doubles import REWRITES_HISTORY, library_text, needs_library, smollm2_with
from trajforge.policy.check import check_label, check_trajectory
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.rollout import Limits, Sampling
from trajforge.rollout.resplit import SPLIT_INTO
from trajforge.schema import ExactnessKind, Message, OutcomeStatus, Role, Task, Trajectory
from trajforge.store.sqlite import TrajectoryStore


def _reply(task: Task | None, messages: list[Message]) -> str:
    return f"answer {sum(1 for m in messages if m.role is Role.ASSISTANT) + 1}"


def _play(template: str, store: TrajectoryStore) -> tuple[ScriptedPolicy, list[Trajectory]]:
    """The policy and every stored piece, shortest first; the episode's own is the last."""
    policy = ScriptedPolicy(_reply, smollm2_with(template))
    (episode,) = run_live(UserTurnsEnv, policy, make_tasks(1), store=store, run_id="r")
    pieces = sorted(store.query(run="r"), key=lambda t: len(t.messages))
    assert pieces[-1].id == episode.id
    return policy, pieces


def test_an_episode_splits_at_each_break_into_linked_exact_pieces(tmp_path: Path) -> None:
    with TrajectoryStore(tmp_path / "s.db") as store:
        policy, pieces = _play(REWRITES_HISTORY, store)
    assert [len(p.messages) for p in pieces] == [2, 4, 6]
    first, second, last = pieces
    assert [p.sample_index for p in pieces] == [None, None, 0]
    assert first.exactness.is_exact
    assert second.exactness.kind is ExactnessKind.SPLIT
    assert (second.exactness.split_from, last.exactness.split_from) == (first.id, second.id)
    assert [first.metadata[SPLIT_INTO], second.metadata[SPLIT_INTO]] == [second.id, last.id]
    assert SPLIT_INTO not in last.metadata
    assert last.exactness.rendered_prefix == 5
    reason = last.exactness.reason or ""
    assert "message 3 (assistant)" in reason and "'(earlier reply)" in reason
    # The reward is the episode's; every piece keeps the turn rewards of its own turns.
    assert all(p.outcome.status is OutcomeStatus.OK and p.reward == 1.0 for p in pieces)
    assert [m.reward for m in first.messages if m.role is Role.ASSISTANT] == [0.25]
    # Each piece's sampled turns carry logprobs; replies rendered into a later prompt do not.
    assert [m.logprobs is not None for m in last.messages if m.role is Role.ASSISTANT] == [
        False,
        False,
        True,
    ]
    for piece in pieces:
        assert check_trajectory(piece, policy.renderer) == []
        assert check_label(piece) == []


def test_a_prefix_safe_template_keeps_one_exact_trajectory(tmp_path: Path) -> None:
    with TrajectoryStore(tmp_path / "s.db") as store:
        _, pieces = _play(str(load_tokenizer().chat_template), store)
    (only,) = pieces
    assert len(only.messages) == 6 and only.exactness.is_exact


@needs_library
def test_qwen3_splits_an_episode_where_a_new_user_turn_drops_the_thinking(
    tmp_path: Path,
) -> None:
    with TrajectoryStore(tmp_path / "s.db") as store:
        policy, pieces = _play(library_text("Qwen-Qwen3-0.6B"), store)
    assert len(pieces) == 3
    assert "'<think>" in (pieces[1].exactness.reason or "")
    for piece in pieces:
        assert check_trajectory(piece, policy.renderer) == []


def test_a_batched_model_with_its_prefix_cache_samples_every_piece_exactly(
    tmp_path: Path,
) -> None:
    model, _ = tiny_model_and_tokenizer(seed=0)
    policy = HFPolicy(model, smollm2_with(REWRITES_HISTORY), max_batch_size=4)
    try:
        with TrajectoryStore(tmp_path / "s.db") as store:
            episodes = run_live(
                UserTurnsEnv,
                policy,
                make_tasks(2),
                store=store,
                run_id="r",
                n=2,
                concurrency=4,
                sampling=Sampling(max_new_tokens=6),
                limits=Limits(stop_on_turn_limit=False),
            )
            stored = store.query(run="r")
    finally:
        asyncio.run(policy.close())
    assert len(episodes) == 4 and len(stored) == 12
    by_id = {t.id: t for t in stored}
    for episode in episodes:
        assert episode.exactness.kind is ExactnessKind.SPLIT
        previous = by_id[episode.exactness.split_from or ""]
        assert previous.sample_index is None and previous.metadata[SPLIT_INTO] == episode.id
    for piece in stored:
        assert check_trajectory(piece, policy.renderer) == []
        sampled = [m for m in piece.messages if m.logprobs is not None]
        assert sampled and all(m.role is Role.ASSISTANT for m in sampled)
