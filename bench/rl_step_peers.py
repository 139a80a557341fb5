"""One RL step of the main job in trajforge and in TRL's GRPOTrainer, side by side.

The work is the ``rl`` stage of examples/calculator/experiment.yaml, read from the file as
bench/rl_step.py reads it: the step's 8 calculator tasks x 4 samples, temperature 0.7, at most
4 assistant turns of at most 64 new tokens each, GRPO advantages (group mean and std), the
PPO-clip loss (eps 0.2) averaged over the step's assistant tokens, two passes over the step's
episodes with one optimizer step each (AdamW, lr 3e-4, grad norm clipped at 1), LoRA r16 alpha 32
on the same projections of the same layers (the tiny model: both of its layers), no KL term.
Zero-advantage groups are trained (``filter_zero_advantage`` off, as in bench/rl_step.py), since
TRL has no such filter. Both start from the same weights (``--model``) in fp32 by default.

- trajforge: ``RLTrainer.run_step`` (sampling with its own decode engine, then training).
- TRL 1.16.0: ``GRPOTrainer`` on its multi-turn tool path (``environment_factory``), with the
  same tokenizer and the chat template trajforge would save with a model (its text tool
  protocol: the tools in the system message, ``<tool_call>{json}</tool_call>`` calls, which
  TRL's Qwen3 response parser reads); the environment wraps trajforge's own calculator env, so
  each tool call and the final verdict run the same code. The bench checks that both render the
  first task's prompt to the same token ids. ``generation_batch_size`` 32 (one generate call for
  all 32 first turns), ``max_new_tokens`` 64 a turn, ``max_tool_calling_iterations`` 3,
  micro-batches of ``--trl-micro-batch`` rows, gradient checkpointing off and ``bf16`` as
  ``--precision`` says (TRL's defaults are on), constant learning rate.

Differences that could not be removed (each is how TRL works):

- generation is HF ``generate``: every turn re-prefills the whole conversation (no KV cache kept
  across turns), the rows of a batch decode until the longest is done, and only the rows that
  called a tool go on to the next turn, as one batch;
- TRL computes logprobs with its chunked fused lm_head kernel, which off CUDA runs the lm_head
  (49,152 words) over every position, the prompt's included; trajforge only over the tokens
  that are trained;
- with two passes TRL computes the old logprobs in a separate no-grad forward over the batch
  before training; trajforge takes them from the first pass's own forward;
- the PPO loss is normalised by the active tokens of the whole accumulated batch in both (TRL's
  ``dapo``, trajforge's ``token-mean``), but TRL forwards each micro-batch padded to its longest
  row, trajforge packs micro-batches by tokens (``micro_batch_tokens``);
- a tool call TRL cannot parse ends the episode as a plain reply; trajforge's env answers it with
  an ``Error:`` tool message and the episode goes on. A reply with several calls runs them all
  in both; TRL does not run the calls of the last allowed turn, trajforge does;
- sampling differs (each side draws its own tokens), so the two steps do not see the same
  episodes: ``generated_tokens`` and ``turns`` say how much work each step's episodes were.

Each side runs in its own subprocess (model loading excluded from its times; peak RSS of the
whole process), one after the other, the order alternating over ``--repeats``:

    nice -n 10 .venv/bin/python bench/rl_step_peers.py --model embedded
    nice -n 10 .venv/bin/python bench/rl_step_peers.py --model tiny     # a quick check

Prints a JSON line per side and run, then one with ``ratio`` = TRL seconds per step /
trajforge seconds per step (means over the repeats), ``sampling_s`` the generation with the
tool calls, ``training_s`` the rest (rewards, advantages, old logprobs, the passes), ``cpu_s`` the
process's CPU seconds in the step (less sensitive than wall time to other jobs on the machine),
and ``tokens_per_s`` the step's generated tokens per second of the step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from rl_step import cpu_name, rl_stage

from trajforge.envs import get_env
from trajforge.envs.base import Env
from trajforge.envs.builtin.calculator import calculator
from trajforge.schema import Message, Role, Task, ToolCall, Trajectory
from trajforge.train.config import RLConfig
from trajforge.train.rl.advantages import episode_reward

SIDES = ("trajforge", "trl")
UNLIMITED_TURNS = 1_000_000
"""The wrapped env's own turn limit: TRL counts the turns (a reply with several calls steps the
env once per call)."""


def peak_rss_mib() -> float:
    """This process's peak resident set size in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def step_tasks(cfg: RLConfig, steps: int) -> list[Task]:
    """The tasks trajforge's first ``steps`` steps draw: the split's first tasks in order."""
    tasks = get_env(cfg.env).tasks(cfg.num_tasks, seed=cfg.seed, split=cfg.task_split)
    return tasks[: steps * cfg.groups_per_step]


