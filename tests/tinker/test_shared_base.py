"""Training clients on one copy of the base weights: each client's adapter trains, interleaved
with the others', exactly as it trains on a base model of its own."""

from __future__ import annotations

import numpy as np
import torch

from trajforge.tinker.shared_base import SharedBase
from trajforge.tinker.trainer import LoraSpec, TrainingModel
from trajforge.tinker.wire import Datum

SEQ = [1, 17, 305, 42, 9, 1200, 77, 3, 88, 2]
ADAM = {"lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.0, "clip": 1.0}


def _datum(shift: int) -> Datum:
    tokens = [t + shift for t in SEQ]
    return Datum(tokens[:-1], {"target_tokens": np.array(tokens[1:], dtype=np.int64)})


def _steps(models: dict[str, TrainingModel], order: list[tuple[str, str]]) -> list[np.ndarray]:
    """Run ``(client, "fb" | "step")`` in order; the logprobs of each forward-backward."""
    outputs = []
    for client, kind in order:
        model = models[client]
        if kind == "fb":
            shift = 0 if client == "a" else 5
            result = model.forward_backward([_datum(shift)], "cross_entropy", {}, backward=True)
            outputs.append(result.outputs[0]["logprobs"])
        else:
            model.optim_step(**ADAM)
    return outputs


def test_clients_on_one_base_train_as_each_alone() -> None:
    specs = {"a": LoraSpec(rank=4, seed=1, train_unembed=False), "b": LoraSpec(rank=2, seed=2)}
    shared = SharedBase("tiny")
    together = {c: TrainingModel(c, "tiny", "tiny", s, shared) for c, s in specs.items()}
    alone = {c: TrainingModel(c, "tiny", "tiny", s) for c, s in specs.items()}
    order = [("a", "fb"), ("b", "fb"), ("a", "step"), ("b", "fb"), ("b", "step"),
             ("a", "fb"), ("a", "step"), ("b", "fb")]  # fmt: skip
    got = _steps(together, order)
    want = {c: _steps(alone, [(o, k) for o, k in order if o == c]) for c in specs}
    for k, client in enumerate(c for c, kind in order if kind == "fb"):
        np.testing.assert_allclose(got[k], want[client].pop(0), atol=1e-6, rtol=0)
    for client in specs:
        mine, theirs = together[client].trainable_state(), alone[client].trainable_state()
        assert sorted(mine) == sorted(theirs)
        for name, value in mine.items():
            torch.testing.assert_close(value, theirs[name], atol=1e-6, rtol=0)
    assert together["a"].model is together["b"].model  # one copy of the base weights
    # The shared model holds b's (its head untied, for b trains it) plus a's adapter alone.
    adapter_a = sum(p.numel() for n, p in alone["a"].model.named_parameters() if "lora_" in n)
    own_b = sum(p.numel() for p in alone["b"].model.parameters())
    assert sum(p.numel() for p in shared.model.parameters()) == own_b + adapter_a
