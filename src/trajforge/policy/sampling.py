"""Per-sequence token sampling for batched decoding.

Every row of a batch has its own temperature, top-p and ``torch.Generator``. Each row draws one
uniform number per step from its own generator and picks a token by inverting its CDF, so what a
sequence samples depends only on its own logits and seed, never on which other sequences share
the batch.

Reported logprob: ``log_softmax(logits / temperature)[token]`` over the full vocabulary (the
distribution before top-p truncation; temperature 1 for greedy rows). That is the quantity an RL
trainer recomputes from its own forward pass (``logits / T``, as verl and vLLM do), so old and new
logprobs compare like with like in importance ratios.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def make_generator(seed: int | None, device: torch.device) -> torch.Generator:
    """A generator seeded with ``seed``, or from fresh OS entropy when ``seed`` is None."""
    import torch

    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


def sample_tokens(
    logits: torch.Tensor,
    temperatures: torch.Tensor,
    top_ps: torch.Tensor,
    generators: list[torch.Generator],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row of ``logits`` ``[B, V]``.

    Args:
        logits: raw next-token logits, float32.
        temperatures: ``[B]``; a row with temperature 0 is decoded greedily.
        top_ps: ``[B]`` nucleus mass in (0, 1]; 1 keeps the whole vocabulary.
        generators: one generator per row, advanced by one draw for sampled rows only.

    Returns:
        ``(tokens [B] long, logprobs [B] float32)``, logprobs as described in the module doc.
    """
    import torch

    greedy = temperatures <= 0
    if bool((temperatures == 1).all()):
        scaled = logits
    else:
        safe_temps = torch.where(greedy, torch.ones_like(temperatures), temperatures)
        scaled = logits / safe_temps[:, None]
    probs = torch.softmax(scaled, dim=-1)
    tokens = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    greedy_rows = greedy.nonzero().flatten()
    sampled_rows = (~greedy).nonzero().flatten().tolist()
    if len(greedy_rows):
        tokens[greedy_rows] = scaled[greedy_rows].argmax(dim=-1)
    if sampled_rows:
        uniforms = torch.stack(
            [
                torch.rand((), generator=generators[i], device=logits.device, dtype=torch.float64)
                for i in sampled_rows
            ]
        )
        if len(sampled_rows) == logits.shape[0]:
            tokens = _inverse_cdf(probs, top_ps, uniforms)
        else:
            rows = torch.tensor(sampled_rows, device=logits.device)
            tokens[rows] = _inverse_cdf(probs[rows], top_ps[rows], uniforms)
    # A sampled token never has zero probability and a greedy one has the largest, so the log
    # of the gathered probability is finite: one softmax serves sampling and logprobs.
    logprobs = probs.gather(-1, tokens[:, None]).squeeze(-1).log()
    return tokens, logprobs


def _inverse_cdf(probs: torch.Tensor, top_ps: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling with optional nucleus truncation; rows are independent."""

    if bool((top_ps < 1).any()):
        # Keep every token at least as likely as the least likely one inside the nucleus, then
        # sample in vocabulary order: a tiny change in the logits (another batch shape) moves
        # only the tokens at that threshold, where sampling in sorted order would reshuffle
        # near-equal tokens.
        sorted_probs = probs.sort(dim=-1, descending=True).values
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        kept = (mass_before < top_ps[:, None]).sum(dim=-1, keepdim=True).clamp(min=1)
        threshold = sorted_probs.gather(-1, kept - 1)
        probs = probs.masked_fill(probs < threshold, 0.0)
    return _search(probs, uniforms)


SEARCH_BLOCK = 1024
"""Vocabulary block of the two-level CDF search."""


def _search(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """The token whose CDF interval holds ``uniform * total`` in each row, in two levels.

    A full float64 cumulative sum over a 49k vocabulary was most of the sampler's cost.
    Instead: block masses (one vectorised sum), a cumulative sum over the ~50 blocks to
    find the block, then one within that block only.
    """
    import torch
    import torch.nn.functional as F

    rows, vocab = weights.shape
    blocks = -(-vocab // SEARCH_BLOCK)
    padded = F.pad(weights, (0, blocks * SEARCH_BLOCK - vocab)) if vocab % SEARCH_BLOCK else weights
    blocked = padded.view(rows, blocks, SEARCH_BLOCK)
    block_mass = blocked.sum(dim=-1).double()
    block_cdf = block_mass.cumsum(dim=-1)
    targets = uniforms * block_cdf[:, -1]
    block = torch.searchsorted(block_cdf, targets[:, None], right=True).squeeze(-1)
    block = torch.minimum(block, _last_positive(block_mass))
    before = torch.where(
        block > 0, block_cdf.gather(-1, (block - 1).clamp(min=0)[:, None]).squeeze(-1), 0.0
    )
    inside = blocked[torch.arange(rows, device=weights.device), block]
    # right=True returns the first index whose cdf exceeds the target: never a zero-weight token,
    # unless rounding puts the target past the block's end; then its last positive one is taken.
    offset = torch.searchsorted(
        inside.double().cumsum(dim=-1), (targets - before)[:, None], right=True
    ).squeeze(-1)
    offset = torch.minimum(offset, _last_positive(inside))
    return block * SEARCH_BLOCK + offset


def _last_positive(weights: torch.Tensor) -> torch.Tensor:
    """Per row, the index of the last entry above zero (0 when there is none)."""
    import torch

    index = torch.arange(weights.shape[-1], device=weights.device)
    return torch.where(weights > 0, index, 0).amax(dim=-1)
