"""Harbor task folders as environments: the reference solution scores 1 and a wrong answer 0,
commands run sandboxed over a fresh workspace, and a folder that is no task is refused by the
file it lacks. The tasks (examples/harbor_tasks) are written as Harbor's docs lay them out."""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path

import pytest

from trajforge.envs import sandbox
from trajforge.envs.base import Env
from trajforge.envs.harbor import HarborEnv, find_tasks, read_task
from trajforge.envs.registry import EnvEntry, EnvSource, get_env
from trajforge.envs.tool_env import EnvError
from trajforge.errors import ConfigError
from trajforge.formats.atif import from_atif, to_atif
from trajforge.formats.tool_calls import parse_tool_calls
from trajforge.rollout import PolicyRef, RolloutSpec, run_rollout
from trajforge.schema import Message, Role, Task, ToolCall

TASKS = Path(__file__).resolve().parents[2] / "examples" / "harbor_tasks"
HELLO, COUNT = TASKS / "hello-world", TASKS / "count-lines"

needs_sandbox = pytest.mark.skipif(
    not sandbox.sandbox_available(),
    reason="bubblewrap cannot run here (apt-get install bubblewrap)",
)


def _entry(path: Path = TASKS) -> EnvEntry:
    return get_env(f"harbor:{path}")


def _task(entry: EnvEntry, name: str) -> Task:
    return next(t for t in entry.tasks(10) if t.id == name)


async def _run(env: Env, task: Task, *replies: str) -> tuple[float, list[Message]]:
    """Play ``replies`` (text protocol) as the assistant's turns; the reward and conversation."""
    messages = await env.reset(task)
    try:
        for turn, reply in enumerate(replies):
            parsed = parse_tool_calls(reply, id_prefix=f"call_{turn}")
            action = Message(role=Role.ASSISTANT, content=parsed.content,
                             tool_calls=parsed.tool_calls)  # fmt: skip
            messages.append(action)
            result = await env.step(action)
            messages.extend(result.observations)
            if result.done:
                return result.reward, messages
    finally:
        await env.close()
    raise AssertionError("the episode did not end")


def test_a_folder_of_tasks_reads_as_harbor_lays_it_out() -> None:
    hello, count = sorted(find_tasks(TASKS), key=lambda t: t.name)
    assert (hello.name, count.name) == ("hello-world", "trajforge/count-lines")
    assert (
        hello.instruction == 'Create a file called hello.txt with "Hello, world!" as the content.'
    )
    assert hello.workdir == "/app" and hello.not_reproduced == ("FROM ubuntu:24.04",)
    assert count.copies == ((COUNT / "environment" / "records.txt", "data/records.txt"),)
    assert count.env == {"LC_ALL": "C.UTF-8"}
    assert count.verifier_env == {"EXPECTED_LINES": "3"}  # ${VAR:-default} with VAR unset
    assert count.not_reproduced[1].startswith("RUN apt-get update && apt-get install")
    assert [t.name for t in find_tasks(HELLO)] == ["hello-world"]


def test_the_entry_is_a_harbor_source_with_its_tasks_for_either_split() -> None:
    entry = _entry()
    assert entry.source is EnvSource.HARBOR
    assert sorted(t.id for t in entry.tasks(10)) == ["hello-world", "trajforge/count-lines"]
    assert sorted(t.id for t in entry.tasks(10, split="test")) == sorted(
        t.id for t in entry.tasks(10))  # fmt: skip
    hello = _task(entry, "hello-world")
    assert hello.metadata["harbor"] == {"workdir": "/app", "not_reproduced": ["FROM ubuntu:24.04"]}
    assert hello.data["path"] == str(HELLO) and hello.env == f"harbor:{TASKS}"
    assert entry.tool_names() == ["bash"]
    env = entry.make(max_turns=3)
    assert isinstance(env, HarborEnv) and env.max_turns == 3


@needs_sandbox
@pytest.mark.parametrize("name", ["hello-world", "trajforge/count-lines"])
async def test_the_reference_solution_scores_one(name: str) -> None:
    entry = _entry()
    task = _task(entry, name)
    env = entry.make()
    messages = await env.reset(task)
    reward = 0.0
    for turn in range(3):
        parsed = parse_tool_calls(entry.expert(task, messages) or "", id_prefix=f"c{turn}")
        action = Message(role=Role.ASSISTANT, content=parsed.content,
                         tool_calls=parsed.tool_calls)  # fmt: skip
        messages.append(action)
        result = await env.step(action)
        messages.extend(result.observations)
        if result.done:
            reward = result.reward
            break
    await env.close()
    assert reward == 1.0
    assert messages[2].tool_calls[0].arguments["command"] == (
        task_folder(task) / "solution" / "solve.sh").read_text()  # fmt: skip


def task_folder(task: Task) -> Path:
    return Path(task.data["path"])


