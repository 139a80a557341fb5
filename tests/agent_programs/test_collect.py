"""``collect``: an agent program per task x sample as the episodes of a rollout, every run
accounted for."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from serve_helpers import MODEL, adder_reply, assert_token_exact, recorded
from typer.testing import CliRunner

from trajforge.agent_programs import AgentRunner
from trajforge.cli.main import app
from trajforge.errors import ConfigError
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.rollout import Limits, RolloutSpec, group_id_for, run_rollout
from trajforge.schema import EvaluatorKind, OutcomeStatus, Role, Task, is_infra_failure
from trajforge.serve.gateway import Gateway
from trajforge.serve.wire import DEFAULT_MAX_TOKENS
from trajforge.store import TrajectoryStore

AGENT = f"{sys.executable} {Path(__file__).parent / 'agent_program.py'}"


def _task(k: int, **behaviour: object) -> Task:
    a, b, c = k, k + 1, 2 * k
    return Task(
        id=f"t{k:03d}", prompt=f"Add {a} and {b} and {c}?", answer=a + b + c, data=behaviour
    )


def test_200_runs_with_crashes_and_hangs_are_all_accounted_for(
    gateway: Gateway, tmp_path: Path, processes_with: Callable[[str], list[int]]
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
    store_path = tmp_path / "gateway.db"
    spec = RolloutSpec(
        tasks=tasks,
        limits=Limits(episode_timeout_s=3.0),
        concurrency=16,
        run_id="gw",
        store=store_path,
    )
    runs = run_rollout(spec, runner=AgentRunner(AGENT, gateway=gateway))
    statuses = {r.task.id: r.outcome.status for r in runs}
    assert len(runs) == 200 and len(statuses) == 200
    for task in tasks:
        expected = (
            OutcomeStatus.ERROR if task.data.get("crash")
            else OutcomeStatus.TIMEOUT if task.data.get("hang")
            else OutcomeStatus.OK
        )  # fmt: skip
        assert statuses[task.id] is expected, task.id
    assert all(r.reward == 1.0 for r in runs if r.outcome.status is OutcomeStatus.OK)
    assert processes_with(marker) == []
    stored = recorded(store_path)
    assert sorted(t.task.id for t in stored) == sorted(t.id for t in tasks)
    assert all(t.sample_index == 0 and t.group_id == group_id_for("gw", t.task.id) for t in stored)
    crashed = [t for t in stored if t.outcome.status is OutcomeStatus.ERROR]
    assert len(crashed) == 40 and all(
        "the agent fell over" in (t.outcome.error or "") for t in crashed
    )
    assert all(t.num_turns == 1 for t in crashed)  # the call before the crash is kept
    hung = [t for t in stored if t.outcome.status is OutcomeStatus.TIMEOUT]
    assert len(hung) == 20 and all(not t.messages for t in hung)
    assert all(t.outcome.error == "no exit after 3 s" for t in hung)
    # A crashed or killed agent program is the infrastructure's failure, not the policy's.
    assert {t.id for t in stored if is_infra_failure(t)} == {t.id for t in crashed + hung}
    assert_token_exact(store_path)
    # Each run's session is gone once its episode is: the gateway holds only runs under way.
    assert gateway.recorder.sessions == {}


def test_a_runs_verifier_reward_and_its_other_trajectories_linked_beside_it(
    gateway: Gateway, tmp_path: Path
) -> None:
    # n=2 choices on the first call fork the conversation: two trajectories in one session.
    store_path = tmp_path / "forks.db"
    program = tmp_path / "forking_agent.py"
    program.write_text(
        "import json, os, sys, urllib.request\n"
        "task = json.loads(sys.stdin.read())\n"
        "body = {'model': os.environ['TRAJFORGE_MODEL'], 'n': 2,\n"
        "        'messages': [{'role': 'user', 'content': task['prompt']}]}\n"
        "request = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions',\n"
        "    data=json.dumps(body).encode(), headers={'Content-Type': 'application/json'})\n"
        "urllib.request.urlopen(request, timeout=60).read()\n"
    )
    spec = RolloutSpec(tasks=[_task(1)], n=2, run_id="gw", store=store_path)
    runs = run_rollout(spec, runner=AgentRunner(f"{sys.executable} {program}", gateway=gateway))
    assert [(r.task.id, r.sample_index) for r in runs] == [("t001", 0), ("t001", 1)]
    with TrajectoryStore(store_path) as store:
        stored = store.query(run="gw")
        assert store.completed_keys("gw") == {("t001", 0), ("t001", 1)}
    assert len(stored) == 4  # each run's episode and the fork linked to it
    linked = [t for t in stored if t.sample_index is None]
    assert {t.metadata["gateway"]["forked_from"] is not None for t in linked} == {True}
    sessions = {t.metadata["gateway"]["session"] for t in stored}
    assert sessions == {"gw.t001.0", "gw.t001.1"}


CLOSING_ENV = """
from pathlib import Path
from trajforge.envs import ToolEnv, tool

