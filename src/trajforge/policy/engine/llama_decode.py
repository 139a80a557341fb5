"""A lean forward for Llama-architecture models (SmolLM2, the tiny test model).

A decode step or a short prefill through transformers' module stack costs mostly Python: hooks,
output records, mask construction and kwargs plumbing around a handful of small matmuls, and
async rollout runs many small batches. This forward computes the same layer equations from the
model's own weights and rotary embedding (RMSNorm, grouped-query attention over the engine's
cache, SiLU-gated MLP): in fp32 its logits agree with transformers' to 1e-5; in bf16 its
attention kernel rounds differently, so near-tied greedy tokens can flip. On SmolLM2 in bf16 it
makes multi-turn generation without prefix reuse 1.09x faster (``bench/multiturn_generation.py``).
Any model this does not recognise keeps the transformers forward.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from trajforge.policy.engine.decode_weights import decode_weights
from trajforge.policy.engine.lora import LoraAdapter, RowAdapters

if TYPE_CHECKING:
    from trajforge.policy.engine.kv_cache import RowCache


def supports_lean_decode(model: Any) -> bool:
    """True for a plain ``LlamaForCausalLM`` whose layers are the standard ones (no biases,
    SiLU MLP, no tensor-parallel split, rotary frequencies that do not depend on the sequence
    length). PEFT-wrapped models are not plain."""
    config = getattr(model, "config", None)
    return (
        type(model).__name__ == "LlamaForCausalLM"
        and config is not None
        and config.model_type == "llama"
        and config.hidden_act == "silu"
        and not config.attention_bias
        and not getattr(config, "mlp_bias", False)
        and getattr(config, "pretraining_tp", 1) == 1
        and getattr(model.model.rotary_emb, "rope_type", None) == "default"
    )


def _rms_norm(hidden: torch.Tensor, norm: Any) -> torch.Tensor:
    """transformers' ``LlamaRMSNorm``: normalised in fp32, rounded to the input's dtype, then
    scaled. In fp32 that is one fused op, bit for bit the same."""
    shape, eps = hidden.shape[-1:], norm.variance_epsilon
    if hidden.dtype is torch.float32:
        return F.rms_norm(hidden, shape, norm.weight, eps)
    return norm.weight * F.rms_norm(hidden.float(), shape, eps=eps).to(hidden.dtype)


def causal_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    """The ``[B, 1, Q, L]`` bool mask of a ``width``-token prefill from a ``[B, L]`` padding
    mask whose last ``width`` columns are the new tokens: each query sees the unpadded columns
    up to its own. A padding query also sees itself, so its (unused) row stays finite instead
    of a softmax over nothing, whose NaN keys and values would reach later layers."""
    length = mask.shape[-1]
    queries = torch.arange(width, device=mask.device)
    own = length - width + queries
    causal = torch.arange(length, device=mask.device)[None, :] <= own[:, None]
    allowed = mask.bool()[:, None, None, :] & causal[None, None]
    allowed[:, :, queries, own] = True
    return allowed


@dataclass
class RotaryTable:
    """A rotary embedding's cosines and sines ``[N, D]`` for positions ``0..N-1``, computed by
    the embedding itself, so a lookup gives exactly what a call would."""

    inv_freq: torch.Tensor
    version: int
    cos: torch.Tensor
    sin: torch.Tensor


_ROTARY_TABLES: weakref.WeakKeyDictionary[Any, dict[torch.dtype, RotaryTable]] = (
    weakref.WeakKeyDictionary()
)


def rotary_table(rotary: Any, length: int, dtype: torch.dtype) -> RotaryTable:
    """The table of ``rotary`` (a transformers rotary embedding) in ``dtype``, covering at least
    ``length`` positions; rebuilt if its frequencies were replaced or changed in place.

    A decode step would otherwise call the embedding, a module with a dozen small ops, once per
    step for a handful of rows."""
    tables = _ROTARY_TABLES.setdefault(rotary, {})
    table = tables.get(dtype)
    inv_freq = rotary.inv_freq
    if (
        table is None
        or table.inv_freq is not inv_freq
        or table.version != inv_freq._version
        or table.cos.shape[0] < length
    ):
        size = max(length, int(rotary.max_seq_len_cached), 2 * table.cos.shape[0] if table else 0)
        positions = torch.arange(size, device=inv_freq.device)[None]
        cos, sin = rotary(torch.empty(0, dtype=dtype, device=inv_freq.device), positions)
        table = RotaryTable(inv_freq, inv_freq._version, cos[0], sin[0])
        tables[dtype] = table
    return table


def _rotate(heads: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of ``heads`` ``[N, heads, D]`` (queries and keys side by side,
    as the fused projection gives them) with ``cos``/``sin`` ``[N, D]``: transformers'
    ``apply_rotary_pos_emb``, elementwise the same."""
    half = heads.shape[-1] // 2
    rotated = torch.cat([-heads[..., half:], heads[..., :half]], dim=-1)
    return heads * cos[:, None] + rotated * sin[:, None]


