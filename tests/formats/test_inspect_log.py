"""Inspect AI eval logs written by inspect-ai itself (its ``mockllm`` model with scripted
outputs, offline), imported as trajectories with their tool calls and scores."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import (
    ChatMessageUser,
    ContentImage,
    ContentText,
    ModelOutput,
    ModelUsage,
    get_model,
)
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import tool
from typer.testing import CliRunner

from image_samples import png_bytes
from trajforge.cli.main import app
from trajforge.errors import DataError
from trajforge.formats.records import FORMATS, load_records, write_records
from trajforge.schema import ImagePart, OutcomeStatus, Role
from trajforge.store import TrajectoryStore

ASYNCIO_RUN = asyncio.run


@tool
def add():  # type: ignore[no-untyped-def]
    async def execute(a: int, b: int) -> str:
        """Add two integers.

        Args:
            a: The first.
            b: The second.
        """
        return str(a + b)

    return execute


def _output(output: ModelOutput) -> ModelOutput:
    # Without usage, mockllm counts tokens with tiktoken, which downloads its tables.
    output.usage = ModelUsage(input_tokens=12, output_tokens=4, total_tokens=16)
    return output


def _write_log(folder: Path, log_format: str) -> Path:
    outputs = [
        _output(ModelOutput.for_tool_call("mockllm/model", "add", {"a": 2, "b": 3})),
        _output(ModelOutput.from_content("mockllm/model", "The answer is 5.")),
        _output(ModelOutput.for_tool_call("mockllm/model", "add", {"a": 1, "b": 1})),
        _output(ModelOutput.from_content("mockllm/model", "The answer is 3.")),
    ]
    task = Task(
        dataset=[
            Sample(input="What is 2+3?", target="5", id="s1"),
            Sample(input="What is 1+1?", target="2", id="s2"),
        ],
        solver=[use_tools(add()), generate()],
        scorer=includes(),
        name="adding",
    )
    model = get_model("mockllm/model", custom_outputs=outputs)
    # Synchronous on purpose: called inside a running event loop, Inspect installs
    # nest_asyncio for the whole process, which would change every later test's asyncio.
    (log,) = inspect_eval(
        task, model=model, log_dir=str(folder), log_format=log_format, max_samples=1,
        display="none",
    )  # fmt: skip
    assert log.status == "success"
    return Path(log.location)


@pytest.mark.parametrize("log_format", ["eval", "json"])
def test_an_inspect_log_imports_with_calls_and_scores(tmp_path: Path, log_format: str) -> None:
    path = _write_log(tmp_path, log_format)
    assert path.suffix == f".{log_format}"
    trajs = sorted(load_records(path, FORMATS.get("inspect")), key=lambda t: t.task.id)
    assert [t.task.id for t in trajs] == ["s1", "s2"]
    right, wrong = trajs
    assert [m.role for m in right.messages] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
    ]
    (call,) = right.messages[1].tool_calls
    assert call.name == "add" and call.arguments == {"a": 2, "b": 3}
    assert right.messages[2].tool_call_id == call.id and right.messages[2].content == "5"
    assert right.reward == 1.0 and wrong.reward == 0.0
    assert right.score("includes") is not None and right.task.answer == "5"
    assert right.outcome.status is OutcomeStatus.OK and right.model == "mockllm/model"
    assert right.env == "adding" and right.usage.prompt_tokens == 24
    assert not right.is_tokenized  # text: it trains only through an explicit rendering

    store = tmp_path / "s.db"
    result = CliRunner().invoke(app, ["import", str(path), "-f", "inspect", "--store", str(store)])
    assert result.exit_code == 0, result.output
    with TrajectoryStore(store) as db:
        assert db.count() == 2 and db.stats()["reward_mean"] == pytest.approx(0.5)
    assert asyncio.run is ASYNCIO_RUN  # Inspect left the process's asyncio as it was


def test_a_file_that_is_no_inspect_log_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bogus.json"
    path.write_text(json.dumps({"hello": "world"}))
    with pytest.raises(DataError, match=r"bogus\.json: not a readable Inspect log"):
        load_records(path, FORMATS.get("inspect"))
    with pytest.raises(DataError, match="cannot be written"):
        write_records(tmp_path / "x.jsonl", [], FORMATS.get("inspect"))


def test_an_inspect_sample_with_an_image_imports_with_equal_bytes(tmp_path: Path) -> None:
    image = ImagePart.from_bytes(png_bytes(4))
    question = ChatMessageUser(
        content=[ContentText(text="What colour?"), ContentImage(image=image.data_url())]
    )
    task = Task(
        dataset=[Sample(input=[question], target="grey", id="img")],
        solver=[generate()],
        scorer=includes(),
        name="looking",
    )
    outputs = [_output(ModelOutput.from_content("mockllm/model", "grey"))]
    model = get_model("mockllm/model", custom_outputs=outputs)
    (log,) = inspect_eval(task, model=model, log_dir=str(tmp_path), display="none")
    (traj,) = load_records(Path(log.location), FORMATS.get("inspect"))
    assert traj.messages[0].text == "What colour?"
    assert traj.messages[0].images == [image]
    assert traj.reward == 1.0
