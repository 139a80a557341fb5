"""A command whose work partly failed exits ``ExitCode.PARTLY_FAILED`` and prints the first
reasons (counts by reason, an example each) without ``trajforge show``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cli_runner import RunCli
from trajforge.cli.failures import (
    SHOWN_REASONS,
    ExitCode,
    Failure,
    episode_failure,
    failure_lines,
    scored_failures,
)
from trajforge.cli.run_cmds import _stage_failures
from trajforge.schema import Evaluator, EvaluatorKind, Fault, Outcome, OutcomeStatus, Score
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore

FLAKY_ENV = f"{Path(__file__).parent / 'flaky_env.py'}:make_env"


def test_failure_lines_count_each_reason_with_one_example() -> None:
    failures = [Failure("error: server down", f"id{i:02d}") for i in range(5)]
    failures += [Failure(f"error: reason {k}", f"other{k}") for k in range(4)]
    lines = failure_lines(failures, 20, "episodes")
    assert lines[0] == "9 of 20 episodes failed:"
    assert lines[1] == "  5 x error: server down (e.g. id00)"
    assert len(lines) == 1 + SHOWN_REASONS + 1
    assert lines[-1] == "  2 more, for 2 other reasons"


def test_an_episode_that_failed_its_task_is_a_result_not_a_failure() -> None:
    traj = synthetic_trajectory(0)
    truncated = traj.model_copy(
        update={"outcome": Outcome(status=OutcomeStatus.TRUNCATED, reason="max_turns")}
    )
    assert episode_failure(truncated) is None
    assert episode_failure(traj.model_copy(update={"outcome": Outcome(reward=0.0)})) is None


def test_an_error_or_an_infra_loss_is_a_failure_with_its_reason() -> None:
    traj = synthetic_trajectory(0)
    errored = traj.model_copy(
        update={"outcome": Outcome(status=OutcomeStatus.ERROR, error="Boom\nsecond line")}
    )
    lost = traj.model_copy(
        update={"outcome": Outcome(status=OutcomeStatus.TIMEOUT, error="hung", fault=Fault.INFRA)}
    )
    assert episode_failure(errored) == Failure("error: Boom", traj.id)
    assert episode_failure(lost) == Failure("timeout, infra: hung", traj.id)
    crash = "exit status 1: Traceback (most recent call last):\n  File x\nKeyError: 'prompt'"
    died = traj.model_copy(
        update={"outcome": Outcome(status=OutcomeStatus.ERROR, error=crash, fault=Fault.INFRA)}
    )
    failure = episode_failure(died)
    assert failure is not None and failure.reason.endswith("KeyError: 'prompt'")


def test_a_scorer_error_is_a_failure_and_a_trajectory_fails_once() -> None:
    judge = Evaluator(kind=EvaluatorKind.LLM, name="judge")
    unscored = Score(name="judge", error="judge server: 503", evaluator=judge)
    traj = synthetic_trajectory(0).model_copy(update={"scores": [unscored, unscored]})
    assert scored_failures([traj]) == [Failure("scorer judge: judge server: 503", traj.id)]
    errored = traj.model_copy(update={"outcome": Outcome(status=OutcomeStatus.ERROR, error="Boom")})
    assert scored_failures([errored]) == [Failure("error: Boom", traj.id)]
    assert scored_failures([errored], episodes=False) == [
        Failure("scorer judge: judge server: 503", traj.id)
    ]
    assert scored_failures([synthetic_trajectory(1)]) == []


def test_rollout_with_lost_episodes_exits_3_and_says_why(run_cli: RunCli, tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    args = ["--env", FLAKY_ENV, "--model", "expert", "--tasks", "4", "--store", store]
    code, out, err = run_cli("rollout", *args)
    assert code == ExitCode.PARTLY_FAILED, err
    assert "stored in" in out
    assert "2 of 4 episodes failed:" in err
    assert "2 x infra: tool 'lookup': the lookup server is down (e.g. " in err


def test_eval_json_stays_whole_on_stdout_with_the_reasons_on_stderr(
    run_cli: RunCli, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    args = ["--env", FLAKY_ENV, "--model", "expert", "--tasks", "4", "--split", "train"]
    code, out, err = run_cli("eval", *args, "--store", store, "--json")
    assert code == ExitCode.PARTLY_FAILED
    assert json.loads(out)["episodes"] == 4
    assert "2 of 4 episodes failed:" in err and "lookup server is down" in err


def test_rollout_without_failures_exits_0(run_cli: RunCli, tmp_path: Path) -> None:
    args = ["--env", "calculator", "--model", "expert", "--tasks", "2"]
    code, _, err = run_cli("rollout", *args, "--store", tmp_path / "s.db")
    assert code == 0 and "failed" not in err


def test_collect_of_a_missing_agent_program_exits_3_with_its_error(
    run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    agent = f"{sys.executable} nothere_agent.py"
    args = ["--agent", agent, "--env", "calculator", "--tasks", "3", "--model", "tiny"]
    code, out, err = run_cli("collect", *args, "--store", tmp_path / "s.db")
    assert code == ExitCode.PARTLY_FAILED
    assert "stored in" in out
    assert "3 of 3 agent runs failed:" in err
    assert "can't open file" in err and "nothere_agent.py" in err


def test_run_counts_the_failed_episodes_of_its_rolling_out_stages(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    ok = synthetic_trajectory(0, run_id="x.eval").model_copy(
        update={"outcome": Outcome(reward=1.0)}
    )
    lost = synthetic_trajectory(1, run_id="x.eval").model_copy(
        update={"outcome": Outcome(status=OutcomeStatus.ERROR, error="sandbox did not start")}
    )
    other = synthetic_trajectory(2, run_id="x.sft").model_copy(
        update={"outcome": Outcome(status=OutcomeStatus.ERROR, error="not a stage's run")}
    )
    with TrajectoryStore(store) as db:
        db.add_many([ok, lost, other])
    results = {"stages": [{"name": "eval", "run_id": "x.eval"}, {"name": "sft"}]}
    assert _stage_failures(store, results) == (
        [Failure("error: sandbox did not start", lost.id)],
        2,
    )
    assert _stage_failures(tmp_path / "none.db", results) == ([], 0)
