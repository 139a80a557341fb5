"""On-policy multi-turn RL: roll out groups with the current weights, score, compute advantages,
update for K epochs with the chosen policy loss, refresh the rollout policy, repeat.

Estimators and losses come from ``trajforge.algos`` by name (``estimator: grpo``, ``loss:
ppo_clip``); the reward is the ``Rubric`` of weighted ``scorers`` (default: the env's verdict),
recorded on each episode (``episode_reward``). The rollout policy is an ``HFPolicy`` over the
very model being trained, so the next rollout always samples from the updated weights. With
``rollout_precision: bf16`` (or ``auto`` while training in bf16) it samples from a bf16 copy
instead, re-synced after every update (under LoRA, a copy with the adapter merged in): decoding
is then about twice as fast on hardware with native bf16; the trainer's own logprobs keep the
PPO ratios exact to the trained weights, and truncated importance weights (``rollout_is_cap``)
make the bf16 copy's tokens an estimate of the trained policy's gradient (docs/metrics.md,
``rollout_logprob_gap``).

Over several processes the main process rolls out and scores every episode of a step and sends
them to the others (rollouts on rank 0, then scattered as a share of the batch: an agent program
or a judge runs once, and only the main process writes the store); every process computes the
same advantages over the whole step and trains on its share (``trajforge.train.distributed``).
Under FSDP the main process samples from a plain copy of the gathered weights.

``run_step`` below is a whole step; where its episodes come from is the ``StepRunner`` chosen
when the trainer starts (``runners.py``) and the update is ``update.update``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from trajforge.algos import drop_from_groups
from trajforge.curate import group_key
from trajforge.distributed import POLICY_VERSION, ray_runner
from trajforge.envs import get_env
from trajforge.errors import ConfigError, EpisodeError
from trajforge.judge import Evaluation, Rubric, evaluate
from trajforge.precision import precision_of
from trajforge.rollout import Limits, RolloutSpec, Sampling, run_rollout
from trajforge.schema import OutcomeStatus, Task, Trajectory, is_infra_failure, is_success
from trajforge.store import TrajectoryStore
from trajforge.train.base import StepCallback, Trainer, TrainResult
from trajforge.train.config import InfraFailures, RLConfig, RoleAdvantage
from trajforge.train.distributed import from_main
from trajforge.train.model import TrainParts
from trajforge.train.rl import update as rl_update
from trajforge.train.rl.advantages import REWARD, episode_reward, reward_score
from trajforge.train.rl.difficulty import Difficulty, Filtered
from trajforge.train.rl.idle import IdleSteps
from trajforge.train.rl.replay import ReplayBuffer
from trajforge.train.rl.runners import AgentRunners, Ahead, RolloutWeights, choose_runner
from trajforge.train.rl.segments import SegmentStash
from trajforge.train.rl.task_revisit import TaskRevisits
from trajforge.train.validation import (
    BestWeights,
    ValidationPoint,
    validation_point,
    validation_tasks,
)

if TYPE_CHECKING:
    from trajforge.train.reference import ReferenceModel
    from trajforge.train.rl.distill import Distiller
    from trajforge.train.rl.self_play import SelfPlay
    from trajforge.train.rl.tree import TreeRollouts


_REFILL_SEED_STRIDE = 7_919
"""Between the sampling seeds of a step's refill rounds: a task rolled out again draws anew."""

RL_RUN_KIND = "rl"
"""The ``kind`` an RL run's rollouts carry in their metadata (the viewer's runs table shows it)."""


