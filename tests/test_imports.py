"""Imports sit at the top of modules; the few lazy ones say why, and the CLI starts light."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import trajforge

SRC = Path(trajforge.__file__).parent
MAX_LAZY_IMPORTS = 40


def _function_local_imports() -> list[tuple[Path, int, str]]:
    found: list[tuple[Path, int, str]] = []
    for path in sorted(SRC.rglob("*.py")):
        lines = path.read_text().splitlines()
        seen: set[int] = set()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import | ast.ImportFrom) and node.lineno not in seen:
                    seen.add(node.lineno)
                    # The reason is on the import's line or on the comment line just above it.
                    here = lines[node.lineno - 1]
                    above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                    reason = here if "# lazy:" in here else above
                    found.append((path.relative_to(SRC), node.lineno, reason))
    return found


def test_function_local_imports_are_few_and_each_says_why() -> None:
    local = _function_local_imports()
    assert len(local) <= MAX_LAZY_IMPORTS, f"{len(local)} function-local imports"
    unexplained = [f"{path}:{line}" for path, line, reason in local if "# lazy:" not in reason]
    assert not unexplained, f"function-local imports without a '# lazy:' reason: {unexplained}"


def _modules_after(statement: str) -> set[str]:
    probe = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_cli_and_configs_load_no_torch_transformers_or_matplotlib() -> None:
    loaded = _modules_after(
        "import trajforge.cli.main, trajforge.pipeline.config, trajforge.algos.names"
    )
    assert not {"torch", "transformers", "matplotlib", "openenv", "gradio"} & loaded


def test_algos_exports_its_functions_on_first_access() -> None:
    loaded = _modules_after("from trajforge.algos import Estimator")
    assert "torch" not in loaded
    loaded = _modules_after("from trajforge.algos import policy_loss")
    assert "torch" in loaded and "trajforge.algos.losses" in loaded


def test_an_unknown_algos_name_is_an_attribute_error() -> None:
    import trajforge.algos as algos

    try:
        algos.no_such_function  # noqa: B018
    except AttributeError as exc:
        assert "no_such_function" in str(exc)
    else:
        raise AssertionError("expected AttributeError")
