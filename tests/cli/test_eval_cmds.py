from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.errors import ConfigError
from trajforge.judge.scoring import summarize
from trajforge.schema import Message, Outcome, OutcomeStatus, Role, Task, Trajectory
from trajforge.store import TrajectoryStore

EVAL = ["eval", "--env", "calculator", "--model", "expert"]


def test_eval_rolls_out_scores_and_summarises(tmp_path: Path) -> None:
    store = tmp_path / "eval.db"
    args = [*EVAL, "--tasks", "4", "--n", "2"]
    result = CliRunner().invoke(app, [*args, "--run", "ev", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["episodes"] == 8
    assert summary["tasks"] == 4
    assert (summary["success"], summary["scored"], summary["reward_mean"]) == (1.0, 8, 1.0)
    assert summary["pass_at"] == {"1": 1.0, "2": 1.0}
    assert summary["pass_hat"] == {"1": 1.0, "2": 1.0}
    # Wilson's interval of 8 successes in 8: 8 episodes are no certainty.
    assert (summary["reward_ci_low"], summary["reward_ci_high"]) == pytest.approx(
        (0.6756, 1.0), abs=1e-4
    )
    assert summary["scores"] == {"env_verifier": 1.0, "process": 1.0}
    assert summary["scores_scored"] == {"env_verifier": 8, "process": 8}
    with TrajectoryStore(store) as db:
        stored = db.query(run="ev")
        assert len(stored) == 8
        assert all(t.score("process") is not None for t in stored)
        meta = db.get_run("ev")
        assert meta is not None and meta["summary"]["success"] == 1.0
        spec = meta["spec"]
        assert spec["sampling"]["temperature"] == 0.0 and spec["tasks"]["split"] == "test"


def test_eval_table_states_success_reward_and_how_many_were_scored(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [*EVAL, "--tasks", "2", "--store", str(tmp_path / "e.db")])
    assert result.exit_code == 0, result.output
    run_id = result.stderr.splitlines()[0].removeprefix("run id: ")
    assert f"(run {run_id})" in result.stdout
    rows = {
        cells[0]: cells[1]
        for line in result.stdout.splitlines()
        if len(cells := [c.strip() for c in line.strip("│┃ ").split("│")]) == 2
    }
    assert rows["success"] == "100.0%"
    assert rows["mean reward (95% CI)"] == "1.000 [0.342, 1.000]"  # Wilson's, 2 of 2
    assert rows["scored"] == "2/2"
    assert rows["score process"] == "1.000 (scored 2/2)"


def test_eval_with_an_unknown_scorer_names_it(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    result = CliRunner().invoke(app, [*EVAL, "--scorer", "nope", "--store", str(db)])
    assert result.exit_code != 0
    assert "unknown scorer 'nope'" in str(result.exception)
    assert not db.exists()  # refused before the store was even opened


def test_eval_resumes_only_its_own_runs(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    made = CliRunner().invoke(
        app, ["rollout", "--model", "expert", "--tasks", "1", "--run", "r", "--store", db]
    )
    assert made.exit_code == 0, made.output
    with pytest.raises(
        ConfigError, match=r"not started by `trajforge eval`; resume it with `trajforge rollout"
    ):
        CliRunner().invoke(app, ["eval", "--resume", "r", "--store", db], catch_exceptions=False)


def _episode(i: int, status: OutcomeStatus, reward: float | None) -> Trajectory:
    return Trajectory(
        task=Task(id=f"t{i}", prompt="2+2?", answer=4),
        env="calculator",
        run_id="mix",
        messages=[
            Message(role=Role.USER, content="2+2?"),
            Message(role=Role.ASSISTANT, content="4"),
        ],
        outcome=Outcome(status=status, reward=reward),
    )


MIXED = [
    (OutcomeStatus.OK, 1.0),
    (OutcomeStatus.OK, 0.0),
    (OutcomeStatus.TRUNCATED, None),
    (OutcomeStatus.ERROR, None),
    (OutcomeStatus.TRUNCATED, 1.0),  # rewarded but cut off: not a success
]


def test_every_command_states_one_reward_figure(tmp_path: Path) -> None:
    """success 1/5 (unscored and cut-off episodes fail), mean reward 2/3 over the 3 scored."""
    trajs = [_episode(i, status, reward) for i, (status, reward) in enumerate(MIXED)]
    db = tmp_path / "mix.db"
    with TrajectoryStore(db) as store:
        store.add_many(trajs)
    summary = summarize(trajs)
    assert (summary.success, summary.scored) == (0.2, 3)
    assert summary.reward_mean == pytest.approx(2 / 3)

    env = {"COLUMNS": "200"}
    listing = CliRunner().invoke(app, ["ls", "--store", str(db)], env=env)
    assert "success 20.0% · mean reward 0.667 · scored 3/5" in listing.stdout
    limited = CliRunner().invoke(app, ["ls", "--store", str(db), "--limit", "2"], env=env)
    assert "(of the 2 shown)" in limited.stdout

    table = CliRunner().invoke(app, ["stats", "--store", str(db)], env=env)
    assert table.exit_code == 0, table.output
    all_row = next(ln for ln in table.stdout.splitlines() if ln.strip("│ ").startswith("all"))
    assert "20.0%" in all_row and "0.667" in all_row and "3/5" in all_row


MY_SCORERS = '''
async def exact_total(trajectory):
    """1.0 when the final reply names the gold number."""
    return float(str(trajectory.task.answer) in trajectory.messages[-1].content)
'''


def _scorer_file(folder: Path) -> Path:
    path = folder / "my_scorers.py"
    path.write_text(MY_SCORERS)
    return path


def test_eval_and_judge_take_a_user_scorer_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scorer_file(tmp_path)
    monkeypatch.chdir(tmp_path)  # named relative to the current folder, as a user types it
    store = str(tmp_path / "u.db")
    args = [*EVAL, "--tasks", "2", "--run", "u", "--store", store, "--json"]
    result = CliRunner().invoke(app, [*args, "--scorer", "my_scorers.py:exact_total"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["scores"] == {"exact_total": 1.0}
    with TrajectoryStore(store) as db:
        meta = db.get_run("u")
        assert meta is not None
        # Stored by absolute path, so that --resume finds the file from any folder.
        assert meta["judging"]["scorers"] == [f"{tmp_path / 'my_scorers.py'}:exact_total"]
        verdicts = [t.score("exact_total") for t in db.query(run="u")]
        assert [v.value if v else None for v in verdicts] == [1.0, 1.0]

    monkeypatch.syspath_prepend(str(tmp_path))
    # another test's my_scorers module may be imported already; this one's file is meant
    monkeypatch.delitem(sys.modules, "my_scorers", raising=False)
    judged = CliRunner().invoke(
        app, ["judge", "u", "--scorer", "my_scorers:exact_total", "--store", store, "--json"]
    )
    assert judged.exit_code == 0, judged.output
    assert json.loads(judged.stdout)["scores"] == {"exact_total": 1.0}


def test_judge_eval_reads_a_user_scorers_own_name(tmp_path: Path) -> None:
    path = _scorer_file(tmp_path)
    store = tmp_path / "j.db"
    made = CliRunner().invoke(app, [*EVAL, "--tasks", "2", "--run", "j", "--store", str(store)])
    assert made.exit_code == 0, made.output
    with TrajectoryStore(store) as db:
        ids = [t.id for t in db.query(run="j")]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"trajectory_id": i, "label": 1}) + "\n" for i in ids))
    args = ["judge-eval", "--labels", str(labels), "--scorer", f"{path}:exact_total"]
    result = CliRunner().invoke(app, [*args, "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["overall"]["n"] == 2 and report["overall"]["recall"] == 1.0


def test_a_user_scorer_that_does_not_load_is_refused_before_the_run(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    args = [*EVAL, "--scorer", f"{tmp_path}/absent.py:f", "--store", str(db)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0
    assert "absent.py:f': file" in str(result.exception) and "does not exist" in str(
        result.exception
    )
    assert not db.exists()


def test_eval_runs_each_env_to_its_own_turn_limit(tmp_path: Path) -> None:
    """retail's expert takes up to 8 turns (its env allows 16): no episode is cut off."""
    store = tmp_path / "retail.db"
    args = ["eval", "--env", "retail", "--model", "expert", "--tasks", "10", "--n", "2"]
    result = CliRunner().invoke(app, [*args, "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["status"] == {"ok": 20}
    assert (summary["success"], summary["reward_mean"]) == (1.0, 1.0)
    with TrajectoryStore(store) as db:
        meta = db.get_run(summary["run_id"])
    assert meta is not None and meta["spec"]["limits"]["max_turns"] is None


def test_eval_says_when_the_split_has_fewer_tasks_than_asked(tmp_path: Path) -> None:
    """The example env declares 29 tasks, of which its test split holds 3."""
    env = str(Path(__file__).parents[2] / "examples" / "custom_env" / "my_env.py") + ":make_env"
    args = ["eval", "--env", env, "--model", "expert", "--json"]
    result = CliRunner().invoke(app, [*args, "--tasks", "5", "--store", str(tmp_path / "s.db")])
    assert result.exit_code == 0, result.output
    assert "asked for 5 tasks; the test split of" in result.stderr
    assert "my_env.py:make_env has 3, so 3 run" in result.stderr
    assert json.loads(result.stdout)["tasks"] == 3
    fits = CliRunner().invoke(app, [*args, "--tasks", "2", "--store", str(tmp_path / "t.db")])
    assert fits.exit_code == 0, fits.output
    assert "asked for" not in fits.stderr


NEVER_ANSWERS = """
def ramble(task, messages):
    '''Talks past any token budget: every turn is cut before it answers.'''
    return "Let me think about this very carefully. " * 40
"""


def test_a_model_that_never_answers_scores_zero_and_is_not_failed_work(tmp_path: Path) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text(NEVER_ANSWERS)
    store = tmp_path / "never.db"
    args = ["eval", "--env", "calculator", "--model", f"script:{script}:ramble"]
    args += [
        "--tasks",
        "2",
        "--max-new-tokens",
        "16",
        "--run",
        "nev",
        "--store",
        str(store),
        "--json",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "failed" not in result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == {"truncated": 2}
    assert (summary["success"], summary["reward_mean"], summary["scored"]) == (0.0, 0.0, 2)
    assert (summary["policy_failures"], summary["infra_failures"]) == (2, 0)
    assert summary["scores"]["env_verifier"] == 0.0
    with TrajectoryStore(store) as db:
        assert [t.outcome.reward for t in db.query(run="nev")] == [0.0, 0.0]
