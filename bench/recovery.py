"""Recovery with and without repair data: the arms of ``examples/recovery/experiment.yaml``.

Per seed, two runs of the experiment through the pipeline: the repair arm as written (SFT on
48 repair trajectories and 192 expert demonstrations) and the clean arm
(``stages.sft.demonstrations=demonstrations``: SFT on 240 expert demonstrations, as many steps). Both
are evaluated on the same held-out tasks as they are and with the first call forced to fail.
The recovery rate is held-out success under the forced fault.

``bench/triage.py --recovery-seeds N`` runs it and reports ``ratio`` = recovery with repair
data / without; alone: ``PYTHONPATH=src python bench/recovery.py --seeds 3``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from trajforge.judge.stats import mean_ci95, wilson_ci95
from trajforge.pipeline.config import load_experiment
from trajforge.pipeline.runner import ExperimentRunner

EXPERIMENT = Path(__file__).resolve().parents[1] / "examples" / "recovery" / "experiment.yaml"
ARMS = {"clean": ["stages.sft.demonstrations=demonstrations"], "repair": []}
EVALS = ("clean", "recovery")


def run_arm(arm: str, seed: int, out_dir: Path, extra: list[str]) -> dict[str, Any]:
    """One arm at one seed: per eval stage, successes and episodes; the repairs trained on."""
    overrides = [f"name=recovery_{arm}", f"seed={seed}", f"out_dir={out_dir}", *ARMS[arm]]
    exp = load_experiment(EXPERIMENT, [*overrides, *extra])
    results = ExperimentRunner(exp, console=Console(stderr=True)).run()
    stages = {s["name"]: s for s in results["stages"]}
    for name, stage in stages.items():
        if stage.get("status") != "done":
            raise SystemExit(f"{arm} arm, seed {seed}: stage {name} did not finish")
    row: dict[str, Any] = {"arm": arm, "seed": seed, "repairs": stages["repair"]["count"]}
    for name in EVALS:
        summary = stages[name]["summary"]
        solved = round(summary["success"] * summary["scored"])
        row[name] = {"solved": solved, "of": summary["episodes"]}
        row[f"{name}_s"] = round(stages[name]["duration_s"])
    row["sft_s"] = round(stages["sft"]["duration_s"])
    return row


def _rate(cell: dict[str, int]) -> float:
    return cell["solved"] / cell["of"]


def recovery_figures(seeds: int, extra: list[str], out: Path | None = None) -> dict[str, Any]:
    """Both arms over ``seeds`` seeds: per run the two evals with Wilson intervals, per arm
    the mean over seeds with a t-interval, and the repair arm's gain in recovery (paired by
    seed)."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="recovery-") as tmp:
        where = out or Path(tmp)
        for seed in range(seeds):
            for arm in ARMS:
                row = run_arm(arm, seed, where / f"seed{seed}", extra)
                rows.append(row)
                cells = ", ".join(
                    f"{name} {row[name]['solved']}/{row[name]['of']} {_wilson(row[name])}"
                    for name in EVALS
                )
                print(f"seed {seed} {arm}: {cells}; SFT {row['sft_s']} s", flush=True)
    figures: dict[str, Any] = {"recovery_runs": rows}
    for arm in ARMS:
        for name in EVALS:
            ci = mean_ci95([_rate(r[name]) for r in rows if r["arm"] == arm])
            figures[f"{arm}_{name}"] = [round(ci.mean, 4), round(ci.low, 4), round(ci.high, 4)]
    by_seed = {(r["arm"], r["seed"]): _rate(r["recovery"]) for r in rows}
    gains = [by_seed["repair", s] - by_seed["clean", s] for s in range(seeds)]
    gain = mean_ci95(gains)
    figures["recovery_gain"] = [round(gain.mean, 4), round(gain.low, 4), round(gain.high, 4)]
    before = figures["clean_recovery"][0]
    figures["recovery_ratio"] = round(figures["repair_recovery"][0] / before, 3) if before else None
    return figures


def _wilson(cell: dict[str, int]) -> str:
    low, high = wilson_ci95(cell["solved"], cell["of"])
    return f"[{100 * low:.0f}, {100 * high:.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE overrides for both arms")
    args = parser.parse_args()
    figures = recovery_figures(args.seeds, args.overrides, args.out)
    print(json.dumps({"bench": "recovery", **figures, "ratio": figures["recovery_ratio"]}))


if __name__ == "__main__":
    main()
