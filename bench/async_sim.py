"""Asynchronous RL past this machine: a discrete-event simulator of N generation workers and M
trainers, fed with step costs measured here, checked against a measured run here.

Costs (measured with the tiny model on this machine, unless given with ``--costs``):

- a decode step of ``n`` sequences takes ``decode_a + decode_b * n`` seconds (an ``HFPolicy``
  decoding 1 and 16 sequences at once), a prompt token's prefill ``prefill`` seconds;
- the generation side's level is then fitted to the synchronous run (the same job as the check,
  measured here): each turn costs ``turn_overhead`` seconds besides (rendering, parsing, the
  environment), or, where the micro-measured decode already overshoots, the decode costs are
  scaled down, until the simulated synchronous run takes the measured seconds per step;
- each step costs ``step_overhead`` on the trainer besides the update (scoring, advantages);
- training costs ``train_token`` seconds per loss token (the synchronous run's ``tokens_per_s``),
  divided among M data-parallel trainers;
- publishing the weights costs ``publish`` seconds on the trainer and pauses each worker as long
  (``RolloutWeights.refresh``, timed);
- on shared cores, decoding and the update slow each other down by ``gen_slowdown`` and
  ``train_slowdown`` while both run (decoding 16 sequences beside the run's own update, timed).

The simulator plays a run's steps: episodes (turns of sampled tokens, lengths drawn from a
long-tailed lognormal, or the measured run's own) are handed out first in, first out to free
slots of the workers; all sequences a worker holds advance one token per decode step. A step
trains once its episodes have all ended and the previous step has trained. Synchronous: a step's
episodes start after the previous step's weights are published. Asynchronous with staleness k:
they start as soon as the weights of k + 1 steps earlier are out, and an episode under way
when new weights are published continues with them (partial rollouts). ``shared_cores``
models one machine whose generation and training slow each other down while both run, by the
factors measured here (the check's setting).

The check: the same config as a measured 2-worker run here (``bench/async_rl.py``'s job on the
tiny model: one generation worker, the policy's thread, and one trainer, in one process on
shared cores, ``async_staleness`` 1), the simulator's seconds per step against the measured
ones; it passes within 15%. Then projections, steps per hour, for N workers and M trainers, each
a device as fast as this machine.

    .venv/bin/python bench/async_sim.py            # measure, check, project
    .venv/bin/python bench/async_sim.py --quick    # fewer measured steps

Ends with one JSON line; ``ratio`` is async (staleness 2) over sync steps per hour at 64
workers and 8 trainers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from async_rl import _config as async_rl_config
from async_sim_model import Costs, Workload, simulate

from trajforge.policy.base import SamplingParams
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.schema import Role
from trajforge.train.rl import RLTrainer
from trajforge.train.rl import update as rl_update


def _decode_cost(policy: HFPolicy, n: int, new_tokens: int) -> tuple[float, float, float]:
    """Wall seconds, decode steps and prefill tokens of ``n`` sequences generated at once."""
    before = policy.stats
    prompts = [[10 + i, 20 + i, 30, 40, 50, 60, 70, 80] for i in range(n)]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=1)

    async def run() -> None:
        await asyncio.gather(*(policy.generate(p, sampling) for p in prompts))

    start = time.perf_counter()
    asyncio.run(run())
    wall = time.perf_counter() - start
    after = policy.stats
    return (
        wall,
        after.decode_steps - before.decode_steps,
        after.prefill_tokens - before.prefill_tokens,
    )


@dataclass
class _Run:
    """A measured RL run: its episodes' sampled tokens per turn, their prompt and observation
    tokens, and the seconds each refresh of the rollout weights took."""

    episodes: list[list[int]] = field(default_factory=list)
    prompts: list[int] = field(default_factory=list)
    observations: list[int] = field(default_factory=list)
    refreshes: list[float] = field(default_factory=list)
    last: list[Any] = field(default_factory=list)
    slowdowns: tuple[float, float] = (1.0, 1.0)
    """Decoding's and the update's time factors while the other runs (synchronous run)."""


def _measured_run(
    steps: int, staleness: int, policy: HFPolicy | None = None
) -> tuple[dict[str, Any], _Run]:
    """A measured RL run's figures per step, and what it sampled; with ``policy``, how much
    decoding with it and the run's own update (on its last step's episodes) slow each other
    down at once."""
    seen = _Run()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = RLTrainer(async_rl_config(Path(tmp), "tiny", steps, staleness))
        episodes_of = trainer._episodes
        refresh = trainer.weights.refresh

        async def recording(*args: Any) -> Any:
            trajs = await episodes_of(*args)
            seen.last = trajs
            for t in trajs:
                roles = [m.role is Role.ASSISTANT for m in t.messages]
                first = roles.index(True) if True in roles else len(roles)
                sizes = [len(m.token_ids or ()) for m in t.messages]
                seen.episodes.append([n for n, a in zip(sizes, roles, strict=True) if a] or [1])
                seen.prompts.append(sum(sizes[:first]))
                after = [n for n, a in zip(sizes[first:], roles[first:], strict=True) if not a]
                seen.observations.extend(after)
            return trajs

        def timed(version: int) -> None:
            start = time.perf_counter()
            refresh(version)
            seen.refreshes.append(time.perf_counter() - start)

        trainer._episodes = recording  # type: ignore[method-assign]
        trainer.weights.refresh = timed  # type: ignore[method-assign]
        start = time.perf_counter()
        result = trainer.train()
        wall = time.perf_counter() - start
        if policy is not None:
            last = seen.last
            seen.slowdowns = _slowdowns(
                policy, lambda: rl_update.update(trainer, trainer.rl_cfg, list(last))
            )
    history = result.history
    later = history[1:] or history
    figures = {
        "s_per_step": wall / steps,
        "s_per_later_step": sum(h["step_time_s"] for h in later) / len(later),
        "rollout_s": sum(h["rollout_time_s"] for h in later) / len(later),
        "tokens_per_s": sum(h.get("tokens_per_s", 0.0) for h in later) / len(later),
        "loss_tokens": sum(h.get("loss_tokens", 0.0) for h in later) / len(later),
    }
    return figures, seen


def _slowdowns(policy: HFPolicy, update: Callable[[], object]) -> tuple[float, float]:
    """How much decoding and the RL update (``update``: one step's) slow each other down when
    they run at once on this machine's cores."""

    def train_once() -> float:
        start = time.perf_counter()
        update()
        return time.perf_counter() - start

    alone_train = min(train_once() for _ in range(2))
    alone_gen = min(_decode_cost(policy, 16, 48)[0] for _ in range(2))
    stop = threading.Event()
    beside: list[float] = []

    def trainer_loop() -> None:
        while not stop.is_set():
            beside.append(train_once())

    thread = threading.Thread(target=trainer_loop)
    thread.start()
    together_gen = _decode_cost(policy, 16, 48)[0]
    stop.set()
    thread.join()
    together_train = sum(beside) / len(beside)
    return together_gen / alone_gen, together_train / alone_train


def measure(steps: int) -> tuple[Costs, dict[str, Any], _Run]:
    """This machine's costs, the synchronous run they came from, and what it sampled."""
    model, tok = tiny_model_and_tokenizer()
    policy = HFPolicy(model, tok, max_batch_size=16)
    _decode_cost(policy, 4, 8)  # warm up
    wall1, steps1, pre1 = _decode_cost(policy, 1, 48)
    wall16, steps16, pre16 = _decode_cost(policy, 16, 48)
    long_prompt = [[(i * 7 + j) % 500 + 10 for j in range(256)] for i in range(8)]
    before = policy.stats
    start = time.perf_counter()

    async def prefill_only() -> None:
        once = SamplingParams(max_new_tokens=1, seed=1)
        await asyncio.gather(*(policy.generate(p, once) for p in long_prompt))

    asyncio.run(prefill_only())
    prefill = (time.perf_counter() - start) / max(
        policy.stats.prefill_tokens - before.prefill_tokens, 1
    )
    step1 = (wall1 - pre1 * prefill) / max(steps1, 1)
    step16 = (wall16 - pre16 * prefill) / max(steps16, 1)
    decode_b = max((step16 - step1) / 15, 0.0)
    decode_a = max(step1 - decode_b, 1e-6)
    sync, seen = _measured_run(steps, 0, policy)
    gen_slow, train_slow = seen.slowdowns
    asyncio.run(policy.close())
    publish = sum(seen.refreshes) / len(seen.refreshes)
    train_token = 1 / sync["tokens_per_s"] if sync["tokens_per_s"] else 0.0
    train_s = sync["loss_tokens"] * train_token
    # The trainer's side of a step besides the update: scoring, advantages, the refresh.
    step_overhead = max(sync["s_per_later_step"] - sync["rollout_s"] - train_s - publish, 0.0)
    measured = Costs(
        decode_a=decode_a,
        decode_b=decode_b,
        prefill=prefill,
        turn_overhead=0.0,
        step_overhead=step_overhead,
        train_token=train_token,
        publish=publish,
        gen_slowdown=gen_slow,
        train_slowdown=train_slow,
    )
    return _fit_generation(measured, sync, _check_workload(seen)), sync, seen


def _check_workload(seen: _Run) -> Workload:
    """The measured job: 4 groups of 4, its own episodes and prompts."""
    prompt = round(sum(seen.prompts) / len(seen.prompts))
    return Workload(groups=4, samples=4, prompt_tokens=prompt, episodes=seen.episodes)


def _fit_generation(costs: Costs, sync: dict[str, Any], work: Workload) -> Costs:
    """``costs`` with the host's time per turn (rendering, parsing, the environment; never
    negative) or, where the micro-measured decode already overshoots, the decode costs scaled,
    so that the simulated synchronous run takes the measured one's seconds per step: the
    generation side's level comes from the run, its shape (batch size, prefill) from the
    micro-measures."""

    def simulated(c: Costs) -> float:
        return simulate(c, work, workers=1, trainers=1, staleness=None, steps=12, slots=16)[
            "s_per_step"
        ]

    target = sync["s_per_later_step"]
    base = simulated(costs)
    turns = sum(len(e) for e in work.episodes) / len(work.episodes) * work.groups * work.samples
    if base <= target:
        return replace(costs, turn_overhead=(target - base) / turns)
    low, high = 0.0, 1.0
    for _ in range(30):  # simulated time grows with the scale
        mid = (low + high) / 2
        scaled = replace(
            costs,
            decode_a=costs.decode_a * mid,
            decode_b=costs.decode_b * mid,
            prefill=costs.prefill * mid,
        )
        low, high = (mid, high) if simulated(scaled) < target else (low, mid)
    return replace(
        costs,
        decode_a=costs.decode_a * low,
        decode_b=costs.decode_b * low,
        prefill=costs.prefill * low,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 measured steps instead of 6")
    parser.add_argument("--costs", type=Path, help="a JSON of Costs instead of measuring")
    args = parser.parse_args()
    steps = 4 if args.quick else 6
    check: dict[str, Any] = {}
    if args.costs is not None:
        costs = Costs(**json.loads(args.costs.read_text()))
    else:
        costs, sync, seen = measure(steps)
        measured_async, _ = _measured_run(steps, 1)
        work = _check_workload(seen)
        common = {"workers": 1, "trainers": 1, "steps": 40, "slots": 16, "shared_cores": True}
        sim_sync = simulate(costs, work, staleness=None, **common)["s_per_step"]
        sim_async = simulate(costs, work, staleness=1, **common)["s_per_step"]
        error = sim_async / measured_async["s_per_later_step"] - 1
        check = {
            "measured_sync_s": round(sync["s_per_later_step"], 3),
            "simulated_sync_s": round(sim_sync, 3),
            "measured_async_s": round(measured_async["s_per_later_step"], 3),
            "simulated_async_s": round(sim_async, 3),
            "async_error": round(error, 3),
            "passed": abs(error) <= 0.15,
        }
        print(
            f"check: async staleness 1, 1 worker + 1 trainer on shared cores: measured "
            f"{check['measured_async_s']} s/step, simulated {check['simulated_async_s']} "
            f"({error:+.1%}); {'PASS' if check['passed'] else 'FAIL'} (within 15%)"
        )
    # Projections: a bigger job (512 episodes of long-tailed lengths per step), each worker a
    # device of this machine's speed decoding up to 32 sequences.
    big = Workload(groups=64, samples=8, prompt_tokens=256, turns_mean=3, tokens_median=96)
    table: list[dict[str, Any]] = []
    for workers, trainers in ((8, 1), (8, 4), (64, 8)):
        row: dict[str, Any] = {"workers": workers, "trainers": trainers}
        for name, staleness in (("sync", None), ("async1", 1), ("async2", 2), ("async4", 4)):
            got = simulate(
                costs,
                big,
                workers=workers,
                trainers=trainers,
                staleness=staleness,
                steps=30,
                slots=32,
            )
            row[name] = round(got["steps_per_hour"], 1)
        table.append(row)
        print(
            f"{workers:>3} workers, {trainers} trainers: steps/hour sync {row['sync']}, "
            f"async 1/2/4 {row['async1']}/{row['async2']}/{row['async4']}"
        )
    last = table[-1]
    print(
        json.dumps(
            {
                "bench": "async_sim",
                "cpus": os.cpu_count(),
                "costs": {k: round(v, 6) for k, v in asdict(costs).items()},
                "check": check,
                "projections": table,
                "ratio": round(last["async2"] / last["sync"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
