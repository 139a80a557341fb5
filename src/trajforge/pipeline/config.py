"""A training stage's config, built from the experiment, and the check of a whole experiment.

``sft_config`` and ``rl_config`` build a training stage's config, filled with what the
experiment decides (model, data, output folder, env, store, seed); the runner trains with
them and ``check_experiment`` validates them, so the check sees exactly what will run. The
experiment model (``experiment.py``) and its stages (``stages.py``) are re-exported here, the
one place the pipeline's configs are imported from.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from trajforge.configfile import KeyPath, raise_problems, validate
from trajforge.errors import ConfigError
from trajforge.memory import RULES, read_memory
from trajforge.pipeline.experiment import (
    Experiment,
    best_of_problem,
    distilled_stages,
    load_experiment,
    memory_stage_of,
    triaged_stages,
)
from trajforge.pipeline.stages import (
    STAGE_KINDS,
    TRAJECTORY_KINDS,
    CollectStage,
    DemonstrationStage,
    EvalSettings,
    EvalStage,
    MemoryStage,
    RepairStage,
    RLStage,
    SFTStage,
    Stage,
    SynthesizeStage,
    TriageStage,
    stage_name,
)
from trajforge.policy import OPENAI_PREFIX, SCRIPT_PREFIX, check_embedder_name, load_script
from trajforge.train import ConfigT, RLConfig, SFTConfig, env_problem, model_name_problem

__all__ = [
    "STAGE_CHECKPOINT_S",
    "STAGE_KINDS",
    "STORE_FILE",
    "TRAJECTORY_KINDS",
    "CollectStage",
    "DemonstrationStage",
    "EvalSettings",
    "EvalStage",
    "Experiment",
    "MemoryStage",
    "RLStage",
    "RepairStage",
    "SFTStage",
    "Stage",
    "SynthesizeStage",
    "TriageStage",
    "best_of_problem",
    "check_experiment",
    "data_runs",
    "distilled_stages",
    "load_experiment",
    "memory_stage_of",
    "rl_config",
    "sft_config",
    "stage_name",
    "triaged_stages",
]

_Trains = TypeVar("_Trains", SFTStage, RLStage)

STORE_FILE = "store.db"
STAGE_CHECKPOINT_S = 300.0
"""A training stage saves a checkpoint at least this often (seconds) unless its ``train``
says otherwise: an interrupted experiment loses minutes, never the whole stage."""
STAGE_KEEP_CHECKPOINTS = 2
"""A training stage keeps this many of its latest checkpoints (they serve to resume it) unless
its ``train`` says otherwise."""


def _stage_defaults(exp: Experiment, raw: dict[str, Any], output_dir: Path) -> None:
    """What a training stage's ``train`` takes from the experiment unless it sets it."""
    raw.setdefault("output_dir", str(output_dir))
    raw.setdefault("seed", exp.seed)
    raw.setdefault("checkpoint_every_s", STAGE_CHECKPOINT_S)
    raw.setdefault("keep_checkpoints", STAGE_KEEP_CHECKPOINTS)


def _training_stage(exp: Experiment, index: int, kind: type[_Trains]) -> _Trains:
    """Stage ``index`` of ``exp``, which the caller builds a ``kind`` training config for."""
    stage = exp.stages[index]
    if not isinstance(stage, kind):
        wanted = kind.model_fields["kind"].default
        raise TypeError(f"stage {stage.name!r} is a {stage.kind} stage, not {wanted}")
    return stage


def sft_config(
    exp: Experiment,
    index: int,
    *,
    model: str,
    run_dir: Path,
    demonstrations_run: str | list[str],
) -> SFTConfig:
    """The config SFT stage ``index`` trains with, starting from weights ``model`` on the
    successful trajectories of run ``demonstrations_run`` (or runs) in the run's store."""
    stage = _training_stage(exp, index, SFTStage)
    at: KeyPath = ("stages", index, "train")
    problems: list[str] = []
    raw = dict(stage.train)
    data = _own_section(
        exp, raw, "data", at, {"jsonl", "store", "run"}, "the demonstrations stage", problems
    )
    raw["model"] = _model_section(exp, raw, model, at, problems)
    raw["data"] = {
        "min_reward": 1.0,
        **data,
        "store": str(run_dir / STORE_FILE),
        "run": demonstrations_run,
    }
    _stage_defaults(exp, raw, run_dir / stage.name)
    return _validated(exp, raw, SFTConfig, at, problems)


