"""The lean forward's copy of a Llama model's linear weights: fused and packed for decoding.

A decode step multiplies a few rows by each of 211 weights. Two things make those calls cheaper
on a CPU: fewer of them (each layer's query, key and value projections as one ``[Q+K+V, hidden]``
weight, its gate and up projections as one ``[2 * inter, hidden]``), and weights already in
oneDNN's blocked layout, which a plain tensor is reordered into on every call
(``bench/generation.py``'s ``linear_ms``; docs/benchmarks.md, Generation). Every output column is the same dot product as before: logits are
unchanged.

The copy is rebuilt when the model's weights change: a weight replaced by another tensor, or
changed in place in a way torch's version counter records (``load_state_dict``, a foreach or
plain optimizer step). A fused optimizer step (``AdamW(fused=True)``) and writes through
``.data`` bypass that counter, so whoever updates weights that way and samples again calls
``forget_decode_weights`` (``HFPolicy.set_weights`` does).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
import torch.nn.functional as F


@cache
def onednn_fp32_linear() -> bool:
    """Whether this torch build has oneDNN's linear kernel (``TRAJFORGE_ONEDNN_LINEAR=0`` turns
    it off, to compare with the BLAS path)."""
    if os.environ.get("TRAJFORGE_ONEDNN_LINEAR", "1") == "0":
        return False
    return bool(torch.backends.mkldnn.is_available()) and hasattr(
        torch.ops.mkldnn, "_linear_pointwise"
    )


def _linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T``. fp32 on a CPU goes through oneDNN: for the few rows of a decode step
    its kernels are 1.5-2.7x faster than the BLAS call behind ``F.linear`` (on AMD CPUs, where
    MKL takes a generic path, the gap is widest), and the weights are read as they are."""
    if weight.dtype is torch.float32 and weight.device.type == "cpu" and onednn_fp32_linear():
        return _onednn_linear(x, weight)
    return F.linear(x, weight)


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")


def _packs(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether weights of ``dtype`` on ``device`` are stored in oneDNN's layout: on a CPU whose
    oneDNN runs that dtype natively (bf16 needs AVX512-BF16 or AMX)."""
    if device.type != "cpu" or not onednn_fp32_linear():
        return False
    if dtype is torch.float32:
        return True
    return dtype is torch.bfloat16 and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@dataclass
class Linear:
    """One weight ready to multiply: ``apply(x)`` is ``x @ weight.T``."""

    weight: torch.Tensor
    """The plain ``[out, in]`` weight, or its oneDNN-packed copy."""
    apply_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.apply_fn(x, self.weight)


def _prepare(parts: list[torch.Tensor]) -> Linear:
    """``parts`` stacked along the output axis (a lone weight is used as it is unless packed),
    packed where ``_packs`` says so."""
    first = parts[0]
    weight = first.detach() if len(parts) == 1 else torch.cat([p.detach() for p in parts])
    if _packs(first.dtype, first.device):
        return Linear(torch.ops.mkldnn._reorder_linear_weight(weight), _onednn_linear)
    return Linear(weight, _linear)


@dataclass
class LayerWeights:
    """One decoder layer's projections; ``qkv`` gives queries, keys and values side by side."""

    qkv: Linear
    o: Linear
    gate_up: Linear
    down: Linear


@dataclass
class DecodeWeights:
    """Every layer's fused weights and the LM head, with the tensors they were built from."""

    layers: list[LayerWeights]
    lm_head: Linear
    sources: list[torch.Tensor]
    versions: list[int]

    def current(self, sources: list[torch.Tensor]) -> bool:
        """Whether these were built from ``sources`` as they are now."""
        return len(sources) == len(self.sources) and all(
            new is old and new._version == version
            for new, old, version in zip(sources, self.sources, self.versions, strict=True)
        )


_WEIGHTS: weakref.WeakKeyDictionary[Any, DecodeWeights] = weakref.WeakKeyDictionary()


def _sources(model: Any) -> list[torch.Tensor]:
    """The weights the lean forward multiplies, layer by layer, the LM head last."""
    out = []
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        out += [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight, attn.o_proj.weight]
        out += [mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight]
    out.append(model.lm_head.weight)
    return out


def decode_weights(model: Any) -> DecodeWeights:
    """The fused weights of ``model`` (one for which ``supports_lean_decode`` holds), built on
    first use and again whenever its weights changed (see the module doc)."""
    sources = _sources(model)
    weights = _WEIGHTS.get(model)
    if weights is not None and weights.current(sources):
        return weights
    # The old copy goes before the new one is built: two copies of the weights at once would
    # be the peak memory of every rebuild.
    _WEIGHTS.pop(model, None)
    layers = []
    for i in range(0, len(sources) - 1, 7):
        q, k, v, o, gate, up, down = sources[i : i + 7]
        layers.append(
            LayerWeights(_prepare([q, k, v]), _prepare([o]), _prepare([gate, up]), _prepare([down]))
        )
    weights = DecodeWeights(layers, _prepare([sources[-1]]), sources, [s._version for s in sources])
    _WEIGHTS[model] = weights
    return weights


def forget_decode_weights(model: Any) -> None:
    """Drop ``model``'s fused weights; the next forward rebuilds them from its weights."""
    _WEIGHTS.pop(model, None)
