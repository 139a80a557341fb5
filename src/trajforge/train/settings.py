"""The settings every trainer shares (the model and its LoRA adapter, the optimiser, the data,
several processes, checkpoints and logs) and the SFT and DPO configs built on them.

Every key is documented by the docstring under it: ``trajforge config show`` and
``docs/configuration.md`` are generated from them.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trajforge.precision import Precision
from trajforge.schema import OutcomeStatus


# No docstring: a section without one of its own would show this one in the generated docs.
class ConfigModel(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Schedule(StrEnum):
    CONSTANT = "constant"
    LINEAR = "linear"
    COSINE = "cosine"


class LoraSettings(ConfigModel):
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


class ModelSettings(ConfigModel):
    """The model to train."""

    spec: str = "tiny"
    """``tiny`` (random test model), ``pocket`` (a random 7M-parameter model to train from
    scratch), ``tiny-vlm`` (random vision-language test model, docs/vision.md), ``embedded`` (SmolLM2-135M-Instruct), a local Hugging Face model folder (a vision-language model's with its processor) or a training checkpoint (``runs/x/checkpoints/step-0000004``)."""
    tiny_seed: int = 0
    """Seed of the random weights of a model built from scratch (``tiny``, ``pocket``, ``tiny-vlm``)."""
    lora: LoraSettings | None = None
    """LoRA adapter settings; null trains every weight."""
    precision: Precision = Precision.AUTO
    """``auto`` (bf16 autocast where the hardware has native bf16, else fp32), ``fp32`` or
    ``bf16`` (an error on hardware without native bf16)."""


class OptimSettings(ConfigModel):
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


class DataSource(ConfigModel):
    """Trajectories from a JSONL file or a store, with curation filters. Give exactly one of
    ``jsonl`` and ``store``."""

    jsonl: Path | None = None
    """A trajectory JSONL file (``trajforge export``)."""
    store: Path | None = None
    """A trajectory store (SQLite, e.g. ``runs/<name>/store.db``)."""
    run: str | list[str] | None = None
    """Only trajectories of this run id (or of these, in this order)."""
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


class DistributedSettings(ConfigModel):
    """How a run spreads over several processes (``trajforge train ... --num-processes N``,
    ``accelerate launch`` or ``torchrun``); a run in one process ignores it. See docs/scaling.md."""

    strategy: Strategy = Strategy.DDP
    """``ddp``: every process holds all weights and gradients are averaged; ``fsdp``: weights,
    gradients and optimizer state are sharded over the processes (FSDP2 ``fully_shard``, one
    unit per decoder layer)."""
    timeout_s: float = Field(default=600.0, gt=0)
    """Seconds a collective waits for the other processes: a process that died ends the run
    with an error on the others instead of a hang."""


class CommonSettings(ConfigModel):
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
    RL's old logprobs; RL's rollouts prefill every prompt whole (no beginning that prompts
    admitted together share prefilled once). Equal up to fp32 rounding and slower: what the
    fast path is tested and benchmarked against (bench/rl_step.py). Under
    ``distributed.strategy: fsdp`` rows always run whole."""
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


class LossOn(StrEnum):
    ASSISTANT = "assistant"
    ALL = "all"


class SFTConfig(CommonSettings):
    """Supervised fine-tuning on the assistant tokens of stored trajectories (``loss_on``:
    every token)."""

    data: DataSource | None = None
    """The trajectories to learn from (required)."""
    epochs: int = Field(default=1, ge=1)
    """Passes over the data (when ``max_steps`` is null)."""
    batch_size: int = Field(default=8, ge=1)
    """Trajectories per optimiser step."""
    max_steps: int | None = Field(default=None, ge=1)
    """Make exactly this many steps, cycling the data as often as it takes (null: ``epochs``
    passes)."""
    loss_on: LossOn = LossOn.ASSISTANT
    """``assistant``: the assistant turns' tokens (behaviour cloning); ``all``: every token
    after the first, the environment's observations too (a model trained from scratch then
    learns what the observations say and how they follow from its moves, where behaviour
    cloning of moves that ignore them would teach it to ignore them)."""


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
