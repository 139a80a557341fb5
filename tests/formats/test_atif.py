"""ATIF documents: the spec's own examples import with their tool calls and observations, a
trajectory round-trips exactly, and bad documents are refused whole, naming file:line and field."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest

from trajforge.errors import DataError
from trajforge.formats.atif import ATIF_VERSION, from_atif, read_atif_file, to_atif
from trajforge.formats.atif_models import AtifTrajectory
from trajforge.formats.detect import detect_format
from trajforge.formats.records import FORMATS, load_records, write_records
from trajforge.schema import Message, Outcome, OutcomeStatus, Role, Task, ToolCall, Trajectory
from trajforge.schema.synthetic import synthetic_trajectory

EXAMPLES = Path(__file__).parent / "atif_examples"
STOCKS = EXAMPLES / "rfc_v1_5_stock_price.json"
MULTIMODAL = EXAMPLES / "rfc_v1_7_multimodal_subagent.json"


def _example(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def test_the_rfc_example_keeps_its_calls_observations_and_tools() -> None:
    (traj,) = read_atif_file(STOCKS)
    assert [m.role for m in traj.messages] == [
        Role.USER, Role.ASSISTANT, Role.TOOL, Role.TOOL, Role.ASSISTANT]  # fmt: skip
    call = traj.messages[1]
    assert [(c.id, c.name, c.arguments) for c in call.tool_calls] == [
        ("call_price_1", "financial_search", {"ticker": "GOOGL", "metric": "price"}),
        ("call_volume_2", "financial_search", {"ticker": "GOOGL", "metric": "volume"}),
    ]
    assert call.reasoning is not None and call.reasoning.startswith("The request requires")
    assert [(m.tool_call_id, m.content) for m in traj.messages[2:4]] == [
        ("call_price_1", "GOOGL is currently trading at $185.35 (Close: 10/11/2025)"),
        ("call_volume_2", "GOOGL volume: 1.5M shares traded."),
    ]
    assert traj.tools[0].function.name == "financial_search"
    assert traj.tools[0].function.parameters["required"] == ["ticker", "metric"]
    assert traj.model == "gemini-2.5-flash"
    assert traj.id == traj.task.id == "025B810F-B3A2-4C67-93C0-FE7A142A947A"
    assert traj.task.prompt == "What is the current trading price of Alphabet (GOOGL)?"
    assert (traj.usage.prompt_tokens, traj.usage.completion_tokens) == (1120, 124)
    assert traj.messages[0].timing is not None
    assert traj.messages[0].timing.started_at == 1760178600.0  # 2025-10-11T10:30:00Z
    # The example's 44 logprobs do not align with its 37 ids: the ids stay, the drop is noted.
    final = traj.messages[-1]
    assert final.token_ids is not None and len(final.token_ids) == 37 and final.logprobs is None
    assert traj.metadata["atif"]["dropped"] == [
        "steps[2].metrics.logprobs: 44 logprobs for 37 completion_token_ids"
    ]


def test_multimodal_parts_subagents_and_system_observations_read_as_text() -> None:
    (traj,) = read_atif_file(MULTIMODAL)
    assert traj.id == "root-42" and traj.task.id == "run-42"
    assert traj.messages[1].content == "What is in this image?\n[image: images/step_1_input.png]"
    tool_results = [m.content for m in traj.messages if m.role is Role.TOOL]
    assert tool_results == [
        "[subagent trajectory: sub-1]",
        "NVIDIA announces new GPU architecture...",
    ]
    assert traj.messages[2].tool_calls[1].arguments == {"q": "NVIDIA GPU"}
    system_event = traj.messages[6]
    assert (system_event.role, system_event.content) == (
        Role.USER, "Summary: a GPU photo; NVIDIA news found.")  # fmt: skip
    kept = traj.metadata["atif"]["subagent_trajectories"]
    assert kept[0]["trajectory_id"] == "sub-1"
    # Written back, the document keeps its subagents and is valid ATIF again.
    again = AtifTrajectory.model_validate(to_atif(traj))
    assert again.subagent_trajectories is not None
    assert again.subagent_trajectories[0].steps[1].message == "A graphics card on a desk."


def _audio_document(media_type: str, source: dict[str, Any]) -> dict[str, Any]:
    part = {"type": "audio", "source": {"media_type": media_type, **source}}
    return {
        "schema_version": "ATIF-v1.8",
        "session_id": "heard",
        "agent": {"name": "listener", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": [{"type": "text", "text": "Transcribe:"}, part]},
            {"step_id": 2, "source": "agent", "message": "hello"},
        ],
    }  # fmt: skip


def test_v1_8_audio_parts_read_as_text_and_an_alias_as_its_type() -> None:
    document = _audio_document("audio/MP3", {"path": "clip.mp3", "duration_sec": 2.5})
    traj = from_atif(document)
    assert traj.messages[0].content == "Transcribe:\n[audio: clip.mp3]"
    part = AtifTrajectory.model_validate(document).steps[0].message[1]  # type: ignore[index]
    assert part.source.media_type == "audio/mpeg"  # type: ignore[union-attr]
    # An image's source under an audio part, or a negative length, is no audio part.
    for bad in (
        _audio_document("image/png", {"path": "a.png"}),
        _audio_document("audio/wav", {"path": "a.wav", "duration_sec": -1}),
    ):
        with pytest.raises(DataError):
            from_atif(bad)


def _rich_trajectory() -> Trajectory:
    """A trajectory using every message field, a bad call and an episode cut short."""
    base = synthetic_trajectory(3)
    bad_call = ToolCall(id="bad", name="add", raw="<tool_call>{oops", parse_error="not JSON")
    cut = Message(role=Role.ASSISTANT, content="", tool_calls=[
        ToolCall(id="open", name="add", arguments={"a": 1})], token_ids=[7], logprobs=[-0.5])  # fmt: skip
    messages = [
        *base.messages[:-1],
        Message(role=Role.ASSISTANT, content="try", tool_calls=[bad_call], name="solver"),
        Message(role=Role.TOOL, content="Error: not JSON", tool_call_id="bad", reward=0.25),
        cut,
    ]
    return base.model_copy(update={
        "messages": messages, "outcome": Outcome(status=OutcomeStatus.TRUNCATED, reward=0.0),
        "metadata": {"note": "rich"}})  # fmt: skip


@pytest.mark.parametrize("make", [lambda: synthetic_trajectory(0), _rich_trajectory])
def test_a_trajectory_round_trips_exactly(tmp_path: Path, make: Any) -> None:
    traj = make()
    document = to_atif(traj)
    AtifTrajectory.model_validate(document)  # what Harbor's validator would take
    assert document["schema_version"] == ATIF_VERSION
    assert from_atif(document) == traj
    path = tmp_path / "out.jsonl"
    write_records(path, [traj, synthetic_trajectory(1)], FORMATS.get("atif"))
    assert detect_format(path).name == "atif"
    assert load_records(path, FORMATS.get("atif")) == [traj, synthetic_trajectory(1)]


def test_assistant_ids_are_the_completion_and_everything_before_the_prompt() -> None:
    traj = synthetic_trajectory(0)
    steps = to_atif(traj)["steps"]
    first_agent = next(s for s in steps if s["source"] == "agent")
    before = [i for m in traj.messages[:2] for i in m.token_ids or []]
    assert first_agent["metrics"]["prompt_token_ids"] == before
    assert first_agent["metrics"]["completion_token_ids"] == traj.messages[2].token_ids
    assert first_agent["metrics"]["logprobs"] == traj.messages[2].logprobs
    assert first_agent["observation"]["results"][0]["source_call_id"] == (
        traj.messages[2].tool_calls[0].id)  # fmt: skip


def test_an_imported_documents_own_fields_survive_export() -> None:
    document = _example(STOCKS)
    written = to_atif(from_atif(document))
    assert written["notes"] == document["notes"]
    assert {k: v for k, v in written["agent"].items() if k != "tool_definitions"} == {
        "name": "harbor-agent", "version": "1.0.0", "extra": {},
        "model_name": "gemini-2.5-flash"}  # fmt: skip
    assert written["agent"]["tool_definitions"] == document["agent"]["tool_definitions"]
    assert [s["source"] for s in written["steps"]] == ["user", "agent", "agent"]
    assert written["steps"][1]["tool_calls"] == document["steps"][1]["tool_calls"]
    assert written["steps"][1]["observation"]["results"] == [
        {k: r[k] for k in ("source_call_id", "content")}
        for r in document["steps"][1]["observation"]["results"]
    ]


def test_an_unknown_version_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps({**_example(STOCKS), "schema_version": "ATIF-v2.0"}, indent=2))
    with pytest.raises(
        DataError,
        match=r"trajectory.json:2: schema_version: 'ATIF-v2.0' is not an ATIF version this "
        r"trajforge reads \(ATIF-v1.0 to ATIF-v1.8\)",
    ):
        list(read_atif_file(path))


def test_a_pretty_printed_document_names_the_line_of_the_bad_field(tmp_path: Path) -> None:
    document = _example(STOCKS)
    del document["steps"][1]["tool_calls"][1]["function_name"]
    document["steps"][2]["timestamp"] = "later"
    path = tmp_path / "trajectory.json"
    text = json.dumps(document, indent=2)
    path.write_text(text)
    lines = text.splitlines()
    call = next(i for i, line in enumerate(lines) if '"call_volume_2"' in line)  # 0-based
    assert lines[call - 1].strip() == "{"  # the call that lacks its name starts a line above
    with pytest.raises(DataError, match=rf"trajectory.json:{call}: steps.1.tool_calls.1."
                       r"function_name: Field required \(and 1 more problem\)"):  # fmt: skip
        list(read_atif_file(path))
    del document["steps"][1]["tool_calls"]
    path.write_text(json.dumps(document, indent=2))
    stamp = next(i for i, line in enumerate(json.dumps(document, indent=2).splitlines(), 1)
                 if '"later"' in line)  # fmt: skip
    with pytest.raises(DataError, match=rf"trajectory.json:{stamp}: steps.2.timestamp: not an"):
        list(read_atif_file(path))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["steps"][1]["tool_calls"][0].pop("function_name"),
         r"steps.1.tool_calls.0.function_name: Field required"),
        (lambda d: d["steps"][0].update(tool_calls=[]),
         r"steps.0.tool_calls: only agent steps have one, not user steps"),
        (lambda d: d["steps"][2].update(step_id=7), r"steps.2.step_id: expected 3, got 7"),
        (lambda d: d["steps"][1]["observation"]["results"][0].update(source_call_id="nope"),
         r"steps.1.observation.results.0.source_call_id: 'nope' is no tool call of this step"),
        (lambda d: d["steps"][1]["observation"]["results"].pop(),
         r"steps.1.observation: no result answers tool call\(s\) call_volume_2"),
        (lambda d: d["steps"][0].update(timestamp="yesterday"),
         r"steps.0.timestamp: not an ISO 8601 timestamp: 'yesterday'"),
        (lambda d: d.update(steps=[]), r"steps: List should have at least 1 item"),
    ],
)  # fmt: skip
def test_a_bad_document_is_refused_whole_naming_line_and_field(
    tmp_path: Path, change: Any, message: str
) -> None:
    good, bad = _example(STOCKS), _example(STOCKS)
    change(bad)
    path = tmp_path / "two.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + json.dumps(bad) + "\n")
    with pytest.raises(DataError, match=rf"two.jsonl:3: {message}"):
        load_records(path, FORMATS.get("atif"))


def test_broken_json_and_empty_files_are_refused(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(_example(STOCKS)) + "\n" + '{"steps": [\n')
    with pytest.raises(DataError, match=r"broken.jsonl:2:\d+: invalid JSON"):
        list(read_atif_file(broken))
    empty = tmp_path / "empty.json"
    empty.write_text("\n")
    with pytest.raises(DataError, match=r"empty.json: the file is empty"):
        list(read_atif_file(empty))
    array = tmp_path / "array.json"
    array.write_text("[1, 2]")
    with pytest.raises(DataError, match=r"array.json:1: expected an ATIF document"):
        list(read_atif_file(array))


def test_a_trajectory_without_messages_cannot_be_written() -> None:
    empty = Trajectory(id="e", task=Task(id="t", prompt="p"))
    with pytest.raises(DataError, match=r"trajectory e: no messages; an ATIF document needs"):
        to_atif(empty)


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "atif_example.py"


def test_the_docs_example_is_shown_whole_and_reads_and_writes_the_rfc_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = EXAMPLE.read_text()
    assert len([line for line in text.splitlines() if line.strip()]) <= 15
    assert f"```python\n{text}```" in (EXAMPLE.parents[1] / "docs" / "atif.md").read_text()
    namespace = runpy.run_path(str(EXAMPLE))  # its functions, without running main
    namespace["main"](str(STOCKS), str(tmp_path / "out.json"))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["user", "assistant", "tool", "tool", "assistant"]
    assert lines[1].endswith(
        'financial_search({"ticker": "GOOGL", "metric": "price"}) '
        'financial_search({"ticker": "GOOGL", "metric": "volume"})'
    )
    written = AtifTrajectory.model_validate_json((tmp_path / "out.json").read_text())
    assert written.schema_version == ATIF_VERSION and len(written.steps) == 3
