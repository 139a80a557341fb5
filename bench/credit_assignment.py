"""Credit assignment on keydoor: GRPO, turn-level returns, GiGPO and GiGPO on tree rollouts from
the same SFT weights.

Two presets of one experiment: base eval -> expert demonstrations (a limited set) -> SFT ->
eval, run once; then, from that one SFT checkpoint, its RL stage runs once per arm and seed,
changing only the advantage estimator (and, in the last arm, how the groups are sampled):

- ``grpo``: the outcome reward normalised in its group, the same advantage on every turn;
- ``turn_returns``: per-turn discounted returns (key rewards plus the outcome), normalised in
  the group (``gamma`` 0.95);
- ``gigpo``: the episode advantage plus a step advantage from anchor-state groups (the same
  board, square and keys in several samples of a task; ``gamma`` 0.95, ``omega`` 1).
- ``gigpo_tree``: GiGPO on tree-structured rollouts (``tree: {branches: B}``): after a step's
  groups are played, one episode of each group is branched at a turn boundary drawn inside it,
  ``B`` branches replaying its turns up to there and sampling the rest, so the parent's turn
  and its branches share a state: a step-level group GiGPO compares, made on purpose rather
  than found by chance.

- ``--preset cpu`` (``examples/keydoor/cpu.yaml``, the default): ``keydoor-compact`` (the same
  boards in ~15 tokens a turn, one-letter moves) and the ``pocket`` policy, a 7M-parameter
  Llama built from scratch and taught by trajforge's own SFT; whole on two CPU cores.
- ``--preset gpu`` (``examples/keydoor/experiment.yaml``): the rendered boards, tool calls and
  SmolLM2-135M; ~2,000-token episodes, ~8 h a seed on two CPU cores (see its file).

Every arm has the same rollout budget and the same seeds, and is then evaluated greedily on the
same held-out boards. The budget is sampled tokens: steps x groups x ``S`` samples (the same
turn and token limits) for the first three. A branch samples only what follows its boundary:
its replayed turns are prefill (the parent's, from the prefix cache) and out of the loss. With
the boundary drawn uniformly after turn ``k`` in ``1 .. T-1`` of a ``T``-turn parent, a branch
replays ``k`` turns and samples about ``T - k``: half an episode on average (keydoor-compact's
turns are alike in size, one move of a few tokens). So the tree arm plays ``S' = S - B/2``
samples and ``B`` branches per group, ``S' + B/2 = S`` episodes' worth of sampled tokens, with
``B = 2 max(1, S // 4)`` (S = 8: 6 samples and 4 branches, groups of 10 episodes, a step-level
group of 5 at each branch point; the ``--model tiny`` run's S = 4: 3 and 2). That it matches is
an expectation, not a construction: per arm the bench prints the sampled episodes and the
sampled tokens per step it measured (the trainer's ``sampled_tokens``; ``branched_episodes``
and ``branch_replayed_tokens`` for the tree arm), so a reader can check. No
setting is chosen on those boards: the sizes and rates are the experiment file's (``--set``
changes them, as ``trajforge run`` overrides do), and any validation the RL stage does runs
on training-split tasks.

    .venv/bin/python bench/credit_assignment.py --model tiny              # micro sizes, ~1 min
    .venv/bin/python bench/credit_assignment.py --preset cpu --out runs/credit

Prints per arm the held-out success as the mean over seeds with a 95% Student-t interval, the
pooled episodes' 95% Wilson interval, the per-step training reward and success curves and the
validation success (training-split tasks) per step, episodes trained on, the sampled episodes
and tokens per step and GiGPO's share of steps in anchor groups (means over seeds) and the wall
time, then ONE JSON line. ``ratio`` is GiGPO's held-out gain over SFT divided by GRPO's
(success points); when GRPO's gain is zero or negative the ratio is null and both gains are
reported (``ratio_note`` says so): a quotient there would not mean "GiGPO gains more".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any, NamedTuple

import torch
from over_seeds import over_seeds, step_curve
from stage_records import done_record

from trajforge.judge.stats import wilson_ci95
from trajforge.pipeline.config import (
    EvalStage,
    Experiment,
    RLStage,
    SFTStage,
    load_experiment,
    rl_config,
)
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.train.rl import RLConfig

HELD_OUT = "held_out"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "keydoor"
PRESETS = {"cpu": EXAMPLES / "cpu.yaml", "gpu": EXAMPLES / "experiment.yaml"}


class Arm(NamedTuple):
    """An arm's advantage estimator and its options, and whether its groups grow by branches."""

    estimator: str
    options: dict[str, float]
    tree: bool = False


