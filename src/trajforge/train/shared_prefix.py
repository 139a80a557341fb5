"""Hidden states of a micro-batch whose rows start with the same tokens, that start run once.

The samples of an RL group share their prompt, and every trajectory of an env shares its system
prompt: on the calculator, 263 of a trajectory's tokens are its group's and 226 every row's. The
backbone runs that common prefix for one row, with ``use_cache``, and the rest of every row from
its keys and values (its ``cache`` repeated over the rows). The prefix's hidden states are
then broadcast to all rows, so whatever reads ``hidden[b, t]`` gets what a full forward gives, and
the gradients of every row flow back into the one prefix pass (summed, as the chain rule sums
them over a shared input). Only the order of fp32 reductions differs from a full forward.
"""

from __future__ import annotations

import torch
from torch import nn

MIN_SHARED_PREFIX = 16
"""Shorter common prefixes run as part of every row: a second backbone call costs more than
recomputing a few tokens."""


def shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """How many leading tokens every row of ``input_ids`` ``[B, T]`` has in common, all of them
    real (attention 1); at most ``T - 1``, so that each row keeps a token after the prefix."""
    same = (input_ids == input_ids[:1]).all(0) & attention_mask.bool().all(0)
    return min(int(same.long().cumprod(0).sum()), input_ids.shape[1] - 1)


def backbone_hidden(
    backbone: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    share_prefix: bool = True,
) -> torch.Tensor:
    """``[B, T, H]`` last hidden states of ``backbone`` (a HF decoder), the rows' common prefix
    run once when ``share_prefix`` and it is at least ``MIN_SHARED_PREFIX`` tokens long."""
    rows = input_ids.shape[0]
    n = shared_prefix_length(input_ids, attention_mask) if share_prefix and rows > 1 else 0
    if n < MIN_SHARED_PREFIX:
        return backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)[0]
    prefix = backbone(
        input_ids=input_ids[:1, :n], attention_mask=attention_mask[:1, :n], use_cache=True
    )
    cache = prefix.cache
    cache.batch_repeat_interleave(rows)
    # Positions continue from the cache (n, n + 1, ...), as in a full forward of each row.
    rest = backbone(
        input_ids=input_ids[:, n:],
        attention_mask=attention_mask,
        cache=cache,
        use_cache=True,
    )[0]
    return torch.cat([prefix[0].expand(rows, -1, -1), rest], dim=1)
