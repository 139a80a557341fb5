"""Training on synthesized tasks only vs on the hand-written training tasks, at the same number
of SFT steps, judged on held-out tasks of the environment's own list.

Two arms of one experiment (``keydoor-compact``, the ``pocket`` policy built from scratch), per
seed, each from the same untrained weights:

- ``hand``: expert demonstrations on ``--tasks`` of the env's hand-written training boards,
  then SFT;
- ``synth``: a ``synthesize`` stage (the random explorer walks from training boards, the square
  it reaches becomes the goal, each task checked by executing its solution and a wrong
  answer), expert demonstrations on ``--tasks`` of the synthesized boards, then the same SFT.

With ``--match-difficulty`` the ``synth`` arm explores ten times as many training boards and
keeps the boards whose expert solution lengths mix as the training split's do
(``match_difficulty: train``, docs/synthesis.md), so its demonstrations are as long as the
hand-written arm's; without it (the default) the arm is the issue's setting, synthesis as a user
runs it bare, whose boards are easier than the env's own (the measured shortfall this option
addresses). The JSON line gives the mean shortest solution of the synthesized boards and of the
training boards exploration started from.

Both SFT stages stop after the same ``--steps`` optimizer steps; both arms are evaluated
greedily on the same held-out boards (the env's test split, which synthesis never starts from).
The base (untrained) weights are evaluated on them once per seed.

With ``--env web`` or ``--env calculator`` the experiment is a job on the embedded SmolLM2: the
web job (``examples/web/experiment.yaml``, twelve MiniWoB++ tasks in headless Chromium) or the
calculator job (``examples/calculator/experiment.yaml``, a calculator tool). **hand** is the job
up to its ``after_sft`` eval (its base eval, its teacher's demonstrations on its training tasks,
its SFT); **synth** puts a ``synthesize`` stage in place of the base eval (the calculator's
random call chains; the web job's form pages, the seven of its twelve tasks whose page state the
web synthesizer reads; from training-split tasks, ``--explore`` episodes, every reached state
with one change or more kept), the same teacher plays as many of those tasks, then the same SFT
and the same held-out eval (the job's test split). Run folders of the job made before
(``trajforge run JOB seed=N --out DIR``) copied to ``OUT/<env>-hand-s<N>`` are reused by
fingerprint. ``--match-difficulty`` works for the jobs as for keydoor (ten times the episodes,
the training split's mix of expert solution lengths kept); ``--env-expert`` makes the env's own
expert the teacher of both arms in place of the job's imperfect one (whose habit, a shortcut or
a batched reply, the student copies whatever tasks it is shown).

Each seed's row also gives each arm's share of held-out episodes cut at a limit
(``<arm>_truncated``), of an episode's tool calls that failed (``<arm>_tool_errors``, the mean
over episodes) and of demonstrations with a reply of several calls (``<arm>_batched``); for the
calculator job, its held-out problems solved and played per solution shape
(``<arm>_by_shape``: ``n*n r-n`` is a product, then a number taken from it); for the web job,
its held-out success on the form pages (``<arm>_forms``) and on the job's other pages
(``<arm>_other``), which no synthesized task is made from.

    .venv/bin/python bench/synthesis.py --quick        # 1 seed, 40 boards, 60 steps: minutes
    .venv/bin/python bench/synthesis.py --seeds 0 1 2  # 120 boards, 200 steps, 100 held out
    .venv/bin/python bench/synthesis.py --quick --match-difficulty
    TRAJFORGE_BROWSERS=8 .venv/bin/python bench/synthesis.py --env web --out runs/synthesis_web
    .venv/bin/python bench/synthesis.py --env calculator --out runs/synthesis_calculator
    .venv/bin/python bench/synthesis.py --env calculator --match-difficulty --out runs/calc_matched
    .venv/bin/python bench/synthesis.py --env calculator --match-difficulty --env-expert --out D

Prints each arm's held-out success per seed, then ONE JSON line; ``ratio`` is the synthesized
arm's mean gain over the base weights divided by the hand-written arm's (null when the
hand-written gain is not positive: the quotient would not mean what it says).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calculator_job import JOB as CALCULATOR
from rich.console import Console

from trajforge.envs import TaskSet
from trajforge.envs.browser.miniwob import PREFIX as MINIWOB
from trajforge.envs.builtin.arith import format_number, safe_eval
from trajforge.envs.builtin.keydoor import KeyBoard
from trajforge.envs.registry import get_env
from trajforge.envs.synthesizers.web import SYNTH_TASKS
from trajforge.judge.stats import difference_ci95
from trajforge.pipeline.config import (
    DemonstrationStage,
    Experiment,
    SynthesizeStage,
    load_experiment,
)
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.schema import is_success
from trajforge.store import TrajectoryStore

ENV = "keydoor-compact"
SFT_TRAIN: dict[str, Any] = {
    "epochs": 1000,  # max_steps decides; the same in both arms
    "batch_size": 16,
    "micro_batch_tokens": 32768,
    "optim": {"lr": 3.0e-3, "schedule": "cosine", "warmup_steps": 5},
}
EVAL: dict[str, Any] = {"split": "test", "max_turns": 16, "max_new_tokens": 4}
PRESETS: dict[str, dict[str, int]] = {
    "quick": {"tasks": 40, "steps": 60, "held_out": 50, "explore": 80},
    "full": {"tasks": 120, "steps": 200, "held_out": 100, "explore": 240},
}
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
JOBS = {"web": EXAMPLES / "web" / "experiment.yaml", "calculator": CALCULATOR}
EXPLORE = {"web": 180, "calculator": 400}
"""Exploration episodes per job: enough for its demonstrations (144 web pages, 320 calculator
problems) after the states that change nothing or have no wrong answer are dropped."""
BASE, AFTER_SFT = "base", "after_sft"
MATCHED_EXPLORE = 10
"""Matching keeps about one board in ten of a bare exploration (the hardest share of the
training boards is what walks reach least), so a matched arm explores this many times more."""


def _synthesize(sizes: dict[str, int], seed: int, matched: bool) -> dict[str, Any]:
    if not matched:
        return {"kind": "synthesize", "episodes": sizes["explore"], "seed": seed}
    episodes = sizes["explore"] * MATCHED_EXPLORE
    return {"kind": "synthesize", "episodes": episodes, "seed": seed, "match_difficulty": "train"}


def _experiment(
    arm: str, seed: int, sizes: dict[str, int], out: Path, matched: bool = False
) -> Experiment:
    demos: dict[str, Any] = {"kind": "demonstrations", "tasks": sizes["tasks"], "seed": seed}
    stages: list[dict[str, Any]] = [{"kind": "eval", "name": "base"}] if arm == "hand" else []
    if arm == "synth":
        stages.append(_synthesize(sizes, seed, matched))
        demos["tasks_from"] = "synthesize"
    sft = {"kind": "sft", "train": {**SFT_TRAIN, "max_steps": sizes["steps"]}}
    stages += [demos, sft, {"kind": "eval", "name": "after_sft"}]
    return Experiment.model_validate(
        {
            "name": f"{arm}-s{seed}",
            "env": ENV,
            "model": "pocket",
            "seed": seed,
            "precision": "fp32",
            "out_dir": str(out),
            "eval": {**EVAL, "tasks": sizes["held_out"]},
            "stages": stages,
        }
    )


@dataclass(frozen=True)
class JobArms:
    """How a job's arms are made: exploration episodes, difficulty matching, and whether the
    env's own expert replaces the job's teacher in both arms."""

    explore: int
    matched: bool = False
    env_expert: bool = False


def _job_arms(job_file: Path, seed: int, how: JobArms) -> dict[str, Experiment]:
    """A job's two arms for ``seed``: its stages to ``after_sft``, and the same with a
    ``synthesize`` stage in place of the base eval (over the job's env, or its form pages for a
    MiniWoB++ env), its demonstrations stage playing those tasks."""
    job = load_experiment(job_file, [f"seed={seed}"])
    stages = job.stages[: [s.name for s in job.stages].index(AFTER_SFT) + 1]
    env = get_env(job.env).name
    pages = env.removeprefix(MINIWOB).split(",") if env.startswith(MINIWOB) else None
    forms = MINIWOB + ",".join(p for p in pages if p in SYNTH_TASKS) if pages else None
    # Every reached state with one change or more: the jobs' own tasks include short ones.
    synthesize = SynthesizeStage(
        env=forms,
        episodes=how.explore * MATCHED_EXPLORE if how.matched else how.explore,
        seed=seed,
        min_steps=1,
        match_difficulty="train" if how.matched else None,
    )
    if how.env_expert:
        stages = [
            s.model_copy(update={"policy": "expert"}) if isinstance(s, DemonstrationStage) else s
            for s in stages
        ]
    synth: list[Any] = [synthesize]
    for stage in stages:
        if isinstance(stage, DemonstrationStage):
            synth.append(stage.model_copy(update={"tasks_from": synthesize.name}))
        elif stage.name != BASE:
            synth.append(stage)
    return {
        "hand": job.model_copy(update={"stages": stages}),
        "synth": job.model_copy(update={"stages": synth}),
    }


def _success(results: dict[str, Any], stage: str) -> float:
    record = next(s for s in results["stages"] if s["name"] == stage)
    return float(record["summary"]["success"])


def _mean_shortest(tasks: list[Any]) -> float:
    lengths = [len(KeyBoard.from_task(t).shortest_path() or []) for t in tasks]
    return round(sum(lengths) / len(lengths), 2)


def _keydoor_seed(
    seed: int, sizes: dict[str, int], out: Path, matched: bool
) -> tuple[dict[str, float], dict[str, Any]]:
    """Both keydoor arms of ``seed``: held-out success per arm (and the base weights'), and
    what synthesis kept."""
    row: dict[str, float] = {}
    made: dict[str, Any] = {}
    for arm in ("hand", "synth"):
        exp = _experiment(arm, seed, sizes, out, matched)
        results = ExperimentRunner(exp, console=Console(stderr=True, quiet=True)).run()
        if arm == "hand":
            row["base"] = _success(results, "base")
        else:
            synth = next(s for s in results["stages"] if s["name"] == "synthesize")
            tasks = TaskSet.from_jsonl(out / exp.name / synth["path"])
            explored = get_env(ENV).tasks(synth["explored"], seed=seed, split="train")
            shortest = {"synth": _mean_shortest(list(tasks)), "train": _mean_shortest(explored)}
            made = {**{k: synth[k] for k in ("explored", "kept", "dropped")}, "mean_shortest": shortest}  # fmt: skip
        row[arm] = _success(results, AFTER_SFT)
    return row, made


def _job_seed(
    job: str, seed: int, how: JobArms, out: Path
) -> tuple[dict[str, float], dict[str, Any]]:
    """Both arms of job ``job`` for ``seed``, in ``OUT/<job>-<arm>-s<seed>``."""
    row: dict[str, float] = {}
    made: dict[str, Any] = {}
    for arm, exp in _job_arms(JOBS[job], seed, how).items():
        runner = ExperimentRunner(exp, run_dir=out / f"{job}-{arm}-s{seed}")
        results = runner.run()
        if arm == "hand":
            row["base"] = _success(results, BASE)
        else:
            synth = next(s for s in results["stages"] if s["name"] == "synthesize")
            made |= {k: synth[k] for k in ("explored", "kept", "dropped")}
        demos = next(s for s in results["stages"] if s["name"] == "demonstrations")
        made[f"{arm}_demonstrations"] = demos["solved"]
        made[f"{arm}_batched"] = _batched_share(runner.store_path, demos["run_id"])
        row[arm] = _success(results, AFTER_SFT)
        after = next(s for s in results["stages"] if s["name"] == AFTER_SFT)
        cut, episodes = after["summary"]["status"].get("truncated", 0), after["summary"]["episodes"]
        row[f"{arm}_truncated"] = round(cut / episodes, 4)
        row[f"{arm}_tool_errors"] = round(after["summary"]["tool_error_rate"], 4)
        if job == "web":
            row |= {f"{arm}_{k}": v for k, v in _form_split(runner.store_path, after["run_id"]).items()}  # fmt: skip
        if job == "calculator":
            row[f"{arm}_by_shape"] = _shape_split(runner.store_path, after["run_id"])
    return row, made


def _shape(steps: list[str]) -> str:
    """A calculator solution's shape: per step its operator and whether each operand is a
    number of the problem (``n``) or an earlier result (``r``), e.g. ``n*n r-n``."""
    results: list[str] = []
    parts: list[str] = []
    for step in steps:
        left, op, right = step.split()
        parts.append(f"{'r' if left in results else 'n'}{op}{'r' if right in results else 'n'}")
        results.append(format_number(safe_eval(step)))
    return " ".join(parts)


def _shape_split(store_path: Path, run_id: str) -> dict[str, list[int]]:
    """Held-out episodes solved and played per solution shape of an eval run: which kinds of
    problem the synthesized stories taught, and which they did not."""
    counts: dict[str, list[int]] = {}
    with TrajectoryStore(store_path) as store:
        for t in store.iter_query(run=run_id):
            tally = counts.setdefault(_shape(t.task.data["steps"]), [0, 0])
            tally[0] += is_success(t.outcome.status, t.outcome.reward)
            tally[1] += 1
    return dict(sorted(counts.items()))


def _batched_share(store_path: Path, run_id: str) -> float:
    """The share of a run's episodes with a reply of more than one tool call: a teacher that
    batches its actions teaches replies a job's per-turn token limit may cut."""
    with TrajectoryStore(store_path) as store:
        batched = [any(len(m.tool_calls) > 1 for m in t.messages) for t in store.iter_query(run=run_id)]  # fmt: skip
    return round(sum(batched) / len(batched), 4)


def _form_split(store_path: Path, run_id: str) -> dict[str, float]:
    """Held-out success of an eval run on the pages synthesis makes tasks of (``forms``) and on
    the job's other pages (``other``): what synthesized tasks teach, and what they cannot."""
    wins: dict[str, list[bool]] = {"forms": [], "other": []}
    with TrajectoryStore(store_path) as store:
        for row in store.summaries(run=run_id):
            page = row["task_id"].split("/", 1)[0]
            wins["forms" if page in SYNTH_TASKS else "other"].append(
                is_success(row["status"], row["reward"])
            )
    return {k: round(sum(v) / len(v), 4) for k, v in wins.items() if v}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", choices=("keydoor", *JOBS), default="keydoor")
    parser.add_argument("--quick", action="store_true", help="1 seed at small sizes: minutes")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument(
        "--match-difficulty",
        action="store_true",
        help="synth arm: explore 10x and match the training split's solution lengths",
    )
    parser.add_argument("--explore", type=int, default=None, help="a job's exploration episodes")  # fmt: skip
    parser.add_argument(
        "--env-expert", action="store_true", help="a job's arms: the env's expert as the teacher"
    )
    parser.add_argument("--out", type=Path, default=None, help="run folders (default: temp)")
    args = parser.parse_args()
    sizes = PRESETS["quick" if args.quick else "full"]
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    synthesized: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        for seed in seeds:
            if args.env in JOBS:
                explore = args.explore or EXPLORE[args.env]
                how = JobArms(explore, args.match_difficulty, args.env_expert)
                row, made = _job_seed(args.env, seed, how, out)
            else:
                row, made = _keydoor_seed(seed, sizes, out, args.match_difficulty)
            rows.append({"seed": seed, **row})
            synthesized.append(made)
            print(f"  seed {seed}: base {row['base']:.3f}, hand-written {row['hand']:.3f}, "
                  f"synthesized {row['synth']:.3f}; {made}", flush=True)  # fmt: skip
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in ("base", "hand", "synth")}
    hand_gain, synth_gain = mean["hand"] - mean["base"], mean["synth"] - mean["base"]
    ratio = round(synth_gain / hand_gain, 3) if hand_gain > 0 else None
    gap = difference_ci95([r["synth"] - r["hand"] for r in rows])
    job = JOBS.get(args.env)
    print(
        json.dumps(
            {
                "bench": "synthesis",
                "env": str(job.relative_to(EXAMPLES.parent)) if job else ENV,
                "model": "embedded" if job else "pocket",
                "quick": args.quick,
                "match_difficulty": args.match_difficulty,
                "env_expert": args.env_expert,
                "sizes": {"explore": args.explore or EXPLORE[args.env]} if job else sizes,
                "seeds": seeds,
                "per_seed": rows,
                "mean": {k: round(v, 4) for k, v in mean.items()},
                "hand_gain": round(hand_gain, 4),
                "synth_gain": round(synth_gain, 4),
                "synth_minus_hand": round(gap.mean, 4),
                "synth_minus_hand_ci95": (round(gap.low, 4), round(gap.high, 4)),
                "synthesized": synthesized,
                "cpus": os.cpu_count(),
                "wall_s": round(time.perf_counter() - started, 1),
                "ratio": ratio,
            }
        )
    )


if __name__ == "__main__":
    main()