GIGPO = {"gamma": 0.95, "omega": 1.0}
ARMS = {
    "grpo": Arm("grpo", {}),
    "turn_returns": Arm("turn_returns", {"gamma": 0.95}),
    "gigpo": Arm("gigpo", GIGPO),
    "gigpo_tree": Arm("gigpo", GIGPO, tree=True),
}
# The micro run that proves the bench end to end with the tiny random model in minutes.
MICRO = [
    "eval.tasks=8",
    "eval.max_turns=6",
    "eval.max_new_tokens=40",
    "stages.demonstrations.tasks=8",
    "stages.sft.train.epochs=1",
    "stages.sft.train.max_steps=2",
    "stages.sft.train.batch_size=4",
    "stages.rl.train.num_tasks=8",
    "stages.rl.train.steps=2",
    "stages.rl.train.groups_per_step=2",
    "stages.rl.train.samples_per_group=4",
    "stages.rl.train.max_turns=6",
    "stages.rl.train.max_new_tokens=40",
]


def _wilson(successes: int, n: int) -> tuple[float, float]:
    """``wilson_ci95`` rounded for printing; no interval without episodes."""
    if n == 0:
        return (math.nan, math.nan)
    low, high = wilson_ci95(successes, n)
    return (round(low, 4), round(high, 4))


def _eval_counts(record: dict[str, Any]) -> tuple[int, int]:
    summary = record["summary"]
    return round(summary["success"] * summary["episodes"]), summary["episodes"]


def _rate(successes: int, n: int) -> dict[str, Any]:
    return {
        "success": round(successes / n, 4) if n else None,
        "ci95": _wilson(successes, n),
        "n": n,
    }


class Plan(NamedTuple):
    """The experiment up to its first RL stage, and the names the bench reads back."""

    prefix: Experiment
    rl: RLStage
    base_eval: str
    sft: str
    sft_eval: str


def _plan(exp: Experiment) -> Plan:
    """Split ``exp`` at its first RL stage, which must follow eval, sft, eval (in that order,
    other stages between them allowed)."""
    stages = exp.stages
    rl = next((i for i, s in enumerate(stages) if isinstance(s, RLStage)), len(stages))
    sft = max((i for i, s in enumerate(stages[:rl]) if isinstance(s, SFTStage)), default=None)
    base = next((i for i, s in enumerate(stages) if isinstance(s, EvalStage)), None)
    if rl == len(stages) or sft is None or base is None or base > sft:
        raise SystemExit(
            f"{exp.name}: the bench needs an eval stage, an sft stage, an eval stage right "
            "before the first rl stage, then that rl stage"
        )
    rl_stage, sft_eval = stages[rl], stages[rl - 1]
    if not isinstance(sft_eval, EvalStage) or not isinstance(rl_stage, RLStage):
        raise SystemExit(f"{exp.name}: the stage right before the first rl stage must be an eval")
    prefix = exp.model_copy(update={"stages": stages[:rl]})
    return Plan(prefix, rl_stage, stages[base].name, stages[sft].name, sft_eval.name)


