"""Test-time gains without new weights on keydoor: best-of-8 with a selector that does not read
an answer key, and an experience memory on vs off, on a partially successful model.

The model is the SFT checkpoint of ``examples/keydoor/cpu.yaml`` (keydoor-compact and the
7M-parameter ``pocket`` Llama taught by trajforge's own SFT on expert demonstrations), trained
here unless ``--model`` names a checkpoint already made. Then, on the same held-out test boards:

- pass@1: greedy (temperature 0), one attempt a board, what the model does alone;
- best-of-8: 8 samples a board at ``--temperature``; pass@1 of a sample, pass@8 (some sample
  solves it) and selected@8 for each selector: ``verifier`` (keydoor's verifier sees the goal
  reached on the board, never an answer key), ``logprob`` and ``majority``;
- memory: a memory built (templates) from the model's own sampled episodes on training boards,
  successes and failures, then the greedy eval again with ``--memory`` (top 3 by BM25).

Every rate has its Wilson 95% interval over the boards. The last line is ONE JSON object;
``ratio`` is selected@8 (the ``--select`` selector) over greedy pass@1; ``memory_gain`` is the
memory's change in points.

    .venv/bin/python bench/test_time.py --quick                   # tiny random model, ~1 min
    .venv/bin/python bench/test_time.py --out runs/test_time      # SFT'd pocket, 2 CPU cores
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from trajforge.judge.best_of import Rate, best_of_summary, select_best
from trajforge.judge.selectors import parse_selector
from trajforge.memory.distil import distil_rules
from trajforge.memory.items import write_memory
from trajforge.memory.live import Memory
from trajforge.pipeline.config import load_experiment
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.rollout import Limits, PolicyRef, RolloutSpec, Sampling, TaskSample, run_rollout
from trajforge.schema import Trajectory, is_success

ENV = "keydoor-compact"
PRESET = Path(__file__).resolve().parents[1] / "examples" / "keydoor" / "cpu.yaml"
SELECTORS = ("verifier", "logprob", "majority")


def _rate(trajs: list[Trajectory]) -> Rate:
    return Rate.of(sum(is_success(t.outcome.status, t.outcome.reward) for t in trajs), len(trajs))


def _json(rate: Rate) -> dict[str, float]:
    return {"value": rate.value, "low": rate.low, "high": rate.high}


def _sft_checkpoint(out: Path, overrides: list[str]) -> str:
    """Train the preset's demonstrations and SFT stages; the checkpoint folder."""
    exp = load_experiment(PRESET, [f"out_dir={out}", *overrides])
    exp = exp.model_copy(
        update={"stages": [s for s in exp.stages if s.name in ("demonstrations", "sft")]}
    )
    results = ExperimentRunner(exp, console=Console(stderr=True)).run()
    (sft,) = [s for s in results["stages"] if s["name"] == "sft"]
    if sft.get("status") != "done":
        raise SystemExit(f"the SFT stage did not finish: {sft.get('error')}")
    return str(sft["model"])


def _spec(
    model: str, args: argparse.Namespace, split: str, n: int, temperature: float
) -> RolloutSpec:
    tasks = args.train_tasks if split == "train" else args.tasks
    return RolloutSpec(
        env=ENV,
        policy=PolicyRef(name=model, batch_size=args.batch_size, precision="fp32"),
        tasks=TaskSample(count=tasks, split=split, seed=args.seed),
        n=n,
        limits=Limits(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens),
        sampling=Sampling(temperature=temperature, max_new_tokens=args.max_new_tokens),
        seed=args.seed,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="a checkpoint (default: train the SFT)")
    parser.add_argument("--quick", action="store_true", help="the tiny random model, few boards")
    parser.add_argument("--tasks", type=int, default=100, help="held-out test boards")
    parser.add_argument(
        "--train-tasks", type=int, default=100, help="boards the memory is built from"
    )
    parser.add_argument("--n", type=int, default=8, help="samples a board for best-of-N")
    parser.add_argument(
        "--select", default="verifier", choices=SELECTORS, help="the headline selector"
    )
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-turns", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--memory-k", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="SFT overrides")
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: a temp dir)")
    args = parser.parse_args()
    if args.quick:
        args.model = args.model or "tiny"
        args.tasks, args.train_tasks, args.n, args.max_turns = 4, 4, 2, 3
    out = args.out or Path(tempfile.mkdtemp(prefix="test-time-"))
    t0 = time.monotonic()
    model = args.model or _sft_checkpoint(out, args.set)
    trained_s = time.monotonic() - t0

    greedy = run_rollout(_spec(model, args, "test", 1, 0.0))
    sampled = run_rollout(_spec(model, args, "test", args.n, args.temperature))
    best: dict[str, Any] = {}
    for name in SELECTORS:
        selector = parse_selector(name)
        summary = best_of_summary(selector, select_best(selector, sampled))
        best[name] = _json(summary.selected_at_n)
        pass_at_1, pass_at_n = summary.pass_at_1, summary.pass_at_n

    experience = run_rollout(_spec(model, args, "train", 1, args.temperature))
    memory_path = out / "memory.jsonl"
    write_memory(memory_path, [distil_rules(t) for t in experience])
    memory = Memory.load(memory_path, ENV, k=args.memory_k)
    with_memory = run_rollout(_spec(model, args, "test", 1, 0.0), wrap_env=memory.wrap)

    base, remembered = _rate(greedy), _rate(with_memory)
    headline = best[args.select]["value"]
    result = {
        "bench": "test_time",
        "env": ENV,
        "model": model,
        "quick": args.quick,
        "tasks": args.tasks,
        "n": args.n,
        "temperature": args.temperature,
        "pass_at_1_greedy": _json(base),
        "pass_at_1_sampled": _json(pass_at_1),
        f"pass_at_{args.n}": _json(pass_at_n),
        f"selected_at_{args.n}": best,
        "select": args.select,
        "best_of_gain_points": 100 * (headline - base.value),
        "memory_items": len(memory.items),
        "memory_successes": sum(i.kind == "success" for i in memory.items),
        "memory_off": _json(base),
        "memory_on": _json(remembered),
        "memory_gain": 100 * (remembered.value - base.value),
        "train_s": round(trained_s, 1),
        "wall_s": round(time.monotonic() - t0, 1),
        "ratio": headline / base.value if base.value else None,
    }
    if not base.value:
        result["ratio_note"] = "greedy pass@1 is 0: no quotient; see best_of_gain_points"
    print(f"greedy pass@1 {base.text()}; sampled pass@1 {pass_at_1.text()}; "
          f"pass@{args.n} {pass_at_n.text()}")  # fmt: skip
    for name, rate in best.items():
        print(
            f"selected@{args.n} by {name}: {rate['value']:.3f} [{rate['low']:.3f}, {rate['high']:.3f}]"
        )
    print(f"memory off {base.text()}, on {remembered.text()} ({len(memory.items)} items)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
