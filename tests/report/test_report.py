from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from image_samples import png_bytes
from trajforge.errors import DataError
from trajforge.judge.scoring import summarize
from trajforge.report.html import build_report
from trajforge.schema import Fault, ImagePart, Outcome, OutcomeStatus, Role, TextPart, Trajectory
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


def test_report_names_the_view_command_and_escapes_stored_text(tmp_path: Path) -> None:
    run_dir = make_run_folder(tmp_path / "run dir")
    with TrajectoryStore(run_dir / "store.db") as db:
        for traj in db.query():  # the samples shown are some of them
            user = next(m for m in traj.messages if m.role is Role.USER)
            user.content = "<script>alert(1)</script> what is 2 < 3?"
            db.put(traj)
    html = build_report(run_dir).read_text()
    assert f"<code>trajforge view &#39;{run_dir.resolve()}&#39;</code>" in html
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; what is 2 &lt; 3?" in html


def test_report_shows_message_images_inline(tmp_path: Path) -> None:
    run_dir = make_run_folder(tmp_path / "run")
    picture = ImagePart.from_bytes(png_bytes(3))
    with TrajectoryStore(run_dir / "store.db") as db:
        for traj in db.query():
            user = next(m for m in traj.messages if m.role is Role.USER)
            user.content = [TextPart(text=user.text), picture]
            db.put(traj)
    html = build_report(run_dir).read_text()
    assert f'<img class="shot" src="{picture.data_url()}"' in html
    assert "[image image/png" in html  # its label, as alt text


def _with_outcome(t: Trajectory, status: OutcomeStatus, reward: float | None) -> Trajectory:
    return t.model_copy(update={"outcome": Outcome(status=status, reward=reward)})


def test_report_states_how_many_episodes_were_scored(tmp_path: Path) -> None:
    """Base: 3 episodes cut off unscored; after: 3 solved. An old summary without ``scored``
    still renders its episode count."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    stages: list[dict[str, object]] = []
    with TrajectoryStore(run_dir / "store.db") as db:
        for name, status, reward in (
            ("base", OutcomeStatus.TRUNCATED, None),
            ("after", OutcomeStatus.OK, 1.0),
        ):
            run_id = f"demo.{name}"
            trajs = [
                _with_outcome(synthetic_trajectory(i, run_id=run_id), status, reward)
                for i in range(3)
            ]
            db.add_many(trajs)
            summary = summarize(trajs).as_dict()
            stages.append({"name": name, "kind": "eval", "run_id": run_id, "summary": summary})
    old = dict(stages[1]["summary"])  # type: ignore[call-overload]
    del old["scored"]
    stages.insert(1, {"name": "old", "kind": "eval", "summary": old})
    results = {"name": "demo", "env": "calculator", "model": "tiny", "stages": stages}
    (run_dir / "results.json").write_text(json.dumps(results))
    html = build_report(run_dir).read_text()
    rows = re.findall(
        r"<tr><td>(\w+)</td><td>(.*?)</td>\s*<td>(.*?)</td>.*?<td>([^<]*)</td><td>[^<]*</td></tr>",
        html,
        re.S,
    )
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("base", "n/a", "-", "scored 0/3"),  # nothing scored: no success rate to state
        # Without its trajectories a stage shows the interval its evaluation recorded.
        ("old", "100.0% [43.9%, 100.0%]", "1.000 [0.439, 1.000]", "3"),
        # Three rewards of 1 leave room below 1: Wilson's interval says how much.
        ("after", "100.0% [43.9%, 100.0%]", "1.000 [0.439, 1.000]", "scored 3/3"),
    ]
    assert html.count('reward unscored <span class="bad">not solved</span>') == 3
    assert html.count('reward 1.00 <span class="ok">solved</span>') == 3


def test_report_shows_pass_hat_k_beside_pass_at_k(tmp_path: Path) -> None:
    """Two tasks of two samples: one solved twice, one once. pass@2 is 100%, pass^2 50%."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    trajs = [
        _with_outcome(
            synthetic_trajectory(i, run_id="demo.ev", samples_per_task=2),
            OutcomeStatus.OK,
            0.0 if i == 3 else 1.0,
        )
        for i in range(4)
    ]
    with TrajectoryStore(run_dir / "store.db") as db:
        db.add_many(trajs)
    summary = summarize(trajs, ks=[1, 2]).as_dict()
    assert summary["pass_at"] == {"1": 0.75, "2": 1.0}
    assert summary["pass_hat"] == {"1": 0.75, "2": 0.5}
    stage = {"name": "ev", "kind": "eval", "run_id": "demo.ev", "summary": summary}
    results = {"name": "demo", "env": "retail", "model": "tiny", "stages": [stage]}
    (run_dir / "results.json").write_text(json.dumps(results))
    html = build_report(run_dir).read_text()
    assert "<th>pass@1</th><th>pass@2</th><th>pass^2</th>" in html
    assert re.search(r"<td>75\.0%</td><td>100\.0%</td>\s*<td>50\.0%</td>", html)


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