def run_trajforge(cfg: RLConfig, steps: int) -> dict[str, Any]:
    """Seconds, generated tokens and turns of ``steps`` steps of trajforge's RLTrainer."""
    from trajforge.train.rl import RLTrainer

    trainer = RLTrainer(cfg)
    played: list[Trajectory] = []
    rollout = trainer._rollout

    def keep(*args: Any, **kwargs: Any) -> list[Trajectory]:
        trajs = rollout(*args, **kwargs)
        played.extend(trajs)
        return trajs

    trainer._rollout = keep  # type: ignore[method-assign]
    step_s = sampling_s = 0.0
    cpu_start = time.process_time()
    for step in range(1, steps + 1):
        metrics = trainer.run_step(step)
        step_s += metrics["step_time_s"]
        sampling_s += metrics["rollout_time_s"]
    cpu_s = time.process_time() - cpu_start
    assistant = [m for t in played for m in t.messages if m.role is Role.ASSISTANT]
    return {
        "step_s": step_s / steps,
        "cpu_s": cpu_s / steps,
        "sampling_s": sampling_s / steps,
        "episodes": len(played) / steps,
        "generated_tokens": sum(len(m.token_ids or []) for m in assistant) / steps,
        "turns": len(assistant) / max(len(played), 1),
        "reward_mean": sum(episode_reward(t) for t in played) / max(len(played), 1),
    }


class EnvTools:
    """trajforge's env behind TRL's environment interface: ``reset`` starts an episode on the
    row's task, ``calculator`` steps the env with that one call and returns its tool message,
    and ``_finish`` (private: TRL offers every public method as a tool) steps it with the
    final reply and returns the env's reward."""

    def __init__(self, env: Env, loop: asyncio.AbstractEventLoop) -> None:
        self.env = env
        self.loop = loop
        self.calls = 0

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def reset(self, **row: Any) -> None:
        self.calls = 0
        self._run(self.env.reset(Task.model_validate_json(row["task"])))

    def calculator(self, expression: str) -> str:
        self.calls += 1
        call = ToolCall(id=f"call_{self.calls}", name="calculator", arguments={"expression": expression})  # fmt: skip
        result = self._run(self.env.step(Message(role=Role.ASSISTANT, tool_calls=[call])))
        return str(result.observations[0].content)

    def _finish(self, reply: str) -> float:
        result = self._run(self.env.step(Message(role=Role.ASSISTANT, content=reply)))
        return float(result.reward)


# TRL (through transformers) writes the tool's schema from the method's docstring: trajforge's.
EnvTools.calculator.__doc__ = calculator.fn.__doc__


def final_reply(completion: list[dict[str, Any]]) -> str:
    """The text of the last assistant message of a TRL multi-turn completion."""
    replies = [m for m in completion if m.get("role") == "assistant"]
    return str(replies[-1].get("content") or "") if replies else ""


def env_reward(
    completions: list[list[dict[str, Any]]], environments: list[EnvTools], **_: Any
) -> list[float | None]:
    """TRL reward function: each episode's env scores its final reply."""
    return [env._finish(final_reply(c)) for env, c in zip(environments, completions, strict=True)]


