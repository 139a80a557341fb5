"""Context management where the full history does not fit: keydoor-compact under a token budget
below an expert episode's length, four ways of keeping within it, from one SFT checkpoint.

The pocket policy (a 7M-parameter Llama from scratch, SmolLM2's template) is taught by
trajforge's SFT on two sets of expert demonstrations: whole episodes in one growing context, and
episodes under ``context.strategy: fold`` played by ``bench/fold_expert.py`` (a shortest path and,
every 3 moves, a ``fold`` call whose summary is the current observation). Then, per seed, on
held-out boards drawn with that seed, greedy, every turn capped at the tokens a fold call takes:

- ``cut``: no management (``none``): a turn that would pass the budget ends the episode;
- ``keep_last``: the task and the last ``--keep`` turns;
- ``summary``: the task, one rule-written line per older turn and the last ``--keep`` turns;
- ``fold_sft``: the SFT checkpoint folding its own context (the fold tool offered);
- ``fold_rl``: the same after ``--rl-steps`` GRPO steps with the fold tool (seeded), its fold
  calls and summaries trained tokens.

``--budget`` is the budget of the arms without the tool; the fold arms' is larger by what the
fold tool's description costs in the system prompt (measured), so every arm has the same room
for the episode itself. An expert episode's full history is measured and printed beside it.

    .venv/bin/python bench/context.py --quick               # tiny model, ~1-2 min: the plumbing
    .venv/bin/python bench/context.py --out runs/context    # pocket, 2 CPU cores

Prints per arm the held-out success (mean over seeds, 95% Student-t interval; pooled Wilson),
per seed, the folds per episode, the episodes ended by the budget, the largest forward, the RL
reward and success per step, then ONE JSON line: ``ratio`` = fold_rl / keep_last success
(null when keep_last's is 0), ``max_prompt_tokens`` the most tokens any forward held (prompt
and completion) beside the budgets. Finished stages and evals in ``--out`` are resumed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from over_seeds import over_seeds, step_curve
from rich.console import Console

from trajforge.judge.best_of import Rate
from trajforge.pipeline.experiment import Experiment
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.policy import load_policy
from trajforge.rollout import Limits, PolicyRef, RolloutSpec, Sampling, TaskSample, run_rollout
from trajforge.rollout.context import FOLD_TOOL, ContextSpec
from trajforge.schema import Message, Role, Trajectory, is_success

ENV = "keydoor-compact"
FOLD_EXPERT = Path(__file__).resolve().parent / "fold_expert.py"
MAX_NEW_TOKENS = 48
"""Every turn's cap, in every arm: a fold call carrying an observation takes ~40 tokens."""
MAX_TURNS = 20
"""The expert's longest path (12 moves) and its folds, with room to spare."""
VALIDATION_SEED = 1000
"""Added to a seed to draw validation boards from the training split, away from the
demonstrations' seeds (0 and 1)."""
DEMO_SLACK = Sampling().max_new_tokens - MAX_NEW_TOKENS
ARMS = ("cut", "keep_last", "summary", "fold_sft", "fold_rl")
SFT_TRAIN = {
    # The credit bench's SFT of the pocket model from scratch (examples/keydoor/cpu.yaml); 11
    # passes over ~300 rows is ~200 steps. At 6 passes over ~440 rows (168 steps, fold calls
    # ~3/4 of the trained tokens) the model bumped into walls and solved nothing.
    "batch_size": 16,
    "micro_batch_tokens": 32768,
    "optim": {"lr": 3.0e-3, "schedule": "cosine", "warmup_steps": 5},
}
QUICK = {"tasks": 3, "demos": 3, "sft_steps": 2, "rl_steps": 1, "groups": 2, "samples": 2}


class Arm(NamedTuple):
    """One arm and seed on the held-out boards."""

    won: int
    n: int
    peak: int
    folds: float
    over_budget: int


def _log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def _fold_overhead() -> tuple[int, int]:
    """The tokens of keydoor-compact's opening alone and with the fold tool offered."""
    policy = load_policy("expert", expert=lambda task, messages: None)
    opening = [
        Message(role=Role.SYSTEM, content="Reach G."),
        Message(role=Role.USER, content="G R1 + R"),
    ]
    return (
        policy.start_session(opening, []).num_tokens,
        policy.start_session(opening, [FOLD_TOOL]).num_tokens,
    )


