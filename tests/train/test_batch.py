"""TokenBatch: layout, masks, old logprobs, bucketing, refusals."""

from __future__ import annotations

import pytest
import torch
from train_helpers import raw_trajectory

from trajforge.schema import Message, Role, Task, Trajectory
from trajforge.train.batch import (
    SequenceTooLongError,
    TextOnlyTrajectoryError,
    TokenBatch,
    encode_trajectory,
    micro_batches,
    padding_fraction,
    plan_micro_batches,
)


def _two_turns_raw() -> list[tuple[str, list[int]]]:
    return [
        ("system", [1, 2]),
        ("user", [3, 4, 5]),
        ("assistant", [6, 7]),
        ("user", [8]),
        ("assistant", [9, 10, 11]),
    ]


def _two_turns() -> Trajectory:
    return raw_trajectory(_two_turns_raw())


def test_layout_masks_turns_and_old_logprobs() -> None:
    t = _two_turns()
    short = raw_trajectory([("user", [20, 21]), ("assistant", [22])])
    b = TokenBatch.from_trajectories([t, short], pad_token_id=0)
    assert b.input_ids.tolist() == [
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
        [20, 21, 22, 0, 0, 0, 0, 0, 0, 0, 0],
    ]
    assert b.attention_mask[1].tolist() == [1, 1, 1] + [0] * 8
    assert b.loss_mask[0].tolist() == [False] * 5 + [True, True, False, True, True, True]
    assert b.loss_mask[1].tolist() == [False, False, True] + [False] * 8
    assert b.token_turn_index[0].tolist() == [-1] * 5 + [0, 0, -1, 1, 1, 1]
    assert b.token_turn_index[1].tolist() == [-1, -1, 0] + [-1] * 8
    expect = [0.0] * 5 + [-0.1, -0.2, 0.0, -0.1, -0.2, -0.3]
    assert b.old_logprobs[0].tolist() == pytest.approx(expect)
    assert b.advantages.abs().sum() == 0
    assert b.trajectory_ids == [t.id, short.id]
    assert b.num_tokens == 14 and b.num_loss_tokens == 6
    assert b.padding_fraction == pytest.approx(1 - 14 / 22)
    assert b.has_old_logprobs


def test_ids_come_from_stored_tokens_not_text() -> None:
    t = raw_trajectory([("user", [5, 6]), ("assistant", [7])])
    t.messages[1].content = "completely different text"
    assert encode_trajectory(t).input_ids == [5, 6, 7]


def test_text_only_trajectory_is_refused_by_id() -> None:
    t = Trajectory(
        task=Task(id="x", prompt="p"),
        messages=[
            Message(role=Role.USER, content="hi"),
            Message(role=Role.ASSISTANT, content="yo"),
        ],
    )
    with pytest.raises(TextOnlyTrajectoryError, match=f"text-only trajectory {t.id}: RL/SFT needs"):
        TokenBatch.from_trajectories([t])


def test_too_long_is_refused_not_cut() -> None:
    t = _two_turns()
    with pytest.raises(
        SequenceTooLongError, match=f"{t.id} has 11 tokens, over the context limit of 10"
    ):
        encode_trajectory(t, max_length=10)
    assert len(encode_trajectory(t, max_length=11)) == 11


def test_what_follows_the_last_turn_can_be_left_out() -> None:
    """An RL episode's last observation (the env's answer to its last turn) conditions no
    trained token: the rollout bounds the sampled turns, not it, so RL encodes up to the last
    turn and the limit applies to that."""
    t = raw_trajectory([*_two_turns_raw(), ("user", [12, 13, 14])])
    with pytest.raises(SequenceTooLongError, match="14 tokens"):
        encode_trajectory(t, max_length=11)
    seq = encode_trajectory(t, max_length=11, through_last_turn=True)
    assert seq.input_ids == list(range(1, 12))
    assert seq.loss_mask == encode_trajectory(_two_turns()).loss_mask
    with pytest.raises(SequenceTooLongError, match="11 tokens"):
        encode_trajectory(t, max_length=10, through_last_turn=True)


def test_missing_logprobs_are_flagged() -> None:
    t = _two_turns()
    t.messages[2].logprobs = None
    assert not TokenBatch.from_trajectories([t]).has_old_logprobs


def test_bucketing_packs_under_budget_and_wastes_little_padding() -> None:
    lengths = [100, 12, 95, 10, 50, 11, 48, 99, 13, 52]
    plan = plan_micro_batches(lengths, max_tokens=200)
    assert sorted(i for b in plan for i in b) == list(range(len(lengths)))
    for b in plan:
        assert len(b) * max(lengths[i] for i in b) <= 200 or len(b) == 1
    bucketed = padding_fraction(lengths, plan)
    naive = padding_fraction(lengths, [list(range(i, min(i + 2, 10))) for i in range(0, 10, 2)])
    assert bucketed <= 0.2 < 0.35 < naive


def test_over_budget_sequence_gets_its_own_micro_batch_and_rows_cap() -> None:
    assert plan_micro_batches([500, 10, 10], max_tokens=100) == [[0], [1, 2]]
    assert plan_micro_batches([10, 10, 10], max_tokens=100, max_rows=2) == [[0, 1], [2]]


def test_micro_batches_keep_rows_intact() -> None:
    seqs = [
        encode_trajectory(raw_trajectory([("user", [1] * n), ("assistant", [2] * n)]))
        for n in (3, 9, 4, 8)
    ]
    mbs = micro_batches(seqs, max_tokens=40)
    assert sum(len(m.lengths) for m in mbs) == 4
    for m in mbs:
        for row, n in enumerate(m.lengths):
            assert int(m.loss_mask[row].sum()) == n // 2
            assert int(m.attention_mask[row].sum()) == n
    assert all(m.input_ids.dtype == torch.long for m in mbs)
