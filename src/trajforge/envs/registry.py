"""The environment registry: every environment, whatever its source, as one ``EnvEntry``.

``ENVS`` (a ``trajforge.registry.Registry``) holds the environments known by name: the
built-ins (``calculator``, ``python``, ``sql``, ``search``, ``gridworld``, ``keydoor``,
``keydoor-compact``, ``time``, ``retail``, ``repo`` (its tasks from ``synthesize --bugs``),
``gui`` (pixel-only screens), and the games ``tictactoe``, ``kuhn-poker``,
``negotiation``, ``nim``) and, where the optional ``tau2`` extra is installed, ``tau2-<domain>`` for each
tau2-bench domain (through the adapter in ``trajforge.envs.tau2_bench``). ``get_env`` also
takes a user's environment by where it is:

- ``package.module:factory`` (a module on the Python path or in the current directory) or
  ``path/to/file.py:factory``: code (``EnvSource.CODE``);
- ``path/to/env.yaml``: an env file (MCP servers, tools, tasks and a verifier, see
  ``trajforge.envs.mcp.envfile``; ``EnvSource.ENV_FILE``);
- ``harbor:PATH``: a Harbor task folder or a folder of them (``trajforge.envs.harbor``;
  ``EnvSource.HARBOR``).
- ``openenv:URL``, ``openenv:module:attr`` or ``openenv-text:...``: an OpenEnv server, running
  or started from its code (``trajforge.envs.openenv.source``; ``EnvSource.OPENENV``).
- ``path/tasks.jsonl``: a task file, its tasks played in the env they name
  (``trajforge.envs.task_file``; ``EnvSource.TASK_FILE``).
- ``miniwob:TASK`` or ``browsergym:TASK`` (comma-separated for several; ``miniwob-screenshot:``
  and ``browsergym-screenshot:`` add screenshots): browser tasks on headless Chromium
  (``trajforge.envs.browser``; ``EnvSource.BROWSER``).

Every source produces the same ``EnvEntry``: a name, where it came from, a factory called once
per episode, its tasks, its scripted expert, its scripted user (envs with a simulated user),
and a description. An unknown name is one ``ConfigError`` with the closest known name and every
kind there is.

A built-in is a module with ``make_env(**kwargs) -> Env``, ``generate_tasks(n, seed, split)``
and ``expert(task, messages)``, and optionally ``scripted_user(task, view)`` and
``ANSWER_FREE_VERIFIER = True`` (its verifier never reads the answer key); its description
is ``DESCRIPTION`` or its docstring's first line.
A game (``trajforge.envs.multiseat``) is a module with ``GAME``, a ``GameKit`` that gives all
of these and also ``make_game()`` (every seat played by a policy) and ``opponents`` (scripted
seats by name); its ``make_env`` is one seat against a scripted opponent.

A user factory is called with the keyword arguments given to ``EnvEntry.make`` and returns either

- an ``Env`` (typically a ``ToolEnv``): the factory is called again for every episode, tasks come
  from the env's ``tasks`` list (split deterministically by id, 10% test, unless the tasks carry
  their own ``split``), and the expert is the env's ``expert`` method; or
- an object with a ``make()`` method returning an ``Env`` and, optionally, ``name``,
  ``description``, ``tasks(n, seed=0, split="train")`` and ``expert(task, messages)``
  (for instance an ``EnvEntry``).

Either may set ``answer_free_verifier = True`` when its verifier never reads the answer key.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from functools import cache, partial
from pathlib import Path
from types import ModuleType

from trajforge.envs.base import Env
from trajforge.envs.entry import EnvEntry, EnvSource, TasksFn
from trajforge.envs.multiseat.base import GameKit
from trajforge.envs.taskset import TRAIN, TaskSet
from trajforge.errors import ConfigError
from trajforge.registry import Registry, is_ref, load_module
from trajforge.schema import Task

BUILTIN_MODULES: dict[str, str] = {
    "calculator": "trajforge.envs.builtin.calculator",
    "python": "trajforge.envs.builtin.python_env",
    "sql": "trajforge.envs.builtin.sql_env",
    "search": "trajforge.envs.builtin.search",
    "gridworld": "trajforge.envs.builtin.gridworld",
    "keydoor": "trajforge.envs.builtin.keydoor",
    "keydoor-compact": "trajforge.envs.builtin.keydoor_compact",
    "time": "trajforge.envs.builtin.time_env",
    "retail": "trajforge.envs.builtin.retail",
    "repo": "trajforge.envs.builtin.repo",
    "gui": "trajforge.envs.gui.builtin",
    "tictactoe": "trajforge.envs.multiseat.tictactoe",
    "kuhn-poker": "trajforge.envs.multiseat.kuhn",
    "negotiation": "trajforge.envs.multiseat.negotiation",
    "nim": "trajforge.envs.multiseat.nim",
}
TAU2_PREFIX = "tau2-"
# Imported by name, only when a tau2 env is named or listed: tau2 takes seconds to import.
TAU2_ADAPTER = "trajforge.envs.tau2_bench.adapter"
USER_TEST_FRACTION = 0.1
# Imported by name only when an env file is named: it loads the MCP SDK.
ENV_FILE_MODULE = "trajforge.envs.mcp.envfile"
ENV_FILE_SUFFIXES = (".yaml", ".yml")
# Imported by name only when a Harbor folder is named.
HARBOR_MODULE = "trajforge.envs.harbor"
HARBOR_PREFIX = "harbor:"
# Imported by name only when an OpenEnv env is named: openenv-core takes seconds to import.
OPENENV_MODULE = "trajforge.envs.openenv.source"
OPENENV_PREFIXES = ("openenv:", "openenv-text:")
# Imported by name only when a browser env is named: it loads Playwright.
BROWSER_MODULE = "trajforge.envs.browser.source"
# Imported by name only when a task file is named.
TASK_FILE_MODULE = "trajforge.envs.task_file"
TASK_FILE_SUFFIX = ".jsonl"
BROWSER_PREFIXES = ("miniwob:", "browsergym:", "miniwob-screenshot:", "browsergym-screenshot:")
USER_ENV_KINDS = (
    "module:factory or file.py:factory (your code)",
    "path/env.yaml (an env file: MCP servers, tools, tasks)",
    "harbor:PATH (a Harbor task folder, or a folder of them)",
    "openenv:URL or openenv:module:app (an OpenEnv server)",
    "miniwob:TASK or browsergym:TASK (browser tasks on headless Chromium)",
    "path/tasks.jsonl (a task file, played in the env its tasks name)",
)

EnvLoader = Callable[[], EnvEntry]

ENVS: Registry[EnvLoader] = Registry("env", hint="or your own: " + "; ".join(USER_ENV_KINDS))
"""The environments known by name: the built-ins, and the tau2 domains once ``tau2_names``
has looked for them."""


def _first_line(doc: str | None) -> str:
    return inspect.cleandoc(doc).splitlines()[0] if doc else ""


def _builtin(name: str, module_name: str) -> EnvEntry:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"env {name!r}: cannot load {module_name}: {exc}") from exc
    description = getattr(module, "DESCRIPTION", None) or _first_line(module.__doc__)
    game = getattr(module, "GAME", None)
    if isinstance(game, GameKit):
        return EnvEntry(
            name,
            game.make_env,
            game.generate_tasks,
            game.expert,
            description,
            source=EnvSource.BUILTIN,
            game=game.make_game,
            opponents=game.opponents,
        )
    for attr in ("make_env", "generate_tasks", "expert"):
        if not callable(getattr(module, attr, None)):
            raise ConfigError(f"env {name!r}: module {module.__name__} has no function {attr}()")
    return EnvEntry(
        name,
        module.make_env,
        module.generate_tasks,
        module.expert,
        description,
        getattr(module, "scripted_user", None),
        EnvSource.BUILTIN,
        getattr(module, "ANSWER_FREE_VERIFIER", False),
    )


for _name, _module in BUILTIN_MODULES.items():
    ENVS.add(_name, partial(_builtin, _name, _module))


def _tau2_adapter(name: str) -> ModuleType:
    try:
        return importlib.import_module(TAU2_ADAPTER)
    except ImportError as exc:
        raise ConfigError(
            f"env {name!r} needs tau2-bench: pip install 'trajforge[tau2]' ({exc})"
        ) from exc


def _tau2_entry(name: str) -> EnvEntry:
    entry: EnvEntry = _tau2_adapter(name).entry(name.removeprefix(TAU2_PREFIX))
    return entry


@cache
def tau2_names() -> list[str]:
    """``tau2-<domain>`` for each domain package of the installed tau2 (none without the
    ``tau2`` extra), registered in ``ENVS``. Found without importing tau2, which takes seconds:
    a mistyped name is answered at once. (tau2's own registry may add variants of these
    domains, such as ``telecom-workflow``; ``get_env`` asks it for a tau2 name not listed.)"""
    found = importlib.util.find_spec("tau2")
    if found is None:
        return []
    folders = [Path(root) / "domains" for root in found.submodule_search_locations or []]
    names = sorted(
        TAU2_PREFIX + domain.name
        for folder in folders
        if folder.is_dir()
        for domain in folder.iterdir()
        if (domain / "__init__.py").is_file()
    )
    for name in names:
        ENVS.add(name, partial(_tau2_entry, name))
    return names


def _tasks_from_list(name: str, declared: list[Task]) -> TasksFn:

    def tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
        if not declared:
            raise ConfigError(f"env {name!r} declares no tasks (pass tasks=[...] to its ToolEnv)")
        if any(t.split is not None for t in declared):
            chosen = TaskSet([t for t in declared if t.split == split], name=name)
        else:
            train, test = TaskSet(declared, name=name).split(USER_TEST_FRACTION, seed=0)
            chosen = train if split == TRAIN else test
        return list(chosen.shuffled(seed).take(n))

    return tasks


def _from_env_file(name: str) -> EnvEntry:
    factory = importlib.import_module(ENV_FILE_MODULE).EnvFileFactory(Path(name))
    tasks = _tasks_from_list(name, factory.tasks)
    return EnvEntry(name, factory, tasks, None, factory.description, source=EnvSource.ENV_FILE,
                    stored_name=factory.name)  # fmt: skip


def _from_harbor(name: str) -> EnvEntry:
    harbor = importlib.import_module(HARBOR_MODULE)
    tasks = harbor.find_tasks(Path(name.removeprefix(HARBOR_PREFIX)))
    declared = [t.task(name) for t in tasks]

    def chosen(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
        # A benchmark folder is what its user chose to run: a task without a declared split
        # is offered for either one.
        pool = [t for t in declared if t.split in (None, split)]
        return list(TaskSet(pool, name=name).shuffled(seed).take(n))

    return EnvEntry(name, partial(harbor.HarborEnv, tasks, name), chosen, harbor.expert,
                    f"Harbor tasks in {name.removeprefix(HARBOR_PREFIX)}",
                    source=EnvSource.HARBOR)  # fmt: skip


def _from_code(name: str) -> EnvEntry:
    target, _, attr = name.rpartition(":")
    module = load_module(name, target, "env")
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"env {name!r}: {target} has no callable {attr!r}")
    made = factory()
    fallback = _first_line(factory.__doc__) or _first_line(module.__doc__)
    if isinstance(made, Env):
        description = getattr(made, "description", "") or fallback
        tasks = _tasks_from_list(name, list(getattr(made, "tasks", None) or []))
        user = getattr(made, "user_script", None)
        answer_free = bool(getattr(made, "answer_free_verifier", False))
        return EnvEntry(name, factory, tasks, made.expert, description, user,
                        answer_free_verifier=answer_free, stored_name=made.name)  # fmt: skip
    if callable(getattr(made, "make", None)):
        return EnvEntry(
            getattr(made, "name", None) or name,
            made.make,
            getattr(made, "tasks", None),
            getattr(made, "expert", None),
            getattr(made, "description", "") or fallback,
            getattr(made, "scripted_user", None),
            answer_free_verifier=bool(getattr(made, "answer_free_verifier", False)),
        )
    raise ConfigError(
        f"env {name!r}: the factory returned {type(made).__name__}; it must return an Env "
        "or an object with a make() method"
    )


@cache
def get_env(name: str) -> EnvEntry:
    """The entry of env ``name``: a name in ``ENVS`` (a built-in, ``tau2-<domain>``),
    ``module:factory``, ``path/file.py:factory``, ``path/env.yaml``, ``harbor:PATH`` or
    ``openenv:TARGET``.

    Raises:
        ConfigError: nothing is known or found by that name; the message gives the closest
            name and every kind of env there is.
    """
    if name.startswith(TAU2_PREFIX) and name not in tau2_names():
        # tau2's registry decides: a variant it registers loads, any other name is refused.
        _tau2_adapter(name).check_domain(name.removeprefix(TAU2_PREFIX))
        ENVS.add(name, partial(_tau2_entry, name))
    if name in ENVS:
        return ENVS.get(name)()
    if name.startswith(HARBOR_PREFIX):
        return _from_harbor(name)
    if name.startswith(OPENENV_PREFIXES):
        entry: EnvEntry = importlib.import_module(OPENENV_MODULE).entry(name)
        return entry
    if name.startswith(BROWSER_PREFIXES):
        try:
            browser = importlib.import_module(BROWSER_MODULE)
        except ImportError as exc:
            raise ConfigError(f"env {name!r} needs pip install 'trajforge[web]' ({exc})") from exc
        browser_entry: EnvEntry = browser.entry(name)
        return browser_entry
    if name.endswith(ENV_FILE_SUFFIXES):
        return _from_env_file(name)
    if name.endswith(TASK_FILE_SUFFIX):
        task_file: EnvEntry = importlib.import_module(TASK_FILE_MODULE).entry(name)
        return task_file
    if is_ref(name):
        return _from_code(name)
    if name.endswith(".py"):
        raise ConfigError(f"env {name!r}: name the factory in the file too: {name}:make_env")
    tau2_names()  # they are among the names the error lists
    raise ENVS.unknown(name)


def stored_env_name(env: str | None) -> str | None:
    """The name trajectories of env ``env`` (a registry name or ``file.py:factory``) carry in
    the store, the same whichever command stored them (``None``: no env)."""
    return None if env is None else get_env(env).stored_name


def env_names() -> list[str]:
    """Every env known by name: the built-ins in registry order, then the tau2 domains."""
    return [*BUILTIN_MODULES, *tau2_names()]


def builtin_names() -> list[str]:
    """The built-in envs, in registry order."""
    return list(BUILTIN_MODULES)
