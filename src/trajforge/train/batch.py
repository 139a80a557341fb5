"""Token batches built from the token ids stored in trajectories, never from re-rendered text.

Layout (shared with ``trajforge.algos``): ``[B, T]`` = trajectories x tokens of the concatenated
context, right-padded. The value at position ``t`` is about token ``t`` (its loss mask, its
sampled logprob, its advantage); the trainer predicts token ``t`` from the logits at ``t - 1``.
The loss mask is exactly the assistant messages' tokens (from ``metadata["loss_from_message"]``
on, where curated data sets it).

Images: a sequence keeps its trajectory's image parts in order (their placeholder tokens are
already in its ids); a batch built with ``pixels`` (a vision-language model's image processor,
``TrainParts.pixels``) carries their pixel tensors in ``vision``, recomputed from the images'
bytes, every row's images one after another as the model matches them to the placeholders in
row-major order. A text model's batches have none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from trajforge.errors import DataError
from trajforge.schema import LOSS_FROM_MESSAGE, ImagePart, Role, Trajectory

PixelInputs = Callable[[Sequence[ImagePart]], dict[str, torch.Tensor]]
"""Images -> the tensors a vision-language model's forward takes for them (``pixel_values``
and the like)."""


class TextOnlyTrajectoryError(DataError):
    """A trajectory without token ids cannot be trained on."""


class SequenceTooLongError(DataError):
    """A trajectory is longer than the context limit; it is refused rather than cut."""


@dataclass
class TokenSequence:
    """One trajectory's tokens and per-token annotations, before padding."""

    trajectory_id: str
    input_ids: list[int]
    loss_mask: list[bool]
    turn_index: list[int]
    old_logprobs: list[float]
    has_old_logprobs: bool
    advantages: list[float] | None = None
    images: list[ImagePart] = field(default_factory=list)
    """The trajectory's images in order, for a vision-language model's forward."""

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_loss_tokens(self) -> int:
        return sum(self.loss_mask)


def first_loss_message(traj: Trajectory, *, mask_rendered: bool = False) -> int:
    """The index of ``traj``'s first message whose assistant tokens train; those before it are
    context only (``mask_rendered`` as in ``encode_trajectory``)."""
    rendered = 0
    # A segment's rendered prefix was sampled, and is trained, in the segments before it.
    if (mask_rendered or traj.segment is not None) and not traj.exactness.is_exact:
        prefix = traj.exactness.rendered_prefix
        rendered = len(traj.messages) if prefix is None else prefix
    # Context-only assistant turns: a repair's failed prefix, a tree branch's replayed turns.
    return max(rendered, traj.metadata.get(LOSS_FROM_MESSAGE, 0))


def encode_trajectory(
    traj: Trajectory,
    *,
    max_length: int | None = None,
    mask_rendered: bool = False,
    through_last_turn: bool = False,
) -> TokenSequence:
    """Flatten a trajectory's stored token ids into a ``TokenSequence``. With
    ``mask_rendered``, the assistant turns of a trajectory that is not exact are left out of
    the loss up to its rendered prefix (all of them where the prefix is not known); a segment's
    always are. With ``through_last_turn``, the sequence ends with the last assistant message:
    what the env said after it conditions no trained token (an RL rollout bounds the sampled
    turns by the context limit, not the observation that ends the episode).

    Raises:
        TextOnlyTrajectoryError: a message has no token ids.
        SequenceTooLongError: the context exceeds ``max_length``.
    """
    if not traj.messages or not traj.is_tokenized:
        missing = [i for i, m in enumerate(traj.messages) if m.token_ids is None]
        where = f" (messages {missing[:5]} have no token_ids)" if missing else " (no messages)"
        raise TextOnlyTrajectoryError(
            f"text-only trajectory {traj.id}: RL/SFT needs token ids; "
            f"roll out with a token policy{where}"
        )
    ids: list[int] = []
    mask: list[bool] = []
    turns: list[int] = []
    old: list[float] = []
    has_old = True
    turn = 0
    loss_from = first_loss_message(traj, mask_rendered=mask_rendered)
    messages = traj.messages
    if through_last_turn:
        turns_at = [i for i, m in enumerate(messages) if m.role is Role.ASSISTANT]
        messages = messages[: turns_at[-1] + 1] if turns_at else messages
    for index, msg in enumerate(messages):
        toks = msg.token_ids or []
        ids.extend(toks)
        if msg.role is Role.ASSISTANT:
            mask.extend([index >= loss_from] * len(toks))
            turns.extend([turn] * len(toks))
            if msg.logprobs is None:
                has_old = False
                old.extend([0.0] * len(toks))
            else:
                old.extend(msg.logprobs)
            turn += 1
        else:
            mask.extend([False] * len(toks))
            turns.extend([-1] * len(toks))
            old.extend([0.0] * len(toks))
    if max_length is not None and len(ids) > max_length:
        raise SequenceTooLongError(
            f"trajectory {traj.id} has {len(ids)} tokens, over the context limit of {max_length}; "
            "raise max_seq_len or drop it (sequences are never cut silently)"
        )
    if mask and mask[0]:
        raise DataError(
            f"trajectory {traj.id}: the context starts with an assistant token; "
            "there is nothing to predict it from"
        )
    images = [image for msg in messages for image in msg.images]
    return TokenSequence(traj.id, ids, mask, turns, old, has_old, images=images)


