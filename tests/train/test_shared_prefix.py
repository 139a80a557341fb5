"""Rows' common prefix run once: the same logprobs, entropies and gradients as every row whole."""

from __future__ import annotations

import pytest
import torch

from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.train import shared_prefix
from trajforge.train.logprobs import TokenLogprobModel
from trajforge.train.shared_prefix import MIN_SHARED_PREFIX, shared_prefix_length

# fp32 keeps 24 bits (u = 6e-8). The shared path sums the same terms in another order (the
# prefix's matmuls on one row instead of four, attention over cached keys): a dot product of
# K = 64 (hidden) terms moves by ~sqrt(K) * u relative, and through the tiny model's two layers
# and a log-softmax over 49152 entries (sqrt(49152) * u = 1.3e-5) logprobs of size O(10) move
# by well under 1e-4. Gradients are sums over the batch's tokens of O(1) terms: 1e-5 relative.
LOGPROB_ATOL = 1e-4
GRAD_RTOL = 1e-5


def test_shared_prefix_length_counts_the_common_real_tokens() -> None:
    ids = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 9, 5], [1, 2, 3, 4, 0]])
    ones = torch.ones_like(ids)
    assert shared_prefix_length(ids, ones) == 3
    assert shared_prefix_length(ids[:1].repeat(2, 1), ones[:2]) == 4  # one token left per row
    padded = ones.clone()
    padded[2, 2:] = 0  # a short row: its padding is never shared
    assert shared_prefix_length(ids, padded) == 2
    assert shared_prefix_length(torch.tensor([[7, 1], [8, 1]]), torch.ones(2, 2)) == 0


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Four rows, 40 common tokens (a prompt), then their own, two of them right-padded."""
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (4, 72))
    ids[:, :40] = ids[0, :40]
    attention = torch.ones_like(ids)
    attention[1, 60:] = 0
    attention[3, 51:] = 0
    mask = torch.zeros_like(ids)
    mask[:, 30:] = 1  # loss tokens inside the shared prefix too
    return ids, attention, mask * attention


def _logprobs_and_grads(
    reference_path: bool, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    model, _ = tiny_model_and_tokenizer(seed=1)
    ids, attention, mask = _batch()
    # As the trainer runs bf16: fp32 weights under autocast (emulated where not native).
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is torch.bfloat16):
        lp, ent = TokenLogprobModel(model, reference_path=reference_path)(
            ids, attention, mask, True, 0.8
        )
    lp = lp.float()
    weights = torch.randn(lp.shape, generator=torch.Generator().manual_seed(2))
    (lp * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert ent is not None
    return lp.detach(), ent, grads


def _close(
    a: tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]],
    b: tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]],
) -> bool:
    if not torch.allclose(a[0], b[0], rtol=0, atol=LOGPROB_ATOL):
        return False
    if not torch.allclose(a[1], b[1], rtol=0, atol=LOGPROB_ATOL):
        return False
    return a[2].keys() == b[2].keys() and all(
        torch.allclose(
            a[2][n], b[2][n], rtol=GRAD_RTOL, atol=GRAD_RTOL * float(b[2][n].abs().max())
        )
        for n in a[2]
    )


def test_a_shared_prefix_gives_the_full_forwards_logprobs_and_gradients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert shared_prefix_length(*_batch()[:2]) == 40 >= MIN_SHARED_PREFIX
    calls: list[int] = []
    real = shared_prefix.shared_prefix_length
    monkeypatch.setattr(
        shared_prefix, "shared_prefix_length", lambda *a: calls.append(real(*a)) or calls[-1]
    )
    reference = _logprobs_and_grads(reference_path=True)
    assert calls == []  # the reference path runs every row whole
    shared = _logprobs_and_grads(reference_path=False)
    assert calls == [40]
    assert _close(shared, reference)
    # Control: a prefix one token too long (row 0's token 40 given to every row) is caught.
    monkeypatch.setattr(shared_prefix, "shared_prefix_length", lambda *a: real(*a) + 1)
    assert not _close(_logprobs_and_grads(reference_path=False), reference)


def _gap(
    a: tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]],
    b: tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]],
) -> tuple[float, float]:
    """The largest logprob difference and the largest gradient difference relative to its
    tensor's scale."""
    grads = max(float((a[2][n] - b[2][n]).abs().max() / b[2][n].abs().max()) for n in b[2])
    return float((a[0] - b[0]).abs().max()), grads


def test_in_bf16_a_shared_prefix_stays_within_bf16s_own_rounding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # bf16 keeps 8 bits (u = 3.9e-3): every matmul of the autocast forward rounds its inputs,
    # so the tolerance is what bf16 already costs the reference path, its gap to fp32; the
    # shared prefix (the same matmuls on one row instead of four) must stay within twice that.
    exact = _logprobs_and_grads(reference_path=True)
    reference = _logprobs_and_grads(reference_path=True, dtype=torch.bfloat16)
    shared = _logprobs_and_grads(reference_path=False, dtype=torch.bfloat16)
    rounding = _gap(reference, exact)
    assert rounding[0] > LOGPROB_ATOL  # bf16 did round: the yardstick is not fp32's
    gap = _gap(shared, reference)
    assert gap[0] <= 2 * rounding[0] and gap[1] <= 2 * rounding[1]
    # Control: a prefix one token too long moves logprobs far beyond bf16's rounding.
    real = shared_prefix.shared_prefix_length
    monkeypatch.setattr(shared_prefix, "shared_prefix_length", lambda *a: real(*a) + 1)
    faulty = _logprobs_and_grads(reference_path=False, dtype=torch.bfloat16)
    assert _gap(faulty, reference)[0] > 2 * rounding[0]
