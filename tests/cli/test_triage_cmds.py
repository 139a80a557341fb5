"""trajforge triage, and ls/stats --signal, run through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_runner import RunCli
from trajforge.schema import Message, Role, Task, Trajectory
from trajforge.store import TrajectoryStore
from triage.conftest import GOOD, episode

BAD = ("calculator", {"expression": "6*"}, "Error: invalid syntax")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    with TrajectoryStore(path) as st:
        st.add_many(
            [
                episode([GOOD], run_id="evalrun"),
                episode([BAD, GOOD], run_id="evalrun"),
                episode([GOOD, GOOD, GOOD], "The answer is 41", reward=0.0, run_id="other"),
                # No tools, no tool calls, no reward, an env nobody knows.
                Trajectory(
                    task=Task(id="chat", prompt="hi"),
                    env="nowhere",
                    run_id="other",
                    messages=[Message(role=Role.USER, content="hi")],
                ),
            ]
        )
    return path


def test_json_lines_give_id_signals_and_first_error(run_cli: RunCli, store: Path) -> None:
    code, out, err = run_cli("triage", "--store", store, "--json")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 4
    with TrajectoryStore(store) as st:
        ids = {t.id for t in st.query()}
    assert {line["id"] for line in lines} == ids
    by_signals = {tuple(line["signals"]): line["first_error"] for line in lines}
    assert by_signals == {
        (): None,
        ("tool_error",): 1,
        ("loop", "wrong_answer"): 3,
        ("no_final_answer",): None,
    }


def test_the_table_and_the_stored_scores_that_ls_and_stats_filter(
    run_cli: RunCli, store: Path
) -> None:
    code, out, err = run_cli("triage", "--store", store)
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert rows["evalrun"][1:3] == ["2", "1"]  # trajectories, failed
    assert rows["other"][1:3] == ["2", "2"]
    assert rows["all"][1] == "4"
    assert "tool_error" in out and "wrong_answer" in out

    code, out, _ = run_cli("ls", "--store", store, "--signal", "loop", "--json")
    assert code == 0
    assert [r["run_id"] for r in json.loads(out)] == ["other"]
    code, out, _ = run_cli("stats", "--store", store, "--signal", "tool_error", "--json")
    assert code == 0 and json.loads(out)["count"] == 1


def test_one_run_by_prefix_and_an_unknown_run(run_cli: RunCli, store: Path) -> None:
    code, out, _ = run_cli("triage", "--store", store, "--run", "eval", "--json")
    assert code == 0
    assert len(out.splitlines()) == 2
    code, out, err = run_cli("triage", "--store", store, "--run", "nosuchrun")
    assert code == 1 and out == ""
    assert err.strip().splitlines() == [
        f"error: --run: no run starting with 'nosuchrun' in {store}"
    ]


def test_an_empty_store_and_a_missing_one(run_cli: RunCli, tmp_path: Path) -> None:
    TrajectoryStore(tmp_path / "empty.db").close()
    code, out, _ = run_cli("triage", "--store", tmp_path / "empty.db")
    assert code == 0 and "no trajectories to triage" in out
    code, _, err = run_cli("triage", "--store", tmp_path / "none.db")
    assert code == 1 and "no store at" in err


def test_a_judge_model_is_asked_only_where_the_rules_blame_no_call(
    run_cli: RunCli, store: Path, tmp_path: Path
) -> None:
    criteria = tmp_path / "criteria.yaml"
    criteria.write_text("name: mine\nversion: '2'\ninstructions: Find the first wrong step.\n")
    code, out, err = run_cli(
        "triage", "--store", store, "--json", "--judge-model", "tiny", "--criteria", criteria
    )
    assert code == 0, err
    lines = {tuple(line["signals"]): line for line in map(json.loads, out.splitlines())}
    # Only failures without a blamed call are asked: not the successes, not the wrong answer
    # after a loop (the loop is blamed), but the unscored chat (no reward: not a success).
    asked = {k for k, line in lines.items() if "llm_first_error" in line}
    assert asked == {("no_final_answer",)}
    assert lines[("no_final_answer",)]["llm_reason"]  # a reason, or why there is none
    with TrajectoryStore(store) as st:
        [judged] = [t for t in st.query() if t.score("triage_llm") is not None]
    score = judged.score("triage_llm")
    assert score is not None and score.evaluator.prompt_version == "triage-llm/1;mine@2"


def test_criteria_need_a_judge_model_and_must_be_criteria(
    run_cli: RunCli, store: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("colour: blue\n")
    code, _, err = run_cli("triage", "--store", store, "--criteria", bad)
    assert code == 1 and "--criteria: give --judge-model too" in err
    code, _, err = run_cli("triage", "--store", store, "--judge-model", "tiny", "--criteria", bad)
    assert code == 1 and f"{bad}: not localiser criteria" in err


def test_the_old_rubric_option_is_refused_with_the_new_spelling(
    run_cli: RunCli, store: Path
) -> None:
    code, _, err = run_cli(
        "triage", "--store", store, "--judge-model", "tiny", "--rubric", "x.yaml"
    )
    assert code == 1
    assert err.strip().splitlines() == [
        "error: --rubric: renamed --criteria (what the localiser is told); give --criteria x.yaml"
    ]
