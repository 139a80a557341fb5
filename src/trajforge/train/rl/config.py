"""The RL config: the algorithm, the rollouts, the update and the checks between its keys. Its
sub-settings (replay, task revisits, difficulty, trees, validation, self-play) live in
``train.rl.settings``.

Every key is documented by the docstring under it: ``trajforge config show`` and
``docs/configuration.md`` are generated from them.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from trajforge import algos
from trajforge.algos import Aggregation, Estimator, KLKind, LossName, RolloutCorrection
from trajforge.distributed import RayOptions
from trajforge.judge import ScorerRefs, default_refs
from trajforge.precision import Precision
from trajforge.rollout import ContextSpec
from trajforge.train.rl.distill_settings import DistillSettings
from trajforge.train.rl.settings import (
    MANAGED_SERVER,
    DifficultySettings,
    InfraFailures,
    ReplaySettings,
    SelfPlayOpponent,
    SelfPlaySettings,
    StaleSamples,
    TaskRevisitSettings,
    TreeSettings,
    ValidationSettings,
    check_rollout_server,
)
from trajforge.train.settings import CommonSettings

_ADAPTER_NAME = re.compile(r"[A-Za-z0-9_-]+")


class RLConfig(CommonSettings):
    """On-policy RL: roll out groups with the current weights, compute advantages, update."""

    env: str = "calculator"
    """The environment: a built-in name, ``module:factory`` or ``file.py:factory``."""
    agent: str | None = None
    """An agent program that produces the rollouts instead of the env's episodes (``python
    my_agent.py``): run once per task and sample against a gateway serving the weights being
    trained, its reward as in ``trajforge collect`` (posted, printed, else the env's verifier)."""
    harness: str | None = None
    """A real agent harness whose runs are the rollouts instead of ``agent``'s: ``claude-code``,
    ``codex`` or ``opencode`` (always confined)."""
    confine: bool = False
    """Run each agent program in the bubblewrap sandbox, as ``trajforge collect --confine``: a
    fresh workspace and home, no network but the gateway, bounded processes."""
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
    difficulty: DifficultySettings | None = None
    """Per-task pass rates, dropping and refilling groups that scored alike, and a curriculum
    over pass rates (null: none of it; ``{}`` tracks the pass rates only)."""
    temperature: float = Field(default=1.0, ge=0)
    """Sampling temperature of rollouts."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling of rollouts."""
    max_new_tokens: int = Field(default=128, ge=1)
    """Tokens per assistant turn."""
    max_turns: int | None = Field(default=None, ge=1)
    """Assistant turns per episode (null: the environment's own limit)."""
    context: ContextSpec | None = None
    """How a rollout's context is kept within a token budget: ``{strategy: keep_last |
    shorten_tools | summary | fold | none, budget: N, ...}`` (docs/context.md; null: one
    growing context, cut at ``max_seq_len``). Each rewrite starts a segment, a row of its own
    trained with its episode's advantage."""
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
    rollout_correction: RolloutCorrection = RolloutCorrection.TOKEN_TIS
    """How tokens sampled by other weights than the trained ones are corrected (docs/
    algorithms.md): ``token_tis`` weights each token's advantage by ``min(pi_train /
    pi_rollout, rollout_is_cap)`` (as above); ``seq_mis`` leaves out every sequence whose ratio
    ``prod_t pi_train / pi_rollout`` leaves ``rollout_is_band``; ``icepop`` leaves out each
    token whose ratio leaves ``rollout_is_band``; ``none``. The masking ones act whichever the
    old logprobs are. The mismatch itself is measured every step (docs/metrics.md,
    ``rollout_kl``)."""
    rollout_is_band: tuple[float, float] | None = None
    """``[low, high]`` of ``seq_mis`` and ``icepop`` (null: [0.5, 2] for ``seq_mis``, verl's
    default; [0.5, 5] for ``icepop``, its paper's)."""
    async_staleness: int = Field(default=0, ge=0)
    """0: synchronous (each step samples from the weights it then trains). 1: the next step's
    rollouts run while this step trains, from a copy of the weights one update old (the later
    turns of an episode under way sample from the newer ones, a partial rollout; every turn
    records its version, and ``max_staleness`` bounds what trains); PPO's importance ratio against the recorded logprobs corrects for it
    (``recompute_old_logprobs: false``), as verl's fully asynchronous mode and AReaL do. k > 1
    (with ``ray``): up to k steps ahead, one step's rollouts after another (each begins when
    the step before has its episodes), from weights at most k updates old."""
    max_staleness: int | None = Field(default=None, ge=0)
    """Bound on how many updates the weights that sampled a trained token may lag behind the
    weights it trains (null: ``async_staleness``). Every token records the weights version
    that sampled it (an episode under way when new weights load samples its later turns from
    them, a partial rollout): tokens beyond the bound leave the loss, and an episode all of
    whose tokens are beyond it is a stale sample (``stale_samples``). Counted per step:
    ``stale_token_frac``, ``stale_samples``."""
    stale_samples: StaleSamples = StaleSamples.DROP
    """A stale sample: ``drop`` leaves it out of its group (a group left with fewer than two is
    skipped); ``resample`` rolls its group out again at once, from the weights just trained."""
    rollout_stall_s: float = Field(default=1800.0, gt=0)
    """Seconds a step's rollouts may go without an episode ending before the run stops with
    the reason (a stalled generator or a hung worker), cancelling what is still running."""
    rollout_server: str | None = None
    """Sample the rollouts with a vLLM server whose weights follow the trainer: ``vllm``
    starts one on the trained model's (base) weights in the rollout precision (vLLM's own
    environment, ``make setup``'s ``.venv-vllm``); ``vllm:http://host:port`` uses one running,
    serving the same base weights with runtime LoRA updates on. After every update a LoRA
    adapter loads as the new weights version; full weights are reloaded, the server started
    again on them (``vllm`` only, synchronous). null: this process samples."""
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
    """Self-play on a multi-seat game (null: one agent, as the env gives it); with ``ray`` its
    games are played on the actors."""
    tree: TreeSettings | None = None
    """Tree-structured rollouts: groups grown by branches from their episodes' turn
    boundaries, step-level groups at the branch points (null: none)."""
    distill: DistillSettings | None = None
    """On-policy distillation: a teacher scores every token the student sampled, its
    reverse-KL advantage added to ``distill.outcome_weight`` times the outcome's (null: none;
    ``trajforge train distill`` is a run with it set)."""
    scorers: ScorerRefs = Field(default_factory=default_refs("env_verifier"), min_length=1)
    """The reward: a rubric of weighted scorers, summed. Each item is a scorer's name, or
    ``{name, weight, options}``; a name is a registered scorer (``env_verifier``, the env's
    verdict; ``env_success``, that verdict as 1 solved or 0 not; ``trajforge judge --help``
    lists them), ``module:function`` or
    ``file.py:function`` (a function ``(trajectory) -> float | Score``)."""

    @field_validator("estimator_kwargs", "loss_kwargs")
    @classmethod
    def _known_options(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        what = "estimator" if info.field_name == "estimator_kwargs" else "loss"
        if what in info.data:
            known = algos.estimator_options if what == "estimator" else algos.loss_options
            _check_options(value, known(info.data[what]), what)
        return value

    @property
    def plays_program(self) -> bool:
        """Whether the rollouts are runs of an agent program (``agent`` or ``harness``)."""
        return self.agent is not None or self.harness is not None

    @model_validator(mode="after")
    def _ray_rolls_out_env_episodes(self) -> RLConfig:
        if self.agent is not None and self.harness is not None:
            raise ValueError("harness: the runs are the agent command's or the harness's; give one")
        if self.confine and not self.plays_program:
            raise ValueError("confine: confines an agent program's runs; give agent or harness")
        if self.ray is not None and self.plays_program:
            raise ValueError("ray: an agent program's rollouts run through the gateway, not on Ray")
        if self.self_play is not None and self.plays_program:
            # An agent program plays one side through the gateway; a game needs every seat.
            raise ValueError("self_play: a game's seats are played by the trainer, not by agent")
        if self.rollout_server is not None:
            check_rollout_server(self.rollout_server)
            if self.model.lora is None and (
                self.rollout_server != MANAGED_SERVER or self.async_staleness
            ):
                raise ValueError(
                    "rollout_server: full weights follow by restarting the server on them (a "
                    "vLLM server moves new weights in over NCCL or CUDA IPC only), so only a "
                    "server started here (vllm) and no rollouts ahead (async_staleness: 0); "
                    "else set model.lora"
                )
            if self.ray is not None or self.plays_program or self.self_play is not None:
                raise ValueError(
                    "rollout_server: samples the env's episodes itself (not with ray, an agent "
                    "program or self_play)"
                )
        if self.async_staleness > 1 and self.ray is None:
            raise ValueError(
                "async_staleness: more than 1 step ahead needs ray: (in this process, rollouts "
                "sample one step ahead at most)"
            )
        if self.difficulty is not None:
            _check_difficulty(self.difficulty, self)
        if self.self_play is not None and self.self_play.per_role:
            _check_per_role(self)
        if self.max_staleness is not None and (self.plays_program or self.self_play):
            raise ValueError(
                "max_staleness: an agent program's or a game's turns record no weights version "
                "to bound (leave max_staleness out)"
            )
        return self

    @field_validator("rollout_is_band")
    @classmethod
    def _band_holds_one(cls, band: tuple[float, float] | None) -> tuple[float, float] | None:
        if band is not None and not 0 <= band[0] <= 1 <= band[1]:
            raise ValueError(
                f"[{band[0]:g}, {band[1]:g}]: the band must hold 1 (0 <= low <= 1 <= high)"
            )
        return band

    @property
    def staleness_bound(self) -> int:
        """The bound in updates a trained token's weights may lag (``max_staleness``)."""
        return self.async_staleness if self.max_staleness is None else self.max_staleness


def _check_per_role(cfg: RLConfig) -> None:
    """Refuse what per-role adapters cannot do under ``cfg``, in one line naming the key."""
    assert cfg.self_play is not None
    if cfg.model.lora is None:
        raise ValueError(
            "self_play.per_role: needs model.lora (each role trains a LoRA adapter of its own "
            "on the one base model)"
        )
    if cfg.self_play.opponent is not SelfPlayOpponent.SELF:
        raise ValueError("self_play.per_role: needs opponent: self (every seat is trained)")
    for key in ("ray", "tree", "distill"):
        if getattr(cfg, key) is not None:
            raise ValueError(f"self_play.per_role: not with {key}: (its rollouts use one policy)")
    if cfg.async_staleness > 0:
        raise ValueError("self_play.per_role: not with async_staleness (rollouts wait for updates)")
    names = cfg.self_play.per_role
    if isinstance(names, dict) and (
        bad := [n for n in names.values() if not _ADAPTER_NAME.fullmatch(n) or n == "default"]
    ):
        raise ValueError(
            f"self_play.per_role: adapter name {bad[0]!r} is not a plain name "
            "(letters, digits, -, _; not default)"
        )


def _check_difficulty(difficulty: DifficultySettings, cfg: RLConfig) -> None:
    """Refuse what ``difficulty`` cannot do under ``cfg``, in one line naming the key."""
    if difficulty.refill and cfg.samples_per_group < 2:
        raise ValueError(
            "difficulty.refill: a group of one sample always scores alike; set "
            "samples_per_group to 2 or more"
        )
    if cfg.async_staleness > 0 and (difficulty.refill or difficulty.band is not None):
        raise ValueError(
            "difficulty: refill and band choose a step's tasks from the pass rates as it "
            "starts; with async_staleness the tasks are chosen steps ahead (set it to 0)"
        )


def _check_options(given: dict[str, Any], known: list[str], what: str) -> None:
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"{key!r} is not an option of this {what}{hint}; its options: "
                f"{', '.join(known) or 'none'}"
            )