@tool
def ping() -> str:
    '''Ping.'''
    return "pong"

def right(evidence) -> float:
    return float(evidence.messages[-1].content == f"The total is {evidence.task.answer}.")

class ClosingEnv(ToolEnv):
    async def close(self) -> None:
        with Path(CLOSED).open("a") as closed:
            closed.write("closed\\n")

def make():
    return ClosingEnv([ping], verifier=right)
"""


def test_a_run_without_a_reward_is_scored_by_its_envs_verifier_and_the_env_is_closed(
    gateway: Gateway, tmp_path: Path
) -> None:
    closed = tmp_path / "closed.txt"
    env_file = tmp_path / "closing_env.py"
    env_file.write_text(f"CLOSED = {str(closed)!r}\n{CLOSING_ENV}")
    spec = RolloutSpec(env=f"{env_file}:make", tasks=[_task(1), _task(2)], run_id="v")
    runs = run_rollout(spec, runner=AgentRunner(AGENT, gateway=gateway))
    assert [r.reward for r in runs] == [1.0, 1.0] and [r.run_id for r in runs] == ["v", "v"]
    scores = [[(s.value, s.evaluator.kind) for s in r.scores] for r in runs]
    assert scores == [[(1.0, EvaluatorKind.ENV)]] * 2
    # The one env made for its verifier is closed with the runner.
    assert closed.read_text() == "closed\n"
    assert gateway.recorder.sessions == {}


def test_an_agent_rollout_takes_a_gateway_that_stores_nothing_itself(tmp_path: Path) -> None:
    with TrajectoryStore(tmp_path / "own.db") as store:
        policy = ScriptedPolicy(adder_reply, load_tokenizer(), name=MODEL)
        storing = Gateway(policy, store, "x")
        spec = RolloutSpec(tasks=[_task(1)], run_id="x")
        with pytest.raises(ConfigError, match="stores nothing itself"):
            run_rollout(spec, runner=AgentRunner(AGENT, gateway=storing))


def test_the_collect_command_on_the_tiny_model(tmp_path: Path) -> None:
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text(
        "".join(_task(k, reward="print").model_dump_json() + "\n" for k in range(3))
    )
    store = tmp_path / "c.db"
    args = ["collect", "--agent", AGENT, "--tasks-file", str(tasks_file), "--n", "2"]
    args += ["--model", "tiny", "--run", "col", "--store", str(store), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    # The tiny model answers nonsense, reward 0 from its printed line. A reply runs to the
    # gateway's token cap, and that run is truncated as eval records such a cut, unless the
    # sampled nonsense hits a stop token first (which draws depend on the CPU's numerics).
    statuses = {status: n for status, n in summary["status"].items() if n}
    assert summary["runs"] == 6 and sum(statuses.values()) == 6
    assert set(statuses) <= {"truncated", "ok"} and statuses.get("truncated", 0) >= 1
    assert summary["reward_mean"] == 0.0
    with TrajectoryStore(store) as db:
        for trajectory in db.query(run="col"):
            reply = next(m for m in trajectory.messages if m.role is Role.ASSISTANT)
            cut = trajectory.outcome.status is OutcomeStatus.TRUNCATED
            assert (len(reply.token_ids or []) == DEFAULT_MAX_TOKENS) == cut, trajectory.id
    check = CliRunner().invoke(app, ["check", "--store", str(store), "--run", "col", "--json"])
    assert check.exit_code == 0 and json.loads(check.stdout)["mismatches"] == []
    with TrajectoryStore(store) as db:
        meta = db.get_run("col")
    assert meta is not None and (meta["command"], meta["agent"]) == ("collect", AGENT)
    # The run's spec holds the tasks themselves: --resume needs no task file.
    assert [t["id"] for t in meta["spec"]["tasks"]] == ["t000", "t001", "t002"]
    assert meta["spec"]["limits"]["episode_timeout_s"] == 300.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--agent", "x"], "give --env or --tasks-file"),
        (["--agent", "x", "--env", "calculator", "--tasks-file", "t.jsonl"], "one of them"),
        (["--env", "calculator"], "--agent"),
        (["--agent", "x", "--harness", "opencode", "--env", "calculator"], "one of them"),
        (["--harness", "aider", "--env", "calculator"], "unknown harness 'aider'"),
        (["--agent", "", "--env", "calculator"], "--agent"),
        (["--agent", "x", "--env", "calculator", "--tasks", "0"], "--tasks: must be at least 1"),
        (["--agent", "x", "--env", "calculator", "--timeout", "0"], "--episode-timeout"),
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
