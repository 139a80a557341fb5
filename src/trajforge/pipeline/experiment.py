"""The experiment model: one YAML naming the env, the model, the evaluation and the stages of a
run, read by ``load_experiment`` (with ``KEY=VALUE`` overrides that address stages by name).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, field_validator

from trajforge.configfile import (
    KeyPath,
    Origin,
    apply_overrides,
    read_yaml,
    repeated,
    validate,
)
from trajforge.distributed import RayOptions
from trajforge.envs import get_env
from trajforge.errors import ConfigError
from trajforge.judge import plan_best_of
from trajforge.pipeline.stages import (
    STAGE_KINDS,
    TRAJECTORY_KINDS,
    DemonstrationStage,
    EvalSettings,
    EvalStage,
    MemoryStage,
    RepairStage,
    SFTStage,
    Stage,
    StrictModel,
    TriageStage,
    check_reads,
    check_repaired,
    check_tasks_from,
)
from trajforge.precision import Precision

_EXAMPLE_STAGES = [
    {"kind": "eval", "name": "base"},
    {"kind": "demonstrations"},
    {"kind": "sft"},
    {"kind": "eval", "name": "after_sft"},
    {"kind": "rl"},
    {"kind": "eval", "name": "after_rl"},
]


class Experiment(StrictModel):
    """A staged run: evaluations, demonstrations and training stages in order, in one folder.

    ``precision`` applies to every stage: the eval and demonstration policies' weights, and
    the training stages' ``model.precision`` (unless a stage sets its own). ``auto`` is bf16
    where the hardware has it natively (a GPU, or a CPU with AMX or AVX512-BF16; roughly half
    the stage times there) and fp32 elsewhere; an explicit ``bf16`` needs native bf16.

    Each stage's trajectories are the run ``<name>.<stage>`` of the run folder's store
    (``<name>.<stage>.<attempt>`` when it is made again; an RL stage's steps
    ``<name>.<stage>.step<N>``), and a training stage writes the folder ``<stage>/``
    (checkpoints, metrics, ``final/``). Started again, a run skips every finished stage whose
    settings, inputs and code are unchanged; the code is hashed by content: the files the
    stage's config names (the env's file, script policies, the agent program's files, each
    with the other ``.py`` files of its folder) and the file the env's verifier is in. A stage
    made again, and everything downstream of it, is a new attempt: its folder holds the new
    one, the one before moves to ``.attempts/`` (see ``keep_attempts``). ``trajforge run``
    ends by printing the final model's folder and the run folder's disk use."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$", examples=["calculator"])
    """Experiment name: the run folder is ``out_dir/name`` and run ids start with it."""
    env: str = Field(examples=["calculator"])
    """The environment: a built-in name, ``module:factory`` or ``file.py:factory``."""
    model: str = "embedded"
    """The starting policy: ``embedded``, ``tiny``, ``pocket``, a model folder (``expert`` or
    ``openai:<base_url>#<model>`` only without training stages)."""
    seed: int = 0
    """Seed of the training stages (unless their ``train`` sets one)."""
    precision: Precision = Precision.AUTO
    """``auto``, ``fp32`` or ``bf16``, for every stage (see above)."""
    out_dir: Path = Path("runs")
    """Folder that holds the run folder."""
    keep_attempts: int = Field(default=1, ge=0)
    """Earlier attempts kept per stage: a stage's folder holds its current attempt, and a
    stage made again moves the one before to ``.attempts/<stage>.<n>`` in the run folder
    (its final weights and metrics, without checkpoints); older ones are deleted."""
    eval: EvalSettings = Field(default_factory=EvalSettings)
    """The held-out evaluation of every ``eval`` stage."""
    ray: RayOptions | None = None
    """Play the episodes of the eval, demonstration and RL stages on Ray actors, and a collect
    stage's agent programs as Ray tasks (needs the ``ray`` extra): ``{}`` for a local cluster
    of this machine's CPUs, or ``{address: auto, actors: 8}`` for an existing one
    (``address``, ``actors``, ``cpus_per_actor``, ``slots``, ``max_restarts``). The store, the
    plan, the gateway and the training stay in this process. ``trajforge run --ray`` sets it."""
    stages: list[Stage] = Field(min_length=1, examples=[_EXAMPLE_STAGES])
    """The stages in order; each has a ``kind``: ``eval``, ``demonstrations``, ``collect``,
    ``sft``, ``rl``, ``triage``, ``repair``, ``memory`` or ``synthesize``."""

    _origin: Origin | None = PrivateAttr(default=None)

    @property
    def origin(self) -> Origin:
        """Where the keys came from: the file and its lines, else the code that built it."""
        if self._origin is not None:
            return self._origin
        names: dict[KeyPath, str] = {("stages", i): s.name for i, s in enumerate(self.stages)}
        return Origin("<experiment>", names=names)

    @field_validator("stages")
    @classmethod
    def _stage_references(cls, stages: list[Stage]) -> list[Stage]:
        names = [s.name for s in stages]
        dupes = repeated(names)
        if dupes:
            raise ValueError(f"stage names must be unique, repeated: {', '.join(dupes)}")
        for i, s in enumerate(stages):
            if isinstance(s, TriageStage | MemoryStage):
                check_reads(s, stages[:i])
            if isinstance(s, RepairStage):
                check_repaired(s, stages[:i])
            if isinstance(s, DemonstrationStage):
                check_tasks_from(s, stages[:i])
            if not isinstance(s, SFTStage):
                continue
            for demo in s.data_stages:
                source = names.index(demo) if demo in names else None
                if source is None or source > i or stages[source].kind not in TRAJECTORY_KINDS:
                    raise ValueError(
                        f"sft stage {s.name!r} reads demonstrations {demo!r}, which is not an "
                        "earlier demonstrations, collect, eval or repair stage"
                    )
        return stages


