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
when the trainer starts (``runners.py``), sampled on a watched thread (``pipeline.py``), and
the update is ``update.update``. Every sampled turn records the weights version that sampled
it; tokens older than ``max_staleness`` leave the loss and a step's stale samples are dropped or
rolled out again (``staleness.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trajforge.curate import group_key
from trajforge.distributed import ray_runner
from trajforge.envs import get_env
from trajforge.errors import ConfigError
from trajforge.judge import Evaluation, Rubric, evaluate
from trajforge.precision import precision_of
from trajforge.rollout import RolloutHook, RolloutSpec, run_rollout
from trajforge.schema import Task, Trajectory
from trajforge.train.base import StepCallback, Trainer, TrainResult
from trajforge.train.config import InfraFailures, RLConfig, RoleAdvantage
from trajforge.train.distributed import from_main
from trajforge.train.model import TrainParts
from trajforge.train.rl import extras
from trajforge.train.rl import update as rl_update
from trajforge.train.rl.advantages import REWARD, episode_reward
from trajforge.train.rl.difficulty import Difficulty, Filtered
from trajforge.train.rl.idle import IdleSteps
from trajforge.train.rl.pipeline import StepRollouts
from trajforge.train.rl.replay import ReplayBuffer
from trajforge.train.rl.runners import AgentRunners, choose_runner
from trajforge.train.rl.segments import SegmentStash
from trajforge.train.rl.selection import (
    episode_metrics,
    infra_failures,
    refuse_all_failed,
    score,
    without,
)
from trajforge.train.rl.server_weights import rollout_weights
from trajforge.train.rl.settings import StaleSamples
from trajforge.train.rl.specs import RESAMPLE_ROUND, round_run_name, step_spec
from trajforge.train.rl.staleness import is_stale, resample_stale, staleness_metrics
from trajforge.train.rl.task_revisit import TaskRevisits
from trajforge.train.rl.validating import RunValidation
from trajforge.train.validation import ValidationPoint

if TYPE_CHECKING:
    from trajforge.train.rl.self_play import SelfPlay


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
        if cfg.plays_program != (agent_runner is not None):
            raise ConfigError(
                "agent: an agent program's rollouts run through the gateway: start the run "
                "with trajforge train rl or an experiment (agent_runner and agent go together)"
            )
        self.rl_cfg = cfg
        self.run_prefix, self.stage = run_prefix, stage
        self.program = {} if agent_runner is None else agent_runner.metadata
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
        self.validation = RunValidation(cfg, self.entry, avoid=self.tasks)
        # The reward: ``rubric`` when given (tests, code), else the config's weighted scorers.
        self.rubric = rubric if rubric is not None else Rubric.from_refs(cfg.scorers, name=REWARD)
        self.replay = ReplayBuffer(cfg.replay.max_size)
        self.rollouts = StepRollouts(
            lambda *args: self._episodes(*args),
            ahead_steps=cfg.async_staleness,
            total_steps=cfg.steps,
            stall_s=cfg.rollout_stall_s,
        )
        self.segments = SegmentStash()
        self.idle = IdleSteps()
        super().__init__(cfg, parts=parts, callbacks=callbacks)
        self.reference = extras.reference_model(cfg, self.parts)
        self.tree = extras.tree_rollouts(cfg)
        self.distiller = extras.distiller(cfg, self.parts, self.entry.expert)
        self.weights = rollout_weights(self.parts, cfg)
        self.roles = extras.role_adapters(
            self.self_play, self.parts, self.weights.dtype, cfg.max_batch_size
        )
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
        self.validation.keep_best(self.parts.unwrapped_model())

    def total_steps(self) -> int:
        return self.rl_cfg.steps

    def schedule_steps(self) -> int:
        # Per-role adapters: each role's update is optimizer steps of its own.
        adapters = self.self_play.seat_adapters if self.self_play is not None else None
        roles = len(set(adapters.values())) if adapters else 1
        return self.rl_cfg.steps * self.rl_cfg.epochs_per_step * roles

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
            "validation": self.validation.state(),
            "self_play": self.self_play.state() if self.self_play is not None else {},
        }

    def set_cursor(self, cursor: dict[str, Any]) -> None:
        self.task_cursor = int(cursor["task_cursor"])
        self.replay.items = [Trajectory.model_validate(t) for t in cursor.get("replay", [])]
        self.revisits.load_state(cursor.get("revisit", []))
        self.difficulty.load_state(cursor.get("difficulty", []))
        self.validation.load_state(cursor.get("validation", []))
        if self.self_play is not None:
            self.self_play.load_state(cursor.get("self_play", {}))

    def train(self, *, resume: bool = False, overwrite: bool = False) -> TrainResult:
        try:
            result = super().train(resume=resume, overwrite=overwrite)
        finally:
            # Whatever ended the run, the rollouts under way are cancelled before the policy
            # and the actors they sample with go.
            self._cancel_rollouts()
            if self.remote is not None:
                self.remote.shutdown()
            if self.roles is not None:
                self.roles.close()
            # Its worker thread keeps the policy, the rollout weights and the caches alive for
            # as long as it runs (a pipeline's later stages need that memory); a server goes.
            self.weights.close()
        result.validation = self.validation.state()
        result.kept_step = self.validation.kept_step()
        summary = self.idle.summary(result.steps - result.resumed_from)
        if summary:
            self.say(summary)
        return result

    def before_steps(self, start: int) -> None:
        self.weights.mark(start)
        self.weights.publish(self.remote, start)
        if self.roles is not None:  # a resumed run's adapters, from its checkpoint
            self.roles.publish(start)
        if self.validation.tasks and not self.validation.resumed_at(start):
            self._validate(start)

    def after_steps(self) -> None:
        self._cancel_rollouts()  # only left after a stop before the last step
        self.validation.restore_best()

    def run_step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        cfg = self.rl_cfg
        # The step's episodes, played and scored on the main process, sent to the others.
        trajs, revisited, rollout_s, failed_scores, filtered = from_main(lambda: self._scored(step))
        refuse_all_failed(step, trajs)
        rewards = [episode_reward(t) for t in trajs]
        outcomes: dict[int, list[float]] = {}
        for t, r in zip(trajs, rewards, strict=True):
            outcomes.setdefault(self.task_index[t.task.id], []).append(r)
        self.revisits.update(outcomes)
        self.difficulty.update(trajs)
        metrics = episode_metrics(trajs, rewards)
        metrics["rollout_time_s"] = rollout_s
        metrics["failed_scores"] = float(failed_scores)
        metrics.update(filtered.metrics)
        metrics.update(self.difficulty.metrics())
        if filtered.dropped:  # groups that scored alike train nothing: left out from here on
            kept = [i for i, t in enumerate(trajs) if group_key(t) not in filtered.dropped]
            trajs, rewards = [trajs[i] for i in kept], [rewards[i] for i in kept]
        # How many updates the weights that sampled the step lag behind the trained ones;
        # replayed past successes are off-policy by design and never stale.
        metrics.update(staleness_metrics(trajs, step - 1))
        stale = [is_stale(t, step - 1, cfg.staleness_bound) for t in trajs]
        replayed = self.replay.fill(trajs, rewards, cfg.replay) if cfg.replay.enabled else 0
        metrics["replayed"] = float(replayed)
        replays = {t.id for t in trajs[len(stale) :]}
        stale += [False] * replayed
        if self.parts.accelerator.is_main_process:
            # The main process chooses the tasks, so its pool is the one that counts visits.
            metrics.update(self.revisits.metrics(revisited))

        # What trains: tokenized episodes with turns, less those lost to the infrastructure
        # (unless trained as failures) and the stale samples.
        trainable = [i for i, t in enumerate(trajs) if t.is_tokenized and t.num_turns > 0]
        lost = infra_failures(trajs)
        metrics["infra_failures"] = float(sum(lost))
        if cfg.infra_failures is InfraFailures.DROP:
            trainable, dropped = without(trajs, trainable, lost, "infra_failures")
            metrics["infra_skipped_groups"] = dropped["infra_failures_skipped_groups"]
        trainable, dropped = without(trajs, trainable, stale, "stale_samples")
        metrics.update(dropped)
        batch = [trajs[i] for i in trainable]
        batch += from_main(lambda: self.segments.take(trajs, batch))  # their earlier segments
        rae = cfg.self_play is not None and cfg.self_play.advantage is RoleAdvantage.RAE
        role_advantages = self.self_play.advantages if self.self_play and rae else None
        if self.distiller is not None:  # the teacher's per-token advantages (self-play refused)
            role_advantages = self.distiller.advantages
        if batch:

            def train(part: list[Trajectory]) -> dict[str, float]:
                return rl_update.update(
                    self,
                    cfg,
                    part,
                    reference=self.reference,
                    role_advantages=role_advantages,
                    trained_version=step - 1,
                    replays=replays,
                )

            metrics.update(self.roles.update(batch, train) if self.roles else train(batch))
        idle = self.idle.check(step, batch, metrics)
        if idle:  # said at once: a run of such steps looks busy and learns nothing
            self.say(idle)

        # The rollout weights follow; on Ray, the pool's snapshot is the weights just published.
        self.weights.refresh(step)
        self.weights.publish(self.remote, step)
        if self.roles is not None:
            self.roles.publish(step)
        if self.self_play is not None and self.weights.local is not None:
            self.self_play.after_update(step, self.weights.local)
        metrics["step_time_s"] = time.perf_counter() - t0
        if self.validation.due(step):
            point = self._validate(step)
            metrics["val_reward"] = point.reward_mean
            metrics["val_success"] = point.success
        return metrics

    def _scored(self, step: int) -> tuple[list[Trajectory], int, float, int, Filtered]:
        """This step's rollouts, how many of its tasks were revisits, the rollout seconds, how
        many scores failed, and what dynamic sampling dropped and rolled out besides (with the
        curriculum's choice of tasks in its metrics)."""
        t0 = time.perf_counter()
        trajs, revisited = self.rollouts.take(step, self._next_tasks)
        resample = self.rl_cfg.stale_samples is StaleSamples.RESAMPLE
        if resample:  # rolled out from the weights just trained: never stale twice

            def again(tasks: list[Task]) -> list[Trajectory]:
                return self.rollouts.rollout(step, tasks, RESAMPLE_ROUND)

            resampled = resample_stale(trajs, step - 1, self.rl_cfg.staleness_bound, again)
        grown: dict[str, float] = {}
        if self.tree is not None and self.weights.policy is not None:
            spec = self._spec(self.tasks, 1, self.rl_cfg.temperature, step, f"step{step}")
            branches, grown = self.tree.grow(trajs, spec, self.weights.policy, step)
            trajs = trajs + branches
        spent = [time.perf_counter() - t0, 0.0]  # rollout seconds, failed scores
        spent[1] = asyncio.run(score(self.rubric, trajs))

        def more(round_: int, groups: int) -> list[Trajectory]:
            t1 = time.perf_counter()
            chosen = {self.task_index[t.task.id] for t in trajs}
            indices, self.task_cursor = self.difficulty.take(
                self.tasks, self.task_cursor, groups, chosen
            )
            new = self.rollouts.rollout(step, [self.tasks[i] for i in indices], round_)
            spent[0] += time.perf_counter() - t1
            spent[1] += asyncio.run(score(self.rubric, new))
            return new

        filtered = self.difficulty.refill(trajs, self.rl_cfg.groups_per_step, more)
        filtered.metrics.update(self.difficulty.picked_metrics())
        filtered.metrics.update(grown)
        if resample:
            filtered.metrics["stale_resampled_groups"] = float(resampled)
        return trajs, revisited, spent[0], int(spent[1]), filtered

    async def _episodes(
        self, step: int, tasks: list[Task], round_: int, hooks: Sequence[RolloutHook]
    ) -> list[Trajectory]:
        """The step's groups on ``tasks`` as the runner plays them (a run and sampling seeds
        of their own per refill round)."""
        assert self.runner is not None  # the main process rolls out
        cfg = self.rl_cfg
        name = round_run_name(step, round_)
        spec = self._spec(tasks, cfg.samples_per_group, cfg.temperature, step, name, round_)
        return self.segments.keep(await self.runner.rollout(spec, step, hooks))

    def _cancel_rollouts(self) -> None:
        stuck = self.rollouts.cancel()
        if stuck:
            self.say(f"rl: the rollouts of steps {stuck} did not end when cancelled")

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
        self, tasks: list[Task], n: int, temperature: float, step: int, name: str, round_: int = 0
    ) -> RolloutSpec:
        return step_spec(
            self.rl_cfg,
            tasks,
            n=n,
            temperature=temperature,
            step=step,
            name=name,
            round_=round_,
            run_prefix=self.run_prefix,
            stage=self.stage,
            program=self.program,
        )

    def _validate(self, step: int) -> ValidationPoint:
        """Greedy episodes on the validation tasks with the current weights; the best kept."""

        def episodes() -> Evaluation:
            policy = self.roles.task_seat_policy() if self.roles else self.weights.policy
            assert policy is not None  # the main process has the rollout policy
            spec = self._spec(self.validation.tasks, 1, 0.0, step, f"val-step{step}")
            trajs = run_rollout(spec, policy=policy)
            return asyncio.run(evaluate(trajs, self.rubric, close=False))

        return self.validation.run(step, lambda: from_main(episodes))
