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
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import torch

from trajforge.algos import (
    AdvantageInput,
    compute_advantages,
    drop_from_groups,
    kl_estimate,
    policy_loss,
    truncated_is_weights,
)
from trajforge.algos.advantages import weight_by_sign
from trajforge.curate import group_key
from trajforge.distributed import POLICY_VERSION, ray_runner
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError
from trajforge.judge.scorer import Rubric
from trajforge.policy.hf import HFPolicy
from trajforge.policy.token_policy import TokenPolicy
from trajforge.precision import Precision, precision_of, resolve_precision, torch_dtype
from trajforge.rollout import (
    EpisodeRunner,
    Limits,
    PolicyRef,
    RolloutSpec,
    Sampling,
    run_rollout,
)
from trajforge.schema import OutcomeStatus, Role, Task, Trajectory, is_infra_failure, is_success
from trajforge.train.base import StepCallback, Trainer, TrainResult
from trajforge.train.batch import TokenBatch, TokenSequence, encode_trajectory
from trajforge.train.config import InfraFailures, RLConfig, RoleAdvantage
from trajforge.train.distributed import from_main
from trajforge.train.model import TrainParts
from trajforge.train.on_policy import check_sampled_temperature
from trajforge.train.reference import ReferenceModel
from trajforge.train.replay import ReplayBuffer
from trajforge.train.self_play import SelfPlay
from trajforge.train.task_revisit import TaskRevisits
from trajforge.train.validation import (
    BestWeights,
    ValidationPoint,
    validation_point,
    validation_tasks,
)

_COUNTED_BY_THE_STEP = frozenset(
    {"groups", "zero_adv_groups", "zero_adv_group_frac", "reward_mean", "reward_std"}
)
# The loss's per-micro-batch advantage moments and token count repeat the step's own.
_LOSS_REPEATS = frozenset({"adv_mean", "adv_std", "loss_tokens"})

AgentRunners = Callable[[TokenPolicy], EpisodeRunner]
"""``runner(policy)``: the ``EpisodeRunner`` that plays a step's episodes as runs of the config's
agent program, whose model calls ``policy`` answers; the layer above training provides it
(``trajforge.agent_programs.agent_runners``), since training sits below the gateway."""


class Ahead:
    """The next step's rollouts, sampled on a thread while this step trains."""

    def __init__(
        self,
        rollout: Callable[[int, list[Task]], list[Trajectory]],
        step: int,
        tasks: list[Task],
        revisited: int,
    ) -> None:
        self.revisited = revisited
        self._trajs: list[Trajectory] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run,
            args=(rollout, step, tasks),
            name="trajforge-rollout-ahead",
            daemon=True,
        )
        self._thread.start()

    def _run(
        self, rollout: Callable[[int, list[Task]], list[Trajectory]], step: int, tasks: list[Task]
    ) -> None:
        try:
            self._trajs = rollout(step, tasks)
        except BaseException as exc:  # re-raised in the training thread
            self._error = exc

    def result(self) -> tuple[list[Trajectory], int]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._trajs, self.revisited


