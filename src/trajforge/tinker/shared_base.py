"""One copy of a base model's weights under every training client's LoRA adapter.

Each training client of a base model adds its adapter to one PEFT model over one copy of the
base weights (PEFT's named adapters; SkyRL's multi-tenant Tinker server shares its base the same
way), instead of loading a copy of its own. A client's calls first make its adapter the active
one: it alone computes, takes gradients and is stepped. The training thread runs one call at a
time, so no call sees another client's adapter, and a client's gradients wait in its own
adapter's ``.grad`` while other clients' calls run.

A client's adapter is created exactly as ``build_lora_model`` creates a lone one (same config,
same seeded initialisation), and its parameters are named as a lone one's (``...lora_A.default
.weight``) wherever they leave this module, so checkpoints move between clients.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from peft import get_peft_model

from trajforge.tinker.errors import UserError
from trajforge.train import LoraSettings, ModelSettings, load_base_model, lora_config

LORA_ALPHA = 32
"""Tinker fixes LoRA's alpha; the adapter's scale is ``alpha / rank``."""

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
UNEMBED = ("lm_head",)
LONE = "default"
"""The adapter name of a lone PEFT model, the one checkpoints use."""


def max_rank(model: Any) -> int:
    """The largest LoRA rank that still is a low-rank update: the model's hidden size."""
    return int(model.config.hidden_size)


def untie_head(model: Any) -> None:
    # An adapter on a head tied to the input embedding would, once merged for sampling, change
    # the embedding too: the head gets its own (frozen) copy first, so only the head learns.
    head = model.get_output_embeddings()
    copy = model.get_input_embeddings().weight.detach().clone()
    head.weight = torch.nn.Parameter(copy, requires_grad=False)
    model.config.tie_word_embeddings = False


class SharedBase:
    """The base model ``spec``, loaded on the first adapter, and every client's adapter."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.model: Any = None
        """The PEFT model, once a client has added its adapter."""
        self.tokenizer: Any = None
        self._adapters: dict[str, str] = {}
        self._serial = itertools.count(1)

    def add(
        self, client: str, rank: int, seed: int | None, target_modules: list[str], unembed: bool
    ) -> None:
        """Give ``client`` a fresh adapter (rank 1..hidden size, else a ``UserError``), its
        random initialisation fixed by ``seed``."""
        base: Any
        if self.model is not None:
            base = self.model.get_base_model()
        else:
            base, self.tokenizer = load_base_model(ModelSettings(spec=self.spec))
        top = max_rank(base)
        if not 1 <= rank <= top:
            raise UserError(f"rank: {rank} is out of range for this model (1 to {top})")
        if unembed and base.config.tie_word_embeddings:
            untie_head(base)
        config = lora_config(LoraSettings(r=rank, alpha=LORA_ALPHA, target_modules=target_modules))
        name = LONE if self.model is None else f"client{next(self._serial)}"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed if seed is not None else 0)
            if self.model is None:
                self.model = get_peft_model(base, config)
            else:
                self.model.add_adapter(name, config)
        self._adapters[client] = name

    def use(self, client: str) -> Any:
        """The model with ``client``'s adapter active (the only one that computes and trains)."""
        name = self._adapters[client]
        if self.model.active_adapter != name:
            self.model.set_adapter(name)
        return self.model

    def lone_names(self, client: str, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` keyed by ``client``'s parameter names as a lone adapter's."""
        own = f".{self._adapters[client]}."
        return {k.replace(own, f".{LONE}."): v for k, v in state.items()}

    def own_names(self, client: str, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` keyed by a lone adapter's names, as ``client``'s parameter names."""
        own = f".{self._adapters[client]}."
        return {k.replace(f".{LONE}.", own): v for k, v in state.items()}

    @property
    def clients(self) -> int:
        return len(self._adapters)
