"""``data.non_exact``: training keeps, masks or refuses trajectories that are not exact."""

from __future__ import annotations

import pytest

from trajforge.errors import DataError
from trajforge.schema import Exactness, ExactnessKind, Role, Trajectory
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.train.batch import encode_trajectory
from trajforge.train.config import NonExact
from trajforge.train.data import apply_non_exact


def _labelled(i: int, kind: ExactnessKind, prefix: int | None) -> Trajectory:
    traj = synthetic_trajectory(i, turns=3)
    label = Exactness(
        kind=kind,
        reason="edited",
        split_from="t0" if kind is ExactnessKind.SPLIT else None,
        rendered_prefix=prefix,
    )
    return traj.model_copy(update={"exactness": label})


def _assistant_loss(traj: Trajectory, mask_rendered: bool) -> list[bool]:
    """Per assistant message: whether its tokens are in the loss."""
    seq = encode_trajectory(traj, mask_rendered=mask_rendered)
    flags, at = [], 0
    for m in traj.messages:
        n = len(m.token_ids or [])
        if m.role is Role.ASSISTANT:
            flags.append(all(seq.loss_mask[at : at + n]))
        at += n
    return flags


def test_masking_leaves_out_the_turns_of_the_rendered_prefix_only() -> None:
    exact = synthetic_trajectory(0, turns=3)
    assert _assistant_loss(exact, mask_rendered=True) == [True, True, True]
    # system, user, assistant, tool, assistant, tool, assistant: the first four were rendered.
    split = _labelled(1, ExactnessKind.SPLIT, prefix=4)
    assert _assistant_loss(split, mask_rendered=True) == [False, True, True]
    assert _assistant_loss(split, mask_rendered=False) == [True, True, True]
    unknown = _labelled(2, ExactnessKind.RE_RENDERED, prefix=None)
    assert _assistant_loss(unknown, mask_rendered=True) == [False, False, False]


def test_keep_mask_and_refuse_choose_what_is_trained_on() -> None:
    exact = synthetic_trajectory(0, turns=3)
    split = _labelled(1, ExactnessKind.SPLIT, prefix=4)
    imported = _labelled(2, ExactnessKind.RE_RENDERED, prefix=len(exact.messages))
    trajs = [exact, split, imported]
    assert apply_non_exact(trajs, NonExact.KEEP) == trajs
    # The import has no sampled turn left to train on: it is left out.
    assert apply_non_exact(trajs, NonExact.MASK) == [exact, split]
    assert apply_non_exact([exact], NonExact.REFUSE) == [exact]
    with pytest.raises(DataError, match=rf"trajectory {split.id} is split \(edited\)"):
        apply_non_exact(trajs, NonExact.REFUSE)
