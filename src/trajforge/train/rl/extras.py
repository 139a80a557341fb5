"""The optional parts of an RL run, each built only where its config asks for it: a KL
reference, tree rollouts, a distillation teacher, per-role adapters. The last three load their
code lazily, so a plain run imports none of it (the reference's code is the trainer's own)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from trajforge.schema import ExpertFn
from trajforge.train.model import TrainParts
from trajforge.train.reference import ReferenceModel
from trajforge.train.rl.config import RLConfig

if TYPE_CHECKING:
    from trajforge.train.rl.distill import Distiller
    from trajforge.train.rl.roles import RoleAdapters
    from trajforge.train.rl.self_play import SelfPlay
    from trajforge.train.rl.tree import TreeRollouts


def reference_model(cfg: RLConfig, parts: TrainParts) -> ReferenceModel | None:
    """The frozen reference of a run with a KL penalty."""
    if cfg.kl_coef <= 0:
        return None

    return ReferenceModel(parts)


def tree_rollouts(cfg: RLConfig) -> TreeRollouts | None:
    """The branching of a run that grows trees."""
    if cfg.tree is None:
        return None
    # lazy: branching and its replayed prefixes load only for a run that grows trees
    from trajforge.train.rl.tree import TreeRollouts

    return TreeRollouts(cfg)


def distiller(cfg: RLConfig, parts: TrainParts, expert: ExpertFn) -> Distiller | None:
    """The teacher of a run that distils."""
    if cfg.distill is None:
        return None
    # lazy: the teacher's code (and its model or client) loads only for a run that distils
    from trajforge.train.rl.distill import Distiller

    return Distiller(cfg, parts, expert)


def role_adapters(
    self_play: SelfPlay | None, parts: TrainParts, dtype: torch.dtype, max_batch_size: int
) -> RoleAdapters | None:
    """The seats' own adapters of a self-play run with per-role adapters (handed to the
    self-play too, whose seats sample under them)."""
    if self_play is None or self_play.seat_adapters is None:
        return None
    # lazy: the adapters and their seat policy load only for a run with per-role adapters
    from trajforge.train.rl.roles import RoleAdapters

    roles = RoleAdapters(self_play.seat_adapters, parts, dtype, max_batch_size)
    self_play.roles = roles
    return roles
