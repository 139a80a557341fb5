"""On-policy multi-turn RL: roll out groups with the current weights, score, compute advantages,
update for K epochs with the chosen policy loss, refresh the rollout policy, repeat.

Estimators and losses come from ``trajforge.algos`` by name (``estimator: grpo``, ``loss:
ppo_clip``); the reward is the ``Rubric`` of weighted ``scorers`` (default: the env's verdict).
The rollout policy is an ``HFPolicy`` over the very model being trained, so the next rollout
always samples from the updated weights. With ``rollout_precision: bf16`` (or
``auto`` while training in bf16) it samples from a bf16 copy instead, re-synced after every
update (under LoRA, a copy with the adapter merged in): decoding is then about twice as fast on
hardware with native bf16; the trainer's own logprobs keep the PPO ratios exact to the trained
weights, and truncated importance weights (``rollout_is_cap``) make the bf16 copy's tokens an
estimate of the trained policy's gradient (docs/metrics.md, ``rollout_logprob_gap``).

Over several processes the main process rolls out and scores every episode of a step and sends
them to the others (rollouts on rank 0, then scattered as a share of the batch: an agent program
or a judge runs once, and only the main process writes the store); every process computes the
same advantages over the whole step and trains on its share (``trajforge.train.distributed``).
Under FSDP the main process samples from a plain copy of the gathered weights.

Here is the step loop (scoring, replay, validation, the step's metrics); where a step's rollouts
come from is ``rl_rollout.py``, and the update they feed is ``rl_update.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import torch

from trajforge.algos import drop_from_groups
from trajforge.curate import group_key
from trajforge.distributed import POLICY_VERSION, ray_runner
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError, EpisodeError
from trajforge.judge.scorer import Rubric
from trajforge.precision import precision_of
from trajforge.rollout import run_rollout
from trajforge.schema import OutcomeStatus, Trajectory, is_infra_failure, is_success
from trajforge.train.base import StepCallback, TrainResult
from trajforge.train.config import InfraFailures, RLConfig
from trajforge.train.distributed import from_main
from trajforge.train.model import TrainParts
from trajforge.train.reference import ReferenceModel
from trajforge.train.replay import ReplayBuffer
from trajforge.train.rl_rollout import AgentRunners, RLRollouts
from trajforge.train.rl_update import RLUpdate, advantage_input
from trajforge.train.self_play import SelfPlay
from trajforge.train.task_revisit import TaskRevisits
from trajforge.train.validation import (
    BestWeights,
    ValidationPoint,
    validation_point,
    validation_tasks,
)

# ``advantage_input`` is imported from here by code that predates the split.
__all__ = ["RLTrainer", "advantage_input"]


class RLTrainer(RLRollouts, RLUpdate):
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
    ) -> None:
        if (cfg.agent is None) != (agent_runner is None):
            raise ConfigError(
                "agent: an agent program's rollouts run through the gateway: start the run "
                "with trajforge train rl or an experiment (agent_runner and agent go together)"
            )
        self.agent_runner = agent_runner
        self.rl_cfg = cfg
        self.entry = get_env(cfg.env)
        self.tasks = self.entry.tasks(cfg.num_tasks, seed=cfg.seed, split=cfg.task_split)
        self.self_play = (
            SelfPlay(cfg.self_play, self.entry, cfg.seed) if cfg.self_play is not None else None
        )
        self.task_cursor = 0
        self.task_index = {task.id: i for i, task in enumerate(self.tasks)}
        self.revisits = TaskRevisits(cfg.revisit)
        self.validation_tasks = (
            validation_tasks(self.entry, cfg.validation, split=cfg.task_split, avoid=self.tasks)
            if cfg.validation.tasks
            else []
        )
        self.validated: list[ValidationPoint] = []
        # The reward: ``rubric`` when given (tests, code), else the config's weighted scorers.
        self.rubric = rubric if rubric is not None else Rubric.from_refs(cfg.scorers, name="reward")
        self.replay = ReplayBuffer(cfg.replay.max_size)
        self.ahead = deque()
        super().__init__(cfg, parts=parts, callbacks=callbacks)
        self.reference = ReferenceModel(self.parts) if cfg.kl_coef > 0 else None
        self.policy = self._make_policy()
        # On Ray, the actors' replicas sample the rollouts; ``policy`` still validates. Over
        # several processes only the main one rolls out, so only it starts the actors.
        main = self.parts.accelerator.is_main_process
        self.remote = ray_runner(cfg.ray, persistent=True) if cfg.ray and main else None
        if self.self_play is not None:
            self.self_play.remote = self.remote
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
        return f"{super().precision_text()}, rollouts sampled in {precision_of(self.rollout_dtype)}"

    def cursor(self) -> dict[str, Any]:
        return {
            "task_cursor": self.task_cursor,
            "replay": [t.model_dump(mode="json") for t in self.replay.items],
            "revisit": self.revisits.state(),
            "validation": [p.as_dict() for p in self.validated],
            "self_play": self.self_play.state() if self.self_play is not None else {},
        }

    def set_cursor(self, cursor: dict[str, Any]) -> None:
        self.task_cursor = int(cursor["task_cursor"])
        self.replay.items = [Trajectory.model_validate(t) for t in cursor.get("replay", [])]
        self.revisits.load_state(cursor.get("revisit", []))
        self.validated = [ValidationPoint(**p) for p in cursor.get("validation", [])]
        if self.self_play is not None:
            self.self_play.load_state(cursor.get("self_play", {}))

    def train(self, *, resume: bool = False, overwrite: bool = False) -> TrainResult:
        try:
            result = super().train(resume=resume, overwrite=overwrite)
        finally:
            if self.remote is not None:
                self.remote.shutdown()
            if self.policy is not None:
                # Its worker thread keeps the policy, the rollout weights and the caches alive
                # for as long as it runs: a pipeline's later stages need that memory.
                asyncio.run(self.policy.close())
        result.validation = [p.as_dict() for p in self.validated]
        if self.best is not None and self.best.best is not None:
            result.kept_step = self.best.best.step
        return result

    def before_steps(self, start: int) -> None:
        self._publish(start)
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

    def _validate(self, step: int) -> ValidationPoint:
        """Greedy episodes on the validation tasks with the current weights; the best kept."""

        def episodes() -> tuple[list[Trajectory], list[float]]:
            assert self.policy is not None  # the main process has the rollout policy
            spec = self._spec(self.validation_tasks, 1, 0.0, step, f"val-step{step}")
            trajs = run_rollout(spec, policy=self.policy)
            return trajs, asyncio.run(self._rewards(trajs))[0]

        trajs, rewards = from_main(episodes)
        point = validation_point(step, trajs, rewards)
        self.validated.append(point)
        if self.best is not None:
            self.best.offer(point)
        return point

    def _validation_due(self, step: int) -> bool:
        every = self.rl_cfg.validation.every
        last = step == self.rl_cfg.steps
        return bool(self.validation_tasks) and (last or (every > 0 and step % every == 0))

    async def _rewards(self, trajs: Sequence[Trajectory]) -> tuple[list[float], int]:
        """Each trajectory's rubric total (its scores appended to it), and how many scores
        failed (a failed score counts 0: a scorer that always fails leaves no signal)."""
        rewards = []
        failed = 0
        for t in trajs:
            total, scores = await self.rubric.evaluate(t)
            t.scores.extend(scores)
            failed += sum(s.value is None for s in scores)
            rewards.append(total)
        return rewards, failed

    def _with_replay(self, trajs: list[Trajectory], rewards: list[float]) -> int:
        """Add a past success to each group where every sample failed; return how many."""
        rcfg = self.rl_cfg.replay
        if not rcfg.enabled:
            return 0
        solved = [
            is_success(t.outcome.status, r, rcfg.min_reward)
            for t, r in zip(trajs, rewards, strict=True)
        ]
        successes = [t for t, ok in zip(trajs, solved, strict=True) if ok]
        added = 0
        groups: dict[str, list[int]] = {}
        for i, t in enumerate(trajs):
            groups.setdefault(group_key(t), []).append(i)
        for idx in groups.values():
            if added >= rcfg.per_step or any(solved[i] for i in idx):
                continue
            past = self.replay.for_task(trajs[idx[0]].task.id)
            if past is not None:
                trajs.append(past.model_copy(update={"group_id": trajs[idx[0]].group_id}))
                rewards.append(float(past.outcome.reward or 0.0))
                added += 1
        self.replay.add(successes)
        return added

    def _scored_rollouts(self, step: int) -> tuple[list[Trajectory], int, float, list[float], int]:
        """This step's rollouts, revisits, rollout seconds, rewards and failed scores."""
        t0 = time.perf_counter()
        trajs, revisited = self._step_rollouts(step)
        rollout_s = time.perf_counter() - t0
        rewards, failed_scores = asyncio.run(self._rewards(trajs))
        return trajs, revisited, rollout_s, rewards, failed_scores

    def run_step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        scored = from_main(lambda: self._scored_rollouts(step))
        trajs, revisited, rollout_s, rewards, failed_scores = scored
        _refuse_all_failed(step, trajs)
        versions = [t.metadata[POLICY_VERSION] for t in trajs if POLICY_VERSION in t.metadata]
        outcomes: dict[int, list[float]] = {}
        for t, r in zip(trajs, rewards, strict=True):
            outcomes.setdefault(self.task_index[t.task.id], []).append(r)
        self.revisits.update(outcomes)
        reward_t = torch.tensor(rewards, dtype=torch.float32)
        metrics: dict[str, float] = {
            "reward_mean": float(reward_t.mean()),
            "reward_std": float(reward_t.std()) if len(rewards) > 1 else 0.0,
            "success_rate": sum(
                is_success(t.outcome.status, r) for t, r in zip(trajs, rewards, strict=True)
            )
            / len(trajs),
            "error_rate": sum(t.outcome.status is OutcomeStatus.ERROR for t in trajs) / len(trajs),
            "turns_mean": sum(t.num_turns for t in trajs) / len(trajs),
            "rollout_time_s": rollout_s,
            "failed_scores": float(failed_scores),
        }
        if versions:  # updates the oldest weights lagged behind the ones trained now
            metrics["policy_staleness_max"] = float(step - 1 - min(versions))
        metrics["replayed"] = float(self._with_replay(trajs, rewards))
        if self.parts.accelerator.is_main_process:
            # The main process chooses the tasks, so its pool is the one that counts visits.
            metrics.update(self.revisits.metrics(revisited))
        trainable = [i for i, t in enumerate(trajs) if t.is_tokenized and t.num_turns > 0]
        trainable = self._without_infra_failures(trajs, trainable, metrics)
        trajs = [trajs[i] for i in trainable]
        reward_t = torch.tensor([rewards[i] for i in trainable], dtype=torch.float32)
        update = self._update(trajs, reward_t) if trajs else {}
        metrics.update(update)
        self._refresh_policy()
        # Published first: on Ray, the pool's snapshot is the weights just published.
        self._publish(step)
        if self.self_play is not None and self.policy is not None:
            self.self_play.after_update(step, self.policy)
        metrics["step_time_s"] = time.perf_counter() - t0
        if self._validation_due(step):
            point = self._validate(step)
            metrics["val_reward"] = point.reward_mean
            metrics["val_success"] = point.success
        return metrics

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


def _refuse_all_failed(step: int, trajs: Sequence[Trajectory]) -> None:
    """Stop when no episode of a step ran (an agent program that cannot start, a dead env):
    training on nothing but errors would only look like a run."""
    if trajs and all(t.outcome.status is OutcomeStatus.ERROR for t in trajs):
        error = (trajs[0].outcome.error or "no error text").strip().splitlines()
        raise EpisodeError(
            f"RL step {step}: all {len(trajs)} episodes failed; the first: {error[-1]}"
        )
