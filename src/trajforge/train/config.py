"""Training configs (SFT, DPO, RL) as pydantic models; unknown keys are errors that name the key."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trajforge.errors import ConfigError


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Schedule(StrEnum):
    CONSTANT = "constant"
    LINEAR = "linear"
    COSINE = "cosine"


class Precision(StrEnum):
    AUTO = "auto"
    FP32 = "fp32"
    BF16 = "bf16"


class LoraSettings(_Config):
    """LoRA adapter settings. ``layers`` limits the adapter to those decoder layers (e.g. the top
    few): the backward pass then stops at the lowest adapted layer, which makes steps cheaper."""

    r: int = Field(default=16, ge=1)
    alpha: int = Field(default=32, gt=0)
    dropout: float = Field(default=0.0, ge=0, lt=1)
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
    layers: list[int] | None = None


class ModelSettings(_Config):
    """``spec``: ``tiny`` (random test model), ``embedded`` (SmolLM2-135M) or a local HF folder."""

    spec: str = "tiny"
    tiny_seed: int = 0
    lora: LoraSettings | None = None
    precision: Precision = Precision.AUTO


class OptimSettings(_Config):
    lr: float = Field(default=1e-4, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(default=1e-8, gt=0)
    schedule: Schedule = Schedule.CONSTANT
    warmup_steps: int = Field(default=0, ge=0)
    max_grad_norm: float | None = Field(default=1.0, gt=0)


class DataSource(_Config):
    """Trajectories from a JSONL file or a store, with curation filters."""

    jsonl: Path | None = None
    store: Path | None = None
    run: str | None = None
    env: str | None = None
    status: str | None = "ok"
    min_reward: float | None = None
    drop_void_turns: bool = False
    limit: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_source(self) -> DataSource:
        if (self.jsonl is None) == (self.store is None):
            raise ValueError("give exactly one of data.jsonl or data.store")
        return self


class CommonSettings(_Config):
    output_dir: Path = Path("runs/train")
    seed: int = 0
    model: ModelSettings = Field(default_factory=ModelSettings)
    optim: OptimSettings = Field(default_factory=OptimSettings)
    max_seq_len: int = Field(default=2048, ge=2)
    micro_batch_tokens: int = Field(default=4096, ge=2)
    micro_batch_rows: int | None = Field(default=None, ge=1)
    checkpoint_every: int = Field(default=0, ge=0)
    log_every: int = Field(default=1, ge=1)
    tensorboard: bool = True
    progress: bool = True


class SFTConfig(CommonSettings):
    data: DataSource | None = None
    epochs: int = Field(default=1, ge=1)
    batch_size: int = Field(default=8, ge=1)
    max_steps: int | None = Field(default=None, ge=1)


class DPOConfig(CommonSettings):
    """Pairs are built per group (or task) from the highest and lowest scored trajectories."""

    data: DataSource | None = None
    score: str | None = None
    min_margin: float = Field(default=0.5, ge=0)
    beta: float = Field(default=0.1, gt=0)
    label_smoothing: float = Field(default=0.0, ge=0, lt=0.5)
    epochs: int = Field(default=1, ge=1)
    batch_size: int = Field(default=4, ge=1)
    max_steps: int | None = Field(default=None, ge=1)


class ReplaySettings(_Config):
    """Replay of past successes: stored trajectories with reward >= ``min_reward``."""

    enabled: bool = False
    min_reward: float = 1.0
    max_size: int = Field(default=256, ge=1)
    per_step: int = Field(default=2, ge=0)


class TaskRevisitSettings(_Config):
    """Prioritized revisits of tasks not yet solved by every sample (``train.task_revisit``)."""

    enabled: bool = False
    fraction: float = Field(default=0.5, ge=0, le=1)
    """Share of each step's groups given to revisits (fewer while the pool is smaller)."""
    max_visits: int = Field(default=3, ge=1)
    capacity: int = Field(default=64, ge=1)
    solved_reward: float = 1.0
    """A sample with at least this reward solved its task."""


class RLConfig(CommonSettings):
    env: str = "calculator"
    task_split: str = "train"
    num_tasks: int = Field(default=64, ge=1)
    groups_per_step: int = Field(default=4, ge=1)
    samples_per_group: int = Field(default=4, ge=1)
    steps: int = Field(default=10, ge=1)
    epochs_per_step: int = Field(default=1, ge=1)
    estimator: str = "grpo"
    estimator_kwargs: dict[str, Any] = Field(default_factory=dict)
    positive_advantage_weight: float = Field(default=1.0, ge=0, le=1)
    negative_advantage_weight: float = Field(default=1.0, ge=0, le=1)
    loss: str = "ppo_clip"
    loss_kwargs: dict[str, Any] = Field(default_factory=dict)
    aggregation: str = "token-mean"
    recompute_old_logprobs: bool = True
    kl_coef: float = Field(default=0.0, ge=0)
    kl_kind: str = "k3"
    filter_zero_advantage: bool = False
    replay: ReplaySettings = Field(default_factory=ReplaySettings)
    revisit: TaskRevisitSettings = Field(default_factory=TaskRevisitSettings)
    temperature: float = Field(default=1.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_new_tokens: int = Field(default=128, ge=1)
    max_turns: int = Field(default=6, ge=1)
    max_batch_size: int = Field(default=16, ge=1)
    rollout_precision: Precision = Precision.AUTO
    store: Path | None = None


ConfigT = TypeVar("ConfigT", bound=BaseModel)


def load_config(path: Path, cls: type[ConfigT]) -> ConfigT:
    """Read a YAML file into ``cls``; errors name the file and the offending key."""
    import yaml

    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping of keys, not {type(raw).__name__}"
        )
    return parse_config(raw, cls, source=str(path))


def parse_config(raw: dict[str, Any], cls: type[ConfigT], *, source: str = "<config>") -> ConfigT:
    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"]) or "<top level>"
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"{key}: {msg}")
        raise ConfigError(f"{source}: " + "; ".join(problems)) from None