@dataclass
class ForwardGroup:
    """Rows that share a query width: the live batch's decode step (``Q = 1``), or a group of
    prompts being prefilled. Each group attends over its own cache."""

    ids: torch.Tensor
    """``[B, Q]`` token ids to feed."""
    mask: torch.Tensor
    """``[B, 1, Q, L]`` (``L`` includes the new columns): bool, True where a query may attend
    (``causal_mask`` builds it for a prefill), or the additive form attention adds to its scores
    (0 or ``-inf``, in the model's dtype)."""
    positions: torch.Tensor
    """``[B, Q]`` position of each fed token."""
    cache: RowCache
    """The group's cache; each layer's keys and values grow by ``Q`` columns."""
    adapters: Sequence[LoraAdapter | None] = ()
    """Each row's LoRA adapter (None, or empty for all rows: the base weights)."""


def attention_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype the lean forward attends in, for weights of ``dtype`` on ``device``: fp32 on a
    CPU. At decode shapes (one query row against hundreds of cached keys) SDPA's bf16 CPU kernel
    measured 5-7x slower than its fp32 one (16 rows x 300 keys: 3.4 ms against 0.53 ms a layer),
    which cost bf16 decode more than its projections save; the cache then keeps fp32 keys and
    values."""
    return torch.float32 if device.type == "cpu" else dtype


def lean_forward(model: Any, groups: Sequence[ForwardGroup]) -> list[torch.Tensor]:
    """Next-token logits ``[B, V]`` for each group's rows, after its ``Q`` new tokens.

    The groups go through one pass: every projection, MLP and the LM head run once over all
    their tokens packed together (for a small model on a CPU the LM head over a 49k
    vocabulary is a large part of every step), and only attention runs per group. That is how a
    decode step and the prefill of prompts that arrived meanwhile share one forward. Rows with
    a LoRA adapter add its delta to each projection (``lora.RowAdapters``), so rows under
    different adapters share every base matmul too.

    Args:
        model: a model for which ``supports_lean_decode`` holds.
        groups: the row groups; their ``Q``s may differ.
    """
    inner = model.model
    weights = decode_weights(model)
    sizes = [g.ids.numel() for g in groups]
    hidden = F.embedding(_cat([g.ids.reshape(-1) for g in groups]), inner.embed_tokens.weight)
    # A position never exceeds its row's column count: the cache's columns plus the new ones.
    longest = max(g.cache.length + g.ids.shape[1] for g in groups)
    table = rotary_table(inner.rotary_emb, longest, hidden.dtype)
    positions = _cat([g.positions.reshape(-1) for g in groups])
    cos, sin = table.cos[positions], table.sin[positions]
    attends_in = attention_dtype(hidden.dtype, hidden.device)
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    lora = RowAdapters.of(
        [(g.adapters, g.ids.shape[0], g.ids.shape[1]) for g in groups], hidden.device
    )

    def project(name: str, index: int, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = getattr(weights.layers[index], name)(x)
        return out if lora is None else lora.add(out, x, index, name)

    for index, layer in enumerate(inner.layers):
        attn = layer.self_attn
        x = _rms_norm(hidden, layer.input_layernorm)
        qkv = project("qkv", index, x).view(len(x), heads + 2 * kv_heads, attn.head_dim)
        qk = _rotate(qkv[:, : heads + kv_heads], cos, sin)
        outs = []
        for group, qk_rows, v in zip(
            groups, qk.split(sizes), qkv[:, heads + kv_heads :].split(sizes), strict=True
        ):
            rows, width = group.ids.shape
            q = qk_rows[:, :heads].view(rows, width, heads, -1).transpose(1, 2)
            k = qk_rows[:, heads:].view(rows, width, kv_heads, -1).transpose(1, 2)
            keys, values = group.cache.layers[index].update(
                k.to(attends_in), v.view(rows, width, kv_heads, -1).transpose(1, 2).to(attends_in)
            )
            out = F.scaled_dot_product_attention(
                q.to(attends_in),
                keys,
                values,
                attn_mask=group.mask,
                scale=attn.scaling,
                enable_gqa=True,
            )
            outs.append(out.transpose(1, 2).reshape(rows * width, -1).to(hidden.dtype))
        hidden = hidden + project("o", index, _cat(outs))
        gate, up = project(
            "gate_up", index, _rms_norm(hidden, layer.post_attention_layernorm)
        ).chunk(2, -1)
        hidden = hidden + project("down", index, F.silu(gate) * up)
    last = _cat(
        [
            packed.view(*g.ids.shape, -1)[:, -1]
            for g, packed in zip(groups, hidden.split(sizes), strict=True)
        ]
    )
    logits = weights.lm_head(_rms_norm(last, inner.norm)).float()
    return list(logits.split([g.ids.shape[0] for g in groups]))


def _cat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """``torch.cat`` that does not copy a lone tensor (a decode step is a single group)."""
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)
