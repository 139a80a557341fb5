"""The help the user reads: one meaning per option name across commands, help written for the
command it is on, flags without a value type, and the command listing and each command's own
page unbroken at 80 columns."""

from __future__ import annotations

import itertools
import re

import pytest
from typer.core import TyperOption

from cli_runner import RunCli
from trajforge.cli.help import Command, flow, summary, walk
from trajforge.cli.main import command

ROOT = command()
COMMANDS = [(path, cmd) for path, cmd in walk(ROOT) if path]
COMMAND_NAMES = {name for path, _ in COMMANDS for name in path}

SAME_MEANING_OTHER_TYPE = {
    # Continue an interrupted run: rollout and eval name the run (a store holds many), a
    # training run is its output folder, which the config names.
    "--resume",
}


def _value_type(option: TyperOption) -> str:
    """What the option takes, a repeatable option's one value (``--scorer`` one or many)."""
    if option.is_flag:
        return "flag"
    descriptor = option.type_descriptor
    annotation = descriptor.annotation
    if descriptor.is_list:
        annotation = annotation.__args__[0]
    return getattr(annotation, "__name__", str(annotation))


def _options() -> list[tuple[str, str, TyperOption]]:
    return [
        (" ".join(path), name, param)
        for path, cmd in COMMANDS
        for param in cmd.params
        if isinstance(param, TyperOption)
        for name in param.opts
        if name.startswith("--")
    ]


def test_every_option_name_takes_one_kind_of_value_across_commands() -> None:
    kinds: dict[str, dict[str, list[str]]] = {}
    for where, name, param in _options():
        kinds.setdefault(name, {}).setdefault(_value_type(param), []).append(where)
    mixed = {n: k for n, k in kinds.items() if len(k) > 1 and n not in SAME_MEANING_OTHER_TYPE}
    assert not mixed, f"option names with two meanings: {mixed}"
    assert kinds["--tasks"].keys() == {"int"}  # a count on rollout, eval and collect alike


def test_option_help_names_only_the_commands_it_is_on() -> None:
    """Help shared by rollout and eval says "rollout: ..., eval: ..."; copied to another command
    it would describe that command wrongly (collect's --split did)."""
    on: dict[tuple[str, str | None], set[str]] = {}
    for where, name, param in _options():
        on.setdefault((name, param.help), set()).add(where)
    wrong = []
    for (name, text), wheres in on.items():
        named = set(re.findall(r"(?:^|[(;,]\s*)([a-z][a-z-]+):", text or "")) & COMMAND_NAMES
        for where in wheres:
            if named and where.split()[0] not in named:
                wrong.append(f"{where} {name}: {text}")
    assert not wrong


def test_rollout_split_help_is_not_collects() -> None:
    helps = {where: p.help for where, name, p in _options() if name == "--split"}
    assert "rollout:" in (helps["rollout"] or "") and "rollout" not in (helps["collect"] or "")


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=" ".join)
def test_no_help_shows_a_value_type_on_a_flag(run_cli: RunCli, path: tuple[str, ...]) -> None:
    code, out, _ = run_cli(*path, "--help")
    assert code == 0
    assert "<bool>" not in out


def test_top_level_help_lists_each_command_unbroken_at_80_columns(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli("--help")
    assert code == 0 and "<bool>" not in out
    panel = out.split("Commands", 1)[1].split("╰", 1)[0].splitlines()[1:]
    rows = [line[1:-1] for line in panel if line.startswith("│")]
    start = re.match(r"\s*\S+\s+", rows[0]).end()  # type: ignore[union-attr]
    width = len(rows[0]) - start - 1
    for this, following in itertools.pairwise(rows):
        if following[:start].strip():
            continue  # the next command's entry starts
        next_word = following[start:].split()[0]
        used = len(this[start:].rstrip())
        assert used + 1 + len(next_word) > width, f"a line broken early:\n{this}\n{following}"
    listed = " ".join(" ".join(r.split()) for r in rows)
    for path, cmd in COMMANDS:
        if len(path) == 1:
            assert f"{path[0]} {summary(cmd.help)}" in listed


def _broken_early(lines: list[str], width: int) -> list[str]:
    """Each pair of ``lines`` (text ``width`` wide) where the first ends while the next one's
    first word would still have fitted on it: a line break the text carried, not the terminal."""
    return [
        f"{this}\n{following}"
        for this, following in itertools.pairwise(lines)
        if this.strip()
        and following.strip()
        and len(this.rstrip()) + 1 + len(following.split()[0]) <= width
    ]


@pytest.mark.parametrize("path", [(), *(p for p, _ in COMMANDS)], ids=lambda p: " ".join(p) or "-")
def test_every_help_page_flows_at_80_columns(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch, path: tuple[str, ...]
) -> None:
    """The command's text above its option panels wraps only where the terminal ends (collect's
    "to the" / "system message" was cut mid-line by a line break in its docstring)."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli(*path, "--help")
    assert code == 0
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("Usage:")) + 1
    text = list(itertools.takewhile(lambda line: not line.startswith("╭"), lines[start:]))
    # Rich pads the page by one column each side.
    assert not _broken_early([line[1:] for line in text], 80 - 2)


def test_flow_joins_each_paragraph_and_keeps_what_click_marks() -> None:
    text = """First line
        goes on.

        Second paragraph,
        cut here.

        \bkept
        as is

        \f
        not shown,
        left alone"""
    assert flow(text) == (
        "First line goes on.\n\nSecond paragraph, cut here.\n\n\bkept\nas is\n\n"
        "\f\nnot shown,\nleft alone"
    )


def test_help_epilogue_documents_the_exit_statuses(run_cli: RunCli) -> None:
    code, out, _ = run_cli("--help")
    assert code == 0
    for status in ("0 done", "1 refused", "2 a wrong option", "3 ran, but some", "130 interrupted"):
        assert status in " ".join(out.split())


def test_every_command_is_tidied() -> None:
    commands: list[Command] = [cmd for _, cmd in COMMANDS]
    assert all(cmd.short_help is not None and "\n" not in cmd.short_help for cmd in commands)
