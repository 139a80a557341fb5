"""``trajforge synthesize``: a task file from exploration, and bad input refused in one line
before anything (the task file, the store) is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_runner import RunCli
from trajforge.envs import TaskSet


def test_synthesize_writes_a_task_file_other_commands_play(run_cli: RunCli, tmp_path: Path) -> None:
    out, store = tmp_path / "tasks.jsonl", tmp_path / "s.db"
    code, stdout, _ = run_cli(
        "synthesize", "--env", "keydoor-compact", "--out", out, "--episodes", "6",
        "--store", store, "--run", "explore",
    )  # fmt: skip
    assert code == 0, stdout
    tasks = list(TaskSet.from_jsonl(out))
    assert tasks and "tasks from 6 exploration episodes" in stdout
    code, stdout, err = run_cli(
        "rollout", "--env", out, "--model", "expert", "--tasks", "2", "--store", store
    )
    assert code == 0, err
    # eval plays the test split; a file of training tasks says so and how to choose
    code, _, err = run_cli("eval", "--env", out, "--model", "expert", "--tasks", "2")
    assert (
        code != 0 and "has no test tasks (its tasks' splits: train; choose one with --split)" in err
    )
    code, _, err = run_cli(
        "eval", "--env", out, "--model", "expert", "--tasks", "2", "--split", "train",
        "--store", store,
    )  # fmt: skip
    assert code == 0, err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--env", "time"], "env 'time': no task synthesizer for this env"),
        (["--env", "calculator", "--band", "0.9", "0.1"], "--band: need 0 <= low <= high <= 1"),
        (["--env", "calculator", "--episodes", "0"], "--episodes: Input should be greater"),
        (
            ["--env", "calculator", "--difficulty-policy", "nope"],
            "--difficulty-policy: unknown policy",
        ),
        (["--env", "calculator", "--explorer", "nope"], "--explorer: unknown policy"),
        (["--env", "miniwob:click-shape"], "synthesized from the MiniWoB++ form pages"),
        (["--env", "miniwob:entr-text"], "miniwob: no task 'entr-text' in the miniwob package"),
        (["--env", "browsergym:miniwob.click-test"], "no task synthesizer for this env"),
        (
            ["--env", "keydoor-compact", "--match-difficulty", "test"],
            "--match-difficulty 'test': neither 'train' (the env's training split) nor an "
            "existing task file",
        ),
    ],
)
def test_bad_input_fails_in_one_line_and_writes_nothing(
    run_cli: RunCli, tmp_path: Path, args: list[str], says: str
) -> None:
    out, store = tmp_path / "tasks.jsonl", tmp_path / "s.db"
    code, _, err = run_cli("synthesize", *args, "--out", out, "--store", store)
    assert code == 1
    assert err.strip().count("\n") == 0 and says in err, err
    assert list(tmp_path.iterdir()) == []


def test_an_existing_or_misnamed_out_is_refused(run_cli: RunCli, tmp_path: Path) -> None:
    taken = tmp_path / "taken.jsonl"
    taken.write_text("keep me\n")
    code, _, err = run_cli(
        "synthesize", "--env", "calculator", "--out", taken, "--store", tmp_path / "s.db"
    )
    assert code == 1 and "it exists" in err and taken.read_text() == "keep me\n"
    code, _, err = run_cli(
        "synthesize",
        "--env",
        "calculator",
        "--out",
        tmp_path / "t.txt",
        "--store",
        tmp_path / "s.db",
    )
    assert code == 1 and "a task file ends in .jsonl" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.jsonl"]


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        ([], "the task file holds no task"),
        (
            ['{"id": "t1", "prompt": "p", "env": "keydoor-compact", "split": "test"}'],
            "task 't1' is a test task; held-out tasks never tune synthesis",
        ),
        (
            ['{"id": "t1", "prompt": "p", "env": "calculator"}'],
            "task 't1' is of env 'calculator', not 'keydoor-compact'",
        ),
    ],
)
def test_a_bad_difficulty_reference_fails_in_one_line_and_writes_nothing(
    run_cli: RunCli, tmp_path: Path, lines: list[str], says: str
) -> None:
    reference = tmp_path / "reference" / "tasks.jsonl"
    reference.parent.mkdir()
    reference.write_text("".join(f"{line}\n" for line in lines))
    out, store = tmp_path / "tasks.jsonl", tmp_path / "s.db"
    code, _, err = run_cli(
        "synthesize", "--env", "keydoor-compact", "--match-difficulty", reference,
        "--out", out, "--store", store,
    )  # fmt: skip
    assert code == 1
    assert err.strip().count("\n") == 0 and f"--match-difficulty {reference}: {says}" in err, err
    assert sorted(tmp_path.iterdir()) == [reference.parent]
