"""Where an RL step's rollouts come from, and the weights they sample with.

A step's episodes are played by one of four sources: the agent program's runner (``agent``),
self-play over a multi-seat game (``self_play``, its games played here or, with ``ray``, on the
actors), the Ray actors (``ray``), or the live rollout policy in this process. The policy is
the trained module itself, or a copy of its weights of its own (bf16, asynchronous rollouts,
LoRA merged in, or gathered under FSDP) refreshed after every update; the Ray actors get the
weights published to them. In the asynchronous mode the next ``async_staleness`` steps'
rollouts are sampled on threads (``Ahead``) while a step trains.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from trajforge.policy.hf import HFPolicy
from trajforge.policy.token_policy import TokenPolicy
from trajforge.precision import Precision, resolve_precision, torch_dtype
from trajforge.rollout import EpisodeRunner, Limits, PolicyRef, RolloutSpec, Sampling, run_rollout
from trajforge.schema import Task, Trajectory
from trajforge.train.base import Trainer
from trajforge.train.config import RLConfig
from trajforge.train.on_policy import check_sampled_temperature
from trajforge.train.self_play import SelfPlay
from trajforge.train.task_revisit import TaskRevisits

if TYPE_CHECKING:
    from trajforge.distributed.runner import RayRunner

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


class RLRollouts(Trainer):
    """The rollout side of ``RLTrainer``: its rollout policy, the task cursor and the sources
    a step's episodes come from."""

    rl_cfg: RLConfig
    tasks: list[Task]
    task_cursor: int
    revisits: TaskRevisits
    self_play: SelfPlay | None
    agent_runner: AgentRunners | None
    policy: HFPolicy | None
    rollout_dtype: torch.dtype
    remote: RayRunner | None
    ahead: deque[Ahead]
    """The next steps' rollouts under way, oldest first (``async_staleness`` at most)."""

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
        return HFPolicy(
            model,
            self.parts.tokenizer,
            max_batch_size=self.rl_cfg.max_batch_size,
            share_prefixes=not self.rl_cfg.reference_path,
        )

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
        if self.remote is not None:
            # Each actor builds this policy, then loads the published weights.
            precision = Precision.BF16 if self.rollout_dtype is torch.bfloat16 else Precision.FP32
            actors = PolicyRef(
                name=cfg.model.spec, batch_size=cfg.max_batch_size, precision=precision
            )
            spec = spec.model_copy(update={"policy": actors})
        if self.self_play is not None:
            # On Ray its games are played by ``self.remote``'s actors (``SelfPlay.remote``).
            return self.self_play.rollout(spec, self.policy, step)
        if self.remote is not None:
            return run_rollout(spec, runner=self.remote)
        # The policy is passed live: it samples from the very weights being trained.
        return run_rollout(spec, policy=self.policy)

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
