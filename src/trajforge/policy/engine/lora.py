"""LoRA adapters for the lean forward: a PEFT adapter's weights, fused like the base weights.

The lean forward multiplies each layer's queries, keys and values as one fused projection, and
its gate and up projections as another (``decode_weights``). An adapter is fused the same way,
once, when it is loaded: the ``A`` matrices of the modules a fused projection covers stacked
into one ``[r_q + r_k + r_v, in]`` matrix and their ``B`` matrices into one block-diagonal
``[Q + K + V, r_q + r_k + r_v]`` (zero where a module has no adapter), the scaling
(``alpha / r``, or ``alpha / sqrt(r)`` under rsLoRA) folded into ``B``. A row's delta for a
fused projection is then two small matmuls, whatever modules the adapter targets.

``RowAdapters`` applies several adapters in one forward: the base projection runs once over
every packed token, and each adapter adds its delta to its own tokens (grouped by adapter, so
each adapter's matrices are read once a step, as Punica's and S-LoRA's segmented kernels do).
Deltas are computed in fp32, as PEFT computes them for a bf16 or fp16 model (it keeps adapter
weights in fp32), and rounded to the model's dtype when added.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig
from peft.utils import load_peft_weights

from trajforge.errors import ConfigError

FUSED = {"qkv": ("q_proj", "k_proj", "v_proj"), "o": ("o_proj",),
         "gate_up": ("gate_proj", "up_proj"), "down": ("down_proj",)}  # fmt: skip
"""The lean forward's fused projections and the Llama modules each one stacks, in order."""

_KEY = re.compile(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+_proj)\.lora_([AB])\.weight$")
_SERIALS = itertools.count(1)


@dataclass
class LoraPair:
    """One fused projection's adapter: its delta for inputs ``x`` is ``(x @ a.T) @ b.T``."""

    a: torch.Tensor
    """``[R, in]`` fp32."""
    b: torch.Tensor
    """``[out, R]`` fp32, the scaling folded in."""

    def delta(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() @ self.a.T) @ self.b.T


@dataclass
class LoraAdapter:
    """A loaded adapter: per decoder layer, a ``LoraPair`` for each fused projection it
    changes. ``key`` identifies the weights (cached keys and values computed under them can
    be reused under them alone)."""

    name: str
    layers: list[dict[str, LoraPair]]
    key: int

    @property
    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size()
            for layer in self.layers
            for pair in layer.values()
            for t in (pair.a, pair.b)
        )


def check_adapter_folder(folder: Path) -> LoraConfig:
    """The adapter config in ``folder``, refused (naming the field) where the lean forward
    cannot apply it: DoRA, trained biases, extra trained modules, per-module ranks."""
    if not (folder / "adapter_config.json").is_file():
        raise ConfigError(f"adapter {folder}: no adapter_config.json")
    config = LoraConfig.from_pretrained(str(folder))
    unsupported = {
        "use_dora": config.use_dora,
        "bias": config.bias != "none",
        "lora_bias": getattr(config, "lora_bias", False),
        "modules_to_save": bool(config.modules_to_save),
        "rank_pattern": bool(config.rank_pattern),
        "alpha_pattern": bool(config.alpha_pattern),
        "layer_replication": bool(config.layer_replication),
    }
    bad = [name for name, on in unsupported.items() if on]
    if bad:
        raise ConfigError(f"adapter {folder}: {', '.join(bad)} is not supported for serving")
    return config


