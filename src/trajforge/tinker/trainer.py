"""One training client's model: trajforge's model loading and LoRA, AdamW, Tinker's losses.

The model is loaded by ``trajforge.train.model.load_base_model`` and the adapter configured by
``lora_config`` (the SFT/RL trainers' own functions), in fp32 on the CPU; every client of a base
model holds its adapter on one copy of the base weights (``shared_base``). ``forward_backward`` adds each batch's
gradients to what earlier calls left, as Tinker does, until ``optim_step`` applies them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, Field
from torch import nn

from trajforge.tinker.errors import UserError
from trajforge.tinker.losses import check_inputs, datum_loss, loss_fn
from trajforge.tinker.shared_base import ATTN, MLP, UNEMBED, SharedBase
from trajforge.tinker.wire import Datum
from trajforge.train import OptimSettings, make_optimizer, token_logprobs


class LoraSpec(BaseModel):
    """What ``create_lora_training_client`` asked for, kept with every checkpoint."""

    rank: int = Field(ge=1)
    seed: int | None = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True

    def target_modules(self) -> list[str]:
        return [
            *(ATTN if self.train_attn else ()),
            *(MLP if self.train_mlp else ()),
            *(UNEMBED if self.train_unembed else ()),
        ]


def build_lora_model(spec: str, lora: LoraSpec) -> tuple[Any, Any]:
    """The base model ``spec`` (``tiny``, ``embedded``, a folder) with a fresh LoRA adapter whose
    random init is fixed by ``lora.seed``; a rank outside 1..hidden size is a ``UserError``."""
    shared = SharedBase(spec)
    shared.add("lone", lora.rank, lora.seed, lora.target_modules(), lora.train_unembed)
    return shared.model, shared.tokenizer


def target_logprobs(model: Any, data: list[Datum]) -> list[torch.Tensor]:
    """Per datum, ``[N]`` logprobs of ``target_tokens[i]`` after ``tokens[: i + 1]``.

    When every datum's targets are its tokens shifted by one (SFT and RL data always are), the
    batch goes through the trainers' own ``token_logprobs`` on the whole sequences, so the
    numbers are the in-process trainers' to the bit; other targets are gathered from the
    logits."""
    targets = [d.inputs["target_tokens"].astype(np.int64).tolist() for d in data]
    shifted = all(t[:-1] == d.tokens[1:] for t, d in zip(targets, data, strict=True))
    rows = [d.tokens + t[-1:] if shifted else d.tokens for d, t in zip(data, targets, strict=True)]
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    if shifted:
        lp = token_logprobs(model, ids, mask, mask).logprobs[:, 1:]
    else:
        wanted = torch.zeros_like(ids)
        for i, t in enumerate(targets):
            wanted[i, : len(t)] = torch.tensor(t)
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
        lp = torch.log_softmax(logits, dim=-1).gather(-1, wanted.unsqueeze(-1)).squeeze(-1)
    return [lp[i, : len(d.tokens)] for i, d in enumerate(data)]


@dataclass
class StepResult:
    outputs: list[dict[str, np.ndarray]]
    metrics: dict[str, float]


class TrainingModel:
    """A LoRA model being trained through the API, with its optimizer and counters.

    ``shared``: the base model its adapter joins (a copy of its own when not given)."""

    def __init__(
        self, model_id: str, base: str, spec: str, lora: LoraSpec, shared: SharedBase | None = None
    ) -> None:
        self.model_id = model_id
        self.base = base
        self.spec = spec
        self.lora = lora
        self.shared = shared or SharedBase(spec)
        self.shared.add(model_id, lora.rank, lora.seed, lora.target_modules(), lora.train_unembed)
        self.tokenizer = self.shared.tokenizer
        self.model.train()
        self.vocab = int(self.model.get_input_embeddings().num_embeddings)
        self.optimizer = make_optimizer(self.model, OptimSettings(), fused=False)
        self.steps = 0
        """Optimizer steps taken: the weights' version."""
        self.pending: dict[str, float] = {}
        """What the ``forward_backward`` calls since the last step added up to (for its metrics)."""

    def _check(self, data: list[Datum], name: str) -> None:
        if not data:
            raise UserError("data: the batch holds no datum")
        loss, _ = loss_fn(name, {})
        for i, datum in enumerate(data):
            if not datum.tokens:
                raise UserError(f"data[{i}].model_input: no tokens")
            bad = [t for t in datum.tokens if not 0 <= t < self.vocab]
            if bad:
                raise UserError(
                    f"data[{i}].model_input: token id {bad[0]} is outside the vocabulary "
                    f"(0..{self.vocab - 1})"
                )
            check_inputs(loss, i, len(datum.tokens), datum.inputs)
            targets = datum.inputs["target_tokens"]
            if targets.size and not (targets.min() >= 0 and targets.max() < self.vocab):
                raise UserError(
                    f"data[{i}].loss_fn_inputs['target_tokens']: ids outside the vocabulary "
                    f"(0..{self.vocab - 1})"
                )

    def forward_backward(
        self, data: list[Datum], name: str, config: dict[str, float], *, backward: bool
    ) -> StepResult:
        """The batch's loss (summed over datums and tokens); with ``backward`` its gradients
        are added to the accumulated ones."""
        self._check(data, name)
        loss, full_config = loss_fn(name, config)
        with torch.set_grad_enabled(backward):
            logprobs = target_logprobs(self.model, data)
            losses = [
                datum_loss(loss, lp, d.inputs, full_config)
                for lp, d in zip(logprobs, data, strict=True)
            ]
            total = torch.stack(losses).sum()
            if backward:
                total.backward()
                for key, value in (
                    ("loss", float(total.detach())),
                    ("datums", len(data)),
                    ("tokens", sum(len(d.tokens) for d in data)),
                ):
                    self.pending[key] = self.pending.get(key, 0.0) + value
        outputs = [{"logprobs": lp.detach().numpy().astype(np.float32)} for lp in logprobs]
        return StepResult(outputs=outputs, metrics={"loss:sum": float(total.detach())})

    def optim_step(
        self, lr: float, betas: tuple[float, float], eps: float, weight_decay: float, clip: float
    ) -> dict[str, float]:
        """One AdamW step with these settings (Tinker sends them with every step); its metrics
        with the losses, datums and tokens of the batches it applies."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        grads = [p.grad for p in params if p.grad is not None]
        norm = float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0
        if clip > 0:
            torch.nn.utils.clip_grads_with_norm_(params, clip, torch.tensor(norm))
        for group in self.optimizer.param_groups:
            group.update(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        metrics = {**self.pending, "grad_norm": norm, "learning_rate": lr}
        self.pending = {}
        return metrics

    @property
    def model(self) -> Any:
        """The shared model with this client's adapter active."""
        return self.shared.use(self.model_id)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The adapter's parameters, named as a lone adapter's."""
        own = {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}
        return self.shared.lone_names(self.model_id, own)

    def save(self, folder: Path, *, optimizer: bool) -> None:
        """The adapter (and the optimizer's state) with what rebuilds the model."""
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(self.trainable_state(), folder / "adapter.pt")
        if optimizer:
            torch.save(self.optimizer.state_dict(), folder / "optimizer.pt")
        meta = CheckpointMeta(base=self.base, spec=self.spec, lora=self.lora, steps=self.steps)
        (folder / "checkpoint.json").write_text(meta.model_dump_json(indent=2))

    def load(self, folder: Path, *, optimizer: bool) -> None:
        """Weights (and, with ``optimizer``, the optimizer's state) from ``save``."""
        load_adapter(self.model, folder, lambda state: self.shared.own_names(self.model_id, state))
        if optimizer:
            if not (folder / "optimizer.pt").exists():
                raise UserError("path: this checkpoint holds no optimizer state")
            self.optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=True))
        self.steps = read_meta(folder).steps
        self.optimizer.zero_grad(set_to_none=True)

    def merged(self) -> nn.Module:
        """A plain copy of the model with the adapter merged in: what a sampler decodes with."""
        merged: nn.Module = copy.deepcopy(self.model).merge_and_unload()
        return merged.eval()


def load_adapter(
    model: Any, folder: Path, rename: Callable[[dict[str, Any]], dict[str, Any]] = dict
) -> None:
    """Copy a saved adapter into ``model``, which must have the same LoRA layout (``rename``:
    the saved names as the model's)."""
    state = rename(torch.load(folder / "adapter.pt", weights_only=True))
    params = dict(model.named_parameters())
    missing = sorted(n for n, p in params.items() if p.requires_grad and n not in state)
    if missing:
        raise UserError(f"path: the checkpoint lacks {missing[0]} (another model or rank?)")
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)


class CheckpointMeta(BaseModel):
    base: str
    """The served name of the base model."""
    spec: str
    lora: LoraSpec
    steps: int


def read_meta(folder: Path) -> CheckpointMeta:
    path = folder / "checkpoint.json"
    if not path.exists():
        raise UserError(f"path: no checkpoint at {folder}")
    return CheckpointMeta.model_validate_json(path.read_text())
