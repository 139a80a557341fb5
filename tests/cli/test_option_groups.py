"""An option group's options stand in a command's signature where its group parameter stood,
and the command gets them as one object."""

from __future__ import annotations

from typing import Annotated

import typer
from typer.testing import CliRunner

from trajforge.cli.option_groups import option_group

LowOption = Annotated[int, typer.Option("--low", help="The low end.")]
HighOption = Annotated[int, typer.Option("--high", help="The high end.")]

span_options = option_group(
    "span", lambda low, high: range(low, high), {"low": (LowOption, 0), "high": (HighOption, 3)}
)


def test_a_grouped_command_takes_the_options_in_place_and_gets_the_group() -> None:
    got: list[object] = []

    @span_options
    def command(
        name: Annotated[str, typer.Option("--name")] = "x",
        span: range = range(0),
        loud: Annotated[bool, typer.Option("--loud")] = False,
    ) -> None:
        got.append((name, span, loud))

    app = typer.Typer()
    app.command()(command)
    runner = CliRunner()
    assert runner.invoke(app, ["--name", "y", "--high", "5", "--loud"]).exit_code == 0
    assert runner.invoke(app, []).exit_code == 0
    assert got == [("y", range(0, 5), True), ("x", range(0, 3), False)]
    help_text = runner.invoke(app, ["--help"]).output
    order = [help_text.index(option) for option in ("--name", "--low", "--high", "--loud")]
    assert order == sorted(order)
    assert "--span" not in help_text