def tree_budget(samples: int) -> tuple[int, int]:
    """The tree arm's samples per group and branches for the other arms' ``samples``: as many
    sampled tokens per group in expectation, a branch sampling half an episode (module doc)."""
    if samples < 2:
        raise SystemExit(
            f"samples_per_group {samples}: the gigpo_tree arm needs 2 or more (it gives half of "
            "them to branches)"
        )
    branches = 2 * max(1, samples // 4)
    return samples - branches // 2, branches


def arm_train(train: dict[str, Any], arm: str, samples: int) -> dict[str, Any]:
    """The RL stage's ``train`` overrides for ``arm``; ``samples``: the stage's samples per
    group, which the tree arm splits between samples and branches (``tree_budget``)."""
    spec = ARMS[arm]
    out = {**train, "estimator": spec.estimator, "estimator_kwargs": spec.options}
    if spec.tree:
        out["samples_per_group"], branches = tree_budget(samples)
        out["tree"] = {"branches": branches}
    return out


def _arm(
    prefix: Experiment, rl: RLStage, train: dict[str, Any], arm: str, seed: int, model: str
) -> Experiment:
    return Experiment.model_validate(
        {
            **prefix.model_dump(),
            "name": f"{prefix.name}-{arm}-s{seed}",
            "model": model,
            "seed": seed,
            "stages": [
                RLStage(name=rl.name, train=train).model_dump(),
                EvalStage(name=HELD_OUT).model_dump(),
            ],
        }
    )


def _validation(records: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """``(step, validation success)``, the mean over seeds, at the steps every seed validated
    (step 0 is the SFT weights); validation tasks are training-split tasks the RL never samples."""
    by_seed = [{p["step"]: float(p["success"]) for p in r.get("validation") or []} for r in records]
    steps = sorted(set.intersection(*(set(d) for d in by_seed))) if by_seed else []
    return [(step, round(sum(d[step] for d in by_seed) / len(by_seed), 3)) for step in steps]


def _mean(histories: list[list[dict[str, Any]]], key: str) -> float:
    """Metric ``key``'s mean over every step of every seed (0 where no step wrote it)."""
    values = [float(h[key]) for history in histories for h in history if key in h]
    return round(sum(values) / len(values), 1) if values else 0.0


def _sampled(
    histories: list[list[dict[str, Any]]], train: dict[str, Any], cfg: RLConfig
) -> dict[str, Any]:
    """What an arm sampled per step, means over steps and seeds: its episodes (the groups'
    samples and the branches kept), the tokens the policy sampled (the trainer's
    ``sampled_tokens``) and those its branches replayed (prefill only): the budget's check."""
    samples = int(train.get("samples_per_group", cfg.samples_per_group))
    branched = _mean(histories, "branched_episodes")
    return {
        "samples_per_group": samples,
        "branches": train.get("tree", {}).get("branches", 0),
        "sampled_episodes_per_step": round(cfg.groups_per_step * samples + branched, 1),
        "branched_episodes_per_step": branched,
        "sampled_tokens_per_step": _mean(histories, "sampled_tokens"),
        "replayed_tokens_per_step": _mean(histories, "branch_replayed_tokens"),
    }


def _worker_init(threads: int, bench: int) -> None:
    """A pool worker's torch threads, and its end once the bench process is gone: a killed
    bench's workers would otherwise play their arms out as orphans, holding the cores."""
    torch.set_num_threads(threads)

    def watch() -> None:
        while os.getppid() == bench:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="bench-watch", daemon=True).start()


class ArmRun(NamedTuple):
    """One arm and seed: its held-out wins of ``n`` episodes and its RL stage's record."""

    won: int
    n: int
    record: dict[str, Any]
    wall_s: float


def _run_arm(
    prefix: Experiment,
    rl: RLStage,
    train: dict[str, Any],
    arm: str,
    seed: int,
    model: str,
    out: Path,
) -> ArmRun:
    """RL from ``model`` with ``arm``'s ``train`` overrides and ``seed``, then the held-out
    eval (in a worker process of its own when ``--jobs`` > 1)."""
    started = time.perf_counter()
    run = _arm(prefix, rl, train, arm, seed, model)
    results = ExperimentRunner(run, run_dir=out / run.name).run()
    won, n = _eval_counts(done_record(results, HELD_OUT))
    return ArmRun(won, n, done_record(results, rl.name), time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=list(PRESETS), default="cpu",
                        help="cpu: keydoor-compact and the pocket policy; gpu: keydoor and SmolLM2")  # fmt: skip
    parser.add_argument("--model", default=None,
                        help="the preset's model, or tiny (micro sizes), pocket, embedded, a folder")  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="RL seeds, each arm")  # fmt: skip
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--experiment", type=Path, default=None, help="instead of the preset's")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="experiment overrides, e.g. stages.rl.train.steps=8")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1,
                        help="arms and seeds run at once, each a process (on 2 cores, 2 is ~1.5x faster)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None,
                        help="run folders kept here; finished stages are resumed (default: a temp dir)")  # fmt: skip
    args = parser.parse_args()
    if "grpo" not in args.arms or "gigpo" not in args.arms:
        parser.error("--arms: the ratio needs both grpo and gigpo")
    models = [f"model={args.model}"] if args.model else []
    overrides = [*(MICRO if args.model == "tiny" else []), *models, *args.set]
    exp = load_experiment(args.experiment or PRESETS[args.preset], overrides)
    plan = _plan(exp)
    prefix, rl = plan.prefix, plan.rl
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        cfg = rl_config(exp, exp.stages.index(rl), model=exp.model, run_dir=out)
        trains = {arm: arm_train(rl.train, arm, cfg.samples_per_group) for arm in args.arms}
        started = time.perf_counter()
        base_results = ExperimentRunner(prefix, run_dir=out / prefix.name).run()
        sft_wall = time.perf_counter() - started
        sft_model = done_record(base_results, plan.sft)["model"]
        base = _rate(*_eval_counts(done_record(base_results, plan.base_eval)))
        sft = _rate(*_eval_counts(done_record(base_results, plan.sft_eval)))
        runs = [(arm, seed) for arm in args.arms for seed in args.seeds]
        threads = max(1, (os.cpu_count() or 1) // args.jobs)
        with ProcessPoolExecutor(
            args.jobs, get_context("spawn"), _worker_init, (threads, os.getpid())
        ) as pool:
            futures = {
                (arm, seed): pool.submit(
                    _run_arm, prefix, rl, trains[arm], arm, seed, sft_model, out
                )
                for arm, seed in runs
            }
            finished = {r: f.result() for r, f in futures.items()}
        arms: dict[str, dict[str, Any]] = {}
        for arm in args.arms:
            per_arm = [finished[(arm, seed)] for seed in args.seeds]
            wins = sum(r.won for r in per_arm)
            episodes = sum(r.n for r in per_arm)
            per_seed = [round(r.won / r.n, 4) for r in per_arm]
            records = [r.record for r in per_arm]
            histories = [r["history"] for r in records]
            arms[arm] = {
                **_rate(wins, episodes),
                "seeds": over_seeds(per_seed),
                "per_seed": per_seed,
                "gain": round(wins / episodes - sft["success"], 4),
                "reward_curve": step_curve(histories, "reward_mean"),
                "success_curve": step_curve(histories, "success_rate"),
                "validation_curve": _validation(records),
                "kept_steps": [r.get("kept_step") for r in records],
                # Episodes the update trained on (groups with all-zero advantages are skipped)
                # and, for GiGPO, the share of steps in an anchor-state group of two or more.
                "trained_curve": step_curve(histories, "trained_trajectories"),
                "anchor_step_frac_curve": step_curve(histories, "anchor_step_frac"),
                **_sampled(histories, trains[arm], cfg),
                "wall_s": round(sum(r.wall_s for r in per_arm), 1),
            }
        total_wall = time.perf_counter() - started

    budget = cfg.steps * cfg.groups_per_step * cfg.samples_per_group
    print(
        f"{exp.env}, model {exp.model}, seeds {args.seeds}, {budget} RL episodes per arm and seed"
        " (gigpo_tree: as many sampled tokens, see the sampled figures)"
    )
    print(f"  base   held-out success {base['success']:.3f}  95% CI {base['ci95']}")
    print(
        f"  sft    held-out success {sft['success']:.3f}  95% CI {sft['ci95']}  ({sft_wall:.0f} s)"
    )
    for arm, row in arms.items():
        seeds = row["seeds"]
        print(
            f"  {arm:<12} held-out success {seeds['mean']:.3f}  95% CI over seeds {seeds['ci95']}"
            f"  (episodes pooled {row['ci95']})  gain {row['gain']:+.3f}  per seed "
            f"{row['per_seed']}  ({row['wall_s']:.0f} s)"
        )
        print(f"  {'':<12} validation success (step, mean) {row['validation_curve']}")
        print(f"  {'':<12} train reward per step {row['reward_curve']}")
        print(f"  {'':<12} train success per step {row['success_curve']}")
        print(f"  {'':<12} trained episodes per step {row['trained_curve']}")
        print(
            f"  {'':<12} per step: {row['samples_per_group']} samples + {row['branches']} "
            f"branches a group, sampled episodes {row['sampled_episodes_per_step']}, sampled "
            f"tokens {row['sampled_tokens_per_step']}, replayed tokens "
            f"{row['replayed_tokens_per_step']}"
        )
        if ARMS[arm].estimator == "gigpo":
            print(f"  {'':<12} anchor step share per step {row['anchor_step_frac_curve']}")
    grpo_gain, gigpo_gain = arms["grpo"]["gain"], arms["gigpo"]["gain"]
    ratio = round(gigpo_gain / grpo_gain, 3) if grpo_gain > 0 else None
    note = (
        "gigpo gain / grpo gain"
        if ratio is not None
        else "null: grpo's held-out gain over sft is <= 0, so no ratio; compare the two gains"
    )
    print(
        json.dumps(
            {
                "bench": "credit_assignment",
                "preset": args.preset,
                "model": exp.model,
                "seeds": args.seeds,
                "rl_episodes_per_arm_and_seed": budget,
                "cpus": os.cpu_count(),
                "base": base,
                "sft": sft,
                "arms": arms,
                "grpo_gain": grpo_gain,
                "gigpo_gain": gigpo_gain,
                "best_rl_gain": max(row["gain"] for row in arms.values()),
                "wall_s": round(total_wall, 1),
                "ratio": ratio,
                "ratio_note": note,
            }
        )
    )


if __name__ == "__main__":
    main()
