"""The registry: built-ins by name, user envs by module:factory and file.py:factory."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from episodes import rewards
from trajforge.envs.base import Env
from trajforge.envs.registry import EnvEntry, EnvSource, builtin_names, env_names, get_env
from trajforge.envs.tool_env import ToolEnv
from trajforge.errors import ConfigError
from trajforge.schema import Task

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_env" / "my_env.py"


def solve_all(entry: EnvEntry, tasks: list[Task]) -> list[float]:
    return rewards(entry.make, tasks, entry.expert)


def test_builtin_names() -> None:
    assert builtin_names() == [
        "calculator",
        "python",
        "sql",
        "search",
        "gridworld",
        "keydoor",
        "keydoor-compact",
        "time",
        "retail",
        "repo",
        "gui",
        "tictactoe",
        "kuhn-poker",
        "negotiation",
        "nim",
    ]


@pytest.mark.parametrize(
    ("name", "tools"),
    [
        ("calculator", ["calculator"]),
        ("search", ["search", "open"]),
        ("gridworld", ["move"]),
        ("keydoor", ["move"]),
        ("keydoor-compact", []),
    ],
)
def test_builtin_entries_make_fresh_envs_tasks_and_experts(name: str, tools: list[str]) -> None:
    entry = get_env(name)
    assert entry.name == name and entry.description
    assert entry.tool_names() == tools
    assert entry.make() is not entry.make()
    train = entry.tasks(10, seed=1)
    test = entry.tasks(10, seed=1, split="test")
    assert {t.id for t in train}.isdisjoint(t.id for t in test)
    assert all(t.env == name for t in train)
    assert solve_all(entry, train[:5]) == [1.0] * 5
    with pytest.raises(ConfigError, match="split"):
        entry.tasks(1, split="dev")


def test_example_env_loads_by_path_and_its_expert_solves_every_task() -> None:
    entry = get_env(f"{EXAMPLE}:make_env")
    assert (
        entry.description
        == "A custom environment in a few lines: temperature conversion with one tool."
    )
    assert entry.tool_names() == ["to_fahrenheit"]
    train, test = entry.tasks(100), entry.tasks(100, split="test")
    assert len(train) + len(test) == 29 and len(test) == 3
    assert {t.id for t in train}.isdisjoint(t.id for t in test)
    assert entry.tasks(5, seed=2) == entry.tasks(5, seed=2)
    assert solve_all(entry, train + test) == [1.0] * 29
    assert solve_all(entry, train[:1]) == [1.0]


def test_example_env_loads_as_module_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    entry = get_env("my_env:make_env")
    assert isinstance(entry.make(), ToolEnv)
    assert solve_all(entry, entry.tasks(3)) == [1.0] * 3


def test_factory_may_return_an_entry_like_object(tmp_path: Path) -> None:
    module = tmp_path / "entry_env.py"
    module.write_text(
        "from trajforge.envs.registry import EnvEntry, get_env\n"
        "calc = get_env('calculator')\n"
        "def build():\n"
        "    return EnvEntry('mycalc', calc.make, calc.tasks, calc.expert, 'my calculator')\n"
    )
    entry = get_env(f"{module}:build")
    assert (entry.name, entry.description) == ("mycalc", "my calculator")
    assert solve_all(entry, entry.tasks(3)) == [1.0] * 3


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nosuchenv", "unknown env 'nosuchenv'; known envs: calculator, gridworld, gui, keydoor"),
        ("my_env.py", "env 'my_env.py': name the factory in the file too: my_env.py:make_env"),
        ("no_such_module_xyz:make", "cannot import module 'no_such_module_xyz'"),
        ("/nonexistent/dir/env.py:make", "does not exist"),
        ("trajforge.envs.builtin.calculator:missing", "has no callable 'missing'"),
        ("trajforge.envs.builtin.calculator:DESCRIPTION", "has no callable 'DESCRIPTION'"),
        (
            "trajforge.envs.builtin.calculator:generate_tasks",
            "missing 1 required positional argument",
        ),
        ("trajforge.envs.taskset:TaskSet", "missing 1 required positional argument"),
    ],
)
def test_bad_specs_fail_with_a_clear_error(spec: str, message: str) -> None:
    with pytest.raises((ConfigError, TypeError)) as err:
        get_env(spec)
    assert message in str(err.value)


def test_factory_returning_something_else_is_refused(tmp_path: Path) -> None:
    module = tmp_path / "wrong_env.py"
    module.write_text("def make():\n    return 42\n")
    with pytest.raises(ConfigError, match="returned int; it must return an Env"):
        get_env(f"{module}:make")


def test_env_without_tasks_says_so(tmp_path: Path) -> None:
    module = tmp_path / "bare_env.py"
    module.write_text(
        "from trajforge.envs import ToolEnv, tool\n"
        "@tool\n"
        "def ping() -> str:\n"
        "    '''Ping.'''\n"
        "    return 'pong'\n"
        "def make():\n"
        "    return ToolEnv([ping])\n"
    )
    entry = get_env(f"{module}:make")
    assert isinstance(entry.make(), Env)
    assert entry.expert(Task(id="t", prompt="p"), []) is None
    with pytest.raises(ConfigError, match="declares no tasks"):
        entry.tasks(1)


def test_the_guide_shows_the_tested_example_verbatim() -> None:
    guide = (EXAMPLE.parents[2] / "docs" / "environments.md").read_text()
    block = guide.split("```python\n", 1)[1].split("```", 1)[0]
    assert block == EXAMPLE.read_text()
    code_lines = [line for line in block.splitlines() if line.strip()]
    assert len(code_lines) < 30


def test_every_source_gives_one_entry_shape_that_names_its_source(tmp_path: Path) -> None:
    module = tmp_path / "bare_env.py"
    module.write_text(
        "from trajforge.envs import ToolEnv, tool\n"
        "@tool\n"
        "def ping() -> str:\n"
        "    '''Ping.'''\n"
        "    return 'pong'\n"
        "def make():\n"
        "    return ToolEnv([ping])\n"
    )
    entries = [get_env("calculator"), get_env(f"{module}:make"), get_env(f"{EXAMPLE}:make_env")]
    assert [type(e) for e in entries] == [EnvEntry] * 3
    assert [e.source for e in entries] == [EnvSource.BUILTIN, EnvSource.CODE, EnvSource.CODE]


def test_an_unknown_name_gets_the_closest_and_every_kind_there_is() -> None:
    with pytest.raises(ConfigError) as err:
        get_env("retial")
    message = str(err.value)
    assert message.startswith("unknown env 'retial' (did you mean 'retail'?); known envs: ")
    assert all(name in message for name in env_names())
    assert message.endswith(
        "; or your own: module:factory or file.py:factory (your code); "
        "path/env.yaml (an env file: MCP servers, tools, tasks); "
        "harbor:PATH (a Harbor task folder, or a folder of them); "
        "openenv:URL or openenv:module:app (an OpenEnv server); "
        "miniwob:TASK or browsergym:TASK (browser tasks on headless Chromium); "
        "path/tasks.jsonl (a task file, played in the env its tasks name)"
    )
    assert "\n" not in message


def test_env_names_are_the_builtins_then_the_tau2_domains_installed() -> None:
    names = env_names()
    assert names[: len(builtin_names())] == builtin_names()
    tau2 = names[len(builtin_names()) :]
    assert all(name.startswith("tau2-") for name in tau2)
    if importlib.util.find_spec("tau2") is None:
        assert tau2 == []
    else:
        assert {"tau2-mock", "tau2-airline", "tau2-retail"} <= set(tau2)
        assert get_env("tau2-mock").source is EnvSource.TAU2