@needs_sandbox
@pytest.mark.parametrize(
    ("name", "command"),
    [("hello-world", "echo 'Hello, World' > hello.txt"),
     ("trajforge/count-lines", "echo 4 > count.txt"),
     ("hello-world", "true")],
)  # fmt: skip
async def test_a_wrong_answer_scores_zero(name: str, command: str) -> None:
    entry = _entry()
    env = entry.make()
    call = ToolCall(id="c", name="bash", arguments={"command": command})
    task = _task(entry, name)
    await env.reset(task)
    try:
        await env.step(Message(role=Role.ASSISTANT, content="", tool_calls=[call]))
        final = await env.step(Message(role=Role.ASSISTANT, content="Done."))
    finally:
        await env.close()
    assert final.done and final.reward == 0.0


@needs_sandbox
async def test_commands_share_files_but_not_the_tests_or_the_solution() -> None:
    entry = _entry()
    env = entry.make()
    task = _task(entry, "trajforge/count-lines")
    await env.reset(task)
    assert isinstance(env, HarborEnv)
    outputs = [
        await env.call_tool("bash", {"command": command})
        for command in (
            "pwd && cat data/records.txt && echo $LC_ALL",
            "echo kept > note.txt",
            "cat note.txt; ls /tests /solution; exit 3",
            "curl -s https://example.com || python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), 2)'",
        )
    ]
    workspace = env.context.state["harbor"] if env.context else None
    await env.close()
    assert outputs[0] == "/app\nalpha\nbeta\ngamma\nC.UTF-8"
    assert outputs[2].startswith("kept\n[stderr]\nls: cannot access '/tests'")
    assert "/solution" in outputs[2] and outputs[2].endswith("[exit code 3]")
    assert "[exit code" in outputs[3]  # no network
    assert workspace is not None and not workspace.root.exists()  # removed on close


@needs_sandbox
async def test_tests_that_write_no_reward_fail_the_verifier(tmp_path: Path) -> None:
    task_dir = tmp_path / "no-reward"
    shutil.copytree(HELLO, task_dir)
    (task_dir / "tests" / "test.sh").write_text("#!/bin/bash\necho checked\n")
    entry = _entry(task_dir)
    with pytest.raises(EnvError, match=r"the verifier failed: tests/test.sh: exit code 0; no "
                       r"/logs/verifier/reward.txt or reward.json was written"):  # fmt: skip
        await _run(entry.make(), entry.tasks(1)[0], "Done.")


@pytest.mark.parametrize(
    ("remove", "missing"),
    [("task.toml", "task.toml is missing"), ("instruction.md", "instruction.md is missing"),
     ("environment", "environment is missing"), ("tests/test.sh", "tests/test.sh is missing")],
)  # fmt: skip
def test_a_folder_that_is_not_a_task_names_the_missing_file(
    tmp_path: Path, remove: str, missing: str
) -> None:
    task_dir = tmp_path / "broken"
    shutil.copytree(HELLO, task_dir)
    target = task_dir / remove
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    if remove == "task.toml":
        with pytest.raises(ConfigError, match=rf"harbor:{task_dir}: not a Harbor task: {missing}"
                           r" \(a task folder holds task.toml, instruction.md, environment, "
                           r"tests/test.sh\), and no subfolder holds one"):  # fmt: skip
            get_env(f"harbor:{task_dir}")
        return
    with pytest.raises(ConfigError, match=rf"harbor:{task_dir}: not a Harbor task: {missing}$"):
        read_task(task_dir)
    with pytest.raises(ConfigError, match=rf"not a Harbor task: {missing}"):
        get_env(f"harbor:{tmp_path}")  # as one of a folder's tasks


def test_bad_folders_and_multi_container_tasks_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"harbor:/no/such/place: no such folder"):
        find_tasks(Path("/no/such/place"))
    task_dir = tmp_path / "compose"
    shutil.copytree(HELLO, task_dir)
    (task_dir / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    with pytest.raises(ConfigError, match=r"docker-compose.yaml: a multi-container task needs"):
        read_task(task_dir)
    (task_dir / "environment" / "docker-compose.yaml").unlink()
    (task_dir / "task.toml").write_text("[verifier\n")
    with pytest.raises(ConfigError, match=r"task.toml: not valid TOML"):
        read_task(task_dir)


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "harbor_env.py"


@needs_sandbox
async def test_the_docs_example_is_shown_whole_and_scores_one_then_zero() -> None:
    text = EXAMPLE.read_text()
    assert len([line for line in text.splitlines() if line.strip()]) <= 15
    assert f"```python\n{text}```" in (EXAMPLE.parents[1] / "docs" / "harbor.md").read_text()
    namespace = runpy.run_path(str(EXAMPLE))  # its functions, without running main
    assert await namespace["main"](str(HELLO)) == [1.0, 0.0]


@needs_sandbox
def test_the_expert_s_rollouts_score_one_and_travel_as_atif() -> None:
    name = f"harbor:{TASKS}"
    spec = RolloutSpec(env=name, policy=PolicyRef(name="expert"), tasks=_entry().tasks(10),
                       run_id="harbor")  # fmt: skip
    trajectories = run_rollout(spec)
    assert sorted(t.task.id for t in trajectories) == ["hello-world", "trajforge/count-lines"]
    for traj in trajectories:
        assert traj.outcome.reward == 1.0 and traj.env == name
        assert [m.role for m in traj.messages] == [
            Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]  # fmt: skip
        assert from_atif(to_atif(traj)) == traj
