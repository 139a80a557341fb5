"""``collect``: an agent program per task x sample, every run accounted for."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from serve_helpers import assert_token_exact, recorded
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.schema import OutcomeStatus, Task, is_infra_failure
from trajforge.serve.collect import Collector
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving

AGENT = f"{sys.executable} {Path(__file__).parent / 'agent_program.py'}"


def _task(k: int, **behaviour: object) -> Task:
    a, b, c = k, k + 1, 2 * k
    return Task(
        id=f"t{k:03d}", prompt=f"Add {a} and {b} and {c}?", answer=a + b + c, data=behaviour
    )


def test_200_runs_with_crashes_and_hangs_are_all_accounted_for(
    gateway: Gateway, store_path: Path, processes_with: Callable[[str], list[int]]
) -> None:
    marker = f"trajforge-test-{uuid.uuid4().hex}"
    tasks = []
    for k in range(200):
        if k % 10 < 2:
            tasks.append(_task(k, crash=True))
        elif k % 10 == 2:
            tasks.append(_task(k, hang=marker))
        else:
            tasks.append(_task(k, reward="post" if k % 2 else "print"))
    with serving(gateway) as url:
        collector = Collector(gateway, url, AGENT, timeout_s=3.0)
        runs = asyncio.run(collector.run(tasks, n=1, concurrency=16))
    statuses = {r.task_id: r.status for r in runs}
    assert len(runs) == 200 and len(statuses) == 200
    for task in tasks:
        expected = (
            OutcomeStatus.ERROR if task.data.get("crash")
            else OutcomeStatus.TIMEOUT if task.data.get("hang")
            else OutcomeStatus.OK
        )  # fmt: skip
        assert statuses[task.id] is expected, task.id
    assert all(r.reward == 1.0 for r in runs if r.status is OutcomeStatus.OK)
    assert processes_with(marker) == []
    stored = recorded(store_path)
    assert {t.task.id for t in stored} == {t.id for t in tasks}
    crashed = [t for t in stored if t.outcome.status is OutcomeStatus.ERROR]
    assert len(crashed) == 40 and all(
        "the agent fell over" in (t.outcome.error or "") for t in crashed
    )
    assert all(t.num_turns == 1 for t in crashed)  # the call before the crash is kept
    hung = [t for t in stored if t.outcome.status is OutcomeStatus.TIMEOUT]
    assert len(hung) == 20 and all(not t.messages for t in hung)
    # A crashed or killed agent program is the infrastructure's failure, not the policy's.
    assert {t.id for t in stored if is_infra_failure(t)} == {t.id for t in crashed + hung}
    assert_token_exact(store_path)


def test_the_collect_command_on_the_tiny_model(tmp_path: Path) -> None:
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text(
        "".join(_task(k, reward="print").model_dump_json() + "\n" for k in range(3))
    )
    store = tmp_path / "c.db"
    args = [
        "collect",
        "--agent",
        AGENT,
        "--tasks-file",
        str(tasks_file),
        "--n",
        "2",
        "--model",
        "tiny",
    ]
    result = CliRunner().invoke(app, [*args, "--run", "col", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    # The tiny model answers nonsense: every run ends ok with reward 0 from its printed line.
    assert summary["runs"] == 6 and summary["status"]["ok"] == 6 and summary["reward_mean"] == 0.0
    check = CliRunner().invoke(app, ["check", "--store", str(store), "--run", "col", "--json"])
    assert check.exit_code == 0 and json.loads(check.stdout)["mismatches"] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--agent", "x"], "give --env or --tasks"),
        (["--agent", "", "--env", "calculator"], "--agent"),
        (["--agent", "x", "--env", "calculator", "--model", "expert"], "model 'expert'"),
    ],
)
def test_collect_refuses_what_it_cannot_run(args: list[str], message: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["collect", *args, "--store", str(tmp_path / "x.db")])
    assert result.exit_code != 0 and message in str(result.exception or result.output)


def test_the_example_openai_agent_is_collected_on_an_env(tmp_path: Path) -> None:
    example = Path(__file__).parents[2] / "examples" / "agent_rl" / "agent.py"
    store = tmp_path / "agents.db"
    args = ["collect", "--agent", f"{sys.executable} {example}", "--env", "calculator"]
    args += ["--tasks", "2", "--n", "2", "--model", "tiny", "--run", "ex", "--store", str(store)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    # The env's verifier rewards every run: the random tiny model never gets the answer.
    assert summary["runs"] == 4 and summary["status"]["error"] == 0
    assert summary["rewarded"] == 4 and summary["reward_mean"] == 0.0
