"""Per-sequence token sampling for batched decoding.

Every row of a batch has its own temperature, top-p, top-k and ``UniformStream`` (a seeded generator).
Each sampled row takes one uniform number per step from its own stream and picks a token by
inverting its CDF, so what a sequence samples depends only on its own logits and seed, never on
which other sequences share the batch.

Reported logprob: ``log_softmax(logits / temperature)[token]`` over the full vocabulary (the
distribution before top-p and top-k truncation; temperature 1 for greedy rows). That is the quantity an RL
trainer recomputes from its own forward pass (``logits / T``, as verl and vLLM do), so old and new
logprobs compare like with like in importance ratios.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from trajforge.policy.base import SamplingParams


def make_generator(seed: int | None, device: torch.device) -> torch.Generator:
    """A generator seeded with ``seed``, or from fresh OS entropy when ``seed`` is None."""
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


UNIFORM_CHUNK = 32
"""Uniforms a ``UniformStream`` draws from its generator at a time."""


class UniformStream:
    """One sequence's float64 uniforms, in its generator's order.

    Drawn in chunks: one tensor op per 32 tokens instead of one per token and row, a cost that
    counts when a decode step is a few milliseconds. A chunk holds exactly the numbers that
    one-at-a-time draws would give, so tokens do not depend on the chunk size.
    """

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator
        self._buffer: list[float] = []
        self._next = 0

    @classmethod
    def seeded(cls, seed: int | None, device: torch.device) -> UniformStream:
        """A stream from ``make_generator(seed, device)``."""
        return cls(make_generator(seed, device))

    def next(self) -> float:
        """The next uniform in [0, 1)."""
        if self._next == len(self._buffer):
            chunk = torch.rand(
                UNIFORM_CHUNK,
                generator=self.generator,
                device=self.generator.device,
                dtype=torch.float64,
            )
            self._buffer, self._next = chunk.tolist(), 0
        self._next += 1
        return self._buffer[self._next - 1]


def step_uniforms(
    streams: list[UniformStream], temperatures: list[float], device: torch.device
) -> torch.Tensor:
    """``[B]`` float64: the next uniform of each sampled row's stream; greedy rows (temperature
    0) take none and get 0."""
    values = [s.next() if t > 0 else 0.0 for s, t in zip(streams, temperatures, strict=True)]
    return torch.tensor(values, dtype=torch.float64, device=device)


def truncations(samplings: Sequence[SamplingParams], device: torch.device) -> torch.Tensor:
    """``[B, 2]`` float32: each row's top-p and top-k (0: no cut), as ``sample_tokens`` takes
    them."""
    rows = [[s.top_p, float(s.top_k)] for s in samplings]
    return torch.tensor(rows, dtype=torch.float32, device=device)


def sample_tokens(
    logits: torch.Tensor,
    temperatures: torch.Tensor,
    cuts: torch.Tensor,
    uniforms: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row of ``logits`` ``[B, V]``.

    Args:
        logits: raw next-token logits, float32.
        temperatures: ``[B]``; a row with temperature 0 is decoded greedily.
        cuts: ``[B, 2]`` (``truncations``): the nucleus mass in (0, 1] (1 keeps the whole
            vocabulary) and the top-k count (0 keeps it too); a token survives both cuts.
        uniforms: ``[B]`` float64 in [0, 1), each sampled row's draw (``step_uniforms``);
            greedy rows' entries are ignored.

    Returns:
        ``(tokens [B] long, logprobs [B] float32)``, logprobs as described in the module doc.
    """
    # Decoding runs this once per step for a handful of rows, so every tensor op counts: the
    # per-row settings are read once as Python numbers and the common cases take no extra op.
    temps = temperatures.tolist()
    if all(t in (0, 1) for t in temps):
        scaled = logits  # greedy rows divide by 1
    else:
        scaled = logits / temperatures.masked_fill(temperatures <= 0, 1.0)[:, None]
    probs = torch.softmax(scaled, dim=-1)
    sampled_rows = [i for i, t in enumerate(temps) if t > 0]
    if len(sampled_rows) == len(temps):
        tokens = _inverse_cdf(probs, cuts, uniforms)
    else:
        tokens = scaled.argmax(dim=-1)
        if sampled_rows:
            rows = torch.tensor(sampled_rows, device=logits.device)
            tokens[rows] = _inverse_cdf(probs[rows], cuts[rows], uniforms[rows])
    # A sampled token never has zero probability and a greedy one has the largest, so the log
    # of the gathered probability is finite: one softmax serves sampling and logprobs.
    logprobs = probs.gather(-1, tokens[:, None]).squeeze(-1).log()
    return tokens, logprobs


def _inverse_cdf(probs: torch.Tensor, cuts: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling with optional nucleus and top-k truncation; rows are independent."""
    top_ps, top_ks = cuts.unbind(-1)
    if min(top_ps.tolist()) < 1 or max(top_ks.tolist()) > 0:
        # Keep every token at least as likely as the least likely one inside the nucleus, then
        # sample in vocabulary order: a tiny change in the logits (another batch shape) moves
        # only the tokens at that threshold, where sampling in sorted order would reshuffle
        # near-equal tokens.
        sorted_probs = probs.sort(dim=-1, descending=True).values
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        kept = (mass_before < top_ps[:, None]).sum(dim=-1, keepdim=True).clamp(min=1)
        top_ks = top_ks.long().masked_fill(top_ks <= 0, probs.shape[-1])
        kept = torch.minimum(kept, top_ks[:, None])
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
    rows, vocab = weights.shape
    blocks = -(-vocab // SEARCH_BLOCK)
    padded = F.pad(weights, (0, blocks * SEARCH_BLOCK - vocab)) if vocab % SEARCH_BLOCK else weights
    blocked = padded.view(rows, blocks, SEARCH_BLOCK)
    block_cdf = blocked.sum(dim=-1).double().cumsum(dim=-1)
    targets = uniforms[:, None] * block_cdf[:, -1:]
    block = _first_above(block_cdf, targets)
    before = F.pad(block_cdf, (1, 0)).gather(-1, block)
    inside = blocked.gather(1, block[:, :, None].expand(rows, 1, SEARCH_BLOCK)).squeeze(1)
    offset = _first_above(inside.double().cumsum(dim=-1), targets - before)
    return (block * SEARCH_BLOCK + offset).squeeze(-1)


def _first_above(cdf: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per row of a cumulative sum ``cdf``, the first index whose value exceeds ``targets``
    ``[rows, 1]``: never a zero-weight entry, whose value equals the one before it. Rounding
    can put a target at or past the row's total; then the entry where the total is first
    reached, which has weight, is taken."""
    found = torch.searchsorted(cdf, targets, right=True)
    return torch.minimum(found, torch.searchsorted(cdf, cdf.amax(dim=-1, keepdim=True)))