def make_env_tools(cfg: RLConfig, loop: asyncio.AbstractEventLoop) -> EnvTools:
    env = get_env(cfg.env).make()
    env.adopt_limits(max_turns=UNLIMITED_TURNS, tool_timeout_s=None)
    return EnvTools(env, loop)


def trl_trainer(cfg: RLConfig, tasks: list[Task], micro_batch: int, out: Path) -> Any:
    """TRL's GRPOTrainer set up for ``cfg``'s step on ``tasks``, with the same weights."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_template

    from trajforge.policy.models.loaders import causal_lm
    from trajforge.policy.renderer import ChatRenderer

    model: Any
    model, tokenizer = causal_lm(cfg.model.spec, dtype=torch.float32, seed=cfg.model.tiny_seed)
    tokenizer.chat_template = ChatRenderer(tokenizer).deploy_template()
    tokenizer.response_template = qwen3_template
    lora = cfg.model.lora
    peft = None
    if lora is not None:
        peft = LoraConfig(
            r=lora.r,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=lora.target_modules,
            layers_to_transform=lora.layers,
            task_type="CAUSAL_LM",
        )
    episodes = cfg.groups_per_step * cfg.samples_per_group
    if episodes % micro_batch:
        raise SystemExit(f"--trl-micro-batch: {micro_batch} does not divide {episodes} episodes")
    system = get_env(cfg.env).make().reset  # the env's opening messages, as trajforge's
    loop = asyncio.new_event_loop()
    rows = []
    for task in tasks:
        opening = loop.run_until_complete(system(task))
        prompt = [{"role": m.role.value, "content": m.content} for m in opening]
        rows.append({"prompt": prompt, "task": task.model_dump_json()})
    args = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        bf16=cfg.model.precision == "bf16",
        gradient_checkpointing=False,
        seed=cfg.seed,
        shuffle_dataset=False,
        num_generations=cfg.samples_per_group,
        per_device_train_batch_size=micro_batch,
        gradient_accumulation_steps=episodes // micro_batch,
        num_iterations=cfg.epochs_per_step,
        max_steps=len(tasks) // cfg.groups_per_step * cfg.epochs_per_step,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        generation_kwargs={"max_new_tokens": cfg.max_new_tokens},
        # The whole multi-turn completion's budget: the context limit, so that only the turn
        # limit and the per-turn tokens bind, as in trajforge.
        max_completion_length=cfg.max_seq_len,
        max_tool_calling_iterations=(cfg.max_turns or 1) - 1,
        beta=cfg.kl_coef,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        learning_rate=cfg.optim.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=cfg.optim.weight_decay,
        max_grad_norm=cfg.optim.max_grad_norm or 0.0,
        logging_steps=10_000,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    return GRPOTrainer(
        model=model,
        reward_funcs=[env_reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=peft,
        environment_factory=partial(make_env_tools, cfg, loop),
    )


def same_prompt(trainer: Any, cfg: RLConfig, task: Task) -> bool:
    """Whether TRL renders ``task``'s opening to the token ids trajforge's renderer does."""
    from trajforge.policy.renderer import ChatRenderer

    env = get_env(cfg.env).make()
    opening = asyncio.run(env.reset(task))
    ours = ChatRenderer(trainer.processing_class).render_text(
        opening, env.tools, add_generation_prompt=True
    )
    theirs = trainer.processing_class.apply_chat_template(
        [{"role": m.role.value, "content": m.content} for m in opening],
        tools=trainer.tools,
        chat_template=trainer.chat_template,
        tokenize=False,
        add_generation_prompt=True,
    )
    return bool(ours == theirs)


def run_trl(cfg: RLConfig, steps: int, micro_batch: int, out: Path) -> dict[str, Any]:
    """Seconds, generated tokens and turns of ``steps`` steps of TRL's GRPOTrainer."""
    from transformers import TrainerCallback

    tasks = step_tasks(cfg, steps)
    trainer = trl_trainer(cfg, tasks, micro_batch, out)
    if not same_prompt(trainer, cfg, tasks[0]):
        raise SystemExit("TRL renders the first task's prompt differently from trajforge")
    times = {"step": 0.0, "cpu": 0.0, "sampling": 0.0, "tokens": 0.0, "turns": 0.0, "episodes": 0.0}
    generate: Callable[..., Any] = trainer._generate

    def timed_generate(prompts: list[Any]) -> Any:
        start = time.perf_counter()
        result = generate(prompts)
        times["sampling"] += time.perf_counter() - start
        completions, tool_mask = result[3], result[2]
        times["episodes"] += len(completions)
        times["tokens"] += sum(sum(m) for m in tool_mask)
        times["turns"] += sum(1 for c in completions for m in c if m.get("role") == "assistant")
        return result

    trainer._generate = timed_generate

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            self.start, self.cpu_start = time.perf_counter(), time.process_time()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            times["step"] += time.perf_counter() - self.start
            times["cpu"] += time.process_time() - self.cpu_start

    trainer.add_callback(StepTimer())
    trainer.train()
    rewards = trainer._metrics["train"].get("reward", [0.0])
    return {
        "step_s": times["step"] / steps,
        "cpu_s": times["cpu"] / steps,
        "sampling_s": times["sampling"] / steps,
        "episodes": times["episodes"] / steps,
        "generated_tokens": times["tokens"] / steps,
        "turns": times["turns"] / max(times["episodes"], 1),
        "reward_mean": sum(rewards) / len(rewards),
    }


