"""Rollouts on a local 2-actor Ray cluster (started once for the module): the same
trajectories as in process, exactly one stored per task x sample when an actor is killed
mid-run, and the CLI's ``--ray``."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import ray
from typer.testing import CliRunner

from trajforge.cli.failures import ExitCode
from trajforge.cli.main import app
from trajforge.cli.run_cmds import _ray_overrides
from trajforge.distributed import RayOptions
from trajforge.distributed.runner import RayRunner
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError
from trajforge.pipeline.config import load_experiment, rl_config
from trajforge.rollout import RolloutSpec, open_rollout, run_rollout
from trajforge.schema import Task, Trajectory
from trajforge.store.sqlite import TrajectoryStore

AGENT = f"{sys.executable} {Path(__file__).parents[1] / 'agent_programs' / 'agent_program.py'}"
SLOW_ENV = f"{Path(__file__).parent / 'ray_envs.py'}:slow_calculator"

pytestmark = pytest.mark.usefixtures("cluster")


def _tokens(trajectory: Trajectory) -> list[list[int] | None]:
    return [m.token_ids for m in trajectory.messages]


def _keys(trajectories: list[Trajectory]) -> list[tuple[str, int]]:
    return [(t.task.id, t.sample_index or 0) for t in trajectories]


def test_ray_rollout_equals_the_local_one_token_for_token() -> None:
    spec = RolloutSpec.model_validate(
        {
            "env": "calculator",
            "policy": {"name": "tiny"},
            "tasks": {"count": 3},
            "n": 2,
            "sampling": {"max_new_tokens": 24},
            "seed": 5,
            "run_id": "same",
        }
    )
    local = run_rollout(spec)
    remote = run_rollout(spec, runner=RayRunner(RayOptions(actors=2, slots=2)))
    assert _keys(remote) == _keys(local)
    assert [_tokens(t) for t in remote] == [_tokens(t) for t in local]
    assert [t.outcome.model_dump() for t in remote] == [t.outcome.model_dump() for t in local]
    assert [t.group_id for t in remote] == [t.group_id for t in local]
    for theirs, ours in zip(remote, local, strict=True):
        for a, b in zip(theirs.messages, ours.messages, strict=True):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_an_actor_killed_mid_run_loses_nothing_and_stores_each_episode_once(
    tmp_path: Path,
) -> None:
    spec = RolloutSpec.model_validate(
        {"env": SLOW_ENV, "policy": {"name": "expert"}, "tasks": {"count": 16}, "run_id": "kill"}
    )
    runner = RayRunner(RayOptions(actors=2, slots=2))

    async def roll_out_killing_one(store: TrajectoryStore) -> int:
        seen = 0
        async with open_rollout(spec, store=store, runner=runner) as stream:
            async for _ in stream:
                seen += 1
                if seen == 2:  # the other actor's episodes are mid-way
                    ray.kill(runner.actors[0], no_restart=True)
        return seen

    with TrajectoryStore(tmp_path / "s.db") as store:
        yielded = asyncio.run(roll_out_killing_one(store))
        stored = store.query(run="kill")
    assert runner.replaced == 1
    assert yielded == 16
    assert len(stored) == 16
    assert sorted(_keys(stored)) == sorted((t.id, 0) for t in get_env(SLOW_ENV).tasks(16))
    assert all(t.outcome.reward == 1.0 for t in stored)


def test_rollout_and_eval_commands_run_on_ray_and_resume_there(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    common = ["--env", "calculator", "--model", "expert", "--store", db, "--json"]
    ray_args = ["--ray", "--ray-actors", "2"]
    result = CliRunner().invoke(
        app, ["rollout", *common, "--tasks", "6", "--run", "r", *ray_args], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["stored"], summary["success"]) == (6, 1.0)
    result = CliRunner().invoke(
        app, ["eval", *common, "--tasks", "4", "--run", "e", *ray_args], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["success"] == 1.0
    resumed = CliRunner().invoke(
        app, ["rollout", "--resume", "r", "--store", db, "--json", *ray_args]
    )
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["resumed_from"] == 6


def test_a_simulated_users_side_is_recorded_on_ray_as_in_process(tmp_path: Path) -> None:
    spec = RolloutSpec.model_validate(
        {
            "env": "retail",
            "policy": {"name": "expert"},
            "tasks": {"count": 2},
            "run_id": "users",
        }
    )
    sides: dict[str, list[Trajectory]] = {}
    for where, runner in (("local", None), ("ray", RayRunner(RayOptions(actors=2)))):
        store = tmp_path / f"{where}.db"
        live = {"runner": runner} if runner is not None else {}
        agents = run_rollout(spec.model_copy(update={"store": store}), **live)  # type: ignore[arg-type]
        with TrajectoryStore(store) as st:
            users = list(st.query(run="users.user"))
        assert {u.metadata["linked"] for u in users} == {a.id for a in agents}
        assert {a.metadata["linked"] for a in agents} == {u.id for u in users}
        assert {u.model for u in users} == {"scripted-user"}
        sides[where] = sorted(users, key=lambda u: u.task.id)
    assert [_tokens(u) for u in sides["ray"]] == [_tokens(u) for u in sides["local"]]


def test_ray_refuses_what_it_cannot_play() -> None:
    lockstep = RolloutSpec.model_validate(
        {"env": "calculator", "policy": {"name": "expert"}, "tasks": {"count": 1}, "lockstep": True}
    )
    with pytest.raises(ConfigError, match=r"spec\.lockstep"):
        run_rollout(lockstep, runner=RayRunner(RayOptions(actors=1)))
    result = CliRunner().invoke(app, ["rollout", "--model", "expert", "--ray-actors", "2"])
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception) == "--ray-actors: the episodes run on Ray only with --ray"


def test_an_experiment_plays_its_stages_on_ray(tmp_path: Path) -> None:
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(
        "name: onray\nenv: calculator\nmodel: expert\n"
        f"out_dir: {tmp_path}\neval: {{tasks: 4}}\nray: {{slots: 2}}\n"
        "stages:\n  - {kind: demonstrations, tasks: 5}\n  - {kind: eval, name: base}\n"
    )
    result = CliRunner().invoke(
        app, ["run", str(experiment), "--ray-actors", "2", "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    stages = {s["name"]: s for s in json.loads(result.stdout)["stages"]}
    assert stages["demonstrations"]["count"] == 5
    assert stages["base"]["summary"]["success"] == 1.0
    with TrajectoryStore(tmp_path / "onray" / "store.db") as store:
        assert len(store.query(run="onray.demonstrations")) == 5
        assert len(store.query(run="onray.base")) == 4
    # The file's ray: settings stay, the options add to them; an RL stage samples on Ray too.
    exp = load_experiment(experiment, ["stages=[{kind: rl}]"])
    assert rl_config(exp, 0, model="tiny", run_dir=tmp_path).ray == RayOptions(slots=2)
    assert _ray_overrides(exp, RayOptions(actors=2)) == ["ray.actors=2"]


def test_collect_runs_the_agent_programs_as_ray_tasks(
    tmp_path: Path, processes_with: Callable[[str], list[int]]
) -> None:
    marker = f"trajforge-ray-test-{uuid.uuid4().hex}"
    cap = {"max_tokens": 8}
    behaviours: list[dict[str, object]] = [{"reward": "post", **cap}, {"reward": "print", **cap}]
    behaviours += [{"crash": True}, {"hang": marker}]
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text(
        "".join(
            Task(id=f"t{k}", prompt=f"Add {k} and 1?", answer=k + 1, data=b).model_dump_json()
            + "\n"
            for k, b in enumerate(behaviours)
        )
    )
    db = tmp_path / "agents.db"
    args = ["collect", "--agent", AGENT, "--tasks-file", str(tasks_file), "--model", "tiny"]
    args += ["--timeout", "5", "--run", "col", "--store", str(db), "--json", "--ray"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    # One run crashed and one hung: the command says so and exits as partly failed.
    assert result.exit_code == ExitCode.PARTLY_FAILED, result.output
    summary = json.loads(result.stdout)
    assert summary["runs"] == 4
    # The tiny model's nonsense runs to the program's 8-token cap: truncated, as eval records it.
    assert (summary["status"]["truncated"], summary["status"]["error"]) == (2, 1)
    assert summary["status"]["timeout"] == 1
    assert processes_with(marker) == []  # the hung program and its child, killed on the Ray worker
    with TrajectoryStore(db) as store:
        assert {t.task.id for t in store.query(run="col")} == {"t0", "t1", "t2", "t3"}


def test_an_experiments_collect_stage_runs_its_agents_on_ray(tmp_path: Path) -> None:
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(
        f"name: agents\nenv: calculator\nmodel: tiny\nout_dir: {tmp_path}\nray: {{}}\n"
        f"stages:\n  - {{kind: collect, agent: {json.dumps(AGENT)}, tasks: 3}}\n"
    )
    result = CliRunner().invoke(app, ["run", str(experiment), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (stage,) = json.loads(result.stdout)["stages"]
    # The tiny model's replies run to the gateway's token cap (truncated, as in eval) unless its
    # nonsense samples a stop token first, which depends on the CPU's numerics.
    assert stage["count"] == 3 and sum(stage["statuses"].values()) == 3
    assert set(stage["statuses"]) <= {"truncated", "ok"}
    with TrajectoryStore(tmp_path / "agents" / "store.db") as store:
        assert len(store.query(run="agents.collect")) == 3
