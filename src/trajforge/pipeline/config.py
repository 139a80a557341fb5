"""The experiment file: one YAML naming the env, the model and the stages of a run.

``load_experiment`` reads it (with ``KEY=VALUE`` overrides that address stages by name).
``sft_config`` and ``rl_config`` build a training stage's config, filled with what the
experiment decides (model, data, output folder, env, store, seed); the runner trains with
them and ``check_experiment`` validates them, so the check sees exactly what will run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from trajforge.configfile import (
    KeyPath,
    Origin,
    apply_overrides,
    raise_problems,
    read_yaml,
    validate,
)
from trajforge.distributed.options import RayOptions
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError
from trajforge.judge.best_of_run import plan_best_of
from trajforge.judge.scorer import ScorerRefs, default_refs
from trajforge.policy.naming import OPENAI_PREFIX
from trajforge.precision import Precision
from trajforge.train.config import (
    ConfigT,
    RLConfig,
    SFTConfig,
    env_problem,
    model_name_problem,
)

STORE_FILE = "store.db"
STAGE_CHECKPOINT_S = 300.0
"""A training stage saves a checkpoint at least this often (seconds) unless its ``train``
says otherwise: an interrupted experiment loses minutes, never the whole stage."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class EvalSettings(_Strict):
    """The held-out evaluation every ``eval`` stage repeats on the same tasks."""

    tasks: int = Field(default=50, ge=1)
    """Tasks evaluated."""
    n: int = Field(default=1, ge=1)
    """Samples per task (pass@k is reported for k up to n)."""
    split: Literal["train", "test"] = "test"
    """The env's task split to evaluate on."""
    seed: int = 0
    """Seed of the task sample and of sampling."""
    temperature: float = Field(default=0.0, ge=0)
    """Sampling temperature (0: greedy)."""
    max_turns: int | None = Field(default=None, ge=1)
    """Assistant turns per episode (null: the environment's own limit)."""
    max_new_tokens: int = Field(default=96, ge=1)
    """Tokens per assistant turn."""
    max_batch_size: int = Field(default=25, ge=1)
    """Sequences a local model decodes together (eval and demonstration stages)."""
    scorers: ScorerRefs = Field(default_factory=default_refs("process"))
    """Scorers run on every eval trajectory, each score stored with it and averaged in the
    summary: names, or ``{name, options}``; a registered scorer, ``module:function`` or
    ``file.py:function``. Success and reward stay the env's verdict (weights only matter
    in an RL reward)."""
    best_of: int | None = None
    """Best-of-N: sample this many candidates per task (instead of ``n``) and keep one chosen
    by ``select``; the stage reports pass@1, pass@N and selected@N with 95% intervals."""
    select: str | None = None
    """The best-of-N selector: ``verifier`` (only for an env whose verifier reads no answer
    key), ``judge:RUBRIC`` (judged by ``judge_model``), ``majority`` or ``logprob``."""
    judge_model: str | None = None
    """The policy that judges candidates for ``select: judge:RUBRIC``."""


class EvalStage(_Strict):
    """Evaluate the latest weights on the held-out tasks (``eval``)."""

    kind: Literal["eval"] = "eval"
    """Stage kind."""
    name: str = Field(examples=["base"])
    """Stage name, unique in the experiment."""


class DemonstrationStage(_Strict):
    """Trajectories from a teacher: the env's scripted expert, or any policy spec."""

    kind: Literal["demonstrations"] = "demonstrations"
    """Stage kind."""
    name: str = "demonstrations"
    """Stage name, unique in the experiment."""
    policy: str = "expert"
    """The teacher: ``expert`` (the env's scripted expert), ``script:file.py:function`` (a
    scripted teacher of your own, called like the expert), ``embedded``, ``tiny``, ``pocket``, a model
    folder or ``openai:<base_url>#<model>``."""
    tasks: int = Field(default=200, ge=1)
    """Episodes, one per task."""
    split: Literal["train", "test"] = "train"
    """The env's task split."""
    seed: int = 0
    """Seed of the task sample."""
    max_turns: int | None = Field(default=None, ge=1)
    """Assistant turns per episode (null: the environment's own limit)."""


