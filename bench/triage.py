"""Failure localisation: how often the rule signals put the first error where it was injected.

Faults are injected at known steps into real episodes: each built-in env's scripted expert
plays its tasks through the one rollout path, except at one chosen turn where the policy
instead makes a failing tool call (``tool_error``: arguments of the wrong type), an
unparsable call (``malformed``), the previous call twice more (``loop``), or a wrong final
answer (``wrong_answer``); the expert then carries on from whatever the env answered. The
label is the index of that turn's assistant message. A sample whose fault did not take (the
env accepted the arguments, the repeated call's result changed, the verifier accepted the
wrong answer) is left out and counted, since it carries no fault to find. The clean
episodes are triaged too: a first error found in one is a false alarm.

With ``--llm N`` the LLM localiser (``trajforge.triage.llm``) with the embedded model judges N
of the faulty trajectories and N clean ones: precision and recall of "has a first error at
step s" against the same labels.

With ``--recovery-seeds N`` it also runs the recovery experiment (``bench/recovery.py``): SFT
with and without repair data, N seeds each, evaluated with the first call forced to fail;
``ratio`` is the recovery rate with repair data / without. Without it ``ratio`` is null.

    PYTHONPATH=src python bench/triage.py [--tasks 30] [--llm 0] [--recovery-seeds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from collections import Counter
from dataclasses import dataclass

from recovery import recovery_figures

from trajforge.curate.repair import RepairSkipped, repair
from trajforge.envs.registry import EnvEntry, get_env
from trajforge.formats.tool_calls import format_tool_call
from trajforge.judge.process import TOOL_ERROR_PREFIX
from trajforge.policy.check import check_trajectory
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.naming import load_policy
from trajforge.policy.renderer import ChatRenderer
from trajforge.rollout import RolloutSpec, run_rollout
from trajforge.schema import ExpertFn, Message, Role, Score, Task, Trajectory
from trajforge.triage import triage
from trajforge.triage.faults import WRONG_ANSWER, Fault, malformed_call, tool_error_call
from trajforge.triage.llm import LLMLocaliser

ENVS = ("calculator", "sql", "search", "time", "retail", "gridworld", "keydoor")


@dataclass(frozen=True)
class Plan:
    fault: Fault
    turn: int


@dataclass(frozen=True)
class Sample:
    env: str
    fault: Fault | None
    label: int | None
    trajectory: Trajectory


def _turns(messages: list[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.role is Role.ASSISTANT]


def _plans(clean: list[Trajectory], rng: random.Random) -> dict[Fault, dict[str, Plan]]:
    """Per fault, the turn it hits in each task (tasks where it cannot happen left out)."""
    plans: dict[Fault, dict[str, Plan]] = {f: {} for f in Fault}
    for traj in clean:
        turns = _turns(traj.messages)
        calls = [k for k, i in enumerate(turns) if traj.messages[i].tool_calls]
        tid = traj.task.id
        if turns:
            plans[Fault.TOOL_ERROR][tid] = Plan(Fault.TOOL_ERROR, rng.randrange(len(turns)))
            plans[Fault.MALFORMED][tid] = Plan(Fault.MALFORMED, rng.randrange(len(turns)))
        if calls and calls[0] + 1 < len(turns):
            after = [k + 1 for k in calls if k + 1 < len(turns)]
            plans[Fault.LOOP][tid] = Plan(Fault.LOOP, rng.choice(after))
        if turns and not traj.messages[turns[-1]].tool_calls:
            plans[Fault.WRONG_ANSWER][tid] = Plan(Fault.WRONG_ANSWER, len(turns) - 1)
    return plans


def _faulty_expert(entry: EnvEntry, plans: dict[str, Plan]) -> ExpertFn:
    try:
        bad_call = tool_error_call(entry.tool_specs())
    except ValueError as exc:
        raise SystemExit(f"env {entry.name!r}: {exc}") from exc
    malformed = malformed_call(entry.tool_names()[0])

    def reply(task: Task, messages: list[Message]) -> str | None:
        plan = plans[task.id]
        turns = _turns(messages)
        turn = len(turns)
        if plan.fault is Fault.TOOL_ERROR and turn == plan.turn:
            return bad_call
        if plan.fault is Fault.MALFORMED and turn == plan.turn:
            return malformed
        if plan.fault is Fault.LOOP and turn in (plan.turn, plan.turn + 1):
            previous = messages[turns[plan.turn - 1]]
            return "".join(format_tool_call(c.name, c.arguments) for c in previous.tool_calls)
        expert = entry.expert(task, messages)
        if plan.fault is Fault.WRONG_ANSWER and turn >= plan.turn and expert is not None:
            return WRONG_ANSWER if "<tool_call>" not in expert else expert
        return expert

    return reply


def _fault_took(traj: Trajectory, fault: Fault, label: int) -> bool:
    """Whether the injected fault is really in the episode (see the module docstring)."""
    msgs = traj.messages
    if label >= len(msgs):
        return False
    here = msgs[label]
    results = {m.tool_call_id: m.content for m in msgs if m.role is Role.TOOL}
    if fault is Fault.TOOL_ERROR:
        return any(results.get(c.id, "").startswith(TOOL_ERROR_PREFIX) for c in here.tool_calls)
    if fault is Fault.MALFORMED:
        return any(c.parse_error is not None for c in here.tool_calls)
    if fault is Fault.WRONG_ANSWER:
        return not here.tool_calls and (traj.outcome.reward or 0.0) < 1.0
    turns = _turns(msgs)
    k = turns.index(label)
    if k + 1 >= len(turns):
        return False
    three = [msgs[turns[j]].tool_calls for j in (k - 1, k, k + 1)]
    said = [[(c.name, c.arguments, results.get(c.id)) for c in calls] for calls in three]
    return bool(said[0]) and said[0] == said[1] == said[2]


def build(tasks: int, seed: int) -> tuple[list[Sample], Counter[str]]:
    """The clean and faulty samples of every env, and how many faults did not take."""
    tokenizer = load_tokenizer()
    rng = random.Random(seed)
    samples: list[Sample] = []
    dropped: Counter[str] = Counter()
    for name in ENVS:
        entry = get_env(name)
        env_tasks = entry.tasks(tasks, seed=seed)
        expert = load_policy("expert", expert=entry.expert, tokenizer=tokenizer)
        clean = run_rollout(RolloutSpec(tasks=env_tasks), env=entry.make, policy=expert)
        samples.extend(Sample(name, None, None, t) for t in clean)
        for fault, plans in _plans(clean, rng).items():
            chosen = [t for t in env_tasks if t.id in plans]
            if not chosen:
                continue
            policy = load_policy("expert", expert=_faulty_expert(entry, plans), tokenizer=tokenizer)
            for traj in run_rollout(RolloutSpec(tasks=chosen), env=entry.make, policy=policy):
                label = _turns(traj.messages)[plans[traj.task.id].turn]
                if _fault_took(traj, fault, label):
                    samples.append(Sample(name, fault, label, traj))
                else:
                    dropped[f"{name}/{fault}"] += 1
    return samples, dropped


def rule_figures(samples: list[Sample]) -> dict[str, object]:
    start = time.perf_counter()
    verdicts = [triage(s.trajectory) for s in samples]
    rate = len(samples) / (time.perf_counter() - start)
    found = {id(s): v.first_error for s, v in zip(samples, verdicts, strict=True)}
    faulty = [s for s in samples if s.fault is not None]
    hit = [found[id(s)] == s.label for s in faulty]
    by_fault = {
        f.value: round(
            sum(h for s, h in zip(faulty, hit, strict=True) if s.fault is f)
            / max(1, sum(1 for s in faulty if s.fault is f)),
            4,
        )
        for f in Fault
    }
    clean = [s for s in samples if s.fault is None]
    alarms = sum(found[id(s)] is not None for s in clean)
    return {
        "faulty": len(faulty),
        "clean": len(clean),
        "first_error_accuracy": round(sum(hit) / max(1, len(hit)), 4),
        "accuracy_by_fault": by_fault,
        "clean_false_alarm_rate": round(alarms / max(1, len(clean)), 4),
        "rule_trajectories_per_s": round(rate),
    }


def repair_figures(samples: list[Sample]) -> dict[str, object]:
    """Repair trajectories (``curate.repair``) of the failed faulty episodes, each continued by
    the clean expert episode of its task: how many were built, why the rest were not, and how
    many of those built pass the token-exactness check."""
    renderer = ChatRenderer(load_tokenizer())
    clean = {(s.env, s.trajectory.task.id): s.trajectory for s in samples if s.fault is None}
    built: list[Trajectory] = []
    skipped: Counter[str] = Counter()
    failed = [s for s in samples if s.fault is not None and s.trajectory.outcome.reward != 1.0]
    for s in failed:
        good = clean[(s.env, s.trajectory.task.id)]
        try:
            built.append(repair(s.trajectory, triage(s.trajectory), good, renderer))
        except RepairSkipped as exc:
            skipped[f"{s.fault}: {str(exc).split(': ', 1)[1]}"] += 1
    exact = sum(not check_trajectory(t, renderer) for t in built)
    return {
        "repair_failed_episodes": len(failed),
        "repair_built": len(built),
        "repair_token_exact": exact,
        "repair_skipped": dict(skipped),
    }


def llm_figures(samples: list[Sample], n: int, seed: int) -> dict[str, object]:
    """Precision and recall of the LLM localiser's (step) claims on n faulty and n clean
    trajectories: a claim is right when it names the labelled step."""
    rng = random.Random(seed)
    faulty = rng.sample([s for s in samples if s.fault is not None], n)
    clean = rng.sample([s for s in samples if s.fault is None], n)
    localiser = LLMLocaliser(load_policy("embedded"))

    async def judge_all() -> list[Score]:
        return [await localiser(s.trajectory) for s in [*faulty, *clean]]

    start = time.perf_counter()
    scores = asyncio.run(judge_all())
    wall = time.perf_counter() - start
    steps = [s.dimensions.get("first_error") for s in scores]
    found = [None if step is None else int(step) for step in steps]
    for problem in [s.error for s in scores if s.error][:3]:
        print(f"unusable verdict: {problem[:300]}")
    labels = [s.label for s in [*faulty, *clean]]
    claims = [(f, y) for f, y in zip(found, labels, strict=True) if f is not None]
    right = sum(1 for f, y in claims if f == y)
    return {
        "llm_sample": 2 * n,
        "llm_model": localiser.policy.name,
        "llm_precision": round(right / len(claims), 4) if claims else None,
        "llm_recall": round(right / n, 4),
        "llm_unparsed": localiser.failures,
        "llm_wall_s": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=30, help="tasks per env")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--llm", type=int, default=0, help="faulty and clean samples to judge")
    parser.add_argument(
        "--recovery-seeds", type=int, default=0, help="seeds of the recovery experiment"
    )
    args = parser.parse_args()
    start = time.perf_counter()
    samples, dropped = build(args.tasks, args.seed)
    built_s = time.perf_counter() - start
    figures = rule_figures(samples)
    for key, value in figures.items():
        print(f"{key}: {value}")
    print(f"faults that did not take (left out): {dict(dropped)}")
    repairs = repair_figures(samples)
    for key, value in repairs.items():
        print(f"{key}: {value}")
    llm = llm_figures(samples, args.llm, args.seed) if args.llm else {}
    for key, value in llm.items():
        print(f"{key}: {value}")
    recovery = recovery_figures(args.recovery_seeds, []) if args.recovery_seeds else {}
    if recovery:
        ratio_note = "recovery rate after SFT with repair data / without (bench/recovery.py)"
    else:
        ratio_note = "null: run with --recovery-seeds N for recovery with / without repair data"
    print(
        json.dumps(
            {
                "bench": "triage",
                "envs": list(ENVS),
                "tasks_per_env": args.tasks,
                "cpus": os.cpu_count(),
                **figures,
                "dropped": sum(dropped.values()),
                **repairs,
                **llm,
                **recovery,
                "build_s": round(built_s, 1),
                "ratio": recovery.get("recovery_ratio"),
                "ratio_note": ratio_note,
            }
        )
    )


if __name__ == "__main__":
    main()
