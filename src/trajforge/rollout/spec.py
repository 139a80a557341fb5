"""``RolloutSpec``: everything a rollout needs, as data that survives ``model_dump_json``.

A spec names its environment and policy by reference (``calculator``, ``module:factory``;
``embedded``, a model folder, ``openai:<url>#<model>``), so it can be stored with a run (what
``--resume`` reads back) or shipped to a worker. In-process callers that hold live objects
instead (RL samples from the very model it trains) hand them to the entry point beside the spec;
the spec then leaves those references out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from trajforge.errors import ConfigError
from trajforge.policy import (
    OPENAI_PREFIX,
    ForcedTurns,
    Policy,
    SamplingParams,
    is_scripted,
    load_policy,
    load_script,
)
from trajforge.precision import Precision, resolve_precision, torch_dtype
from trajforge.rollout.context import ContextSpec
from trajforge.rollout.limits import Limits
from trajforge.schema import ExpertFn, Task

# The defaults of a turn's sampling are the policy contract's own.
_SAMPLING_DEFAULTS = SamplingParams()


class RolloutError(ConfigError):
    """A rollout was asked for with arguments it cannot run."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskSample(_Frozen):
    """``count`` tasks drawn from the environment's ``split``, deterministic in ``seed``."""

    count: int = Field(ge=1)
    split: Literal["train", "test"] = "train"
    seed: int = 0


def _task_source(value: Any) -> str:
    return "list" if isinstance(value, list | tuple) else "sample"


TaskSource = Annotated[
    Annotated[list[Task], Tag("list")] | Annotated[TaskSample, Tag("sample")],
    Discriminator(_task_source),
]
"""The tasks of a run: a sample drawn from the environment, or an explicit list."""


class PolicyRef(_Frozen):
    """A policy by name, with the options a local model is built with."""

    name: str = Field(min_length=1)
    """As ``load_policy`` takes it: ``embedded``, ``tiny``, ``pocket``, ``expert``, a model folder or
    ``openai:<base_url>#<model>``."""
    batch_size: int | None = Field(default=None, ge=1)
    """Sequences a local model decodes together (``None``: the policy's default)."""
    precision: Precision = Precision.AUTO
    """Weights of a local model; resolved on the machine that loads it."""
    force: str | None = None
    """``script:file.py:function`` (called like an environment's expert): the turns it has a
    reply for are forced to that reply, the policy answers the others (``ForcedTurns``)."""

    @property
    def is_local_model(self) -> bool:
        """Whether the policy has weights here (not the scripted expert, not an endpoint)."""
        return not is_scripted(self.name) and not self.name.startswith(OPENAI_PREFIX)

    def load_options(self, field: str = "policy.precision") -> dict[str, Any]:
        """Constructor options: a local model's batch size and the dtype its precision resolves
        to here (bf16 without native bf16 is a ``ConfigError`` naming ``field``)."""
        if not self.is_local_model:
            return {}
        options: dict[str, Any] = {"dtype": torch_dtype(resolve_precision(self.precision, field))}
        if self.batch_size is not None:
            options["max_batch_size"] = self.batch_size
        return options

    def load(self, expert: ExpertFn | None = None) -> Policy:
        """The policy (``expert`` is the environment's scripted expert, for ``expert``)."""
        policy = load_policy(self.name, expert=expert, **self.load_options())
        if self.force is None:
            return policy
        return ForcedTurns.wrapping(policy, load_script(self.force), f"force {self.force!r}")


class Sampling(_Frozen):
    """Base sampling of every turn; each turn's seed derives from the spec's ``seed``."""

    temperature: float = Field(default=_SAMPLING_DEFAULTS.temperature, ge=0)
    top_p: float = Field(default=_SAMPLING_DEFAULTS.top_p, gt=0, le=1)
    top_k: int = Field(default=_SAMPLING_DEFAULTS.top_k, ge=0)
    max_new_tokens: int = Field(default=_SAMPLING_DEFAULTS.max_new_tokens, ge=1)
    stop: tuple[str, ...] = tuple(_SAMPLING_DEFAULTS.stop)

    def params(self) -> SamplingParams:
        return SamplingParams(**{**self.model_dump(), "stop": list(self.stop)})


class RolloutSpec(_Frozen):
    """One rollout: ``n`` episodes of every task, run into a store.

    Attributes:
        env: The environment: a built-in name, ``module:factory`` or ``file.py:factory``
            (``None``: the caller passes a live factory).
        policy: The policy (``None``: the caller passes a live one).
        user: The simulated user's policy, for an env that has one (``expert``: the env's
            scripted user; ``None``: the scripted user, or a live one the caller passes).
            Its side of each episode is stored under the run id ``<run_id>.user``.
        tasks: A ``TaskSample`` of the environment's tasks, or the tasks themselves (their
            ids must be distinct).
        n: Samples per task; they share a ``group_id``.
        limits: Budgets per episode.
        context: How an episode's context is kept within a token budget (keep-last-K,
            shortened tool outputs, a summary, the agent's own fold; ``None``: one growing
            context, cut at ``limits.max_context_tokens``).
        sampling: Base sampling parameters.
        seed: The run's seed; turn seeds derive from it, the task, the sample and the turn.
        concurrency: Episodes running at once (the lockstep batch size); ``None``: all.
        lockstep: Run the synchronous baseline (turn by turn across a batch) instead.
        run_id: The run's name (``None``: a fresh id). A named run that the store already
            holds episodes of resumes: only the missing (task, sample) pairs run.
        store: The trajectory store finished episodes are written to as they end, when the
            caller does not pass an open one.
    """

    env: str | None = Field(default=None, min_length=1)
    policy: PolicyRef | None = None
    user: PolicyRef | None = None
    tasks: TaskSource
    n: int = Field(default=1, ge=1)
    limits: Limits = Field(default_factory=Limits)
    context: ContextSpec | None = None
    sampling: Sampling = Field(default_factory=Sampling)
    seed: int = 0
    concurrency: int | None = Field(default=None, ge=1)
    lockstep: bool = False
    run_id: str | None = Field(default=None, min_length=1)
    store: Path | None = None

    @property
    def episodes(self) -> int:
        """Episodes the run asks for (a resumed run may have some of them already)."""
        count = len(self.tasks) if isinstance(self.tasks, list) else self.tasks.count
        return count * self.n