@dataclass
class TokenBatch:
    """Right-padded tensors for a list of ``TokenSequence``s (see the module docstring)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    token_turn_index: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    trajectory_ids: list[str] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    has_old_logprobs: bool = True
    vision: dict[str, torch.Tensor] | None = None
    """A vision-language model's pixel tensors for the rows' images (``None``: no images, or
    a batch built without ``pixels``)."""

    @classmethod
    def collate(
        cls,
        seqs: Sequence[TokenSequence],
        *,
        pad_token_id: int = 0,
        pixels: PixelInputs | None = None,
    ) -> TokenBatch:
        """Pad ``seqs`` to the longest one. Advantages default to zero when a sequence has none.
        With ``pixels``, the rows' images become ``vision``."""
        if not seqs:
            raise DataError("cannot build a token batch from zero trajectories")
        width = max(len(s) for s in seqs)
        n = len(seqs)
        input_ids = torch.full((n, width), pad_token_id, dtype=torch.long)
        attention = torch.zeros((n, width), dtype=torch.long)
        loss_mask = torch.zeros((n, width), dtype=torch.bool)
        turn_index = torch.full((n, width), -1, dtype=torch.long)
        old = torch.zeros((n, width), dtype=torch.float32)
        adv = torch.zeros((n, width), dtype=torch.float32)
        for row, s in enumerate(seqs):
            k = len(s)
            input_ids[row, :k] = torch.tensor(s.input_ids, dtype=torch.long)
            attention[row, :k] = 1
            loss_mask[row, :k] = torch.tensor(s.loss_mask, dtype=torch.bool)
            turn_index[row, :k] = torch.tensor(s.turn_index, dtype=torch.long)
            old[row, :k] = torch.tensor(s.old_logprobs, dtype=torch.float32)
            if s.advantages is not None:
                adv[row, :k] = torch.tensor(s.advantages, dtype=torch.float32)
        return cls(
            input_ids=input_ids,
            attention_mask=attention,
            loss_mask=loss_mask,
            token_turn_index=turn_index,
            old_logprobs=old,
            advantages=adv,
            trajectory_ids=[s.trajectory_id for s in seqs],
            lengths=[len(s) for s in seqs],
            has_old_logprobs=all(s.has_old_logprobs for s in seqs),
            vision=_vision(seqs, pixels),
        )

    @classmethod
    def from_trajectories(
        cls,
        trajs: Sequence[Trajectory],
        *,
        pad_token_id: int = 0,
        max_length: int | None = None,
    ) -> TokenBatch:
        return cls.collate(
            [encode_trajectory(t, max_length=max_length) for t in trajs], pad_token_id=pad_token_id
        )

    @property
    def num_tokens(self) -> int:
        """Real (non-padding) tokens."""
        return sum(self.lengths)

    @property
    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum().item())

    @property
    def padding_fraction(self) -> float:
        cells = self.input_ids.numel()
        return 0.0 if cells == 0 else 1.0 - self.num_tokens / cells

    def to(self, device: torch.device | str) -> TokenBatch:
        return TokenBatch(
            input_ids=self.input_ids.to(device),
            attention_mask=self.attention_mask.to(device),
            loss_mask=self.loss_mask.to(device),
            token_turn_index=self.token_turn_index.to(device),
            old_logprobs=self.old_logprobs.to(device),
            advantages=self.advantages.to(device),
            trajectory_ids=self.trajectory_ids,
            lengths=self.lengths,
            has_old_logprobs=self.has_old_logprobs,
            vision=None
            if self.vision is None
            else {k: v.to(device) for k, v in self.vision.items()},
        )


def _vision(
    seqs: Sequence[TokenSequence], pixels: PixelInputs | None
) -> dict[str, torch.Tensor] | None:
    images = [image for s in seqs for image in s.images]
    return pixels(images) if pixels is not None and images else None


def plan_micro_batches(
    lengths: Sequence[int], *, max_tokens: int, max_rows: int | None = None
) -> list[list[int]]:
    """Group indices into micro-batches whose padded size (rows x longest) fits ``max_tokens``.

    Indices are sorted by length (longest first) and packed greedily, so sequences of similar
    length share a micro-batch and little padding is wasted. A single sequence longer than the
    budget gets a micro-batch of its own. The result is deterministic for equal inputs.
    """
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for i in order:
        new_width = max(width, lengths[i])
        too_many = max_rows is not None and len(current) >= max_rows
        if current and (too_many or new_width * (len(current) + 1) > max_tokens):
            batches.append(current)
            current, new_width = [], lengths[i]
        current.append(i)
        width = new_width
    if current:
        batches.append(current)
    return batches


def padding_fraction(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Fraction of padded cells across ``batches`` (0 = no padding)."""
    cells = sum(len(b) * max(lengths[i] for i in b) for b in batches if b)
    real = sum(lengths[i] for b in batches for i in b)
    return 0.0 if cells == 0 else 1.0 - real / cells


def micro_batches(
    seqs: Sequence[TokenSequence],
    *,
    max_tokens: int,
    max_rows: int | None = None,
    pad_token_id: int = 0,
    pixels: PixelInputs | None = None,
) -> list[TokenBatch]:
    """Length-bucketed, padded micro-batches of ``seqs`` under a token budget (with ``pixels``,
    each carrying its rows' pixel tensors)."""
    plan = plan_micro_batches([len(s) for s in seqs], max_tokens=max_tokens, max_rows=max_rows)
    return [
        TokenBatch.collate([seqs[i] for i in b], pad_token_id=pad_token_id, pixels=pixels)
        for b in plan
    ]