def rl_config(exp: Experiment, index: int, *, model: str, run_dir: Path) -> RLConfig:
    """The config RL stage ``index`` trains with, starting from weights ``model``."""
    stage = _training_stage(exp, index, RLStage)
    at: KeyPath = ("stages", index, "train")
    problems: list[str] = []
    raw = dict(stage.train)
    raw["model"] = _model_section(exp, raw, model, at, problems)
    raw.setdefault("env", exp.env)
    _stage_defaults(exp, raw, run_dir / stage.name)
    raw.setdefault("store", str(run_dir / STORE_FILE))
    if exp.ray is not None and raw.get("agent") is None and raw.get("harness") is None:
        raw.setdefault("ray", exp.ray.model_dump())
    return _validated(exp, raw, RLConfig, at, problems)


def data_runs(runs: list[str]) -> str | list[str]:
    """An SFT stage's ``data.run``: one run id as itself, several as a list."""
    return runs[0] if len(runs) == 1 else runs


def _repair_problem(exp: Experiment, stage: RepairStage) -> str | None:
    """Why repair ``stage`` cannot run (``None``: it can): its failures are held-out episodes,
    or the experiment's model has no local tokenizer to write the note with."""
    failed = next(s for s in exp.stages if s.name == stage.failed)
    if failed.kind == "eval" and exp.eval.split == "test":
        return (
            f"{stage.failed!r} evaluates held-out tasks (eval.split test): training on their "
            "repairs would leak them; repair a demonstrations or collect stage of training tasks"
        )
    if exp.model.startswith(OPENAI_PREFIX):
        return f"model {exp.model!r} has no local tokenizer to encode the repair note with"
    return None


def _model_section(
    exp: Experiment, raw: dict[str, Any], model: str, at: KeyPath, problems: list[str]
) -> dict[str, Any]:
    setter = "its model, then each training stage's output"
    own = _own_section(exp, raw, "model", at, {"spec"}, setter, problems)
    return {"precision": exp.precision, **own, "spec": model}


def _own_section(
    exp: Experiment,
    raw: Mapping[str, Any],
    key: str,
    at: KeyPath,
    taken: set[str],
    setter: str,
    problems: list[str],
) -> dict[str, Any]:
    """The stage's ``key`` mapping without the keys the experiment sets itself; a stage that
    sets one of those gets a problem rather than being silently overruled."""
    section = raw.get(key)
    if section is None:
        return {}
    if not isinstance(section, dict):
        problems.append(exp.origin.problem((*at, key), "must be a mapping of keys"))
        return {}
    for name in sorted(taken & set(section)):
        problems.append(
            exp.origin.problem((*at, key, name), f"set by the experiment ({setter}); remove it")
        )
    return {k: v for k, v in section.items() if k not in taken}


def _validated(
    exp: Experiment, raw: dict[str, Any], cls: type[ConfigT], at: KeyPath, problems: list[str]
) -> ConfigT:
    """``cls`` from ``raw``; its errors and the ``problems`` found so far as one error."""
    cfg = None
    try:
        cfg = validate(raw, cls, exp.origin, at)
    except ConfigError as exc:
        problems.append(str(exc))
    raise_problems(problems)
    assert cfg is not None  # validate either returned or left a problem
    return cfg


