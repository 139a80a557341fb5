"""The command tree as the user sees it in ``--help``, tidied once the Typer app is built: flags
shown without a ``<bool>`` value they do not take, each command's help flowing (its line in its
group's listing one unwrapped sentence, each paragraph of its own page one line that the terminal
wraps, where Typer would keep a docstring's line breaks after the first paragraph and cut a
sentence mid-line), and every command reachable for the tests that walk them (one meaning per
option name)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

# Typer bundles its own copy of click (``typer._click``); its commands are of these types.
from typer._click.core import Command, Context
from typer.core import TyperGroup, TyperOption


def walk(command: Command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Command]]:
    """Every command under ``command`` (itself first) with its path of names."""
    yield path, command
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            yield from walk(sub, (*path, name))


def summary(help_text: str | None) -> str:
    """A docstring's first paragraph as one line: what a group lists for the command."""
    first = inspect.cleandoc(help_text or "").split("\n\n", 1)[0]
    return " ".join(first.split())


def flow(help_text: str) -> str:
    """``help_text`` with each paragraph on one line; a paragraph marked ``\\b`` (click's "keep
    my line breaks") and whatever follows ``\\f`` (click's "not for the help page") as written."""
    shown, cut, hidden = inspect.cleandoc(help_text).partition("\f")
    paragraphs = [p if p.startswith("\b") else " ".join(p.split()) for p in shown.split("\n\n")]
    return "\n\n".join(paragraphs) + cut + hidden


def tidy(root: Command) -> Command:
    """``root`` with its help tidied (see the module docstring); returned for chaining."""
    for _, command in walk(root):
        if command.short_help is None and command.help:
            command.short_help = summary(command.help)
        if command.help:
            command.help = flow(command.help)
        # The help option is made on first use; made here, it is tidied with the others.
        help_option = command.get_help_option(Context(command))
        for param in [*command.params, *([help_option] if help_option else [])]:
            if isinstance(param, TyperOption) and param.is_bool_flag and param.metavar is None:
                param.metavar = ""
    return root
