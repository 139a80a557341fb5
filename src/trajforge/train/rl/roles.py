"""Per-role adapters (``self_play: {per_role: true}``): each seat of a game trains a LoRA
adapter of its own on the one base model.

The trained PEFT model keeps its ``default`` adapter, never trained: its ``B`` is zero, so with
it active the model is the base, which is what the final folder merges (the base weights) and
what the trainer's own rollout policy samples. Beside it sits one adapter per role, each
starting from ``default``'s initial weights (the run starts from the base as a shared-policy
LoRA run does), and the optimizer trains those alone. An update trains each role in turn on
its own seats' trajectories, that adapter active: the others get no gradient, so AdamW leaves
them as they were, bit for bit (its moments too), and each adapter's steps are its own (its
gradient clipped by its own norm). Role-wise groups are the seats' own: a seat's samples of a
task form its group (``multiseat.seat_group_id``), and RAE's baselines are per seat.

Rollouts sample from an ``HFPolicy`` over a plain copy of the base weights (they never change
under LoRA), each role's adapter served by name (``HFPolicy.add_adapter``): the seats' turns of
a step's games decode in one batch, each row under its seat's adapter (``engine.lora``). After
every update each adapter is saved to a folder of this run's and served again. A model the
lean forward does not run serves no adapters by name and is refused.
"""

from __future__ import annotations

import asyncio
import copy
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel

from trajforge.errors import ConfigError
from trajforge.policy import AdapterSeat, HFPolicy
from trajforge.schema import Trajectory
from trajforge.train.parts import TrainParts

BASE = "default"
"""The PEFT adapter that stands for the base weights (zero ``B``, never trained)."""


def seat_adapters(
    per_role: bool | Mapping[str, str], seats: Sequence[str], env: str
) -> dict[str, str]:
    """Each seat's adapter name: the seat's own (``per_role: true``) or the mapping's, which
    must name every seat of ``env`` and no other."""
    if per_role is True:
        return {seat: seat for seat in seats}
    assert isinstance(per_role, Mapping)
    unknown = sorted(set(per_role) - set(seats))
    missing = [s for s in seats if s not in per_role]
    if unknown or missing:
        what = (
            f"{unknown[0]!r} is no seat of {env}" if unknown else f"no adapter for {missing[0]!r}"
        )
        raise ConfigError(f"self_play.per_role: {what} (its seats: {', '.join(seats)})")
    return {seat: per_role[seat] for seat in seats}