def _spec(
    policy: str, tasks: int, seed: int, context: ContextSpec | None, split: str = "test"
) -> RolloutSpec:
    """Greedy on ``tasks`` boards of ``split``; training-split boards (validation) are drawn
    with ``seed + VALIDATION_SEED`` so that they are not the demonstrations' boards."""
    board_seed = seed + VALIDATION_SEED if split == "train" else seed
    return RolloutSpec(
        env=ENV,
        policy=PolicyRef(name=policy, batch_size=32, precision="fp32"),
        tasks=TaskSample(count=tasks, split=split, seed=board_seed),
        limits=Limits(max_turns=MAX_TURNS, max_new_tokens=MAX_NEW_TOKENS),
        context=context,
        sampling=Sampling(temperature=0.0, max_new_tokens=MAX_NEW_TOKENS),
        seed=seed,
    )


def _episodes(trajs: list[Trajectory]) -> list[Trajectory]:
    """Each episode's own trajectory (its last segment)."""
    return [t for t in trajs if not t.is_earlier_segment]


def _expert_lengths(tasks: int) -> list[int]:
    """The tokens of each expert episode's full history on held-out boards (seed 0)."""
    whole = ContextSpec(strategy="none", budget=10**6)
    episodes = _episodes(run_rollout(_spec("expert", tasks, 0, whole)))
    return sorted(t.metadata["context"]["peak_tokens"] for t in episodes)


def _contexts(args: argparse.Namespace, fold_budget: int) -> dict[str, ContextSpec]:
    keep, budget = args.keep, args.budget
    fold = ContextSpec(strategy="fold", budget=fold_budget)
    return {
        "cut": ContextSpec(strategy="none", budget=budget),
        "keep_last": ContextSpec(strategy="keep_last", budget=budget, keep_turns=keep),
        "summary": ContextSpec(strategy="summary", budget=budget, keep_turns=keep),
        "fold_sft": fold,
        "fold_rl": fold,
    }


def _sft(args: argparse.Namespace, fold: ContextSpec, out: Path) -> str:
    """Demonstrations (whole episodes, and folding ones) and SFT on both; the checkpoint."""
    optim = {**SFT_TRAIN["optim"], "lr": args.sft_lr}
    train: dict[str, Any] = {**SFT_TRAIN, "epochs": args.sft_epochs, "optim": optim}
    if args.quick:
        train.update(epochs=1, max_steps=QUICK["sft_steps"], batch_size=4)
    demos = {"kind": "demonstrations", "max_turns": MAX_TURNS}
    exp = Experiment.model_validate(
        {
            "name": "context-sft",
            "env": ENV,
            "model": args.model,
            "precision": "fp32",
            "stages": [
                {**demos, "name": "whole", "policy": "expert", "tasks": args.demos},
                {
                    **demos,
                    "name": "folding",
                    "policy": f"script:{FOLD_EXPERT}:fold_expert",
                    "tasks": args.fold_demos,
                    "seed": 1,
                    # A demonstrations stage caps a turn at the sampling default, which the
                    # expert never uses: the budget grows by the difference, the prompts do not.
                    "context": fold.model_copy(
                        update={"budget": fold.budget + DEMO_SLACK}
                    ).model_dump(),
                },
                {
                    "kind": "sft",
                    "name": "sft",
                    "demonstrations": ["whole", "folding"],
                    "train": train,
                },
            ],
        }
    )
    results = ExperimentRunner(exp, run_dir=out / exp.name, console=Console(stderr=True)).run()
    by_name = {s["name"]: s for s in results["stages"]}
    for name in ("whole", "folding"):
        _log(f"demonstrations {name}: {by_name[name].get('text')}")
    if by_name["sft"].get("status") != "done":
        raise SystemExit(f"the SFT stage did not finish: {by_name['sft'].get('error')}")
    return str(by_name["sft"]["model"])


