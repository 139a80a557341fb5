"""``trajforge envs`` and ``trajforge tool``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.envs.registry import builtin_names

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_env" / "my_env.py"


def test_envs_json_lists_builtins_with_descriptions_and_tools() -> None:
    result = runner.invoke(app, ["envs", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert list(rows) == builtin_names()  # every built-in, in registry order
    assert rows["calculator"]["tools"] == ["calculator"]
    assert rows["search"]["tools"] == ["search", "open"]
    assert rows["gridworld"]["tools"] == ["move"]
    assert rows["time"]["tools"] == ["convert_time"]
    assert all(rows[name]["description"] for name in rows)


def test_envs_table() -> None:
    result = runner.invoke(app, ["envs"])
    assert result.exit_code == 0, result.output
    assert "calculator" in result.output and "gridworld" in result.output


def test_tool_prints_result_or_error_with_exit_code() -> None:
    ok = runner.invoke(
        app, ["tool", "calculator", "calculator", "--args", '{"expression": "6 * 7"}']
    )
    assert (ok.exit_code, ok.output.strip()) == (0, "42")
    refused = runner.invoke(
        app, ["tool", "calculator", "calculator", "--args", '{"expression": "9**9**9"}']
    )
    assert refused.exit_code == 1
    assert refused.output.strip() == "Error: refused: 9**387420489 is too large to compute"
    # A tool the env has not is the user's mistake, refused as an error (not a tool's answer).
    unknown = runner.invoke(app, ["tool", "calculator", "abacus"])
    assert unknown.exit_code == 1 and unknown.output == ""
    assert (
        str(unknown.exception) == "tool 'abacus': not a tool of calculator; its tools: calculator"
    )
    misspelt = runner.invoke(app, ["tool", "calculator", "calculater"])
    assert "(did you mean 'calculator'?)" in str(misspelt.exception)


def test_tool_sets_up_a_task_for_stateful_envs_and_loads_user_files() -> None:
    moved = runner.invoke(app, ["tool", "gridworld", "move", "--args", '{"direction": "left"}'])
    assert moved.exit_code == 0 and "@" in moved.output
    user = runner.invoke(
        app, ["tool", f"{EXAMPLE}:make_env", "to_fahrenheit", "--args", '{"celsius": 100}']
    )
    assert (user.exit_code, user.output.strip()) == (0, "212")


def test_tool_bad_args_json_is_a_config_error() -> None:
    result = runner.invoke(app, ["tool", "calculator", "calculator", "--args", "{"])
    assert result.exit_code != 0
    assert (
        "--args: invalid JSON" in str(result.exception) or "--args: invalid JSON" in result.output
    )


def test_envs_env_shows_a_user_files_tools_with_schemas() -> None:
    result = runner.invoke(app, ["envs", "--env", f"{EXAMPLE}:make_env", "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["description"].startswith("A custom environment in a few lines")
    [tool] = shown["tools"]
    assert tool["function"]["name"] == "to_fahrenheit"
    assert tool["function"]["description"] == "Convert a temperature from Celsius to Fahrenheit."
    assert tool["function"]["parameters"] == {
        "type": "object",
        "properties": {"celsius": {"type": "number", "description": "Degrees Celsius."}},
        "required": ["celsius"],
    }


@pytest.fixture
def in_example_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The example's folder as the current directory, as when a user runs from their project."""
    monkeypatch.chdir(EXAMPLE.parent)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(EXAMPLE.parent))])
    yield
    sys.modules.pop("my_env", None)


@pytest.mark.usefixtures("in_example_dir")
def test_envs_env_resolves_a_module_from_the_current_directory() -> None:
    result = runner.invoke(app, ["envs", "--env", "my_env:make_env"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("my_env:make_env  A custom environment")
    assert any(line.startswith("╭─ to_fahrenheit ─") for line in lines), result.output
    assert "Convert a temperature from Celsius to Fahrenheit." in result.output
    assert '"celsius": {' in result.output and '"type": "number"' in result.output
    assert all(len(line) <= 80 for line in lines)


@pytest.mark.usefixtures("in_example_dir")
def test_envs_env_unknown_module_names_where_it_looked() -> None:
    result = runner.invoke(app, ["envs", "--env", "no_such_env_module:make_env"])
    assert result.exit_code == 1
    assert str(result.exception) == (
        "env 'no_such_env_module:make_env': cannot import module 'no_such_env_module': "
        f"it is neither on the Python path nor in {EXAMPLE.parent}"
    )


def test_envs_env_builtin_lists_every_tool() -> None:
    result = runner.invoke(app, ["envs", "--env", "search", "--json"])
    assert result.exit_code == 0, result.output
    tools = {t["function"]["name"]: t["function"] for t in json.loads(result.output)["tools"]}
    assert list(tools) == ["search", "open"]
    assert tools["open"]["parameters"]["required"] == ["doc_id"]
