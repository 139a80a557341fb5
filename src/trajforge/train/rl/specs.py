"""The ``RolloutSpec`` of an RL step's episodes, and the run record each rollout leaves in the
store: a run per step (``<prefix>.step<N>``, a refill round's ``-refill<R>``, a resampled stale
sample's ``-resample``, validation's ``val-step<N>``), with seeds of its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trajforge.rollout import Limits, RolloutSpec, Sampling
from trajforge.schema import Task
from trajforge.store import TrajectoryStore
from trajforge.train.config import RLConfig

REFILL_SEED_STRIDE = 7_919
"""Between the sampling seeds of a step's refill rounds: a task rolled out again draws anew."""

RESAMPLE_ROUND = -1
"""The seed round of a step's stale samples rolled out again."""

RL_RUN_KIND = "rl"
"""The ``kind`` an RL run's rollouts carry in their metadata (the viewer's runs table shows it)."""


def round_run_name(step: int, round_: int) -> str:
    """The run name of step ``step``'s rollouts in seed round ``round_`` (0: the step's own)."""
    if round_ == RESAMPLE_ROUND:
        return f"step{step}-resample"
    return f"step{step}-refill{round_}" if round_ else f"step{step}"


def step_spec(
    cfg: RLConfig,
    tasks: list[Task],
    *,
    n: int,
    temperature: float,
    step: int,
    name: str,
    round_: int = 0,
    run_prefix: str | None = None,
    stage: str | None = None,
    program: Mapping[str, Any] | None = None,
) -> RolloutSpec:
    """The rollout of ``n`` samples of each of ``tasks`` at step ``step``, as run ``name`` of
    the run's prefix (``rl-<output folder>-`` without one); ``round_``: the refill round (its
    seeds). Records the run in the config's store (a resumed step keeps what it had), with
    ``program``: what the agent runners record of their program."""
    run_id = f"{run_prefix}.{name}" if run_prefix else f"rl-{cfg.output_dir.name}-{name}"
    spec = RolloutSpec(
        env=cfg.env,
        tasks=tasks,
        n=n,
        limits=Limits(
            max_turns=cfg.max_turns,
            max_new_tokens=cfg.max_new_tokens,
            max_context_tokens=cfg.max_seq_len,
        ),
        context=cfg.context,
        sampling=Sampling(
            temperature=temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens
        ),
        seed=cfg.seed * 1_000_003 + step + REFILL_SEED_STRIDE * round_,
        run_id=run_id,
        store=cfg.store,
    )
    if spec.store is not None:
        with TrajectoryStore(spec.store) as store:
            if store.get_run(run_id) is None:
                store.set_run(run_id, _run_metadata(cfg, spec, stage, program or {}))
    return spec


def _run_metadata(
    cfg: RLConfig, spec: RolloutSpec, stage: str | None, program: Mapping[str, Any]
) -> dict[str, Any]:
    """What the runs table shows of a rollout run: an ``rl`` run (its stage's, in an
    experiment) sampling from the weights being trained, which started as ``model``, and the
    agent program its episodes are runs of (``program``)."""
    meta: dict[str, Any] = {
        "kind": RL_RUN_KIND,
        "model": cfg.model.spec,
        "spec": spec.model_dump(mode="json"),
        **program,
    }
    if stage is not None:
        meta["stage"] = stage
    return meta
