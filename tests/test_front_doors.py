"""Packages are entered through their front door: a module of src/trajforge takes what it needs
from another top-level package through that package's ``__init__`` (``from trajforge.policy
import HFPolicy``), never from its submodules, which are private to the package (and to tests).
Each ``__init__`` states its public names in ``__all__``, and every one of them resolves.

``trajforge/__main__.py`` (``python -m trajforge``) is a launcher, run and never imported: like
the ``trajforge`` console script it names the CLI's entry point where it lives."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from import_scan import SRC, imported, modules, package_of


def _back_doors(tree: ast.AST, name: str, is_package: bool, known: set[str]) -> Iterator[str]:
    """The imports of module ``name`` that reach into another package's submodule."""
    if name.endswith(".__main__"):
        return
    for found in imported(tree, name, is_package, known):
        target = found.module
        home = package_of(target)
        if target in known and home != package_of(name) and target != home:
            yield f"{name}:{found.line} imports {target}"


def _front_door_names(found: dict[str, Path]) -> Iterator[tuple[str, int, str, str]]:
    """(importer, line, package, name) for each name taken from another package's front door."""
    for name, path in found.items():
        tree = ast.parse(path.read_text())
        for taken in imported(tree, name, path.name == "__init__.py", set(found)):
            if taken.name and taken.module == package_of(taken.module) != package_of(name):
                yield name, taken.line, taken.module, taken.name


def _all_of(path: Path) -> list[str] | None:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return None


def test_no_module_reaches_into_another_package() -> None:
    found = modules()
    back = [
        door
        for name, path in found.items()
        for door in _back_doors(
            ast.parse(path.read_text()), name, path.name == "__init__.py", set(found)
        )
    ]
    assert back == [], f"{len(back)} imports reach past a front door:\n" + "\n".join(back)


def test_the_back_door_finder_finds_every_kind() -> None:
    known = {
        "trajforge.policy",
        "trajforge.policy.hf",
        "trajforge.cli",
        "trajforge.cli.run",
        "trajforge.cli.main",
    }
    source = """
from typing import TYPE_CHECKING
from trajforge.policy import HFPolicy
from trajforge.cli.main import app
from trajforge.policy.hf import load
from trajforge.policy import hf
import trajforge.policy.hf
if TYPE_CHECKING:
    from trajforge.policy.hf import Hidden
def later() -> None:
    from ..policy.hf import Late
"""
    doors = list(_back_doors(ast.parse(source), "trajforge.cli.run", False, known))
    assert [door.split(":")[1] for door in doors] == [
        "5 imports trajforge.policy.hf",
        "6 imports trajforge.policy.hf",
        "7 imports trajforge.policy.hf",
        "9 imports trajforge.policy.hf",
        "11 imports trajforge.policy.hf",
    ]


def test_every_name_taken_through_a_front_door_is_in_its_all() -> None:
    found = modules()
    alls = {name: _all_of(path) for name, path in found.items() if path.name == "__init__.py"}
    missing = [
        f"{importer}:{line} takes {name} from {package}, not in its __all__"
        for importer, line, package, name in _front_door_names(found)
        if package in alls and name not in (alls[package] or [])
    ]
    private = [
        f"{importer}:{line} takes the private {name} from {package}"
        for importer, line, package, name in _front_door_names(found)
        if package not in alls and name.startswith("_") and not name.startswith("__")
    ]
    assert missing + private == [], "\n".join(missing + private)


RESOLVE = """
import importlib, json, sys, types
failures = []
for package, names in json.loads(sys.argv[1]).items():
    module = importlib.import_module(package)
    for name in names:
        try:
            value = getattr(module, name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] == "trajforge":
                failures.append(f"{package}.{name}: {exc}")
            continue  # an optional extra that is not installed here
        except Exception as exc:
            failures.append(f"{package}.{name}: {type(exc).__name__}: {exc}")
            continue
        if isinstance(value, types.ModuleType):
            failures.append(f"{package}.{name} is the module {value.__name__}")
print(json.dumps(failures))
"""


def _bound(tree: ast.Module) -> set[str]:
    """The names a module binds at its top when imported (not those for type checking only)."""
    bound: set[str] = set()
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody
            pending += [stmt for handler in node.handlers for stmt in handler.body]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {t.id for t in targets if isinstance(t, ast.Name)}
    return bound


def _lazy_homes(tree: ast.Module) -> dict[str, str]:
    """The name -> submodule map a package's ``__getattr__`` loads from (PEP 562): the literal
    ``{name: submodule}`` dict at its top, whether assigned or passed to ``lazy_exports``."""
    if "__getattr__" not in _bound(tree):
        return {}
    homes: dict[str, str] = {}
    for node in tree.body:
        for found in ast.walk(node):
            if (
                isinstance(found, ast.Dict)
                and found.keys
                and all(
                    isinstance(part, ast.Constant) and isinstance(part.value, str)
                    for part in [*found.keys, *found.values]
                )
            ):
                homes |= ast.literal_eval(found)
    return homes


def test_every_all_entry_is_bound_or_loaded_on_first_access() -> None:
    """Read, not imported: each ``__all__`` entry is bound by its ``__init__`` or named in its
    lazy map, with a submodule that binds it. A lazy one is not also a submodule's name: once
    that submodule is imported, the package's attribute is the submodule and ``__getattr__`` is
    never asked (an eager import in ``__init__`` binds the name after the submodule's)."""
    found = modules()
    wrong: list[str] = []
    for package, path in found.items():
        entries = _all_of(path) if path.name == "__init__.py" else None
        tree = ast.parse(path.read_text())
        bound, homes = _bound(tree), _lazy_homes(tree)
        for entry in entries or []:
            home = found.get(f"{package}.{homes.get(entry)}")
            if entry not in bound and f"{package}.{entry}" in found:
                wrong.append(f"{package}.{entry} is loaded lazily from a submodule of its name")
            elif entry not in bound and (
                home is None or entry not in _bound(ast.parse(home.read_text()))
            ):
                wrong.append(f"{package}.{entry} is neither bound nor loaded on first access")
    assert wrong == [], "\n".join(wrong)


@pytest.mark.slow
def test_every_all_entry_resolves() -> None:
    """Imported: each ``__all__`` entry is there on import (or on first access, for a lazy
    one), and is the object, not a submodule of the same name that shadows it."""
    stated = {
        name: entries
        for name, path in modules().items()
        if path.name == "__init__.py" and (entries := _all_of(path))
    }
    assert "trajforge.schema" in stated
    out = subprocess.run(
        [sys.executable, "-c", RESOLVE, json.dumps(stated)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=SRC.parent,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    failures = json.loads(out.stdout.strip().splitlines()[-1])
    assert failures == [], "\n".join(failures)
