"""Reading the import statements of src/trajforge without importing it: the modules, and what
each import statement names (at the top, inside functions or for type checking only)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import trajforge

SRC = Path(trajforge.__file__).parent


@dataclass(frozen=True)
class Imported:
    """One name an import statement takes: ``module`` is the trajforge module it loads (``a.b``
    for ``from a import b`` where ``a.b`` is a module, else ``a``), ``name`` what it takes from
    it (``None`` for a module object)."""

    line: int
    module: str
    name: str | None


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(SRC.rglob("*.py"))}


def package_of(module: str) -> str:
    """The top-level package (or loose top-level module) ``module`` belongs to."""
    return ".".join(module.split(".")[:2])


def imported(tree: ast.AST, name: str, is_package: bool, known: set[str]) -> Iterator[Imported]:
    """What the import statements of module ``name`` (parsed as ``tree``) take from ``known``."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Imported(node.lineno, alias.name, None)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    yield Imported(node.lineno, sub, None)
                else:
                    yield Imported(node.lineno, base, alias.name)


def imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The trajforge modules ``path`` (module ``name``) imports."""
    tree = ast.parse(path.read_text())
    found = imported(tree, name, path.name == "__init__.py", set(modules))
    return {i.module for i in found if i.module in modules and i.module != name}