def _rl(
    args: argparse.Namespace, model: str, fold: ContextSpec, seed: int, out: Path
) -> dict[str, Any]:
    """GRPO from ``model`` with the fold tool offered; the RL stage's record."""
    train = {
        "context": fold.model_dump(),
        "num_tasks": 256,
        "steps": args.rl_steps,
        "epochs_per_step": 2,
        "groups_per_step": args.groups,
        "samples_per_group": args.samples,
        "estimator": "grpo",
        "loss": "ppo_clip",
        "temperature": 1.0,
        "max_turns": MAX_TURNS,
        "max_new_tokens": MAX_NEW_TOKENS,
        "filter_zero_advantage": True,
        "micro_batch_tokens": 4096,
        "optim": {"lr": args.rl_lr},
    }
    exp = Experiment.model_validate(
        {
            "name": f"context-rl-s{seed}",
            "env": ENV,
            "model": model,
            "seed": seed,
            "precision": "fp32",
            "stages": [{"kind": "rl", "name": "rl", "train": train}],
        }
    )
    results = ExperimentRunner(exp, run_dir=out / exp.name, console=Console(stderr=True)).run()
    (record,) = [s for s in results["stages"] if s["name"] == "rl"]
    if record.get("status") != "done":
        raise SystemExit(f"the RL stage of seed {seed} did not finish: {record.get('error')}")
    return dict(record)


def _held_out(
    model: str, tasks: int, seed: int, context: ContextSpec, split: str, cache: Path
) -> Arm:
    """Greedy on ``tasks`` boards of ``split`` and ``seed`` (read back from ``cache`` when
    done)."""
    if cache.is_file():
        return Arm(*json.loads(cache.read_text()))
    episodes = _episodes(run_rollout(_spec(model, tasks, seed, context, split)))
    meta = [t.metadata["context"] for t in episodes]
    arm = Arm(
        won=sum(is_success(t.outcome.status, t.outcome.reward) for t in episodes),
        n=len(episodes),
        peak=max(m["peak_tokens"] for m in meta),
        folds=round(statistics.mean(m["segments"] - 1 for m in meta), 2),
        over_budget=sum("context_budget" in (t.outcome.error or "") for t in episodes),
    )
    cache.write_text(json.dumps(arm))
    return arm


