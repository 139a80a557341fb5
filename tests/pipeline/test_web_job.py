"""The web job (examples/web): its config, its teacher's habit, and a tiny-model run of its
stages on two MiniWoB++ tasks in the real browser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from trajforge.envs import get_env
from trajforge.envs.browser import shared_pool
from trajforge.envs.browser.experts import EXPERT_TASKS
from trajforge.pipeline.config import DemonstrationStage, RLStage, load_experiment
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.registry import load_ref
from trajforge.schema import Task
from trajforge.store import TrajectoryStore

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "web"


def test_the_web_job_config_loads_on_eight_or_more_tasks_with_experts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    for name in ("experiment.yaml", "gpu.yaml"):
        exp = load_experiment(EXAMPLE / name)
        assert exp.env == "examples/web/env.py:web_env" and exp.model == "embedded"
        assert exp.eval.split == "test"
        (demos,) = [s for s in exp.stages if isinstance(s, DemonstrationStage)]
        assert demos.policy == "script:examples/web/teacher.py:batching_expert"
        assert demos.split == "train"
        (rl,) = [s for s in exp.stages if isinstance(s, RLStage)]
        assert rl.train["validation"]["tasks"] > 0
        assert [s.name for s in exp.stages] == [
            "base", "demonstrations", "sft", "after_sft", "rl", "after_rl"
        ]  # fmt: skip
    entry = get_env("examples/web/env.py:web_env")
    tasks = entry.name.removeprefix("miniwob:").split(",")
    assert len(tasks) >= 8 and set(tasks) <= set(EXPERT_TASKS)
    assert entry.expert_refusal is None


def test_held_out_page_seeds_are_never_training_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    entry = get_env("examples/web/env.py:web_env")
    train = {t.data["seed"] for seed in range(3) for t in entry.tasks(400, seed, "train")}
    test = {t.data["seed"] for seed in range(3) for t in entry.tasks(200, seed, "test")}
    assert train and test and not train & test


def test_the_teacher_batches_most_forms_and_never_a_single_action() -> None:
    batches_form = load_ref(f"{EXAMPLE / 'teacher.py'}:batches_form", "teacher")
    tasks = [Task(id=f"login-user/{i}", prompt="p") for i in range(1000)]
    share = sum(batches_form(t, 3) for t in tasks) / len(tasks)
    assert 0.65 < share < 0.75
    assert not any(batches_form(t, 1) for t in tasks)


@pytest.mark.slow
def test_the_web_jobs_stages_run_with_a_tiny_model_on_two_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    overrides = [
        "model=tiny",
        "env=examples/web/env.py:smoke_env",
        f"out_dir={tmp_path}",
        "eval.tasks=2",
        "eval.max_turns=2",
        "eval.max_new_tokens=8",
        "stages.demonstrations.tasks=4",
        "stages.sft.train={epochs: 1, batch_size: 2, tensorboard: false, progress: false}",
        "stages.rl.train.model={}",
        "stages.rl.train.steps=1",
        "stages.rl.train.num_tasks=4",
        "stages.rl.train.groups_per_step=2",
        "stages.rl.train.samples_per_group=2",
        "stages.rl.train.max_turns=2",
        "stages.rl.train.max_new_tokens=8",
        "stages.rl.train.validation={tasks: 2}",
        "stages.rl.train.tensorboard=false",
        "stages.rl.train.progress=false",
    ]
    exp = load_experiment(EXAMPLE / "experiment.yaml", overrides)
    runner = ExperimentRunner(exp, console=Console(quiet=True))
    try:
        runner.run()
    finally:
        shared_pool().close()
    results = json.loads((runner.run_dir / "results.json").read_text())
    stages = {s["name"]: s for s in results["stages"]}
    assert list(stages) == ["base", "demonstrations", "sft", "after_sft", "rl", "after_rl"]
    assert all(s["status"] == "done" for s in stages.values())
    with TrajectoryStore(runner.run_dir / "store.db") as db:
        demos = db.query(run=stages["demonstrations"]["run_id"])
        held_out = db.query(run=stages["after_rl"]["run_id"])
    assert len(demos) == 4 and all(t.outcome.reward == 1.0 for t in demos)
    assert {t.task.data["task"] for t in demos} == {"click-button", "enter-text"}
    assert len(held_out) == 2 and all(t.task.split == "test" for t in held_out)
    assert all(t.metadata["screens"][0].startswith("data:image/png;base64,") for t in held_out)
    assert (runner.run_dir / "report.html").is_file()