class RLTrainer(Trainer):
    """The on-policy loop over an environment from the registry."""

    description = "rl"
    metric_weight = "loss_tokens"

    def __init__(
        self,
        cfg: RLConfig,
        *,
        parts: TrainParts | None = None,
        callbacks: Sequence[StepCallback] = (),
        rubric: Rubric | None = None,
        agent_runner: AgentRunners | None = None,
        run_prefix: str | None = None,
        stage: str | None = None,
    ) -> None:
        """``run_prefix``: the rollouts' run ids are ``<run_prefix>.step<N>`` (validation:
        ``.val-step<N>``), as an experiment names its stages' runs, ``stage`` the stage's name;
        without one, ``rl-<output folder>-step<N>``."""
        if (cfg.agent is None) != (agent_runner is None):
            raise ConfigError(
                "agent: an agent program's rollouts run through the gateway: start the run "
                "with trajforge train rl or an experiment (agent_runner and agent go together)"
            )
        self.rl_cfg = cfg
        self.run_prefix, self.stage = run_prefix, stage
        self.entry = get_env(cfg.env)
        self.tasks = self.entry.tasks(cfg.num_tasks, seed=cfg.seed, split=cfg.task_split)
        self.self_play: SelfPlay | None = None
        if cfg.self_play is not None:
            # lazy: a game's seats, its runner and RAE load only for a run that plays one
            from trajforge.train.rl.self_play import SelfPlay

            self.self_play = SelfPlay(cfg.self_play, self.entry, cfg.seed)
        self.task_cursor = 0
        self.task_index = {task.id: i for i, task in enumerate(self.tasks)}
        self.revisits = TaskRevisits(cfg.revisit)
        self.difficulty = Difficulty(cfg.difficulty, cfg.seed)
        self.validation_tasks = (
            validation_tasks(self.entry, cfg.validation, split=cfg.task_split, avoid=self.tasks)
            if cfg.validation.tasks
            else []
        )
        self.validated: list[ValidationPoint] = []
        # The reward: ``rubric`` when given (tests, code), else the config's weighted scorers.
        self.rubric = rubric if rubric is not None else Rubric.from_refs(cfg.scorers, name=REWARD)
        self.replay = ReplayBuffer(cfg.replay.max_size)
        self.ahead: deque[Ahead] = deque()
        self.segments = SegmentStash()
        """The next steps' rollouts under way, oldest first (``async_staleness`` at most)."""
        self.idle = IdleSteps()
        super().__init__(cfg, parts=parts, callbacks=callbacks)
        self.reference: ReferenceModel | None = None
        if cfg.kl_coef > 0:
            # lazy: the reference model's code loads only for a run with a KL penalty
            from trajforge.train.reference import ReferenceModel

            self.reference = ReferenceModel(self.parts)
        self.tree: TreeRollouts | None = None
        if cfg.tree is not None:
            # lazy: branching loads only for a run that grows trees
            from trajforge.train.rl.tree import TreeRollouts

            self.tree = TreeRollouts(cfg)
        self.distiller: Distiller | None = None
        if cfg.distill is not None:
            # lazy: the teacher and its model load only for a run that distils
            from trajforge.train.rl.distill import Distiller

            self.distiller = Distiller(cfg, self.parts, self.entry.expert)
        self.weights = RolloutWeights(self.parts, cfg)
        # On Ray, the actors' replicas sample the rollouts; the policy still validates. Over
        # several processes only the main one rolls out, so only it starts the actors.
        main = self.parts.accelerator.is_main_process
        self.remote = ray_runner(cfg.ray, persistent=True) if cfg.ray and main else None
        if self.self_play is not None:
            self.self_play.remote = self.remote
        self.runner = choose_runner(
            cfg,
            self.weights.policy,
            precision=self.weights.precision,
            remote=self.remote,
            self_play=self.self_play,
            agent_runner=agent_runner,
        )
        keep = self.validation_tasks and cfg.validation.keep_best
        self.best = BestWeights(self.parts.unwrapped_model()) if keep else None

    def total_steps(self) -> int:
        return self.rl_cfg.steps

    def schedule_steps(self) -> int:
        return self.rl_cfg.steps * self.rl_cfg.epochs_per_step

    def plan(self) -> str:
        cfg = self.rl_cfg
        return (
            f"{len(self.tasks)} {cfg.env} tasks loaded, {cfg.groups_per_step} x "
            f"{cfg.samples_per_group} episodes per step: {cfg.steps} steps"
        )

    def precision_text(self) -> str:
        return f"{super().precision_text()}, rollouts sampled in {precision_of(self.weights.dtype)}"

    def cursor(self) -> dict[str, Any]:
        return {
            "task_cursor": self.task_cursor,
            "replay": [t.model_dump(mode="json") for t in self.replay.items],
            "revisit": self.revisits.state(),
            "difficulty": self.difficulty.state(),
            "validation": [p.as_dict() for p in self.validated],
            "self_play": self.self_play.state() if self.self_play is not None else {},
        }

    def set_cursor(self, cursor: dict[str, Any]) -> None:
        self.task_cursor = int(cursor["task_cursor"])
        self.replay.items = [Trajectory.model_validate(t) for t in cursor.get("replay", [])]
        self.revisits.load_state(cursor.get("revisit", []))
        self.difficulty.load_state(cursor.get("difficulty", []))
        self.validated = [ValidationPoint(**p) for p in cursor.get("validation", [])]
        if self.self_play is not None:
            self.self_play.load_state(cursor.get("self_play", {}))

    def train(self, *, resume: bool = False, overwrite: bool = False) -> TrainResult:
        try:
            result = super().train(resume=resume, overwrite=overwrite)
        finally:
            if self.remote is not None:
                self.remote.shutdown()
            if self.weights.policy is not None:
                # Its worker thread keeps the policy, the rollout weights and the caches alive
                # for as long as it runs: a pipeline's later stages need that memory.
                asyncio.run(self.weights.policy.close())
        result.validation = [p.as_dict() for p in self.validated]
        if self.best is not None and self.best.best is not None:
            result.kept_step = self.best.best.step
        summary = self.idle.summary(result.steps - result.resumed_from)
        if summary:
            self.say(summary)
        return result

    def before_steps(self, start: int) -> None:
        self.weights.publish(self.remote, start)
        if not self.validation_tasks:
            return
        if self.validated and self.validated[-1].step == start:
            # Resumed from a checkpoint whose weights were validated before the interruption.
            if self.best is not None:
                self.best.offer(self.validated[-1])
            return
        self._validate(start)

    def after_steps(self) -> None:
        while self.ahead:  # only left after a stop before the last step
            self.ahead.popleft().result()
        if self.best is not None and self.best.best is not self.validated[-1]:
            self.best.restore()

    def run_step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        cfg = self.rl_cfg
        # The step's episodes, played and scored on the main process, sent to the others.
        trajs, revisited, rollout_s, failed_scores, filtered = from_main(lambda: self._scored(step))
        _refuse_all_failed(step, trajs)
        rewards = [episode_reward(t) for t in trajs]
        outcomes: dict[int, list[float]] = {}
        for t, r in zip(trajs, rewards, strict=True):
            outcomes.setdefault(self.task_index[t.task.id], []).append(r)
        self.revisits.update(outcomes)
        self.difficulty.update(trajs)
        metrics = _episode_metrics(trajs, rewards)
        metrics["rollout_time_s"] = rollout_s
        metrics["failed_scores"] = float(failed_scores)
        metrics.update(filtered.metrics)
        metrics.update(self.difficulty.metrics())
        if filtered.dropped:  # groups that scored alike train nothing: left out from here on
            kept = [i for i, t in enumerate(trajs) if group_key(t) not in filtered.dropped]
            trajs, rewards = [trajs[i] for i in kept], [rewards[i] for i in kept]
        versions = [t.metadata[POLICY_VERSION] for t in trajs if POLICY_VERSION in t.metadata]
        if versions:  # updates the oldest weights lagged behind the ones trained now
            metrics["policy_staleness_max"] = float(step - 1 - min(versions))
        replayed = self.replay.fill(trajs, rewards, cfg.replay) if cfg.replay.enabled else 0
        metrics["replayed"] = float(replayed)
        if self.parts.accelerator.is_main_process:
            # The main process chooses the tasks, so its pool is the one that counts visits.
            metrics.update(self.revisits.metrics(revisited))

        # What trains: tokenized episodes with turns, less those lost to the infrastructure.
        trainable = [i for i, t in enumerate(trajs) if t.is_tokenized and t.num_turns > 0]
        trainable = self._without_infra_failures(trajs, trainable, metrics)
        batch = [trajs[i] for i in trainable]
        batch += from_main(lambda: self.segments.take(trajs, batch))  # their earlier segments
        rae = cfg.self_play is not None and cfg.self_play.advantage is RoleAdvantage.RAE
        role_advantages = self.self_play.advantages if self.self_play and rae else None
        if self.distiller is not None:  # the teacher's per-token advantages (self-play refused)
            role_advantages = self.distiller.advantages
        if batch:
            metrics.update(
                rl_update.update(
                    self, cfg, batch, reference=self.reference, role_advantages=role_advantages
                )
            )
        idle = self.idle.check(step, batch, metrics)
        if idle:  # said at once: a run of such steps looks busy and learns nothing
            self.say(idle)

        # The rollout weights follow; on Ray, the pool's snapshot is the weights just published.
        self.weights.refresh()
        self.weights.publish(self.remote, step)
        if self.self_play is not None and self.weights.policy is not None:
            self.self_play.after_update(step, self.weights.policy)
        metrics["step_time_s"] = time.perf_counter() - t0
        if self._validation_due(step):
            point = self._validate(step)
            metrics["val_reward"] = point.reward_mean
            metrics["val_success"] = point.success
        return metrics

    def _scored(self, step: int) -> tuple[list[Trajectory], int, float, int, Filtered]:
        """This step's rollouts, how many of its tasks were revisits, the rollout seconds, how
        many scores failed, and what dynamic sampling dropped and rolled out besides (with the
        curriculum's choice of tasks in its metrics)."""
        t0 = time.perf_counter()
        trajs, revisited = self._step_rollouts(step)
        grown: dict[str, float] = {}
        if self.tree is not None and self.weights.policy is not None:
            spec = self._spec(self.tasks, 1, self.rl_cfg.temperature, step, f"step{step}")
            branches, grown = self.tree.grow(trajs, spec, self.weights.policy, step)
            trajs = trajs + branches
        spent = [time.perf_counter() - t0, 0.0]  # rollout seconds, failed scores
        spent[1] = asyncio.run(self._score(trajs))

        def more(round_: int, groups: int) -> list[Trajectory]:
            t1 = time.perf_counter()
            chosen = {self.task_index[t.task.id] for t in trajs}
            indices, self.task_cursor = self.difficulty.take(
                self.tasks, self.task_cursor, groups, chosen
            )
            new = self._rollout(step, [self.tasks[i] for i in indices], refill=round_)
            spent[0] += time.perf_counter() - t1
            spent[1] += asyncio.run(self._score(new))
            return new

        filtered = self.difficulty.refill(trajs, self.rl_cfg.groups_per_step, more)
        filtered.metrics.update(self.difficulty.picked_metrics())
        filtered.metrics.update(grown)
        return trajs, revisited, spent[0], int(spent[1]), filtered

    def _step_rollouts(self, step: int) -> tuple[list[Trajectory], int]:
        """This step's rollouts and how many of its tasks were revisits: sampled now, or, in
        the asynchronous mode, those sampled while earlier steps trained; then the next
        ``async_staleness`` steps' are under way before this one trains (sampled from weights
        at most that many updates old)."""
        if self.ahead:
            trajs, revisited = self.ahead.popleft().result()
        else:
            tasks, revisited = self._next_tasks()
            trajs = self._rollout(step, tasks)
        last = step + len(self.ahead)
        while len(self.ahead) < self.rl_cfg.async_staleness and last < self.total_steps():
            last += 1
            self.ahead.append(Ahead(self._rollout, last, *self._next_tasks()))
        return trajs, revisited

    def _rollout(self, step: int, tasks: list[Task], refill: int = 0) -> list[Trajectory]:
        """The step's groups on ``tasks``; ``refill``: the round of dynamic sampling they refill
        (a run and sampling seeds of its own)."""
        assert self.runner is not None  # the main process rolls out
        cfg = self.rl_cfg
        name = f"step{step}-refill{refill}" if refill else f"step{step}"
        spec = self._spec(tasks, cfg.samples_per_group, cfg.temperature, step, name, refill)
        return self.segments.keep(self.runner.rollout(spec, step))

    def _next_tasks(self) -> tuple[list[Task], int]:
        """This step's tasks: revisits first, then fresh ones from the cursor (a task already
        revisited this step is skipped; under ``difficulty.band``, those in the band preferred).
        Returns them and the number of revisits."""
        n = self.rl_cfg.groups_per_step
        picked = self.revisits.pick(n)
        fresh, self.task_cursor = self.difficulty.take(
            self.tasks, self.task_cursor, n - len(picked), set(picked)
        )
        return [self.tasks[i] for i in picked + fresh], len(picked)

    def _spec(
        self, tasks: list[Task], n: int, temperature: float, step: int, name: str, refill: int = 0
    ) -> RolloutSpec:
        cfg = self.rl_cfg
        prefix = self.run_prefix
        run_id = f"{prefix}.{name}" if prefix else f"rl-{cfg.output_dir.name}-{name}"
        spec = RolloutSpec(
            env=cfg.env,
            tasks=tasks,
            n=n,
            limits=Limits(
                max_turns=cfg.max_turns,
                max_new_tokens=cfg.max_new_tokens,
                max_context_tokens=cfg.max_seq_len,
            ),
            context=cfg.context,
            sampling=Sampling(
                temperature=temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens
            ),
            seed=cfg.seed * 1_000_003 + step + _REFILL_SEED_STRIDE * refill,
            run_id=run_id,
            store=cfg.store,
        )
        if spec.store is not None:
            with TrajectoryStore(spec.store) as store:
                if store.get_run(run_id) is None:  # a resumed step keeps what it had
                    store.set_run(run_id, self._run_metadata(spec))
        return spec

    def _run_metadata(self, spec: RolloutSpec) -> dict[str, Any]:
        """What the runs table shows of a rollout run: an ``rl`` run (its stage's, in an
        experiment) sampling from the weights being trained, which started as ``model``."""
        meta: dict[str, Any] = {
            "kind": RL_RUN_KIND,
            "model": self.rl_cfg.model.spec,
            "spec": spec.model_dump(mode="json"),
        }
        if self.stage is not None:
            meta["stage"] = self.stage
        return meta

    async def _score(self, trajs: Sequence[Trajectory]) -> int:
        """Score each trajectory by the rubric: its scorers' scores and their total (the score
        ``episode_reward`` reads) appended to it. Returns how many scores failed (a failed
        score counts 0: a scorer that always fails leaves no signal)."""
        failed = 0
        for t in trajs:
            total, scores = await self.rubric.evaluate(t)
            t.scores.extend([*scores, reward_score(total)])
            failed += sum(s.value is None for s in scores)
        return failed

    def _without_infra_failures(
        self, trajs: Sequence[Trajectory], rows: list[int], metrics: dict[str, float]
    ) -> list[int]:
        """``rows`` less the episodes lost to the infrastructure and the groups they leave with
        fewer than two (``infra_failures: drop``); counts both in ``metrics``."""
        lost = torch.tensor([is_infra_failure(t) for t in trajs], dtype=torch.bool)
        metrics["infra_failures"] = float(lost.sum())
        if self.rl_cfg.infra_failures is InfraFailures.ZERO:
            return rows
        keep, skipped = drop_from_groups([group_key(t) for t in trajs], lost)
        metrics["infra_skipped_groups"] = float(skipped)
        return [i for i in rows if keep[i]]

    def _validate(self, step: int) -> ValidationPoint:
        """Greedy episodes on the validation tasks with the current weights; the best kept."""

        def episodes() -> Evaluation:
            policy = self.weights.policy
            assert policy is not None  # the main process has the rollout policy
            spec = self._spec(self.validation_tasks, 1, 0.0, step, f"val-step{step}")
            trajs = run_rollout(spec, policy=policy)
            return asyncio.run(evaluate(trajs, self.rubric, close=False))

        point = validation_point(step, from_main(episodes))
        self.validated.append(point)
        if self.best is not None:
            self.best.offer(point)
        return point

    def _validation_due(self, step: int) -> bool:
        every = self.rl_cfg.validation.every
        last = step == self.rl_cfg.steps
        return bool(self.validation_tasks) and (last or (every > 0 and step % every == 0))


def _episode_metrics(trajs: Sequence[Trajectory], rewards: Sequence[float]) -> dict[str, float]:
    """The step's reward, success, error and turn figures over every episode it played."""
    reward_t = torch.tensor(rewards, dtype=torch.float32)
    n = len(trajs)
    return {
        "reward_mean": float(reward_t.mean()),
        "reward_std": float(reward_t.std()) if len(rewards) > 1 else 0.0,
        "success_rate": sum(
            is_success(t.outcome.status, r) for t, r in zip(trajs, rewards, strict=True)
        )
        / n,
        "error_rate": sum(t.outcome.status is OutcomeStatus.ERROR for t in trajs) / n,
        "turns_mean": sum(t.num_turns for t in trajs) / n,
    }


def _refuse_all_failed(step: int, trajs: Sequence[Trajectory]) -> None:
    """Stop when no episode of a step ran (an agent program that cannot start, a dead env):
    training on nothing but errors would only look like a run."""
    if trajs and all(t.outcome.status is OutcomeStatus.ERROR for t in trajs):
        error = (trajs[0].outcome.error or "no error text").strip().splitlines()
        raise EpisodeError(
            f"RL step {step}: all {len(trajs)} episodes failed; the first: {error[-1]}"
        )
