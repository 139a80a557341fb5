from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trajforge.errors import DataError
from trajforge.judge.evaluate import summarize
from trajforge.report.html import build_report
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore

from .browser import check_page

EVALS = ("base", "after_sft", "after_rl")


def make_run_folder(run_dir: Path) -> Path:
    """A run folder as ``trajforge run`` leaves it: results.json plus a store."""
    run_dir.mkdir(parents=True, exist_ok=True)
    stages: list[dict[str, object]] = []
    with TrajectoryStore(run_dir / "store.db") as db:
        for k, name in enumerate(EVALS):
            run_id = f"demo.{name}"
            trajs = [synthetic_trajectory(i, turns=2 + k, run_id=run_id) for i in range(12)]
            db.add_many(trajs)
            stages.append(
                {"name": name, "kind": "eval", "status": "done", "run_id": run_id,
                 "summary": summarize(trajs).as_dict(), "duration_s": 12.0 + k}
            )  # fmt: skip
    history = [{"step": s, "loss": 1.0 / s, "reward_mean": 0.1 * s} for s in range(1, 6)]
    stages.insert(
        1, {"name": "sft", "kind": "sft", "status": "done", "history": history, "text": "5 steps"}
    )
    stages.insert(
        3, {"name": "rl", "kind": "rl", "status": "done", "history": history, "text": "5 steps"}
    )
    results = {
        "name": "demo",
        "env": "calculator",
        "model": "tiny",
        "store": "store.db",
        "stages": stages,
    }
    (run_dir / "results.json").write_text(json.dumps(results))
    return run_dir


def test_report_has_table_plots_and_samples(tmp_path: Path) -> None:
    report = build_report(make_run_folder(tmp_path / "run"))
    html = report.read_text()
    assert html.count("<tr><td>") == len(EVALS)
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    # success per stage, RL reward, RL loss, SFT loss, turns and tokens distributions
    assert len(images) == 6
    assert all(len(b64) > 1000 for b64 in images)
    assert "Sample trajectories: before and after training" in html
    assert "calculator(" in html  # tool calls are rendered


def test_report_refuses_a_folder_without_results(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no results\.json"):
        build_report(tmp_path)


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    from PIL import Image

    report = build_report(make_run_folder(tmp_path / "run"))
    page = check_page(report, tmp_path / "report.png")
    assert page.table_rows == len(EVALS)
    assert page.images == 6
    assert page.broken == 0
    with Image.open(page.screenshot) as shot:
        dark = sum(shot.convert("L").histogram()[:200])
    assert dark > 20_000, "the screenshot is (nearly) blank"