def best_of_problem(exp: Experiment) -> str | None:
    """What is wrong with the eval's best-of-N (``None``: nothing, or none is asked for)."""
    ev = exp.eval
    if ev.best_of is None and ev.select is None:
        return None
    if ev.best_of is not None and ev.n != 1:
        return "give best_of or n, not both (best_of samples N per task)"
    answer_free = get_env(exp.env).answer_free_verifier
    try:
        plan_best_of(exp.env, answer_free, ev.best_of, ev.select, ev.judge_model, ev.temperature)
    except ConfigError as exc:
        return str(exc)
    return None


def triaged_stages(exp: Experiment, index: int) -> list[str]:
    """The stages whose trajectories triage stage ``index`` reads."""
    stage = exp.stages[index]
    assert isinstance(stage, TriageStage)
    before = [s.name for s in exp.stages[:index] if s.kind in TRAJECTORY_KINDS]
    return list(stage.stages) or before


def distilled_stages(exp: Experiment, index: int) -> list[str]:
    """The stages whose trajectories memory stage ``index`` distils."""
    stage = exp.stages[index]
    assert isinstance(stage, MemoryStage)
    before = [s.name for s in exp.stages[:index] if s.kind in TRAJECTORY_KINDS]
    return list(stage.stages) or before


def memory_stage_of(exp: Experiment, index: int) -> MemoryStage | None:
    """The earlier memory stage eval stage ``index`` reads (``None``: its ``memory`` is a
    file, or it has none)."""
    stage = exp.stages[index]
    if not isinstance(stage, EvalStage) or stage.memory is None:
        return None
    return next(
        (s for s in exp.stages[:index] if isinstance(s, MemoryStage) and s.name == stage.memory),
        None,
    )


def load_experiment(path: Path, overrides: Iterable[str] = ()) -> Experiment:
    """Read an experiment YAML and apply ``KEY=VALUE`` ``overrides``; errors name the file,
    the line and the key (or the override)."""
    if not path.is_file():
        raise ConfigError(f"{path}: experiment file not found")
    data, origin = read_yaml(path)
    _name_stages(data)
    origin = apply_overrides(data, origin, overrides)
    experiment = validate(data, Experiment, origin)
    experiment._origin = origin
    return experiment


def _name_stages(data: dict[str, Any]) -> None:
    """Write each unnamed stage's default name into the data, so that overrides and errors can
    call it by that name (``stages.rl``) as the runner will."""
    defaults = {
        kind.model_fields["kind"].default: kind.model_fields["name"].default
        for kind in STAGE_KINDS
        if not kind.model_fields["name"].is_required()
    }
    stages = data.get("stages")
    for stage in stages if isinstance(stages, list) else []:
        if isinstance(stage, dict) and "name" not in stage and stage.get("kind") in defaults:
            stage["name"] = defaults[stage["kind"]]
