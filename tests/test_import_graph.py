"""The modules of trajforge import each other without cycles, and the gateway never reaches up
into training: every import is counted, at the top, inside functions or for type checking only."""

from __future__ import annotations

from import_scan import imports, modules


def _graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(path, name, found) for name, path in found.items()}


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