class CollectStage(_Strict):
    """Trajectories from an agent program: ``trajforge collect`` against a recording gateway
    serving the latest weights, one run per task x ``n`` (see ``docs/gateway.md``)."""

    kind: Literal["collect"] = "collect"
    """Stage kind."""
    name: str = "collect"
    """Stage name, unique in the experiment."""
    agent: str = Field(min_length=1, examples=["python my_agent.py"])
    """The command that runs the agent once (``OPENAI_BASE_URL`` points at its session, the
    task comes as JSON on stdin and in ``TRAJFORGE_TASK``)."""
    tasks: int = Field(default=16, ge=1)
    """Tasks of the env."""
    n: int = Field(default=1, ge=1)
    """Runs per task (they share a group id)."""
    split: Literal["train", "test"] = "train"
    """The env's task split."""
    seed: int = 0
    """Seed of the task sample."""
    concurrency: int = Field(default=8, ge=1)
    """Agent programs running at once."""
    timeout_s: float = Field(default=300.0, gt=0)
    """Seconds one run may take before it and everything it started are killed."""


class SFTStage(_Strict):
    """Fine-tune on the successful demonstrations; ``train`` holds ``SFTConfig`` keys."""

    kind: Literal["sft"] = "sft"
    """Stage kind."""
    name: str = "sft"
    """Stage name, unique in the experiment."""
    demonstrations: str = "demonstrations"
    """The earlier stage (``demonstrations``, ``collect`` or ``eval``) whose successful
    trajectories (reward >= 1) are the data."""
    train: dict[str, Any] = Field(default_factory=dict)
    """``SFTConfig`` keys (``trajforge config show sft``). ``model.spec``, ``data.store`` and
    ``data.run`` are set by the experiment (data filters such as ``data.limit`` are the
    stage's; ``data.min_reward`` defaults to 1); ``output_dir`` and ``seed`` default to the
    run's, ``checkpoint_every_s`` to 300."""


class RLStage(_Strict):
    """On-policy RL on the env; ``train`` holds ``RLConfig`` keys."""

    kind: Literal["rl"] = "rl"
    """Stage kind."""
    name: str = "rl"
    """Stage name, unique in the experiment."""
    train: dict[str, Any] = Field(default_factory=dict)
    """``RLConfig`` keys (``trajforge config show rl``). ``model.spec`` is set by the
    experiment; ``env``, ``output_dir``, ``seed`` and ``store`` default to the run's,
    ``checkpoint_every_s`` to 300."""


TRAJECTORY_KINDS = ("demonstrations", "collect", "eval")
"""The stage kinds that store trajectories (a run of the experiment's store)."""


class TriageStage(_Strict):
    """Triage the trajectories of earlier stages (``trajforge triage``): rule signals and the
    first-error step stored as scores, and a failure table per run in the stage's record."""

    kind: Literal["triage"] = "triage"
    """Stage kind."""
    name: str = "triage"
    """Stage name, unique in the experiment."""
    stages: list[str] = Field(default_factory=list)
    """The earlier ``eval``, ``demonstrations`` or ``collect`` stages whose trajectories it
    triages (empty: every such stage before it)."""
    loop_repeats: int = Field(default=3, ge=2)
    """Identical calls answered identically this many times make a loop."""
    slow_tool_s: float = Field(default=30.0, gt=0)
    """Seconds after which a tool call is slow."""


Stage = Annotated[
    EvalStage | DemonstrationStage | CollectStage | SFTStage | RLStage | TriageStage,
    Field(discriminator="kind"),
]
STAGE_KINDS: tuple[type[BaseModel], ...] = (
    EvalStage,
    DemonstrationStage,
    CollectStage,
    SFTStage,
    RLStage,
    TriageStage,
)

_EXAMPLE_STAGES = [
    {"kind": "eval", "name": "base"},
    {"kind": "demonstrations"},
    {"kind": "sft"},
    {"kind": "eval", "name": "after_sft"},
    {"kind": "rl"},
    {"kind": "eval", "name": "after_rl"},
]