def _row(runs: list[Arm], budget: int) -> dict[str, Any]:
    won, n = sum(r.won for r in runs), sum(r.n for r in runs)
    pooled = Rate.of(won, n)
    per_seed = [round(r.won / r.n, 4) for r in runs]
    return {
        "seeds": over_seeds(per_seed),
        "per_seed": per_seed,
        "pooled": {
            "success": round(pooled.value, 4),
            "ci95": (round(pooled.low, 4), round(pooled.high, 4)),
            "n": n,
        },
        "folds_per_episode": round(statistics.mean(r.folds for r in runs), 2),
        "ended_by_budget": sum(r.over_budget for r in runs),
        "max_prompt_tokens": max(r.peak for r in runs),
        "budget": budget,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the tiny model, micro sizes")
    parser.add_argument("--model", default="pocket", help="the model SFT starts from")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=256, help="tokens a forward may hold (arms without the fold tool)")  # fmt: skip
    parser.add_argument("--keep", type=int, default=2, help="turns keep_last and summary keep whole")  # fmt: skip
    parser.add_argument("--tasks", type=int, default=50, help="held-out boards per seed")
    parser.add_argument("--split", choices=("test", "train"), default="test",
                        help="the boards the arms play: test (held out) or train (validation, "
                        "for choosing settings)")  # fmt: skip
    parser.add_argument("--demos", type=int, default=100, help="boards of whole expert episodes")
    parser.add_argument("--fold-demos", type=int, default=60, help="boards of folding expert episodes")  # fmt: skip
    parser.add_argument("--sft-epochs", type=int, default=11, help="passes over both demonstration sets")  # fmt: skip
    parser.add_argument("--sft-lr", type=float, default=3.0e-3,
                        help="SFT's peak rate (lower when --model is a checkpoint that plays)")  # fmt: skip
    parser.add_argument("--rl-steps", type=int, default=4)
    parser.add_argument("--groups", type=int, default=8, help="boards per RL step")
    parser.add_argument("--samples", type=int, default=8, help="samples per board")
    parser.add_argument("--rl-lr", type=float, default=3.0e-4)
    parser.add_argument("--out", type=Path, default=None, help="run folder, resumed (default: a temp dir)")  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.model = "tiny"
        args.tasks, args.rl_steps = QUICK["tasks"], QUICK["rl_steps"]
        args.demos = args.fold_demos = QUICK["demos"]
        args.groups, args.samples = QUICK["groups"], QUICK["samples"]
    out = args.out or Path(tempfile.mkdtemp(prefix="context-"))
    evals = out / ("evals" if args.split == "test" else f"evals-{args.split}")
    evals.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    bare, with_tool = _fold_overhead()
    fold_budget = args.budget + with_tool - bare
    contexts = _contexts(args, fold_budget)
    lengths = _expert_lengths(args.tasks)
    _log(f"expert full history on {len(lengths)} held-out boards: min {lengths[0]}, median "
         f"{statistics.median(lengths)}, max {lengths[-1]} tokens; budget {args.budget} "
         f"(fold arms {fold_budget}: the fold tool costs {with_tool - bare})")  # fmt: skip
    sft_model = _sft(args, contexts["fold_sft"], out)
    _log(f"SFT checkpoint {sft_model} ({time.monotonic() - started:.0f} s)")

    runs: dict[str, list[Arm]] = {arm: [] for arm in ARMS}
    records: list[dict[str, Any]] = []
    for seed in args.seeds:
        for arm in ARMS[:-1]:
            runs[arm].append(_held_out(sft_model, args.tasks, seed, contexts[arm], args.split, evals / f"{arm}-s{seed}.json"))  # fmt: skip
            _log(f"seed {seed} {arm}: {runs[arm][-1]}")
        record = _rl(args, sft_model, contexts["fold_rl"], seed, out)
        records.append(record)
        runs["fold_rl"].append(_held_out(str(record["model"]), args.tasks, seed, contexts["fold_rl"], args.split, evals / f"fold_rl-s{seed}.json"))  # fmt: skip
        _log(f"seed {seed} fold_rl: {runs['fold_rl'][-1]} ({time.monotonic() - started:.0f} s)")

    arms = {arm: _row(runs[arm], contexts[arm].budget) for arm in ARMS}
    histories = [r["history"] for r in records]
    curves = {key: step_curve(histories, key) for key in ("reward_mean", "success_rate")}
    keep_last, fold_rl = arms["keep_last"]["seeds"]["mean"], arms["fold_rl"]["seeds"]["mean"]
    print(
        f"{ENV}, model {args.model} -> SFT, seeds {args.seeds}, {args.tasks} {args.split}-split boards a seed"
    )
    print(f"  expert full history: min {lengths[0]}, median {statistics.median(lengths)}, max {lengths[-1]} tokens")  # fmt: skip
    for arm, row in arms.items():
        print(f"  {arm:<9} success {row['seeds']['mean']:.3f}  95% CI over seeds {row['seeds']['ci95']}"
              f"  pooled {row['pooled']['ci95']}  per seed {row['per_seed']}  folds/episode "
              f"{row['folds_per_episode']}  ended by budget {row['ended_by_budget']}"
              f"  max forward {row['max_prompt_tokens']} <= {row['budget']}")  # fmt: skip
    print(f"  fold_rl RL reward per step {curves['reward_mean']}")
    print(f"  fold_rl RL success per step {curves['success_rate']}")
    result = {
        "bench": "context",
        "env": ENV,
        "model": args.model,
        "quick": args.quick,
        "seeds": args.seeds,
        "tasks": args.tasks,
        "split": args.split,
        "budget": args.budget,
        "fold_budget": fold_budget,
        "expert_history_tokens": {
            "min": lengths[0],
            "median": statistics.median(lengths),
            "max": lengths[-1],
        },
        "arms": arms,
        "rl_curves": curves,
        "max_prompt_tokens": max(row["max_prompt_tokens"] for row in arms.values()),
        "within_budget": all(row["max_prompt_tokens"] <= row["budget"] for row in arms.values()),
        "gain_points": round(100 * (fold_rl - keep_last), 1),
        "wall_s": round(time.monotonic() - started, 1),
        "ratio": round(fold_rl / keep_last, 3) if keep_last else None,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
