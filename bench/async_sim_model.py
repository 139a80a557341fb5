"""The discrete-event model behind ``bench/async_sim.py``: N generation workers decoding
episodes in batches and M data-parallel trainers, synchronous or asynchronous with a staleness
bound, with the costs of this machine (see that file for what each cost is and how it is
measured)."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field


@dataclass
class Costs:
    decode_a: float
    decode_b: float
    prefill: float
    turn_overhead: float
    step_overhead: float
    train_token: float
    publish: float
    gen_slowdown: float = 1.0
    """Decode time factor while training runs beside it on shared cores."""
    train_slowdown: float = 1.0
    """Training time factor while decoding runs beside it on shared cores."""


@dataclass
class Workload:
    groups: int
    samples: int
    prompt_tokens: int
    episodes: list[list[int]] = field(default_factory=list)
    """Measured episodes' tokens per turn to draw from; empty: the lognormal below."""
    turns_mean: float = 3.0
    tokens_median: float = 64.0
    tokens_sigma: float = 1.0
    max_tokens: int = 1024

    def draw(self, rng: random.Random) -> list[int]:
        if self.episodes:
            return rng.choice(self.episodes)
        turns = 1 + min(int(rng.expovariate(1 / max(self.turns_mean - 1, 1e-9))), 15)
        median = self.tokens_median
        return [
            max(
                1,
                min(self.max_tokens, int(rng.lognormvariate(math.log(median), self.tokens_sigma))),
            )
            for _ in range(turns)
        ]


@dataclass
class _Episode:
    step: int
    turns: list[int]
    turn: int = 0
    left: float = 0.0


@dataclass
class _Worker:
    slots: int
    active: list[_Episode] = field(default_factory=list)
    paused_until: float = 0.0


def simulate(
    costs: Costs,
    work: Workload,
    *,
    workers: int,
    trainers: int,
    staleness: int | None,
    steps: int,
    slots: int,
    shared_cores: bool = False,
    seed: int = 0,
) -> dict[str, float]:
    """Seconds per step and steps per hour (after the first step) of ``steps`` steps;
    ``staleness`` None: synchronous."""
    rng = random.Random(seed)
    per_step = work.groups * work.samples
    pool = [_Worker(slots) for _ in range(workers)]
    queue: list[_Episode] = []
    released = 0  # steps whose episodes may start
    done = [0] * (steps + 2)
    tokens = [0] * (steps + 2)
    trained: list[float] = []
    training_until: float | None = None
    training_step = 0
    now = 0.0
    ahead = 0 if staleness is None else staleness

    def release(upto: int) -> None:
        nonlocal released
        while released < min(upto, steps):
            released += 1
            for _ in range(per_step):
                turns = work.draw(rng)
                tokens[released] += sum(turns)
                queue.append(_Episode(released, turns, 0, float(turns[0])))

    def admit(w: _Worker) -> None:
        while queue and len(w.active) < w.slots:
            ep = queue.pop(0)
            w.active.append(ep)
            w.paused_until = max(w.paused_until, now) + work.prompt_tokens * costs.prefill

    def step_time(w: _Worker) -> float:
        slow = costs.gen_slowdown if shared_cores and training_until is not None else 1.0
        return (costs.decode_a + costs.decode_b * len(w.active)) * slow

    release(1 + ahead)
    while len(trained) < steps:
        for w in pool:
            admit(w)
        # The next event: a worker's pause ending, a turn ending, or training ending.
        events: list[float] = []
        for w in pool:
            if w.paused_until > now:
                events.append(w.paused_until)
            elif w.active:
                events.append(now + min(e.left for e in w.active) * step_time(w))
        if training_until is not None:
            events.append(training_until)
        if not events:
            raise RuntimeError("the simulation has nothing left to do")
        t = min(events)
        for w in pool:
            start = max(now, w.paused_until)
            if w.active and t > start:
                progress = (t - start) / step_time(w)
                for e in w.active:
                    e.left -= progress
        now = t
        for w in pool:
            ended = [e for e in w.active if e.left <= 1e-9]
            for e in ended:
                e.turn += 1
                w.paused_until = max(w.paused_until, now) + costs.turn_overhead
                if e.turn < len(e.turns):
                    e.left = float(e.turns[e.turn])
                    w.paused_until += 16 * costs.prefill  # the observation's tokens
                else:
                    w.active.remove(e)
                    done[e.step] += 1
        if training_until is not None and now >= training_until - 1e-12:
            training_until = None
            trained.append(now)
            for w in pool:  # the new weights load between turns (partial rollouts)
                w.paused_until = max(w.paused_until, now) + costs.publish
            release(training_step + 1 + ahead)
        nxt = len(trained) + 1
        if training_until is None and nxt <= steps and done[nxt] == per_step:
            training_step = nxt
            slow = costs.train_slowdown if shared_cores and any(w.active for w in pool) else 1.0
            train = tokens[nxt] * costs.train_token / trainers * slow
            training_until = now + train + costs.step_overhead + costs.publish
    intervals = [b - a for a, b in itertools.pairwise(trained)]
    s_per_step = sum(intervals) / len(intervals) if intervals else trained[0]
    return {"s_per_step": s_per_step, "steps_per_hour": 3600 / s_per_step}