def advantage_input(
    trajs: Sequence[Trajectory], batch: TokenBatch, rewards: torch.Tensor
) -> AdvantageInput:
    """The ``AdvantageInput`` of ``trajs`` (laid out like ``batch``, one row per trajectory)."""
    turns = [[m for m in t.messages if m.role is Role.ASSISTANT] for t in trajs]
    k = max(1, max(len(a) for a in turns))
    turn_rewards = torch.zeros((len(trajs), k))
    turn_mask = torch.zeros((len(trajs), k), dtype=torch.bool)
    for b, assistant in enumerate(turns):
        for j, m in enumerate(assistant):
            turn_mask[b, j] = True
            turn_rewards[b, j] = m.reward or 0.0
    return AdvantageInput(
        rewards=rewards,
        group_ids=[group_key(t) for t in trajs],
        turn_rewards=turn_rewards,
        turn_mask=turn_mask,
        state_keys=[[m.state_key for m in a] for a in turns],
        token_turn_index=batch.token_turn_index,
    )


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
        self.ahead: deque[Ahead] = deque()
        """The next steps' rollouts under way, oldest first (``async_staleness`` at most)."""
        super().__init__(cfg, parts=parts, callbacks=callbacks)
        self.reference = ReferenceModel(self.parts) if cfg.kl_coef > 0 else None
        self.policy: HFPolicy | None = self._make_policy()
        # On Ray, the actors' replicas sample the rollouts; ``policy`` still validates. Over
        # several processes only the main one rolls out, so only it starts the actors.
        main = self.parts.accelerator.is_main_process
        self.remote = ray_runner(cfg.ray, persistent=True) if cfg.ray and main else None
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

    def _make_policy(self) -> HFPolicy | None:
        self.rollout_dtype = self._rollout_dtype()
        model = self._rollout_source()
        if not self.parts.accelerator.is_main_process:
            return None  # rollouts run on the main process
        # Rollouts that overlap training need weights of their own.
        separate = self.rollout_dtype is torch.bfloat16 or self.rl_cfg.async_staleness > 0
        if separate and model is self.parts.unwrapped_model():
            model = copy.deepcopy(model)
        if self.rollout_dtype is torch.bfloat16:
            model = model.to(torch.bfloat16)
        return HFPolicy(model, self.parts.tokenizer, max_batch_size=self.rl_cfg.max_batch_size)

    def _rollout_dtype(self) -> torch.dtype:
        cfg = self.rl_cfg
        if cfg.rollout_precision is Precision.AUTO:
            resolved = resolve_precision(cfg.model.precision, "model.precision")
        else:
            resolved = resolve_precision(cfg.rollout_precision, "rollout_precision")
        return torch_dtype(resolved)

    def _rollout_source(self) -> Any:
        """The module the rollout weights come from: the trained one, or under LoRA with bf16
        or asynchronous rollouts a copy with the adapter merged in (a plain model the lean
        decoder runs, loaded into the rollout weights after each update). Under FSDP: a plain
        copy of the gathered weights (a collective), LoRA merged in, on the main process only."""
        if self.parts.sharded:
            gathered: Any = self.parts.gathered_model()
            return gathered.merge_and_unload() if gathered and self.parts.is_lora else gathered
        model: Any = self.parts.unwrapped_model()
        own_weights = self.rollout_dtype is torch.bfloat16 or self.rl_cfg.async_staleness > 0
        if self.parts.is_lora and own_weights:
            return copy.deepcopy(model).merge_and_unload()
        return model

    def _refresh_policy(self) -> None:
        # The policy samples from the trained module itself, or from a bf16 copy; set_weights
        # copies the new weights into the copy and is a no-op when the module is shared.
        source = self._rollout_source()
        if self.policy is not None:
            self.policy.set_weights(source)

    def _publish(self, version: int) -> None:
        """On Ray, the trained weights (LoRA merged in) to the actors as ``version`` (the
        updates made so far)."""
        if self.rl_cfg.ray is None:
            return
        # Under FSDP the weights are gathered first, by every process (a collective).
        model: Any = self._rollout_source() if self.parts.sharded else None
        if self.remote is None:
            return  # not the main process
        if model is None:
            model = self.parts.unwrapped_model()
            if self.parts.is_lora:
                model = copy.deepcopy(model).merge_and_unload()
        self.remote.publish({k: v.detach().cpu() for k, v in model.state_dict().items()}, version)

    def _next_tasks(self) -> tuple[list[Any], int]:
        """This step's tasks: revisits first, then fresh ones from the cursor (a task already
        revisited this step is skipped). Returns them and the number of revisits."""
        n = self.rl_cfg.groups_per_step
        picked = self.revisits.pick(n)
        chosen = set(picked)
        out = [self.tasks[i] for i in picked]
        while len(out) < n:
            index = self.task_cursor % len(self.tasks)
            self.task_cursor += 1
            if index not in chosen or len(chosen) >= len(self.tasks):
                chosen.add(index)
                out.append(self.tasks[index])
        return out, len(picked)

    def _spec(
        self, tasks: list[Task], n: int, temperature: float, step: int, name: str
    ) -> RolloutSpec:
        cfg = self.rl_cfg
        return RolloutSpec(
            env=cfg.env,
            tasks=tasks,
            n=n,
            limits=Limits(
                max_turns=cfg.max_turns,
                max_new_tokens=cfg.max_new_tokens,
                max_context_tokens=cfg.max_seq_len,
            ),
            sampling=Sampling(
                temperature=temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens
            ),
            seed=cfg.seed * 1_000_003 + step,
            run_id=f"rl-{cfg.output_dir.name}-{name}",
            store=cfg.store,
        )

    def _rollout(self, step: int, tasks: list[Task]) -> list[Trajectory]:
        cfg = self.rl_cfg
        assert self.policy is not None  # the main process has the rollout policy
        spec = self._spec(tasks, cfg.samples_per_group, cfg.temperature, step, f"step{step}")
        if self.agent_runner is not None:
            # The program makes its own calls; the config bounds each run's time and how many
            # run at once.
            limits = Limits(episode_timeout_s=cfg.agent_timeout_s)
            agent = spec.model_copy(update={"limits": limits, "concurrency": cfg.agent_concurrency})
            played = run_rollout(agent, runner=self.agent_runner(self.policy))
            check_sampled_temperature(played, cfg.temperature)
            return played
        if self.self_play is not None:
            return self.self_play.rollout(spec, self.policy, step)
        if self.remote is not None:
            # Each actor builds this policy, then loads the published weights.
            precision = Precision.BF16 if self.rollout_dtype is torch.bfloat16 else Precision.FP32
            actors = PolicyRef(
                name=cfg.model.spec, batch_size=cfg.max_batch_size, precision=precision
            )
            return run_rollout(spec.model_copy(update={"policy": actors}), runner=self.remote)
        # The policy is passed live: it samples from the very weights being trained.
        return run_rollout(spec, policy=self.policy)

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
        if self.self_play is not None and self.policy is not None:
            self.self_play.after_update(step, self.policy)
        self._publish(step)
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

    def _update(self, trajs: list[Trajectory], rewards: torch.Tensor) -> dict[str, float]:
        cfg = self.rl_cfg
        # A split or re-rendered episode's rendered prefix is context: its turns were not
        # sampled in it, so only the turns after it take the episode's advantage.
        seqs = [encode_trajectory(t, max_length=cfg.max_seq_len, mask_rendered=True) for t in trajs]
        full = TokenBatch.collate(seqs, pad_token_id=self.parts.pad_token_id)
        inp = advantage_input(trajs, full, rewards)
        if cfg.self_play is not None and cfg.self_play.advantage is RoleAdvantage.RAE:
            assert self.self_play is not None
            adv = self.self_play.advantages(trajs, inp)
        else:
            adv = compute_advantages(cfg.estimator, inp, **cfg.estimator_kwargs)
        token_adv = adv.token_advantages.float()
        token_adv = weight_by_sign(
            token_adv,
            positive=cfg.positive_advantage_weight,
            negative=cfg.negative_advantage_weight,
        )
        for row, s in enumerate(seqs):
            s.advantages = token_adv[row, : len(s)].tolist()
        # The step's rewards and zero-advantage groups are counted over every episode (above)
        # and after the sign weights (below): the estimator's own counts would repeat them.
        metrics = {k: float(v) for k, v in adv.metrics.items() if k not in _COUNTED_BY_THE_STEP}
        zero = self._zero_advantage_groups(trajs, token_adv, full.loss_mask)
        metrics["zero_adv_frac"] = zero[1]
        if cfg.filter_zero_advantage:
            seqs = [s for s, t in zip(seqs, trajs, strict=True) if group_key(t) not in zero[0]]
        if not seqs:
            metrics["trained_trajectories"] = 0.0
            return metrics
        metrics["trained_trajectories"] = float(len(seqs))
        return metrics | self._optimize(seqs)

    @staticmethod
    def _zero_advantage_groups(
        trajs: Sequence[Trajectory], token_adv: torch.Tensor, mask: torch.Tensor
    ) -> tuple[set[str], float]:
        nonzero: dict[str, bool] = {}
        for row, t in enumerate(trajs):
            key = group_key(t)
            moving = bool((token_adv[row].abs() * mask[row]).sum() > 1e-8)
            nonzero[key] = nonzero.get(key, False) or moving
        zero = {k for k, v in nonzero.items() if not v}
        return zero, len(zero) / max(1, len(nonzero))

    def _optimize(self, seqs: list[TokenSequence]) -> dict[str, float]:
        """Update on this process's share of the step's ``seqs`` (all of them in one process)."""
        cfg = self.rl_cfg
        device = self.parts.device
        pad = self.parts.pad_token_id
        mine = self.shard(seqs, [len(s) for s in seqs])
        passes = self.even_passes(
            self.micro_batches(mine), lambda: TokenBatch.collate(seqs[:1], pad_token_id=pad)
        )
        batches = [b.to(device) for b, _ in passes]
        counted = [c for _, c in passes]
        # Logprobs of the tempered policy the rollouts sampled from (greedy rollouts: T = 1).
        temperature = cfg.temperature if cfg.temperature > 0 else 1.0
        # The first epoch trains the weights that just rolled out, so the trainer's own old
        # logprobs are that epoch's forward values (ratio 1, its gradient the policy gradient),
        # kept for the later epochs: no separate no-grad pass over the batch. The reference
        # path keeps that pass whenever there are later epochs.
        own_old = cfg.recompute_old_logprobs or not all(b.has_old_logprobs for b in batches)
        one_on_policy = cfg.recompute_old_logprobs and cfg.epochs_per_step == 1
        separate_pass = own_old and cfg.reference_path and not one_on_policy
        from_first_epoch = own_old and not separate_pass
        # What the rollout policy reported, kept before any recompute: the gap to the training
        # forward shows drift between the two (a stale rollout copy, a precision mismatch).
        sampled = [b.old_logprobs if b.has_old_logprobs else None for b in batches]
        if separate_pass:
            with torch.no_grad(), self.parts.accelerator.autocast():
                for b in batches:
                    b.old_logprobs = self.parts.logprob_model(
                        b.input_ids, b.attention_mask, b.loss_mask, False, temperature
                    )[0].float()
        refs = (
            [self.reference.logprobs(b, temperature) for b in batches] if self.reference else None
        )
        n_tokens = sum(b.num_loss_tokens for b, c in zip(batches, counted, strict=True) if c)
        n_rows = sum(len(b.lengths) for b, c in zip(batches, counted, strict=True) if c)
        token_weighted = cfg.aggregation == "token-mean"
        # This process's part of the global mean (the local count alone in one process).
        divisor = self.global_mean_divisor(n_tokens if token_weighted else n_rows)
        sums: dict[str, float] = {}
        gaps: list[tuple[float, float]] = []
        is_stats: list[tuple[float, float, float]] = []
        cap = cfg.rollout_is_cap or 0.0
        # Truncated importance sampling corrects old logprobs that are the trainer's own; the
        # sampler's (recompute_old_logprobs off) already put the PPO ratio against the sampler.
        correct = cap > 0 and own_old

        def share_of(k: int) -> float:
            b = batches[k]
            size = b.num_loss_tokens if token_weighted else len(b.lengths)
            return size / max(n_tokens if token_weighted else n_rows, 1)

        t0 = time.perf_counter()
        for epoch in range(cfg.epochs_per_step):
            for k, b in enumerate(batches):
                with self.parts.accelerator.autocast():
                    lp, ent = self.parts.logprob_model(
                        b.input_ids, b.attention_mask, b.loss_mask, True, temperature
                    )
                lp = lp.float()
                if from_first_epoch and epoch == 0:
                    b.old_logprobs = lp.detach()
                mask = b.loss_mask.float()
                denom = mask.sum().clamp(min=1)
                rollout_lp = sampled[k]
                if epoch == 0 and rollout_lp is not None and counted[k]:
                    gap = ((lp.detach() - rollout_lp).abs() * mask).sum() / denom
                    gaps.append((share_of(k), float(gap)))
                    if correct:  # kept by the later epochs, which reuse the advantages
                        weights = truncated_is_weights(b.old_logprobs, rollout_lp, mask, cap)
                        b.advantages = b.advantages * weights
                        is_stats.append((share_of(k), *_weight_stats(weights, mask, cap)))
                loss, info = policy_loss(
                    cfg.loss,
                    lp,
                    b.old_logprobs,
                    b.advantages,
                    mask,
                    aggregation=cfg.aggregation,
                    **cfg.loss_kwargs,
                )
                size = b.num_loss_tokens if token_weighted else len(b.lengths)
                if not counted[k]:  # a pass that only keeps the processes in step
                    self.backward(loss * 0.0, last=k == len(batches) - 1)
                    continue
                share = share_of(k)
                if refs is not None:
                    kl = (kl_estimate(cfg.kl_kind, lp, refs[k]) * mask).sum() / mask.sum().clamp(
                        min=1
                    )
                    loss = loss + cfg.kl_coef * kl
                    info = {**info, "kl_ref": float(kl.detach())}
                assert ent is not None
                info = {**info, "entropy": float((ent * mask).sum() / denom)}
                info = {key: v for key, v in info.items() if key not in _LOSS_REPEATS}
                self.backward(loss * (size / divisor), last=k == len(batches) - 1)
                for key, value in {"loss": float(loss.detach()), **info}.items():
                    sums[key] = sums.get(key, 0.0) + share * float(value) / cfg.epochs_per_step
            sums.update(self.optimizer_step())
        elapsed = time.perf_counter() - t0
        if gaps:
            sums["rollout_logprob_gap"] = _weighted_mean(gaps)
        if is_stats:
            sums["rollout_is_weight_mean"] = _weighted_mean([(w, m) for w, m, _ in is_stats])
            sums["rollout_is_capped_frac"] = _weighted_mean([(w, c) for w, _, c in is_stats])
        sums["tokens_per_s"] = n_tokens * cfg.epochs_per_step / elapsed
        sums["loss_tokens"] = float(n_tokens)
        return sums


def _weighted_mean(pairs: Sequence[tuple[float, float]]) -> float:
    """The mean of ``(weight, value)`` pairs' values by weight (a plain mean if all weigh 0)."""
    total = sum(w for w, _ in pairs)
    if total <= 0:
        return sum(v for _, v in pairs) / len(pairs)
    return sum(w * v for w, v in pairs) / total


def _weight_stats(weights: torch.Tensor, mask: torch.Tensor, cap: float) -> tuple[float, float]:
    """The mean truncated importance weight over ``mask`` and the fraction at the cap."""
    m = mask.bool()
    n = max(int(m.sum()), 1)
    return float(weights[m].sum()) / n, float((weights[m] >= cap * (1 - 1e-6)).sum()) / n