def test_report_shows_every_eval_stage_side_by_side_and_what_rl_fixed_first(
    tmp_path: Path,
) -> None:
    """Task 2 failed at base and after SFT and was solved after RL: it comes first, with its
    three trajectories in stage order; task 1 (fixed by SFT) follows."""
    solved_at = {"base": set(), "after_sft": {1, 3}, "after_rl": {1, 2, 3}}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    stages: list[dict[str, object]] = []
    with TrajectoryStore(run_dir / "store.db") as db:
        for name, solved in solved_at.items():
            run_id = f"demo.{name}"
            trajs = [
                _with_outcome(
                    synthetic_trajectory(i, run_id=run_id),
                    OutcomeStatus.OK,
                    1.0 if i in solved else 0.0,
                )
                for i in range(4)
            ]
            db.add_many(trajs)
            summary = summarize(trajs).as_dict()
            stages.append({"name": name, "kind": "eval", "run_id": run_id, "summary": summary})
    results = {"name": "demo", "env": "calculator", "model": "tiny", "stages": stages}
    (run_dir / "results.json").write_text(json.dumps(results))
    html = build_report(run_dir, samples=2).read_text()
    tasks = re.findall(r"<h3>Task (\S+):", html)
    # One win (what RL fixed first) and, beside it, the task every stage failed.
    assert tasks == [synthetic_trajectory(i).task.id for i in (2, 0)]
    first = html[html.index("<h3>Task") : html.index("<h3>Task", html.index("<h3>Task") + 1)]
    sides = re.findall(r"<h4>(\w+) · reward [\d.]+ <span class=\"\w+\">([\w ]+)</span>", first)
    assert sides == [("base", "not solved"), ("after_sft", "not solved"), ("after_rl", "solved")]


def test_report_splits_failures_into_the_policys_and_the_infrastructures(tmp_path: Path) -> None:
    """Four episodes: one solved, one wrong answer, two lost to a crashed server (one of them
    still solved); the RL stage's steps left out three episodes between them."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    outcomes = [
        Outcome(status=OutcomeStatus.OK, reward=1.0),
        Outcome(status=OutcomeStatus.OK, reward=0.0),
        Outcome(status=OutcomeStatus.ERROR, error="MCP server crashed", fault=Fault.INFRA),
        Outcome(status=OutcomeStatus.OK, reward=1.0, error="server restarted", fault=Fault.INFRA),
    ]
    trajs = [
        synthetic_trajectory(i, run_id="demo.ev").model_copy(update={"outcome": o})
        for i, o in enumerate(outcomes)
    ]
    with TrajectoryStore(run_dir / "store.db") as db:
        db.add_many(trajs)
    summary = summarize(trajs).as_dict()
    assert (summary["policy_failures"], summary["infra_failures"]) == (1, 1)
    history = [{"step": s, "loss": 0.5, "reward_mean": 0.5, "infra_failures": s} for s in (1, 2)]
    stages = [
        {"name": "ev", "kind": "eval", "run_id": "demo.ev", "summary": summary},
        {"name": "rl", "kind": "rl", "history": history, "text": "2 steps"},
    ]
    results = {"name": "demo", "env": "calculator", "model": "tiny", "stages": stages}
    (run_dir / "results.json").write_text(json.dumps(results))
    html = build_report(run_dir).read_text()
    assert "<th>failures</th>" in html
    assert "<td>policy 1 · infra 1</td>" in html
    assert "2 steps, 3 episodes lost to the infrastructure" in html