class Experiment(_Strict):
    """A staged run: evaluations, demonstrations and training stages in order, in one folder.

    ``precision`` applies to every stage: the eval and demonstration policies' weights, and
    the training stages' ``model.precision`` (unless a stage sets its own). ``auto`` is bf16
    where the hardware has it natively (a GPU, or a CPU with AMX or AVX512-BF16; roughly half
    the stage times there) and fp32 elsewhere; an explicit ``bf16`` needs native bf16."""

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
    ``sft`` or ``rl``."""

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
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"stage names must be unique, repeated: {', '.join(dupes)}")
        for i, s in enumerate(stages):
            if isinstance(s, TriageStage):
                _check_triaged(s, stages[:i])
            if not isinstance(s, SFTStage):
                continue
            source = names.index(s.demonstrations) if s.demonstrations in names else None
            if source is None or source > i or stages[source].kind not in TRAJECTORY_KINDS:
                raise ValueError(
                    f"sft stage {s.name!r} reads demonstrations {s.demonstrations!r}, which is not "
                    "an earlier demonstrations, collect or eval stage"
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


def _check_triaged(stage: TriageStage, before: list[Stage]) -> None:
    earlier = {s.name for s in before if s.kind in TRAJECTORY_KINDS}
    wrong = [n for n in stage.stages if n not in earlier]
    if wrong:
        raise ValueError(
            f"triage stage {stage.name!r} reads {', '.join(map(repr, wrong))}, which is not an "
            "earlier demonstrations, collect or eval stage"
        )
    if not earlier:
        raise ValueError(f"triage stage {stage.name!r} has no earlier stage with trajectories")


def triaged_stages(exp: Experiment, index: int) -> list[str]:
    """The stages whose trajectories triage stage ``index`` reads."""
    stage = exp.stages[index]
    assert isinstance(stage, TriageStage)
    before = [s.name for s in exp.stages[:index] if s.kind in TRAJECTORY_KINDS]
    return list(stage.stages) or before


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


def stage_name(stage: Stage, attempt: int) -> str:
    """A stage's attempt as named in run ids and folders: ``<name>``, then ``<name>.<attempt>``."""
    return stage.name + (f".{attempt}" if attempt else "")


def _stage_defaults(exp: Experiment, raw: dict[str, Any], output_dir: Path) -> None:
    """What a training stage's ``train`` takes from the experiment unless it sets it."""
    raw.setdefault("output_dir", str(output_dir))
    raw.setdefault("seed", exp.seed)
    raw.setdefault("checkpoint_every_s", STAGE_CHECKPOINT_S)


def sft_config(
    exp: Experiment, index: int, *, model: str, run_dir: Path, attempt: int, demonstrations_run: str
) -> SFTConfig:
    """The config SFT stage ``index`` trains with, starting from weights ``model`` on the
    successful trajectories of run ``demonstrations_run`` in the run's store."""
    stage = exp.stages[index]
    if not isinstance(stage, SFTStage):
        raise TypeError(f"stage {stage.name!r} is a {stage.kind} stage, not sft")
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
    _stage_defaults(exp, raw, run_dir / stage_name(stage, attempt))
    return _validated(exp, raw, SFTConfig, at, problems)


def rl_config(exp: Experiment, index: int, *, model: str, run_dir: Path, attempt: int) -> RLConfig:
    """The config RL stage ``index`` trains with, starting from weights ``model``."""
    stage = exp.stages[index]
    if not isinstance(stage, RLStage):
        raise TypeError(f"stage {stage.name!r} is a {stage.kind} stage, not rl")
    at: KeyPath = ("stages", index, "train")
    problems: list[str] = []
    raw = dict(stage.train)
    raw["model"] = _model_section(exp, raw, model, at, problems)
    raw.setdefault("env", exp.env)
    _stage_defaults(exp, raw, run_dir / stage_name(stage, attempt))
    raw.setdefault("store", str(run_dir / STORE_FILE))
    if exp.ray is not None and raw.get("agent") is None:
        raw.setdefault("ray", exp.ray.model_dump())
    return _validated(exp, raw, RLConfig, at, problems)


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
            if isinstance(stage, DemonstrationStage):
                if found := model_name_problem(stage.policy, trainable=False):
                    problems.append(origin.problem(("stages", i, "policy"), found))
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
                demonstrations_run = f"{exp.name}.{stage.demonstrations}"
                sft_config(
                    exp,
                    i,
                    model=exp.model,
                    run_dir=run_dir,
                    attempt=0,
                    demonstrations_run=demonstrations_run,
                )
            elif isinstance(stage, RLStage):
                cfg = rl_config(exp, i, model=exp.model, run_dir=run_dir, attempt=0)
                if cfg.env != exp.env and (found := env_problem(cfg.env)):
                    problems.append(origin.problem(("stages", i, "train", "env"), found))
        except ConfigError as exc:
            problems.append(str(exc))
    raise_problems(problems)
