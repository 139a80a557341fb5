"""Options that were renamed: the old spelling stays hidden only to be refused with a one-line
hint naming the new one, never silently accepted."""

from __future__ import annotations

from typing import Annotated

import typer

from trajforge.errors import ConfigError

OldRubricOption = Annotated[
    str | None, typer.Option("--rubric", hidden=True, help="Renamed --criteria.")
]
"""``--rubric``, renamed ``--criteria``: in trajforge a rubric is weighted scorers only."""


def refuse_renamed(old: str, new: str, value: str | None, what: str) -> None:
    """Refuse ``value`` given under the old option name ``old``, naming ``new`` (``what`` it
    is) in one line; nothing given, nothing happens."""
    if value is not None:
        raise ConfigError(f"{old}: renamed {new} ({what}); give {new} {value}")
