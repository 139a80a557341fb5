"""The RL config's sub-settings: what becomes of episodes lost to the infrastructure and of
stale samples, replay of past successes, task revisits, difficulty filtering and the curriculum,
tree rollouts, validation and self-play. ``RLConfig`` (``train.rl.config``) holds one of each.

Every key is documented by the docstring under it: ``trajforge config show`` and
``docs/configuration.md`` are generated from them.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, field_validator

from trajforge.train.settings import ConfigModel

MANAGED_SERVER = "vllm"
"""``rollout_server`` for a vLLM server started by the trainer."""
RUNNING_SERVER = ("vllm:http://", "vllm:https://")


def check_rollout_server(spec: str) -> None:
    """Refuse a ``rollout_server`` other than ``vllm`` and ``vllm:http://host:port``."""
    if spec != MANAGED_SERVER and not spec.startswith(RUNNING_SERVER):
        raise ValueError(
            f"{spec!r}: write vllm (a vLLM server started for the trained model's base "
            "weights) or vllm:http://host:port (one running, serving them)"
        )


class InfraFailures(StrEnum):
    """What RL does with an episode lost to the infrastructure (``Outcome.fault: infra``)."""

    DROP = "drop"
    ZERO = "zero"


class StaleSamples(StrEnum):
    """What RL does with an episode every token of which is older than ``max_staleness``."""

    DROP = "drop"
    RESAMPLE = "resample"


class ReplaySettings(ConfigModel):
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


class TaskRevisitSettings(ConfigModel):
    """Prioritized revisits of tasks not yet solved by every sample (``train.rl.task_revisit``)."""

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


class DifficultySettings(ConfigModel):
    """Per-task pass rates tracked across steps, and what a run does with them
    (``train.rl.difficulty``): refill the batch in place of groups that scored alike (DAPO's
    dynamic sampling), and prefer tasks of middling pass rate (a curriculum)."""

    refill: bool = False
    """Drop each group whose samples all got the same reward (it teaches nothing) and roll out
    groups on new tasks in its place, until ``groups_per_step`` groups with a spread are in hand
    or a cap below is reached."""
    max_refills: int = Field(default=4, ge=1)
    """Rounds of extra rollouts one step may take (each rolls out the groups still missing)."""
    max_extra_groups: int | None = Field(default=None, ge=1)
    """Groups one step may roll out beyond ``groups_per_step`` (null: only ``max_refills``
    bounds them)."""
    band: tuple[float, float] | None = None
    """``[low, high]``: a step's fresh tasks are those whose pass rate lies in the band (a task
    not yet seen counts as in it); one outside is taken with probability ``explore`` when its
    turn comes, so none is starved. null: tasks in order, whatever their pass rate."""
    explore: float = Field(default=0.1, gt=0, le=1)
    """Chance that a task outside ``band`` is taken when the task order reaches it."""
    pass_rate_alpha: float = Field(default=0.5, gt=0, le=1)
    """Weight of a task's newest group in its pass rate, an exponential moving average of the
    share of its samples that succeeded (1: the newest group alone)."""
    pass_reward: float = 1.0
    """A sample passes when it ended ``ok`` with at least this reward."""

    @field_validator("band")
    @classmethod
    def _band_within_unit(cls, band: tuple[float, float] | None) -> tuple[float, float] | None:
        if band is None:
            return None
        low, high = band
        if not (0 <= low <= 1 and 0 <= high <= 1):
            raise ValueError(f"[{low:g}, {high:g}]: a band of pass rates lies within [0, 1]")
        if low > high:
            raise ValueError(f"[{low:g}, {high:g}]: low is above high; write [low, high]")
        return band


class TreeSettings(ConfigModel):
    """Tree-structured rollouts (``train.rl.tree``): after a step's groups are played, one
    episode of each task is branched at a turn boundary drawn inside it (its turns replayed
    token for token, the rest sampled anew), its branches joining its group."""

    branches: int = Field(default=2, ge=1)
    """Episodes branched from each task's branch point."""


class ValidationMetric(StrEnum):
    REWARD = "reward"
    SUCCESS = "success"


class ValidationSettings(ConfigModel):
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
    keep_best_by: ValidationMetric = ValidationMetric.REWARD
    """What "best" compares: ``reward``, the mean reward on the env's own scale, or
    ``success``, the success rate, ties broken by mean reward. They part where a failure can
    score below another: MiniWoB gives -1 for a wrong final action and 0 for running out of
    turns, so a step that solves more tasks and gives up less can lower the mean reward."""


class SelfPlayOpponent(StrEnum):
    SELF = "self"
    POOL = "pool"


class RoleAdvantage(StrEnum):
    RAE = "rae"
    ESTIMATOR = "estimator"


class SelfPlaySettings(ConfigModel):
    """Self-play on a multi-seat game (``env: tictactoe``, ``kuhn-poker``, ``negotiation``,
    ``nim``): the trained policy sits in the task's seat and ``opponent`` in the others. (To
    train one seat against a scripted opponent, leave this out: the game's env is that seat
    against its heuristic opponent.)"""

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
    per_role: bool | dict[str, str] = False
    """Each role its own LoRA adapter on the one base model (needs ``model.lora`` and
    ``opponent: self``): ``true``, one adapter per seat, named by it; a mapping of seat to
    adapter name (``{p1: dealer, p2: dealer}``) lets seats share one. Each adapter trains on
    its own seats' trajectories alone; rollouts decode every seat's turns in one batch, each
    row under its seat's adapter; the final folder holds the base weights and each adapter
    under ``adapter/<name>``."""
