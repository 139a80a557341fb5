"""Reverse task synthesis end to end: explore, relabel, deduplicate, check by execution,
filter by difficulty, write the task set.

1. Exploration: one episode per start task (training-split tasks of the env) by the env's
   scripted explorer (``random``) or any policy, stored as run ``run_id``: each synthesized task
   names the trajectory it came from (``data["synthesis"]["source"]``).
2. Relabelling: the synthesizer turns each episode's reached state into a task, or says why not.
3. Deduplication: tasks with the same content (their id is its hash) are kept once.
4. Execution check: the task's solution (the exploration's own actions) is played again in a
   fresh env and must succeed by the env's verifier; a wrong answer must fail.
5. Difficulty (optional): a policy's pass rate over ``samples`` episodes per task must lie in
   ``band``; each kept task records it. Matching (optional): the tasks kept so that the
   expert's solution lengths mix as a reference's do (``synthesis.difficulty``).
6. The tasks are written as one JSONL file (``Task`` per line, what ``--tasks-file`` and a
   ``tasks.jsonl`` env read), atomically: a run that fails leaves no file.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trajforge.envs import PROPOSERS, REPO_ENV, Candidate, Synthesizer, synthesizer_for
from trajforge.errors import ConfigError
from trajforge.policy import check_policy_name, load_policy
from trajforge.rollout import PolicyRef, RolloutHook, RolloutSpec, Sampling, run_rollout
from trajforge.schema import ExpertFn, Message, Role, Task, Trajectory, is_success
from trajforge.synthesis.blueprints import synthesize_blueprints
from trajforge.synthesis.bugs import check_package, synthesize_bugs
from trajforge.synthesis.difficulty import match_reference, reference_tasks
from trajforge.synthesis.report import SynthesisReport, write_tasks

RANDOM_EXPLORER = "random"


class SynthesisSettings(BaseModel):
    """How tasks are synthesized from exploration (``trajforge synthesize``, the
    ``synthesize`` stage)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    episodes: int = Field(default=50, ge=1)
    """Exploration episodes, one per training-split task of the env; for retail and sql,
    blueprints proposed."""
    seed: int = 0
    """Seed of the start tasks, the explorer and the difficulty samples."""
    explorer: str = RANDOM_EXPLORER
    """``random`` (the env's scripted random explorer) or a policy that explores at
    temperature 1 (``embedded``, ``tiny``, a model folder, ``openai:<base_url>#<model>``)."""
    min_steps: int = Field(default=3, ge=1)
    """A reached state fewer steps away than this gives no task (too easy)."""
    difficulty_policy: str | None = None
    """A policy whose pass rate filters the tasks (null: no filter)."""
    samples: int = Field(default=4, ge=1)
    """Episodes per task of ``difficulty_policy``."""
    band: tuple[float, float] = (0.0, 1.0)
    """``[low, high]``: the pass rates a kept task may have (both ends included)."""
    match_difficulty: str | None = None
    """Keep the tasks so that the mix of the turns the env's expert needs to solve them is a
    reference's: ``train`` (``episodes`` tasks of the env's training split) or a task file of
    the env's training tasks (null: keep all; ``synthesis.difficulty``)."""

    @field_validator("band")
    @classmethod
    def _band_in_order(cls, band: tuple[float, float]) -> tuple[float, float]:
        low, high = band
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"need 0 <= low <= high <= 1, got [{low}, {high}]")
        return band

    user: str | None = None
    """The simulated user of blueprint conversations (retail): null: the env's scripted user;
    else a policy (``embedded``, a model folder, ``openai:<base_url>#<model>``)."""
    bugs: str | None = None
    """A Python package folder (its source and tests): the tasks are bugs injected into it,
    one function at a time, kept when its tests catch them (env ``repo``; ``episodes`` is the
    number of changes tried)."""
    bug_policy: str | None = None
    """With ``bugs``: a policy that writes each change (it rewrites one function with a bug,
    at temperature 1) instead of the rules (null: the rules)."""

    def check_names(self, env: str, key: Callable[[str], str] = str) -> None:
        """Refuse an env with no synthesizer or proposer, or a policy that names nothing (an
        error names the setting as ``key`` writes it); nothing is loaded or written."""
        if self.bug_policy is not None and self.bugs is None:
            raise ConfigError(f"{key('bug_policy')}: it writes the bugs of {key('bugs')}; "
                              "give that too")  # fmt: skip
        if self.bugs is not None:
            check_package(Path(self.bugs), key("bugs"))
            if env != REPO_ENV:
                raise ConfigError(f"{key('bugs')}: bug-injection tasks are tasks of env "
                                  f"{REPO_ENV!r}, not {env!r}")  # fmt: skip
        elif env == REPO_ENV:
            raise ConfigError(f"env {REPO_ENV!r}: its tasks are made by bug injection into a "
                              f"package: give {key('bugs')} PACKAGE_DIR")  # fmt: skip
        elif env not in PROPOSERS:
            synthesizer_for(env)
        if self.match_difficulty is not None:
            if self.bugs is not None:
                raise ConfigError(f"{key('match_difficulty')}: bug-injection tasks have no "
                                  "reference of their own to match")  # fmt: skip
            reference_tasks(env, self.match_difficulty, self.episodes, self.seed,
                            key("match_difficulty"))  # fmt: skip
        named = {"explorer": self.explorer, "difficulty_policy": self.difficulty_policy,
                 "user": self.user, "bug_policy": self.bug_policy}  # fmt: skip
        for name, policy in named.items():
            if policy is not None and policy != RANDOM_EXPLORER:
                try:
                    check_policy_name(policy)
                except ConfigError as exc:
                    raise ConfigError(f"{key(name)}: {exc}") from None