def load_adapter(
    name: str, folder: Path, model: Any, device: torch.device, key: int | None = None
) -> LoraAdapter:
    """The PEFT LoRA adapter saved in ``folder``, fused for ``model`` (a Llama the lean forward
    runs) and placed on ``device``. ``key``: the identity of an adapter loaded before from the
    same folder (a fresh one otherwise)."""
    config = check_adapter_folder(folder)
    scale = config.lora_alpha / (config.r**0.5 if config.use_rslora else config.r)
    modules: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for param, tensor in load_peft_weights(str(folder), device="cpu").items():
        match = _KEY.search(param)
        if match is None:
            raise ConfigError(f"adapter {folder}: {param} is not a LoRA weight of a decoder layer")
        layer, module, which = int(match[1]), match[2], match[3]
        modules.setdefault((layer, module), {})[which] = tensor.to(device, torch.float32)
    layers = model.model.layers
    fused: list[dict[str, LoraPair]] = [{} for _ in layers]
    for (index, module), pair in sorted(modules.items()):
        if index >= len(layers) or set(pair) != {"A", "B"}:
            raise ConfigError(f"adapter {folder}: layer {index} {module} does not fit the model")
    for index, layer in enumerate(layers):
        for projection, names in FUSED.items():
            parts = [(n, modules.get((index, n))) for n in names]
            if any(p is not None for _, p in parts):
                fused[index][projection] = _fuse(folder, layer, parts, scale)
    return LoraAdapter(name, fused, key if key is not None else next(_SERIALS))


def _fuse(
    folder: Path, layer: Any, parts: list[tuple[str, dict[str, torch.Tensor] | None]], scale: float
) -> LoraPair:
    """One fused projection's ``LoraPair`` from its modules' ``A``/``B`` (None: no adapter)."""
    blocks_a, widths, outs = [], [], []
    for name, pair in parts:
        owner = layer.self_attn if hasattr(layer.self_attn, name) else layer.mlp
        out_features, in_features = getattr(owner, name).weight.shape
        outs.append(out_features)
        if pair is None:
            widths.append(0)
            continue
        a, b = pair["A"], pair["B"]
        if a.shape[1] != in_features or b.shape[0] != out_features or a.shape[0] != b.shape[1]:
            raise ConfigError(
                f"adapter {folder}: {name} has A {tuple(a.shape)} and B {tuple(b.shape)}, the "
                f"model's {name} is [{out_features}, {in_features}]"
            )
        blocks_a.append(a)
        widths.append(a.shape[0])
    a = torch.cat(blocks_a)
    b = a.new_zeros((sum(outs), a.shape[0]))
    row = column = 0
    for (_, pair), width, out in zip(parts, widths, outs, strict=True):
        if pair is not None:
            b[row : row + out, column : column + width] = pair["B"] * scale
        row, column = row + out, column + width
    return LoraPair(a, b)


class RowAdapters:
    """The adapters of one forward's packed tokens: for each adapter present, the indices of
    the tokens that run under it (tokens under none run on the base weights alone)."""

    def __init__(self, parts: list[tuple[LoraAdapter, torch.Tensor]]) -> None:
        self.parts = parts

    @classmethod
    def of(
        cls,
        groups: Sequence[tuple[Sequence[LoraAdapter | None], int, int]],
        device: torch.device,
    ) -> RowAdapters | None:
        """From each group's row adapters (empty: none), rows and query width, in packing
        order; None when every token runs on the base weights alone."""
        tokens: dict[int, tuple[LoraAdapter, list[int]]] = {}
        offset = 0
        for adapters, rows, width in groups:
            for row, adapter in enumerate(adapters):
                if adapter is not None:
                    start = offset + row * width
                    tokens.setdefault(id(adapter), (adapter, []))[1].extend(
                        range(start, start + width)
                    )
            offset += rows * width
        if not tokens:
            return None
        return cls(
            [(a, torch.tensor(ix, dtype=torch.long, device=device)) for a, ix in tokens.values()]
        )

    def add(self, out: torch.Tensor, x: torch.Tensor, layer: int, projection: str) -> torch.Tensor:
        """``out`` (the base projection of ``x``) plus each token's adapter delta."""
        for adapter, index in self.parts:
            pair = adapter.layers[layer].get(projection)
            if pair is not None:
                out.index_add_(0, index, pair.delta(x[index]).to(out.dtype))
        return out
