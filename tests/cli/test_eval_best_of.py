"""``trajforge eval --best-of N --select SELECTOR``: N candidates per task, one kept, the
figures with intervals, the marks in the store, and one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_runner import RunCli
from trajforge.judge.best_of import BEST_OF_KEY
from trajforge.judge.selectors import SELECT_JUDGE_NAME
from trajforge.store import TrajectoryStore

BEST_OF = ["eval", "--env", "keydoor-compact", "--model", "expert", "--tasks", "2"]


def test_best_of_samples_n_keeps_one_and_marks_every_candidate(
    run_cli: RunCli, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    args = ["--best-of", "3", "--select", "verifier", "--temperature", "1", "--run", "bo"]
    code, out, err = run_cli(*BEST_OF, *args, "--store", store, "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["episodes"] == 6
    best = summary["best_of"]
    assert (best["n"], best["tasks"], best["selector"]) == (3, 2, "verifier")
    # The expert always reaches the goal: every figure is 1, Wilson's interval of 2 of 2.
    for key in ("pass_at_1", "pass_at_n", "selected_at_n"):
        assert best[key]["value"] == 1.0
        assert best[key]["low"] == pytest.approx(0.342, abs=1e-3)
    with TrajectoryStore(store) as db:
        stored = db.query(run="bo")
        meta = db.get_run("bo")
    assert meta is not None and meta["best_of"]["select"] == "verifier"
    assert meta["summary"]["best_of"]["chosen"] == best["chosen"]
    marks = [t.metadata[BEST_OF_KEY] for t in stored]
    assert len(marks) == 6 and sum(m["chosen"] for m in marks) == 2
    chosen = {t.group_id: t.id for t in stored if t.metadata[BEST_OF_KEY]["chosen"]}
    assert chosen == best["chosen"]
    # Ties go to the first sample.
    assert all(t.sample_index == 0 for t in stored if t.metadata[BEST_OF_KEY]["chosen"])


def test_the_table_states_the_three_figures(run_cli: RunCli, tmp_path: Path) -> None:
    args = ["--best-of", "2", "--select", "majority", "--temperature", "1"]
    code, out, err = run_cli(*BEST_OF, *args, "--store", tmp_path / "s.db")
    assert code == 0, err
    assert "pass@2 (95% CI)" in out and "selected@2 by majority (95% CI)" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--best-of", "0", "--select", "logprob"], "--best-of: must be at least 1, got 0"),
        (["--best-of", "2", "--select", "best"], "--select: unknown selector 'best'"),
        (["--best-of", "2"], "--best-of: give --select"),
        (["--select", "logprob"], "--select: give --best-of N too"),
        (["--best-of", "2", "--select", "logprob", "--n", "4"], "--best-of and --n: give one"),
        (["--best-of", "2", "--select", "judge:agentrewardbench"], "give --judge-model"),
        (["--best-of", "2", "--select", "logprob", "--temperature", "0"], "greedy samples"),
        (
            ["--env", "calculator", "--best-of", "2", "--select", "verifier"],
            "the verifier of env 'calculator' reads the task's answer key",
        ),
    ],
)
def test_bad_best_of_input_is_one_line_and_stores_nothing(
    run_cli: RunCli, tmp_path: Path, args: list[str], message: str
) -> None:
    temperature = [] if "--temperature" in args else ["--temperature", "1"]
    store = tmp_path / "s.db"
    code, _, err = run_cli(*BEST_OF, *args, *temperature, "--store", store)
    assert code != 0
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not store.exists()


def test_judge_selector_scores_every_candidate_with_the_judge_model(
    run_cli: RunCli, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    args = ["--best-of", "2", "--select", "judge:agentrewardbench", "--judge-model", "tiny"]
    code, out, err = run_cli(
        *BEST_OF[:-1], "1", *args, "--temperature", "1", "--run", "j", "--store", store, "--json"
    )
    # The tiny random judge gives no verdict: those scores are failures (exit 3), never guesses.
    assert code in (0, 3), err
    assert json.loads(out)["best_of"]["selector"] == "judge:agentrewardbench"
    with TrajectoryStore(store) as db:
        stored = db.query(run="j")
    assert len(stored) == 2
    assert all(t.score(SELECT_JUDGE_NAME) is not None for t in stored)
    # No verdict for either: the tie goes to the first sample.
    (chosen,) = [t for t in stored if t.metadata[BEST_OF_KEY]["chosen"]]
    assert chosen.sample_index == 0
