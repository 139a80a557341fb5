"""What the report claims stays true to the data: intervals inside [0, 1] for rates and rewards
in [0, 1], histograms that hide no stage, a one-step curve drawn as a point, failures beside wins,
and the RL diagnostics per step."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from trajforge.judge.scoring import summarize
from trajforge.judge.stats import wilson_ci95
from trajforge.report import plots
from trajforge.report.html import build_report
from trajforge.schema import Outcome, OutcomeStatus, Trajectory
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore

INTERVAL = re.compile(r"([\d.]+)%? \[([\d.]+)%?, ([\d.]+)%?\]")


def _scored(i: int, run_id: str, reward: float) -> Trajectory:
    t = synthetic_trajectory(i, run_id=run_id)
    return t.model_copy(update={"outcome": Outcome(status=OutcomeStatus.OK, reward=reward)})


def _run(tmp_path: Path, rewards: dict[str, list[float]], history: list[dict[str, Any]]) -> Path:
    """A run folder with one eval stage per entry of ``rewards`` and an RL stage's history."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    stages: list[dict[str, Any]] = []
    with TrajectoryStore(run_dir / "store.db") as db:
        for name, values in rewards.items():
            trajs = [_scored(i, f"demo.{name}", r) for i, r in enumerate(values)]
            db.add_many(trajs)
            summary = summarize(trajs).as_dict()
            stages.append(
                {"name": name, "kind": "eval", "run_id": f"demo.{name}", "summary": summary}
            )
    if history:
        stages.append({"name": "rl", "kind": "rl", "history": history, "text": "steps"})
    results = {"name": "demo", "env": "calculator", "model": "tiny", "stages": stages}
    (run_dir / "results.json").write_text(json.dumps(results))
    return run_dir


def test_wilson_ci95_matches_the_formula_and_stays_in_the_unit_interval() -> None:
    assert wilson_ci95(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    low, high = wilson_ci95(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    low, high = wilson_ci95(1, 1)
    assert 0.0 < low < 1.0 and high == 1.0
    with pytest.raises(ValueError, match="n = 0"):
        wilson_ci95(0, 0)


def test_intervals_of_rates_and_unit_rewards_lie_within_zero_and_one(tmp_path: Path) -> None:
    """Two episodes, one solved: Student's t would give the mean 0.5 an interval of about
    +-6.4; the evaluation's and the report's stay inside [0, 1], for the reward and for the
    success rate."""
    summary = summarize([_scored(0, "x", 0.0), _scored(1, "x", 1.0)]).as_dict()
    assert 0.0 < summary["reward_ci_low"] < 0.5 < summary["reward_ci_high"] < 1.0
    html = build_report(_run(tmp_path, {"base": [0.0, 1.0], "after": [1.0, 1.0]}, [])).read_text()
    table = html[html.index('<table class="results"') : html.index("</table>")]
    found = INTERVAL.findall(table)
    assert len(found) == 4  # success and reward of each stage
    for text in found:
        mean, low, high = (float(x) for x in text)
        scale = 100.0 if mean > 1.0 or high > 1.0 else 1.0
        assert 0.0 <= low <= mean <= high <= scale, text


def test_rewards_outside_the_unit_interval_keep_the_evaluations_interval(tmp_path: Path) -> None:
    html = build_report(_run(tmp_path, {"a": [0.0, 3.0], "b": [1.0, 2.0]}, [])).read_text()
    summary = summarize([_scored(0, "x", 0.0), _scored(1, "x", 3.0)]).as_dict()
    assert f"[{summary['reward_ci_low']:.3f}, {summary['reward_ci_high']:.3f}]" in html


def _count(uri: str, hex_color: str) -> int:
    """Pixels of exactly ``hex_color`` in a PNG data URI."""
    png = base64.b64decode(uri.split(",", 1)[1])
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3)
    rgb = [int(hex_color[i : i + 2], 16) for i in (1, 3, 5)]
    return int((pixels == rgb).all(axis=1).sum())


@pytest.mark.parametrize(
    ("values", "least"), [([1.0, 1.0, 2.0, 3.0], 10_000), ([10.0, 40.0, 40.0, 90.0], 200)]
)
def test_stages_with_the_same_histogram_both_stay_visible(values: list[float], least: int) -> None:
    """Identical data in two stages: each stage's own colour still shows well beyond its legend
    swatch (side-by-side bars over a small integer range, solid and dashed outlines over a large
    one), so neither hides the other; overlaid translucent bars showed neither pure colour."""
    uri = plots.distributions({"a": values, "b": values}, "t", "x")
    for color in plots._COLORS[:2]:
        assert _count(uri, color) > least, color


def test_a_one_step_curve_is_a_labelled_point(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[Any] = []
    monkeypatch.setattr(plots, "_to_data_uri", lambda fig: drawn.append(fig) or "")
    plots.curve([1], {"loss": [0.25]}, "one step", "loss")
    plots.curve([1, 2, 3], {"loss": [0.3, 0.2, 0.1]}, "three steps", "loss")
    one, three = (fig.axes[0] for fig in drawn)
    assert [line.get_linestyle() for line in one.lines] == ["None"]
    assert any("the only step" in t.get_text() and "0.25" in t.get_text() for t in one.texts)
    assert list(one.get_xticks()) == [1]
    assert [line.get_linestyle() for line in three.lines] == ["-"]


def test_samples_show_failures_beside_wins(tmp_path: Path) -> None:
    """Six tasks, four solved after training: of three samples two are wins and one a failure,
    labelled as such."""
    run_dir = _run(tmp_path, {"base": [0.0] * 6, "after": [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]}, [])
    html = build_report(run_dir, samples=3).read_text()
    labels = re.findall(r"<h3>Task \S+: .*? <span class=\"(?:ok|bad)\">(\w+)</span></h3>", html)
    assert labels == ["win", "win", "failure"]


def test_rl_diagnostics_are_plotted_per_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: dict[str, Any] = {}
    original = plots.panels

    def record(steps: Any, panels: Any, title: str) -> str:
        drawn.update(panels)
        return original(steps, panels, title)

    monkeypatch.setattr(plots, "panels", record)
    history = [
        {"step": s, "loss": 0.1, "reward_mean": 0.2 * s, "adv_std": 0.9, "kl_ref": 0.01 * s,
         "approx_kl": 0.0, "clip_frac": 0.02, "rollout_logprob_gap": 6e-4}
        for s in (1, 2, 3)
    ]  # fmt: skip
    html = build_report(_run(tmp_path, {"base": [0.0, 1.0]}, history)).read_text()
    assert 'alt="rl RL diagnostics per step"' in html
    assert set(drawn) == {"advantage spread", "KL", "clip fraction", "rollout logprob gap"}
    assert drawn["KL"] == {"kl_ref": [0.01, 0.02, 0.03], "approx_kl": [0.0, 0.0, 0.0]}