def _replayer(replies: Mapping[str, Sequence[str]]) -> ExpertFn:
    """Plays each task's replies in order, then its last one again and again."""

    def reply(task: Task, messages: list[Message]) -> str:
        turn = sum(1 for m in messages if m.role is Role.ASSISTANT)
        script = replies[task.id]
        return script[min(turn, len(script) - 1)]

    return reply


def _play(env: str, tasks: list[Task], replies: Mapping[str, Sequence[str]]) -> dict[str, bool]:
    """Whether each task's scripted replies, played in a fresh env, succeed."""
    if not tasks:
        return {}
    policy = load_policy("expert", expert=_replayer(replies), name="replay")
    spec = RolloutSpec(env=env, tasks=tasks)
    done = run_rollout(spec, policy=policy)
    return {t.task.id: is_success(t.outcome.status, t.outcome.reward) for t in done}


def check_by_execution(env: str, candidates: list[Candidate]) -> tuple[list[Task], Counter[str]]:
    """The candidates whose checker accepts their solution and rejects their wrong answer,
    played in fresh envs; the others counted by reason."""
    tasks = [c.task for c in candidates]
    solved = _play(env, tasks, {c.task.id: c.solution for c in candidates})
    fooled = _play(env, tasks, {c.task.id: c.wrong for c in candidates})
    kept: list[Task] = []
    dropped: Counter[str] = Counter()
    for task in tasks:
        if not solved[task.id]:
            dropped["its checker rejects the exploration's own solution"] += 1
        elif fooled[task.id]:
            dropped["its checker accepts a wrong answer"] += 1
        else:
            kept.append(task)
    return kept, dropped


def pass_rates(
    env: str, tasks: list[Task], policy: str, samples: int, seed: int
) -> dict[str, float]:
    """Each task's success rate over ``samples`` episodes of ``policy`` at temperature 1."""
    spec = RolloutSpec(
        env=env,
        policy=PolicyRef(name=policy),
        tasks=tasks,
        n=samples,
        sampling=Sampling(temperature=1.0),
        seed=seed,
    )
    wins: dict[str, list[bool]] = defaultdict(list)
    for t in run_rollout(spec):
        wins[t.task.id].append(is_success(t.outcome.status, t.outcome.reward))
    return {task_id: sum(w) / len(w) for task_id, w in wins.items()}


