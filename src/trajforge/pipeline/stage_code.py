"""The code a stage runs, by content hash, and what such a hash cannot see.

A stage's config names the code it runs: the environment (``file.py:factory``, ``env.yaml``,
``module:factory``), script policies (``script:file.py:function``), an agent program's command
(``python my_agent.py``), scorers. Each file so named is hashed, and so is every ``.py`` file
in its folder (the helpers and the verifier it imports or names), and the file the
environment's verifier is defined in, wherever it is. Built-in code (trajforge's own, installed packages) is
covered by the trajforge version in the config instead. An edited file changes the stage's
config, so the stage runs again and everything downstream of it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import shlex
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import trajforge
from trajforge.envs import EnvSource, get_env
from trajforge.errors import TrajforgeError
from trajforge.policy import SCRIPT_PREFIX
from trajforge.registry import is_ref

_INSTALLED = [
    Path(trajforge.__file__).resolve().parent,
    *{Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib", "stdlib")},
]
"""Code that the trajforge version and the installed packages stand for."""

_CODE_SUFFIXES = (".py", ".yaml", ".yml", ".json", ".jsonl", ".toml", ".sh", ".js", ".mjs", ".ts")
"""Files a config may name that decide what a stage does: code, env and task files."""

UNSEEN = (
    "not: modules imported from outside those folders, files the code reads at run time, "
    "installed packages (trajforge's own code counts by its version)"
)
"""What a stage's fingerprint cannot see, said when the stage is skipped."""


def code_hashes(config: Mapping[str, Any], *, env: str | None) -> dict[str, str]:
    """The content hash of every project file ``config`` names (and, where the stage runs
    the environment ``env``, of the file its verifier is defined in), by path."""
    files = {p for value in _strings(config) for p in _named_files(value)}
    if env is not None and (verifier := _verifier_file(env)) is not None:
        files.add(verifier)
    files |= {sibling for f in list(files) for sibling in _siblings(f)}
    return {_shown(f): file_sha256(f) for f in sorted(files) if not _installed(f)}


def covered(config: Mapping[str, Any]) -> str:
    """What a stage's fingerprint covers and what it cannot see, in one line."""
    code: Mapping[str, str] = config.get("code") or {}
    files = f"; files: {', '.join(code)}" if code else ""
    return f"fingerprint covers its settings, trajforge {config.get('trajforge')}{files}; {UNSEEN}"


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of the file at ``path``."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _named_files(value: str) -> Iterator[Path]:
    """The files a config string names: itself, a ref's target, a command's words."""
    try:
        words = shlex.split(value) if " " in value else [value]
    except ValueError:  # an unbalanced quote: not a command
        words = [value]
    for word in words:
        word = word.removeprefix(SCRIPT_PREFIX)
        target = word.rpartition(":")[0] if is_ref(word) else word
        path = Path(target).expanduser()
        if target.endswith(_CODE_SUFFIXES) and path.is_file():
            yield path.resolve()
        elif is_ref(word) and (module := _module_file(target)) is not None:
            yield module


def _module_file(name: str) -> Path | None:
    """The file of module ``name`` (a ``module:attr`` ref's target), if it is one."""
    if not all(part.isidentifier() for part in name.split(".")):
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return Path(origin).resolve() if origin and origin.endswith(".py") else None


def _verifier_file(env: str) -> Path | None:
    """The file that defines env ``env``'s verifier, for an env of the user's own code (an env
    file's verifier is hashed with the file's folder; other kinds are not made here, as
    making one may start a server)."""
    if not is_ref(env):
        return None
    try:
        entry = get_env(env)
        verifier = (
            getattr(entry.make(), "verifier", None) if entry.source is EnvSource.CODE else None
        )
    except TrajforgeError:
        return None  # the experiment check reports a broken env; nothing to hash here
    if verifier is None:
        return None
    owner = (
        verifier if inspect.isfunction(verifier) or inspect.ismethod(verifier) else type(verifier)
    )
    try:
        source = inspect.getsourcefile(owner)
    except TypeError:  # a built-in object has no source file
        return None
    return Path(source).resolve() if source else None


def _siblings(file: Path) -> list[Path]:
    """The ``.py`` files in ``file``'s folder (the code it may import or name)."""
    return sorted(p.resolve() for p in file.parent.glob("*.py") if p.is_file())


def _installed(file: Path) -> bool:
    return any(file.is_relative_to(root) for root in _INSTALLED) or any(
        file.is_relative_to(Path(p).resolve()) for p in sys.path if p.endswith("site-packages")
    )


def _shown(file: Path) -> str:
    """``file`` relative to the working directory where it is inside it."""
    cwd = Path.cwd().resolve()
    return str(file.relative_to(cwd)) if file.is_relative_to(cwd) else str(file)
