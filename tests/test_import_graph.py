"""The modules of trajforge import each other without cycles, and the gateway never reaches up
into training: every import is counted, at the top, inside functions or for type checking only."""

from __future__ import annotations

import ast
from pathlib import Path

import trajforge

SRC = Path(trajforge.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(SRC.rglob("*.py"))}


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The trajforge modules ``path`` (module ``name``) imports: ``from a import b`` counts as
    importing ``a.b`` where that is a module, else ``a``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name, modules) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated), or ``None``."""
    finished: set[str] = set()
    for root in sorted(graph):
        if root in finished:
            continue
        path = [root]
        pending = [iter(sorted(graph[root]))]
        while pending:
            nxt = next(pending[-1], None)
            if nxt is None:
                pending.pop()
                finished.add(path.pop())
            elif nxt in path:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in finished:
                path.append(nxt)
                pending.append(iter(sorted(graph[nxt])))
    return None


def test_no_module_imports_itself_through_others() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_gateway_never_imports_training() -> None:
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in _graph().items()
        if module.startswith("trajforge.serve")
        for target in targets
        if target == "trajforge.train"
        or target.startswith(("trajforge.train.", "trajforge.tinker"))
    )
    assert upward == []