def explore(
    env: str, synth: Synthesizer, settings: SynthesisSettings, run_id: str, store: Path,
    hooks: Sequence[RolloutHook] = (),
) -> list[Trajectory]:  # fmt: skip
    """The exploration episodes, stored as run ``run_id``."""
    tasks = synth.start_tasks(settings.episodes, settings.seed)
    live: dict[str, Any] = {"hooks": list(hooks)}
    policy = None
    if settings.explorer == RANDOM_EXPLORER:
        live["policy"] = load_policy(
            "expert", expert=synth.explorer(settings.seed), name="explorer"
        )
    else:
        policy = PolicyRef(name=settings.explorer)
    spec = RolloutSpec(
        env=env,
        policy=policy,
        tasks=tasks,
        sampling=Sampling(temperature=1.0),
        seed=settings.seed,
        run_id=run_id,
        store=store,
    )
    return run_rollout(spec, **live)


def synthesize(
    env: str, settings: SynthesisSettings, *, run_id: str, store: Path, out: Path,
    hooks: Sequence[RolloutHook] = (),
) -> SynthesisReport:  # fmt: skip
    """Synthesize tasks of ``env`` (exploration stored as run ``run_id`` in ``store``) and
    write them to ``out``; for an env with a blueprint proposer (retail, sql), ``episodes``
    blueprints are proposed and validated instead (``synthesis.blueprints``); with ``bugs``,
    ``episodes`` changes to that package are tried (``synthesis.bugs``, env ``repo``).

    Raises:
        ConfigError: the env has no synthesizer, a policy is unknown, the ``bugs`` package
            has no tests or fails them, or no task survived (then nothing is written).
    """
    settings.check_names(env)
    if settings.bugs is not None:
        report = bug_tasks(settings)
    elif env in PROPOSERS:
        report = synthesize_blueprints(
            env, settings.episodes, seed=settings.seed, user=settings.user, hooks=hooks
        )
    else:
        report = reverse_synthesis(env, settings, run_id, store, hooks)
    if settings.difficulty_policy is not None and report.tasks:
        rates = pass_rates(
            env, report.tasks, settings.difficulty_policy, settings.samples, settings.seed
        )
        low, high = settings.band
        rated = [_with_rate(t, rates[t.id]) for t in report.tasks]
        report.tasks = [t for t in rated if low <= t.data["synthesis"]["pass_rate"] <= high]
        if len(report.tasks) < len(rated):
            report.dropped["outside the difficulty band"] += len(rated) - len(report.tasks)
    if settings.match_difficulty is not None and report.tasks:
        report.tasks, unmatched = match_reference(
            env, report.tasks, settings.match_difficulty, settings.episodes, settings.seed,
            "match_difficulty",
        )  # fmt: skip
        report.dropped.update(unmatched)
    if not report.tasks:
        raise ConfigError(f"synthesize: no task of {env} survived ({report.text}); nothing written")
    write_tasks(out, report.tasks)
    return report


def bug_tasks(settings: SynthesisSettings) -> SynthesisReport:
    """The ``repo`` tasks of ``settings.bugs``, changed by the rules or by ``bug_policy``."""
    assert settings.bugs is not None
    if settings.bug_policy is None:
        return synthesize_bugs(Path(settings.bugs), settings.episodes, seed=settings.seed)
    policy = load_policy(settings.bug_policy)
    try:
        return synthesize_bugs(
            Path(settings.bugs), settings.episodes, seed=settings.seed, policy=policy
        )
    finally:
        asyncio.run(policy.close())


def reverse_synthesis(
    env: str, settings: SynthesisSettings, run_id: str, store: Path,
    hooks: Sequence[RolloutHook] = (),
) -> SynthesisReport:  # fmt: skip
    """Explore, relabel, deduplicate and check by execution: the report's tasks are those
    that passed."""
    synth = synthesizer_for(env)
    report = SynthesisReport(env=env, run_id=run_id)
    sources = explore(env, synth, settings, run_id, store, hooks)
    report.explored = len(sources)
    candidates: dict[str, Candidate] = {}
    for source in sources:
        made = synth.relabel(source, settings.min_steps)
        if isinstance(made, str):
            report.dropped[made] += 1
        elif made.task.id in candidates:
            report.dropped["a duplicate"] += 1
        else:
            candidates[made.task.id] = made
    report.tasks, failed = check_by_execution(env, list(candidates.values()))
    report.dropped.update(failed)
    return report


def _with_rate(task: Task, rate: float) -> Task:
    provenance = {**task.data["synthesis"], "pass_rate": rate}
    return task.model_copy(update={"data": {**task.data, "synthesis": provenance}})
