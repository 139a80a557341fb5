"""SFT sets: successful, void-free, tokenized trajectories from any run or a scripted expert."""

from __future__ import annotations

from collections.abc import Iterable

from trajforge.curate.filters import keep
from trajforge.schema import OutcomeStatus, Trajectory


def sft_set(
    trajs: Iterable[Trajectory],
    *,
    min_reward: float | None = 1.0,
    status: OutcomeStatus | str | None = OutcomeStatus.OK,
    drop_void_turns: bool = True,
    dedupe: bool = True,
) -> list[Trajectory]:
    """Trajectories fit for imitation: finished, rewarded, without void turns, with token ids.

    With ``dedupe``, trajectories whose token sequences are identical are kept once (a scripted
    expert sampled n times per task produces the same episode n times).
    """
    kept = keep(
        trajs,
        status=status,
        min_reward=min_reward,
        drop_void_turns=drop_void_turns,
        tokenized_only=True,
    )
    if not dedupe:
        return kept
    seen: set[tuple[int, ...]] = set()
    out = []
    for t in kept:
        key = tuple(i for m in t.messages for i in (m.token_ids or ()))
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out