def run_side(args: argparse.Namespace) -> None:
    """One side's steps in this process: prints its JSON line."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = rl_stage(args.model, args.precision, None, False, Path(tmp) / "run")
        if args.side == "trajforge":
            figures = run_trajforge(cfg, args.steps)
        else:
            figures = run_trl(cfg, args.steps, args.trl_micro_batch, Path(tmp) / "trl")
    figures["training_s"] = figures["step_s"] - figures["sampling_s"]
    figures["tokens_per_s"] = figures["generated_tokens"] / figures["step_s"]
    figures["peak_rss_mib"] = peak_rss_mib()
    rounded = {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}
    print(json.dumps({"bench": "rl_step_peers", "side": args.side, **rounded}), flush=True)


def side_figures(args: argparse.Namespace, side: str) -> dict[str, Any]:
    """Run ``side`` in a subprocess (its own RSS) and read back its JSON line."""
    command = [sys.executable, __file__, "--side", side, "--model", args.model]
    command += ["--precision", args.precision, "--steps", str(args.steps)]
    command += ["--trl-micro-batch", str(args.trl_micro_batch)]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"the {side} side failed (exit {done.returncode}); its stderr is above")
    print(lines[-1], flush=True)
    return dict(json.loads(lines[-1]))


def mean(runs: list[dict[str, Any]], key: str) -> float:
    return round(sum(r[key] for r in runs) / len(runs), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="tiny, embedded or a model folder")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--steps", type=int, default=1, help="RL steps each side times")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each side, alternating")
    parser.add_argument("--trl-micro-batch", type=int, default=8, help="TRL's rows per forward")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        run_side(args)
        return
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for repeat in range(args.repeats):
        for side in SIDES[:: 1 if repeat % 2 == 0 else -1]:
            runs[side].append(side_figures(args, side))
    keys = (
        "step_s",
        "cpu_s",
        "sampling_s",
        "training_s",
        "tokens_per_s",
        "generated_tokens",
        "turns",
    )
    summary: dict[str, Any] = {
        "bench": "rl_step_peers",
        "model": args.model,
        "precision": args.precision,
        "steps": args.steps,
        "repeats": args.repeats,
        "cpu": cpu_name(),
        "cpus": os.cpu_count(),
    }
    for key in (*keys, "peak_rss_mib", "reward_mean"):
        summary[key] = {side: mean(runs[side], key) for side in SIDES}
    summary["peak_rss_mib"] = {side: max(r["peak_rss_mib"] for r in runs[side]) for side in SIDES}
    summary["ratio"] = round(summary["step_s"]["trl"] / summary["step_s"]["trajforge"], 3)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
