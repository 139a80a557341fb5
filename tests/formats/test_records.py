"""File formats by name: round trips over generated trajectories, whole-file refusal of a bad
record, and the CLI's import/export --format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.errors import DataError
from trajforge.formats.records import FORMATS, read_records, write_records
from trajforge.schema import FunctionSpec, Message, Role, Task, ToolCall, ToolSpec, Trajectory
from trajforge.store import TrajectoryStore

TEXT = st.text(st.characters(min_codepoint=1, blacklist_categories=("Cs",)), max_size=12)
ARGUMENTS = st.dictionaries(
    st.text("abcxyz_", min_size=1, max_size=5),
    st.one_of(st.integers(-99, 99), TEXT, st.booleans(), st.none()),
    max_size=3,
)


@st.composite
def trajectories(draw: st.DrawFn) -> Trajectory:
    """Conversations with a system prompt or not, parallel tool calls, tool errors, empty
    contents and any unicode."""
    messages = []
    if draw(st.booleans()):
        messages.append(Message(role=Role.SYSTEM, content=draw(TEXT)))
    messages.append(Message(role=Role.USER, content=draw(TEXT)))
    for turn in range(draw(st.integers(0, 3))):
        calls = [
            ToolCall(id=f"call_{turn}_{k}", name=draw(st.sampled_from(["add", "search"])),
                     arguments=draw(ARGUMENTS))
            for k in range(draw(st.integers(1, 3)))
        ]  # fmt: skip
        messages.append(Message(role=Role.ASSISTANT, tool_calls=calls))
        for call in calls:
            result = draw(st.one_of(TEXT, st.just("error: no such thing")))
            messages.append(Message(role=Role.TOOL, content=result, tool_call_id=call.id))
    messages.append(Message(role=Role.ASSISTANT, content=draw(TEXT)))
    if draw(st.booleans()):
        messages.append(Message(role=Role.USER, content=draw(TEXT)))
        messages.append(Message(role=Role.ASSISTANT, content=draw(TEXT)))
    tools = [ToolSpec(function=FunctionSpec(name="add", description=draw(TEXT)))]
    first_user = next(m.content for m in messages if m.role is Role.USER)
    return Trajectory(task=Task(id="t", prompt=first_user), tools=tools, messages=messages)


def _conversation(traj: Trajectory, with_ids: bool) -> list[tuple[Any, ...]]:
    return [
        (m.role, m.content, [(c.id if with_ids else None, c.name, c.arguments) for c in m.tool_calls],
         m.tool_call_id if with_ids else None)
        for m in traj.messages
    ]  # fmt: skip


def _round_trip(tmp: Path, traj: Trajectory, name: str) -> Trajectory:
    path = tmp / f"{name}.jsonl"
    write_records(path, [traj], FORMATS.get(name))
    (back,) = read_records(path, FORMATS.get(name))
    return back


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(traj=trajectories())
def test_openai_keeps_messages_calls_ids_and_tools(tmp_path: Path, traj: Trajectory) -> None:
    back = _round_trip(tmp_path, traj, "openai")
    assert _conversation(back, with_ids=True) == _conversation(traj, with_ids=True)
    assert back.tools == traj.tools and back.task.prompt == traj.task.prompt


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(traj=trajectories())
def test_sharegpt_keeps_messages_calls_and_tools(tmp_path: Path, traj: Trajectory) -> None:
    back = _round_trip(tmp_path, traj, "sharegpt")
    assert _conversation(back, with_ids=False) == _conversation(traj, with_ids=False)
    # Ids are numbered on the way in, and every result still answers its own call.
    calls = {c.id for m in back.messages for c in m.tool_calls}
    assert {m.tool_call_id for m in back.messages if m.role is Role.TOOL} == calls
    assert back.tools == traj.tools


@pytest.mark.parametrize("name", ["openai", "sharegpt"])
def test_every_role_order_openai_takes_round_trips(tmp_path: Path, name: str) -> None:
    roles = ["system", "system", "assistant", "user", "user", "assistant", "system", "user"]
    messages = [Message(role=Role(r), content=f"{r} {k}") for k, r in enumerate(roles)]
    traj = Trajectory(task=Task(id="t", prompt="p"), messages=messages)
    back = _round_trip(tmp_path, traj, name)
    assert [(m.role, m.content) for m in back.messages] == [(m.role, m.content) for m in messages]


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(traj=trajectories())
def test_trajforge_keeps_everything(tmp_path: Path, traj: Trajectory) -> None:
    assert _round_trip(tmp_path, traj, "trajforge") == traj


def test_an_id_less_record_gets_the_same_id_on_every_import(tmp_path: Path) -> None:
    path = tmp_path / "chats.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    first = [t.id for t in read_records(path, FORMATS.get("openai"))]
    assert first == [t.id for t in read_records(path, FORMATS.get("openai"))]


SHAREGPT_ROLES = [
    {"from": "system", "value": "Be brief."},
    {"from": "human", "value": "Add 2 and 3."},
    {"from": "function_call", "value": '{"name": "add", "arguments": {"a": 2, "b": 3}}'},
    {"from": "observation", "value": "5"},
    {"from": "gpt", "value": "5"},
    {"from": "user", "value": "And 4 and 4, 1 and 1?"},
    {"from": "function_call", "value": json.dumps([{"name": "add", "arguments": {"a": 4, "b": 4}},
                                                   {"name": "add", "arguments": '{"a": 1, "b": 1}'}])},
    {"from": "observation", "value": '["8", "2"]'},
    {"from": "chatgpt", "value": "8 and 2"},
]  # fmt: skip


def test_sharegpt_roles_parallel_calls_and_string_arguments(tmp_path: Path) -> None:
    path = tmp_path / "sg.jsonl"
    path.write_text(json.dumps({"conversations": SHAREGPT_ROLES}) + "\n")
    (traj,) = read_records(path, FORMATS.get("sharegpt"))
    roles = [m.role.value for m in traj.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user", "assistant",
                     "tool", "tool", "assistant"]  # fmt: skip
    parallel = traj.messages[6].tool_calls
    assert [(c.id, c.arguments) for c in parallel] == [("call_2_0", {"a": 4, "b": 4}),
                                                       ("call_2_1", {"a": 1, "b": 1})]  # fmt: skip
    assert [m.content for m in traj.messages[7:9]] == ["8", "2"]


@pytest.mark.parametrize(
    ("fmt", "bad", "message"),
    [
        ("sharegpt", {"conversations": [{"from": "robot", "value": "x"}]}, ":3: conversations.0.from: unknown role 'robot'"),
        ("sharegpt", {"conversations": [{"from": "observation", "value": "x"}]}, ":3: conversations.0: an observation must follow"),
        ("sharegpt", {"conversations": [{"from": "human", "value": 3}]}, ":3: conversations.0.value: expected a string"),
        ("openai", {"messages": [{"role": "robot", "content": "x"}]}, ":3: messages.0: role:"),
        ("openai", {"messages": "hi"}, ":3: messages: expected a list"),
        ("openai", ["not", "an", "object"], ":3: a JSON array; import reads JSON Lines"),
        ("adp", {"content": [{"class_": "teleport"}]}, ":3: content.0.class_: unknown ADP item 'teleport'"),
        ("adp", {"schema_version": "9.0.0", "content": []}, ":3: schema_version: '9.0.0' is ADP 9.x; this trajforge reads ADP 1.x"),
    ],
)  # fmt: skip
def test_a_bad_record_anywhere_refuses_the_file_and_stores_nothing(
    tmp_path: Path, fmt: str, bad: Any, message: str
) -> None:
    good = {
        "sharegpt": {
            "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]
        },
        "openai": {"messages": [{"role": "user", "content": "hi"}]},
        "adp": {
            "id": "x",
            "content": [{"class_": "text_observation", "content": "hi", "source": "user"}],
        },
    }[fmt]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (good, good, bad, good)) + "\n")
    with pytest.raises(DataError) as caught:
        list(read_records(path, FORMATS.get(fmt)))
    assert f"{path}{message}" in str(caught.value)
    store = tmp_path / "s.db"
    result = CliRunner().invoke(app, ["import", str(path), "--format", fmt, "--store", str(store)])
    assert result.exit_code != 0 and message in str(result.exception)
    with TrajectoryStore(store) as db:
        assert db.count() == 0


def test_cli_import_export_between_formats(tmp_path: Path) -> None:
    source = tmp_path / "sg.jsonl"
    source.write_text(json.dumps({"conversations": SHAREGPT_ROLES}) + "\n")
    store, runner = tmp_path / "s.db", CliRunner()
    args = ["import", str(source), "-f", "sharegpt", "--run", "sg", "--store", str(store)]
    assert runner.invoke(app, args).exit_code == 0
    out = tmp_path / "chats.jsonl"
    result = runner.invoke(
        app, ["export", "--out", str(out), "-f", "openai", "--store", str(store)]
    )
    assert result.exit_code == 0, result.output
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert [m["role"] for m in record["messages"]][:4] == ["system", "user", "assistant", "tool"]
    assert record["messages"][2]["tool_calls"][0]["function"]["name"] == "add"
    unknown = runner.invoke(
        app, ["export", "--out", str(out), "-f", "parquet", "--store", str(store)]
    )
    assert unknown.exit_code != 0 and "unknown format 'parquet'" in str(unknown.exception)


ROUND_TRIP = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@ROUND_TRIP
@given(traj=trajectories())
def test_trl_prompt_completion_keeps_messages_calls_ids_and_tools(
    tmp_path: Path, traj: Trajectory
) -> None:
    back = _round_trip(tmp_path, traj, "trl-prompt-completion")
    assert _conversation(back, with_ids=True) == _conversation(traj, with_ids=True)
    assert back.tools == traj.tools


@ROUND_TRIP
@given(traj=trajectories())
def test_adp_keeps_messages_ids_tools_task_and_outcome(tmp_path: Path, traj: Trajectory) -> None:
    back = _round_trip(tmp_path, traj, "adp")
    assert _conversation(back, with_ids=True) == _conversation(traj, with_ids=True)
    assert (back.id, back.task, back.tools) == (traj.id, traj.task, traj.tools)
    assert back.outcome == traj.outcome


@ROUND_TRIP
@given(traj=trajectories())
def test_otel_spans_keep_the_conversation_and_model(tmp_path: Path, traj: Trajectory) -> None:
    back = _round_trip(tmp_path, traj.model_copy(update={"model": "m"}), "otel")
    assert _conversation(back, with_ids=True) == _conversation(traj, with_ids=True)
    assert back.model == "m"


ADP_RECORD = {
    "schema_version": "1.2.0",
    "id": "adp-1",
    "content": [
        {"class_": "text_observation", "content": "List the files, then say hi.", "source": "user"},
        {"class_": "code_action", "language": "bash", "content": "ls", "tool_call_id": "c1",
         "description": "Look first.", "reasoning_content": "The user wants files."},
        {"class_": "text_observation", "content": "a.txt", "source": "environment",
         "tool_call_id": "c1"},
        {"class_": "api_action", "function": "open", "kwargs": {"path": "a.txt"},
         "tool_call_id": "c2"},
        {"class_": "api_action", "function": "open", "kwargs": {"path": "b.txt"},
         "tool_call_id": "c3"},
        {"class_": "web_observation", "axtree": "[1] heading 'A'", "tool_call_id": "c2"},
        {"class_": "text_observation", "content": "no such file", "source": "environment",
         "tool_call_id": "c3"},
        {"class_": "message_action", "content": "hi", "reward": 1.0},
    ],
    "details": {"dataset": "example"},
}  # fmt: skip


def test_an_adp_record_as_adp_converters_write_it(tmp_path: Path) -> None:
    path = tmp_path / "adp.jsonl"
    path.write_text(json.dumps(ADP_RECORD) + "\n")
    (traj,) = read_records(path, FORMATS.get("adp"))
    roles = [m.role.value for m in traj.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "tool", "assistant"]
    code = traj.messages[1]
    assert code.content == "Look first." and code.reasoning == "The user wants files."
    assert [(c.name, c.arguments) for c in code.tool_calls] == [("run_bash", {"code": "ls"})]
    assert [c.id for c in traj.messages[3].tool_calls] == ["c2", "c3"]  # parallel calls
    assert traj.messages[4].content == "[1] heading 'A'" and traj.messages[-1].reward == 1.0
    assert traj.id == "adp-1" and traj.task.prompt == "List the files, then say hi."
    out = tmp_path / "out.jsonl"
    write_records(out, [traj], FORMATS.get("adp"))
    written = json.loads(out.read_text())
    assert [i["class_"] for i in written["content"]][:3] == [
        "text_observation", "code_action", "text_observation"
    ]  # fmt: skip
    (again,) = read_records(out, FORMATS.get("adp"))
    assert _conversation(again, with_ids=True) == _conversation(traj, with_ids=True)