def check_experiment(exp: Experiment, run_dir: Path) -> None:
    """Raise one ``ConfigError`` naming every problem a run of ``exp`` in ``run_dir`` would meet:
    the env, the model and the teachers' names, and each training stage's config built as the
    runner will build it. Nothing is loaded or written."""
    origin = exp.origin
    problems: list[str] = []
    if found := env_problem(exp.env):
        problems.append(origin.problem(("env",), found))
    elif found := best_of_problem(exp):
        problems.append(origin.problem(("eval", "best_of"), found))
    trains = any(isinstance(s, SFTStage | RLStage) for s in exp.stages)
    if found := model_name_problem(exp.model, trainable=trains):
        problems.append(origin.problem(("model",), found))
    for i, stage in enumerate(exp.stages):
        try:
            if isinstance(stage, EvalStage):
                if stage.force is not None and (found := _force_problem(exp, stage.force)):
                    problems.append(origin.problem(("stages", i, "force"), found))
                if (memory := _memory_problem(exp, i, stage)) is not None:
                    problems.append(origin.problem(("stages", i, memory[0]), memory[1]))
            elif isinstance(stage, MemoryStage) and stage.distiller != RULES:
                if found := model_name_problem(stage.distiller, trainable=False):
                    problems.append(origin.problem(("stages", i, "distiller"), found))
            elif isinstance(stage, DemonstrationStage):
                if found := model_name_problem(stage.policy, trainable=False):
                    problems.append(origin.problem(("stages", i, "policy"), found))
            elif isinstance(stage, SynthesizeStage):
                try:
                    stage.check_names(stage.env or exp.env)
                except ConfigError as exc:
                    problems.append(origin.problem(("stages", i), str(exc)))
            elif isinstance(stage, CollectStage):
                # The gateway serves a model with weights here, or forwards to another server.
                forwarded = exp.model.startswith(OPENAI_PREFIX)
                if not (trains or forwarded) and (
                    found := model_name_problem(exp.model, trainable=True)
                ):
                    problems.append(
                        origin.problem(("model",), f"a collect stage serves it: {found}")
                    )
            elif isinstance(stage, SFTStage):
                runs = data_runs([f"{exp.name}.{d}" for d in stage.data_stages])
                sft_config(exp, i, model=exp.model, run_dir=run_dir, demonstrations_run=runs)
            elif isinstance(stage, RepairStage):
                if found := _repair_problem(exp, stage):
                    problems.append(origin.problem(("stages", i, "failed"), found))
            elif isinstance(stage, RLStage):
                cfg = rl_config(exp, i, model=exp.model, run_dir=run_dir)
                if cfg.env != exp.env and (found := env_problem(cfg.env)):
                    problems.append(origin.problem(("stages", i, "train", "env"), found))
        except ConfigError as exc:
            problems.append(str(exc))
    raise_problems(problems)


def _force_problem(exp: Experiment, force: str) -> str | None:
    """What is wrong with an eval stage's ``force`` script, if anything."""
    if not force.startswith(SCRIPT_PREFIX):
        return f"{force!r}: write the forced turns as script:file.py:function"
    if exp.model.startswith(OPENAI_PREFIX):
        return "forced turns need a model that samples token ids, not an OpenAI endpoint"
    try:
        load_script(force)
    except ConfigError as exc:
        return str(exc)
    return None


def _memory_problem(exp: Experiment, index: int, stage: EvalStage) -> tuple[str, str] | None:
    """The key of eval stage ``index`` whose memory setting is wrong, and what is wrong."""
    if stage.memory is None:
        if stage.memory_update:
            return "memory_update", "give memory (the memory to grow)"
        return (
            ("memory_embed", "give memory (the memory to search)") if stage.memory_embed else None
        )
    if stage.memory_embed is not None:
        try:
            check_embedder_name(stage.memory_embed)
        except ConfigError as exc:
            return "memory_embed", str(exc)
    if exp.ray is not None:
        # Retrieval and the memory's growth happen in this process, around each env.
        return "memory", "a memory is read in this process; not with ray"
    source = memory_stage_of(exp, index)
    if source is not None:
        read = distilled_stages(exp, exp.stages.index(source))
        if exp.eval.split == "test" and any(s.kind == "eval" for s in exp.stages if s.name in read):
            return "memory", (
                f"memory stage {source.name!r} distils held-out episodes (an eval stage, "
                "eval.split test): its items would hand this eval the tasks' solutions"
            )
        return None
    path = Path(stage.memory)
    if not path.is_file():
        return "memory", (
            f"eval stage {stage.name!r}: memory {stage.memory!r} is not an earlier memory stage "
            "or a memory file"
        )
    try:
        read_memory(path)  # a bad file is refused whole, naming its first bad line
    except ConfigError as exc:
        return "memory", str(exc)
    return None
