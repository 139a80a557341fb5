"""``trajforge envs`` and ``trajforge tool``."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from trajforge.cli.main import app

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_env" / "my_env.py"


def test_envs_json_lists_builtins_with_descriptions_and_tools() -> None:
    result = runner.invoke(app, ["envs", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert list(rows) == ["calculator", "python", "sql", "search", "gridworld"]
    assert rows["calculator"]["tools"] == ["calculator"]
    assert rows["search"]["tools"] == ["search", "open"]
    assert rows["gridworld"]["tools"] == ["move"]
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
    unknown = runner.invoke(app, ["tool", "calculator", "abacus"])
    assert (
        unknown.exit_code == 1
        and "unknown tool 'abacus'; available tools: calculator" in unknown.output
    )


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
