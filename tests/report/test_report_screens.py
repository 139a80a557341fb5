"""The report's screens section: the held-out episode that failed after SFT and succeeded after
RL (same task id, i.e. the same page seed), shown by the screens its env recorded."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from PIL import Image

from trajforge.judge.scoring import summarize
from trajforge.report.html import build_report
from trajforge.report.screens import rescued_episode
from trajforge.schema import ImagePart, Outcome, OutcomeStatus, Trajectory
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore


def _png(shade: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (16, 20), (shade, shade, shade)).save(buf, format="PNG")
    return ImagePart.from_bytes(buf.getvalue(), "image/png").data_url()


def _episode(i: int, stage: str, solved: bool, screens: list[str] | None) -> Trajectory:
    t = synthetic_trajectory(i, run_id=f"demo.{stage}")
    metadata = {**t.metadata, **({"screens": screens} if screens is not None else {})}
    outcome = Outcome(status=OutcomeStatus.OK, reward=1.0 if solved else 0.0)
    return t.model_copy(update={"outcome": outcome, "metadata": metadata})


def _stages(
    solved_at: dict[str, set[int]], screens: dict[int, list[str]]
) -> dict[str, list[Trajectory]]:
    return {
        stage: [_episode(i, stage, i in solved, screens.get(i)) for i in range(4)]
        for stage, solved in solved_at.items()
    }


SOLVED_AT = {"base": set(), "after_sft": {0, 3}, "after_rl": {0, 1, 2}}


def test_picks_the_task_that_failed_after_sft_and_succeeded_after_rl() -> None:
    # Task 1 has no screens recorded; task 2 is the first with screens that RL turned around.
    screens = {i: [_png(10 * i), _png(10 * i + 5)] for i in (0, 2, 3)}
    stages = _stages(SOLVED_AT, screens)
    picked = rescued_episode(list(stages.items()))
    assert picked is not None
    assert picked["task_id"] == synthetic_trajectory(2).task.id
    assert [(s["stage"], s["solved"]) for s in picked["sides"]] == [
        ("after_sft", False),
        ("after_rl", True),
    ]
    assert picked["sides"][0]["screens"] == screens[2]


def test_no_episode_without_screens_or_without_a_turnaround() -> None:
    assert rescued_episode(list(_stages(SOLVED_AT, {}).items())) is None
    screens = {i: [_png(i)] for i in range(4)}
    same = {"after_sft": {0, 1}, "after_rl": {0, 1}}
    assert rescued_episode(list(_stages(same, screens).items())) is None


def test_a_non_image_data_url_is_never_shown() -> None:
    t = _episode(0, "after_rl", True, ["data:text/html;base64,PHNjcmlwdD4=", _png(1)])
    picked = rescued_episode([("a", [_episode(0, "a", False, [_png(2)])]), ("b", [t])])
    assert picked is not None and picked["sides"][1]["screens"] == [_png(1)]


def _report(tmp_path: Path, screens: dict[int, list[str]]) -> str:
    """The report of a run whose eval stages are ``SOLVED_AT`` with ``screens`` recorded."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    stages = []
    with TrajectoryStore(run_dir / "store.db") as db:
        for name, trajs in _stages(SOLVED_AT, screens).items():
            db.add_many(trajs)
            summary = summarize(trajs).as_dict()
            stages.append(
                {"name": name, "kind": "eval", "run_id": f"demo.{name}", "summary": summary}
            )
    results = {"name": "demo", "env": "miniwob:x", "model": "tiny", "stages": stages}
    (run_dir / "results.json").write_text(json.dumps(results))
    return build_report(run_dir).read_text()


def test_report_shows_the_rescued_episodes_screens(tmp_path: Path) -> None:
    screens = {i: [_png(10 * i), _png(10 * i + 5)] for i in range(4)}
    html = _report(tmp_path, screens)
    section = html[html.index('id="rescued"') : html.index("Sample trajectories")]
    assert synthetic_trajectory(1).task.id in section
    shown = re.findall(r'<img class="screen" src="([^"]+)" alt="(\w+) screen', section)
    assert shown == [
        (screens[1][0], "after_sft"),
        (screens[1][1], "after_sft"),
        (screens[1][0], "after_rl"),
        (screens[1][1], "after_rl"),
    ]


def test_report_without_screens_has_no_section(tmp_path: Path) -> None:
    assert 'id="rescued"' not in _report(tmp_path, {})
