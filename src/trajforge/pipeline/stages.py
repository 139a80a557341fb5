"""The stages of an experiment file: evaluations, demonstrations, agent-program collections,
SFT, RL, triage, repair, experience memory and task synthesis, each a pydantic model told apart
by its ``kind``.

Every key is documented by the docstring under it: ``trajforge config show`` and
``docs/configuration.md`` are generated from them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trajforge.judge import ScorerRefs, default_refs
from trajforge.rollout import ContextSpec
from trajforge.synthesis import SynthesisSettings


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class EvalSettings(StrictModel):
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
    context: ContextSpec | None = None
    """How each episode's context is kept within a token budget: ``{strategy: keep_last |
    shorten_tools | summary | fold | none, budget: N, keep_turns, tool_chars, summary_by,
    summary_tokens}`` (docs/context.md); null: one growing context."""
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
    key), ``judge:CRITERIA`` (judged by ``judge_model``), ``majority`` or ``logprob``."""
    judge_model: str | None = None
    """The policy that judges candidates for ``select: judge:CRITERIA``."""


class EvalStage(StrictModel):
    """Evaluate the latest weights on the held-out tasks (``eval``)."""

    kind: Literal["eval"] = "eval"
    """Stage kind."""
    name: str = Field(examples=["base"])
    """Stage name, unique in the experiment."""
    force: str | None = None
    """``script:file.py:function``, called like the env's expert: the turns it has a reply for
    are forced to it (a mistake to recover from, say), the model plays the rest; null: none."""
    memory: str | None = None
    """An experience memory for the episodes: the name of an earlier ``memory`` stage, or a
    memory JSONL file (``trajforge memory build``; relative to the working directory). The
    top ``memory_k`` items by BM25 for each task go into its system message, and each
    trajectory's ``metadata.memory`` lists them. Not with ``ray`` (the memory is read in this
    process), nor from a memory stage that distils held-out eval episodes (their solutions
    would be in it); null: none."""
    memory_k: int = Field(default=3, ge=1)
    """Memory items retrieved per task."""
    memory_update: bool = False
    """Grow the memory as the eval runs, each finished episode adding an item: a copy in the
    stage's folder grows (``<stage>/memory.jsonl``), never the memory it was given."""
    memory_embed: str | None = None
    """Retrieve the memory's items by the cosine similarity of this model's embeddings
    (``embedded``, ``tiny`` or a model folder, an encoder's embedding best) instead of BM25;
    null: BM25."""


class DemonstrationStage(StrictModel):
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
    max_new_tokens: int | None = Field(default=None, ge=1)
    """Tokens a model teacher may sample a turn (a reply cut there, as in an eval with the
    same limit); null: the sampler's default (256)."""
    context: ContextSpec | None = None
    """How each episode's context is kept within a token budget: ``{strategy: keep_last |
    shorten_tools | summary | fold | none, budget: N, keep_turns, tool_chars, summary_by,
    summary_tokens}`` (docs/context.md); null: one growing context."""
    tasks_from: str | None = None
    """An earlier ``synthesize`` stage whose tasks are played instead of the env's (``tasks``
    of them, in an order fixed by ``seed``); null: the env's ``split``."""


class CollectStage(StrictModel):
    """Trajectories from an agent program: ``trajforge collect`` against a recording gateway
    serving the latest weights, one run per task x ``n`` (see ``docs/gateway.md``)."""

    kind: Literal["collect"] = "collect"
    """Stage kind."""
    name: str = "collect"
    """Stage name, unique in the experiment."""
    agent: str | None = Field(default=None, min_length=1, examples=["python my_agent.py"])
    """The command that runs the agent once (``OPENAI_BASE_URL`` points at its session, the
    task comes as JSON on stdin and in ``TRAJFORGE_TASK``); give it or ``harness``."""
    harness: str | None = None
    """A real agent harness run instead of ``agent``: ``claude-code``, ``codex`` or
    ``opencode`` (its config written for each run and removed after; always confined)."""
    confine: bool = False
    """Run each program in the bubblewrap sandbox, as ``trajforge collect --confine``: a fresh
    workspace and home, no network but the gateway, bounded processes."""
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

    @model_validator(mode="after")
    def _one_program(self) -> CollectStage:
        if (self.agent is None) == (self.harness is None):
            raise ValueError("give agent (a command) or harness (a harness's name), one of them")
        return self


class SFTStage(StrictModel):
    """Fine-tune on the successful demonstrations; ``train`` holds ``SFTConfig`` keys."""

    kind: Literal["sft"] = "sft"
    """Stage kind."""
    name: str = "sft"
    """Stage name, unique in the experiment."""
    demonstrations: str | list[str] = "demonstrations"
    """The earlier stage (``demonstrations``, ``collect``, ``eval`` or ``repair``), or stages,
    whose successful trajectories (reward >= 1) are the data."""

    @property
    def data_stages(self) -> list[str]:
        """The stages named by ``demonstrations``, as a list."""
        d = self.demonstrations
        return [d] if isinstance(d, str) else list(d)

    train: dict[str, Any] = Field(default_factory=dict)
    """``SFTConfig`` keys (``trajforge config show sft``). ``model.spec``, ``data.store`` and
    ``data.run`` are set by the experiment (data filters such as ``data.limit`` are the
    stage's; ``data.min_reward`` defaults to 1); ``output_dir`` and ``seed`` default to the
    run's, ``checkpoint_every_s`` to 300 and ``keep_checkpoints`` to 2."""


