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
    safe_temps = torch.where(greedy, torch.ones_like(temperatures), temperatures)
    logp = torch.log_softmax(logits / safe_temps[:, None], dim=-1)
    tokens = logp.argmax(dim=-1)
    sampled_rows = (~greedy).nonzero().flatten().tolist()
    if sampled_rows:
        rows = torch.tensor(sampled_rows, device=logits.device)
        uniforms = torch.stack(
            [
                torch.rand((), generator=generators[i], device=logits.device, dtype=torch.float64)
                for i in sampled_rows
            ]
        )
        tokens[rows] = _inverse_cdf(logp[rows].exp(), top_ps[rows], uniforms)
    logprobs = logp.gather(-1, tokens[:, None]).squeeze(-1)
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


def _search(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    import torch

    cdf = weights.double().cumsum(dim=-1)
    targets = (uniforms * cdf[:, -1])[:, None]
    # right=True returns the first index whose cdf exceeds the target: never a zero-weight token.
    picked = torch.searchsorted(cdf, targets, right=True).squeeze(-1)
    return picked.clamp(max=weights.shape[-1] - 1)
