"""Training across segments: SFT trains every sampled turn once, whichever segment holds it; RL
forms its groups per episode and gives every segment row its episode's advantage."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from train_helpers import small_rl_config

from context_doubles import PAGES, PagesEnv, looker
from trajforge.algos import compute_advantages
from trajforge.errors import DataError
from trajforge.judge.scorer import FunctionScorer, Rubric
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.rollout import ContextSpec, RolloutSpec, Sampling, run_rollout
from trajforge.schema import EvaluatorKind, Outcome, Role, Task, Trajectory
from trajforge.store.sqlite import TrajectoryStore
from trajforge.train.batch import TokenBatch, TokenSequence, encode_trajectory
from trajforge.train.rl import RLTrainer
from trajforge.train.rl import update as rl_update
from trajforge.train.rl.advantages import advantage_input
from trajforge.train.rl.runners import LocalRollouts
from trajforge.train.rl.segments import (
    EarlierSegments,
    SegmentStash,
    episode_chains,
    episode_input,
    row_advantages,
)

BUDGET = 650


def _played(tmp_path: Path, context: ContextSpec | None, name: str) -> list[Trajectory]:
    """One looker episode (its segments first, the episode last) on a shared task."""
    spec = RolloutSpec(
        tasks=[Task(id="t", prompt="read the pages")],
        sampling=Sampling(max_new_tokens=40),
        context=context,
        run_id=name,
    )
    earlier = EarlierSegments()
    policy = ScriptedPolicy(looker, load_tokenizer())
    with TrajectoryStore(tmp_path / f"{name}.db") as store:
        (episode,) = run_rollout(spec, env=PagesEnv, policy=policy, store=store, hooks=[earlier])
    return [*earlier.trajectories, episode]


def _with_reward(traj: Trajectory, reward: float, group: str = "g") -> Trajectory:
    outcome = Outcome(status=traj.outcome.status, reward=reward)
    return traj.model_copy(update={"outcome": outcome, "group_id": group})


def _segmented(tmp_path: Path) -> list[Trajectory]:
    context = ContextSpec(strategy="keep_last", budget=BUDGET, keep_turns=1)
    rows = _played(tmp_path, context, "kept")
    assert len(rows) == 2 and rows[0].is_earlier_segment
    return rows


def test_sft_rows_train_each_sampled_turn_once_across_the_segments(tmp_path: Path) -> None:
    rows = _segmented(tmp_path)
    seqs = [encode_trajectory(t) for t in rows]
    sampled = sum(len(m.token_ids or ()) for t in rows for m in t.messages if m.logprobs)
    assert sum(s.num_loss_tokens for s in seqs) == sampled
    # The later segment's kept turn was rendered from its text: context, not a target.
    later = rows[1]
    assert later.messages[2].role is Role.ASSISTANT and later.messages[2].logprobs is None
    assert sum(s.num_loss_tokens for s in seqs[1:]) < sum(
        len(m.token_ids or ()) for m in later.messages if m.role is Role.ASSISTANT
    )


def test_rl_groups_per_episode_and_gives_each_segment_its_episodes_advantage(
    tmp_path: Path,
) -> None:
    segmented = [_with_reward(t, 1.0) for t in _segmented(tmp_path)]
    whole = _with_reward(_played(tmp_path, None, "whole")[0], 0.0)
    rows = [segmented[1], whole, segmented[0]]
    seqs = [encode_trajectory(t, mask_rendered=True) for t in rows]
    chains = episode_chains(rows)
    assert chains == [[2, 0], [1]]
    inp, row_turns = episode_input(rows, seqs, chains)
    assert inp.batch_size == 2 and inp.group_ids == ["g", "g"]
    # Every sampled turn of the episode once: the pages and the final answer.
    assert inp.turn_mask.sum(dim=1).tolist() == [PAGES + 1, PAGES + 1]
    adv = compute_advantages("grpo", inp)
    assert adv.metrics["groups"] == 1.0
    width = max(len(s) for s in seqs)
    token_adv = row_advantages(adv.token_advantages, chains, row_turns, width)
    expected = {0: 2**-0.5, 1: -(2**-0.5), 2: 2**-0.5}
    for row, seq in enumerate(seqs):
        mask = torch.tensor(seq.loss_mask)
        values = token_adv[row, : len(seq)]
        assert torch.allclose(values[mask], torch.full_like(values[mask], expected[row]), atol=1e-5)
        assert bool((values[~mask] == 0).all())
        assert seq.num_loss_tokens > 0


def test_rows_without_segments_take_the_advantages_they_always_had(tmp_path: Path) -> None:
    played = _played(tmp_path, None, "a")[0]
    rows = [_with_reward(played, 1.0), _with_reward(played.model_copy(update={"id": "b"}), 0.0)]
    for m in rows[0].messages[2::2]:
        m.reward = 0.5
    seqs = [encode_trajectory(t, mask_rendered=True) for t in rows]
    full = TokenBatch.collate(seqs, pad_token_id=0)
    for estimator in ("grpo", "turn_returns", "reinforce_pp"):
        before = compute_advantages(estimator, advantage_input(rows, full.token_turn_index))
        chains = episode_chains(rows)
        inp, row_turns = episode_input(rows, seqs, chains)
        after = compute_advantages(estimator, inp)
        token_adv = row_advantages(
            after.token_advantages, chains, row_turns, full.input_ids.shape[1]
        )
        assert torch.equal(token_adv, before.token_advantages.float()), estimator


def test_a_segment_without_its_episode_is_refused_and_the_stash_lets_go(tmp_path: Path) -> None:
    earlier, episode = _segmented(tmp_path)
    with pytest.raises(DataError, match=f"segment of episode {episode.id}"):
        episode_chains([earlier])
    stash = SegmentStash()
    assert stash.keep([earlier, episode]) == [episode]
    assert stash.take([episode], []) == []
    assert stash.take([episode], [episode]) == []
    stash.keep([earlier])
    assert stash.take([episode], [episode]) == [earlier]


def _task_rows(rows: list[Trajectory], task: Task, group: str) -> list[Trajectory]:
    return [t.model_copy(update={"task": task, "group_id": group}) for t in rows]


def test_an_rl_step_trains_every_segment_with_its_episodes_advantage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    segmented, whole = _segmented(tmp_path), _played(tmp_path, None, "whole")
    rubric = Rubric([(FunctionScorer(_folded_reward, "segments", EvaluatorKind.RULE), 1.0)])
    trainer = RLTrainer(small_rl_config(tmp_path / "rl", max_seq_len=1024), rubric=rubric)
    assert trainer.runner is not None

    async def played(spec: RolloutSpec, step: int, hooks: object = ()) -> list[Trajectory]:
        first, second = spec.tasks if isinstance(spec.tasks, list) else []
        other = whole[0].model_copy(update={"id": "other"})
        return [
            *_task_rows([segmented[1], whole[0]], first, "a"),
            *_task_rows([whole[0].model_copy(update={"id": "b1"}), other], second, "b"),
            *_task_rows([segmented[0]], first, "a"),
        ]

    trained: list[TokenSequence] = []

    def optimize(ops: object, cfg: object, seqs: list[TokenSequence], ref: object) -> dict:
        trained.extend(seqs)
        return {}

    monkeypatch.setattr(trainer.runner, "rollout", played)
    monkeypatch.setattr(rl_update, "optimize", optimize)
    (metrics,) = trainer.train().history
    assert metrics["trained_trajectories"] == 5.0
    by_id = {s.trajectory_id: s for s in trained}
    assert set(by_id) == {segmented[0].id, segmented[1].id, whole[0].id, "b1", "other"}
    for traj_id, sign in ((segmented[0].id, 1.0), (segmented[1].id, 1.0), (whole[0].id, -1.0)):
        seq = by_id[traj_id]
        assert seq.advantages is not None
        values = {round(a, 5) for a, m in zip(seq.advantages, seq.loss_mask, strict=True) if m}
        assert values == {round(sign * 2**-0.5, 5)}
    assert all(len(by_id[t.id]) <= BUDGET for t in segmented)
    # The earlier segment is trained, not counted as an episode of the step.
    assert metrics["reward_mean"] == pytest.approx(0.25)


def _folded_reward(trajectory: Trajectory) -> float:
    return 1.0 if trajectory.segment is not None else 0.0


def test_a_local_step_runner_returns_the_earlier_segments_beside_the_episodes() -> None:
    doubles = Path(__file__).parents[1] / "context_doubles.py"
    spec = RolloutSpec(
        env=f"{doubles}:PagesEnv",
        tasks=[Task(id="t", prompt="read the pages")],
        sampling=Sampling(max_new_tokens=40),
        context=ContextSpec(strategy="keep_last", budget=BUDGET, keep_turns=1),
    )
    runner = LocalRollouts(ScriptedPolicy(looker, load_tokenizer()))
    played = asyncio.run(runner.rollout(spec, 1))
    assert [t.is_earlier_segment for t in played] == [False, True]
    assert SegmentStash().keep(played) == played[:1]
