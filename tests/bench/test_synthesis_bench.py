"""bench/synthesis.py's job arms: the synthesized arm is a job's hand-written arm with a
``synthesize`` stage in place of the base eval (over the web job's form pages, or the job's own
env), its demonstrations played from those tasks, and everything else (SFT, the held-out eval,
the seed) the same."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from trajforge.pipeline.config import DemonstrationStage, SynthesizeStage
from trajforge.schema import Message, Outcome, OutcomeStatus, Role, Task, Trajectory
from trajforge.store import TrajectoryStore

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_web_arms_differ_only_in_where_the_demonstrations_come_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.chdir(BENCH.parent)  # the job names its env by a path from the checkout
    synthesis = importlib.import_module("synthesis")
    arms = synthesis._job_arms(synthesis.JOBS["web"], seed=2, how=synthesis.JobArms(50))
    hand, synth = arms["hand"], arms["synth"]
    assert [s.name for s in hand.stages] == ["base", "demonstrations", "sft", "after_sft"]
    assert [s.name for s in synth.stages] == ["synthesize", "demonstrations", "sft", "after_sft"]
    explore = synth.stages[0]
    assert isinstance(explore, SynthesizeStage)
    assert (explore.episodes, explore.seed, explore.min_steps) == (50, 2, 1)
    # The job's form pages only: its click-link, click-dialog, ... pages make no tasks.
    forms = explore.env.removeprefix("miniwob:").split(",") if explore.env else []
    assert "login-user" in forms and "click-link" not in forms and len(forms) == 7
    demos = synth.stages[1]
    assert isinstance(demos, DemonstrationStage) and demos.tasks_from == "synthesize"
    assert demos.model_copy(update={"tasks_from": None}) == hand.stages[1]
    assert synth.stages[2:] == hand.stages[2:]
    assert (synth.env, synth.seed, synth.eval) == (hand.env, hand.seed, hand.eval)


def test_a_job_whose_env_has_a_synthesizer_explores_that_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    synthesis = importlib.import_module("synthesis")
    job = synthesis.JOBS["calculator"]
    synth = synthesis._job_arms(job, seed=1, how=synthesis.JobArms(400))
    explore = synth["synth"].stages[0]
    assert isinstance(explore, SynthesizeStage) and explore.env is None
    assert synth["synth"].env == "calculator" and explore.episodes == 400
    assert explore.match_difficulty is None
    matched = synthesis._job_arms(job, seed=1, how=synthesis.JobArms(400, matched=True))
    explore = matched["synth"].stages[0]
    assert isinstance(explore, SynthesizeStage)
    assert (explore.episodes, explore.match_difficulty) == (4000, "train")
    assert matched["hand"] == synth["hand"]
    taught = synthesis._job_arms(job, seed=1, how=synthesis.JobArms(400, env_expert=True))
    for arm in ("hand", "synth"):
        teachers = {s.policy for s in synth[arm].stages if isinstance(s, DemonstrationStage)}
        assert teachers == {"script:examples/calculator/teacher.py:shortcut_expert"}
        teachers = {s.policy for s in taught[arm].stages if isinstance(s, DemonstrationStage)}
        assert teachers == {"expert"}


def test_the_web_split_counts_form_pages_apart_from_the_others(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    synthesis = importlib.import_module("synthesis")
    episodes = [("login-user/3", OutcomeStatus.OK, 1.0), ("login-user/4", OutcomeStatus.OK, 0.0),
                ("click-dialog/5", OutcomeStatus.TRUNCATED, 1.0), ("click-dialog/6", OutcomeStatus.OK, 1.0),
                ("enter-text/7", OutcomeStatus.OK, 1.0)]  # fmt: skip
    with TrajectoryStore(tmp_path / "store.db") as store:
        for task_id, status, reward in episodes:
            store.add(Trajectory(run_id="web.after_sft", env="miniwob:x",
                                 task=Task(id=task_id, prompt="p"),
                                 messages=[Message(role=Role.USER, content="p")],
                                 outcome=Outcome(status=status, reward=reward)))  # fmt: skip
        store.add(Trajectory(run_id="web.base", env="miniwob:x", task=Task(id="enter-text/1", prompt="p"),
                             messages=[Message(role=Role.USER, content="p")], outcome=Outcome(reward=1.0)))  # fmt: skip
    split = synthesis._form_split(tmp_path / "store.db", "web.after_sft")
    # a truncated episode never succeeded, whatever its reward; another run is not counted
    assert split == {"forms": round(2 / 3, 4), "other": 0.5}


def test_calculator_shapes_tell_a_fresh_number_from_an_earlier_result(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    synthesis = importlib.import_module("synthesis")
    assert synthesis._shape(["3 * 6", "20 * 14", "18 + 280"]) == "n*n n*n r+r"
    assert synthesis._shape(["34 * 9", "703 - 306"]) == "n*n n-r"
    solved = [
        (["5 * 6", "30 - 3"], 1.0),
        (["9 * 8", "72 - 12"], 0.0),
        (["34 * 9", "703 - 306"], 1.0),
    ]
    with TrajectoryStore(tmp_path / "store.db") as store:
        for i, (steps, reward) in enumerate(solved):
            store.add(Trajectory(run_id="calculator.after_sft", env="calculator",
                                 task=Task(id=f"t{i}", prompt="p", data={"steps": steps}),
                                 messages=[Message(role=Role.USER, content="p")],
                                 outcome=Outcome(reward=reward)))  # fmt: skip
    split = synthesis._shape_split(tmp_path / "store.db", "calculator.after_sft")
    assert split == {"n*n n-r": [1, 1], "n*n r-n": [1, 2]}