class RLStage(StrictModel):
    """On-policy RL on the env; ``train`` holds ``RLConfig`` keys."""

    kind: Literal["rl"] = "rl"
    """Stage kind."""
    name: str = "rl"
    """Stage name, unique in the experiment."""
    train: dict[str, Any] = Field(default_factory=dict)
    """``RLConfig`` keys (``trajforge config show rl``). ``model.spec`` is set by the
    experiment; ``env``, ``output_dir``, ``seed`` and ``store`` default to the run's,
    ``checkpoint_every_s`` to 300 and ``keep_checkpoints`` to 2."""


TRAJECTORY_KINDS = ("demonstrations", "collect", "eval", "repair")
"""The stage kinds that store trajectories (a run of the experiment's store)."""


class TriageStage(StrictModel):
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


class RepairStage(StrictModel):
    """Repair data (Agent-R, as ``trajforge curate repair`` makes it): each failed trajectory of
    an earlier stage cut after its first error, a turn naming the mistake, then a successful
    episode of the same task from where the two parted. An SFT stage trains on it by naming it
    among its ``demonstrations``."""

    kind: Literal["repair"] = "repair"
    """Stage kind."""
    name: str = "repair"
    """Stage name, unique in the experiment."""
    failed: str = Field(examples=["attempts"])
    """The earlier ``demonstrations``, ``collect`` or ``eval`` stage whose failed trajectories
    are repaired; an eval of the held-out split is refused (its repairs would train on
    held-out tasks)."""
    good: str | None = None
    """The earlier stage whose successful episodes give the endings (null: any stage's)."""


class MemoryStage(StrictModel):
    """Distil an experience memory from the trajectories of earlier stages, as ``trajforge
    memory build`` does (one item per episode, successes and failures alike, each with the
    trajectory ids it came from), written to ``<stage>/memory.jsonl`` in the run folder; an
    ``eval`` stage reads it by naming it as its ``memory``."""

    kind: Literal["memory"] = "memory"
    """Stage kind."""
    name: str = "memory"
    """Stage name, unique in the experiment."""
    stages: list[str] = Field(default_factory=list)
    """The earlier ``demonstrations``, ``collect``, ``eval`` or ``repair`` stages whose
    trajectories, of whatever split, it distils (empty: every such stage before it)."""
    distiller: str = "rules"
    """``rules`` (templates: what worked, what failed and how) or a policy that writes each
    item: ``embedded``, ``tiny``, a model folder, ``openai:<base_url>#<model>``."""


class SynthesizeStage(SynthesisSettings):
    """New training tasks of the env from exploration, as ``trajforge synthesize`` makes them:
    each checked by executing its solution and a wrong answer, written to
    ``<stage>/tasks.jsonl`` in the run folder, the exploration episodes stored as the stage's
    run. A ``demonstrations`` stage plays them by naming it as its ``tasks_from``."""

    kind: Literal["synthesize"] = "synthesize"
    """Stage kind."""
    name: str = "synthesize"
    """Stage name, unique in the experiment."""
    env: str | None = None
    """The env whose tasks are synthesized, when not the experiment's: say, the MiniWoB++ form
    pages (``miniwob:enter-text,login-user``) of an experiment whose env mixes them with pages
    no explorer makes tasks from. Its tasks must play in the experiment's env, which the
    ``demonstrations`` stage that reads them uses; null: the experiment's env."""


Stage = Annotated[
    EvalStage
    | DemonstrationStage
    | CollectStage
    | SFTStage
    | RLStage
    | TriageStage
    | RepairStage
    | MemoryStage
    | SynthesizeStage,
    Field(discriminator="kind"),
]
STAGE_KINDS: tuple[type[BaseModel], ...] = (
    EvalStage,
    DemonstrationStage,
    CollectStage,
    SFTStage,
    RLStage,
    TriageStage,
    RepairStage,
    MemoryStage,
    SynthesizeStage,
)


def check_reads(stage: TriageStage | MemoryStage, before: list[Stage]) -> None:
    """Refuse a triage or memory stage that names no earlier stage with trajectories."""
    earlier = {s.name for s in before if s.kind in TRAJECTORY_KINDS}
    wrong = [n for n in stage.stages if n not in earlier]
    if wrong:
        raise ValueError(
            f"{stage.kind} stage {stage.name!r} reads {', '.join(map(repr, wrong))}, which is "
            "not an earlier demonstrations, collect, eval or repair stage"
        )
    if not earlier:
        raise ValueError(
            f"{stage.kind} stage {stage.name!r} has no earlier stage with trajectories"
        )


def check_repaired(stage: RepairStage, before: list[Stage]) -> None:
    """Refuse a repair stage whose ``failed`` or ``good`` is not an earlier stage with
    trajectories."""
    earlier = {s.name for s in before if s.kind in TRAJECTORY_KINDS}
    for key, name in (("failed", stage.failed), ("good", stage.good)):
        if name is not None and name not in earlier:
            raise ValueError(
                f"repair stage {stage.name!r}: {key} {name!r} is not an earlier "
                "demonstrations, collect, eval or repair stage"
            )


def check_tasks_from(stage: DemonstrationStage, before: list[Stage]) -> None:
    """Refuse a demonstrations stage whose ``tasks_from`` is not an earlier synthesize stage."""
    earlier = {s.name for s in before if s.kind == "synthesize"}
    if stage.tasks_from is not None and stage.tasks_from not in earlier:
        raise ValueError(
            f"demonstrations stage {stage.name!r}: tasks_from {stage.tasks_from!r} is not an "
            "earlier synthesize stage"
        )


def stage_name(stage: Stage, attempt: int) -> str:
    """A stage's attempt as named in run ids and folders: ``<name>``, then ``<name>.<attempt>``."""
    return stage.name + (f".{attempt}" if attempt else "")