class RoleAdapters:
    """The adapters of a per-role run (see the module doc).

    Args:
        adapters: Each seat's adapter name.
        parts: The trained model's parts (a PEFT LoRA model, not sharded).
        dtype: The rollouts' precision.
        max_batch_size: Rows the rollout policy decodes at once.
    """

    def __init__(
        self,
        adapters: Mapping[str, str],
        parts: TrainParts,
        dtype: torch.dtype,
        max_batch_size: int,
    ) -> None:
        model = parts.unwrapped_model()
        if not isinstance(model, PeftModel) or parts.sharded:
            raise ConfigError("self_play.per_role: needs model.lora, unsharded")
        self.seats = dict(adapters)
        self.names = list(dict.fromkeys(self.seats.values()))
        self.model = model
        config = model.peft_config[BASE]
        start = {k: v.detach().clone() for k, v in _adapter_params(model, BASE).items()}
        for name in self.names:
            model.add_adapter(name, copy.deepcopy(config))
            with torch.no_grad():
                for key, param in _adapter_params(model, name).items():
                    param.copy_(start[key])
        self.params = {name: list(_adapter_params(model, name).values()) for name in self.names}
        self.activate(BASE)
        # The parts were built before the seats were known: the optimizer's one group now
        # holds the roles' adapters, and nothing else (it has taken no step yet).
        inner: Any = getattr(parts.optimizer, "optimizer", parts.optimizer)
        if len(inner.param_groups) != 1 or inner.state:
            raise ConfigError("self_play.per_role: the optimizer must be fresh, one group")
        inner.param_groups[0]["params"] = [p for name in self.names for p in self.params[name]]
        _fresh_adam_state(inner)
        base = copy.deepcopy(model).unload().to(dtype)
        self.policy = HFPolicy(base, parts.tokenizer, max_batch_size=max_batch_size)
        if not self.policy.serves_adapters:
            raise ConfigError(
                f"self_play.per_role: {type(base).__name__} serves no adapters by name (rollouts "
                "decode each seat under its adapter on the lean forward: a Llama-architecture model)"
            )
        self._folder = tempfile.TemporaryDirectory(prefix="trajforge-roles-")
        self.publish(0)

    def activate(self, name: str) -> None:
        """Run the model under adapter ``name``; the roles' adapters stay the trained weights
        (PEFT would freeze the inactive ones), the base's never is."""
        self.model.set_adapter(name)
        for params in self.params.values():
            for p in params:
                p.requires_grad_(True)
        for p in _adapter_params(self.model, BASE).values():
            p.requires_grad_(False)

    def role_of(self, traj: Trajectory) -> str:
        """The adapter that played ``traj`` (its seat's)."""
        return self.seats[str(traj.metadata.get("seat"))]

    def update(
        self, trajs: Sequence[Trajectory], train: Callable[[list[Trajectory]], dict[str, float]]
    ) -> dict[str, float]:
        """``train`` on each role's trajectories in turn, that role's adapter active; the
        metrics averaged over the roles that trained (counts summed), each role's count of
        trained trajectories as ``trained_trajectories/<role>``."""
        parts: list[tuple[str, dict[str, float]]] = []
        try:
            for name in self.names:
                own = [t for t in trajs if self.role_of(t) == name]
                if own:
                    self.activate(name)
                    parts.append((name, train(own)))
        finally:
            self.activate(BASE)
        return _combine(parts)

    def publish(self, version: int) -> None:
        """Serve every role's current adapter to the rollouts, as weights ``version``."""
        folder = Path(self._folder.name)
        for name in self.names:
            self.model.save_pretrained(str(folder), selected_adapters=[name])
            self.policy.add_adapter(name, folder / name)
        self.policy.weights_version = version

    def seat_policies(self) -> dict[str, AdapterSeat]:
        """Each seat's policy: the rollout policy under the seat's adapter."""
        return {seat: AdapterSeat(self.policy, self.seats, seat) for seat in self.seats}

    def task_seat_policy(self) -> AdapterSeat:
        """A policy playing each task's seat (``data["seat"]``) under that seat's adapter: a
        game env's single-seat episodes (validation)."""
        return AdapterSeat(self.policy, self.seats)

    def close(self) -> None:
        asyncio.run(self.policy.close())
        self._folder.cleanup()


_LORA_KEY = re.compile(r"\.(lora_[AB])\.([^.]+)\.weight$")


def _adapter_params(model: Any, name: str) -> dict[str, torch.nn.Parameter]:
    """Adapter ``name``'s LoRA weights, keyed by their module path without the name."""
    found = {}
    for key, param in model.named_parameters():
        match = _LORA_KEY.search(key)
        if match is not None and match[2] == name:
            found[f"{key[: match.start()]}.{match[1]}"] = param
    return found


def _fresh_adam_state(optimizer: torch.optim.Optimizer) -> None:
    """AdamW's state before its first step, for every parameter: what it would make at a
    parameter's first gradient, made now, so that a checkpoint saved before some role has
    trained holds state for its adapter too (a resume loads state for every trained weight)."""
    group = optimizer.param_groups[0]
    on_device = group.get("fused") or group.get("capturable")
    for p in group["params"]:
        state = optimizer.state[p]
        state["step"] = torch.tensor(0.0, device=p.device if on_device else "cpu")
        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if group.get("amsgrad"):
            state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)


def _combine(parts: Sequence[tuple[str, dict[str, float]]]) -> dict[str, float]:
    summed = {"trained_trajectories", "loss_tokens"}
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for _, m in parts for k in m):
        values = [m[key] for _, m in parts if key in m]
        out[key] = sum(values) if key in summed else sum(values) / len(values)
    for name, metrics in parts:
        out[f"trained_trajectories/{name}"] = metrics.get("trained_trajectories", 0.0)
    return out
