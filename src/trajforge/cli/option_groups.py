"""Option groups: options that several commands take alike, given to each as one object.

Typer reads a command's options from its signature, so a grouped command's signature lists
the group's options where its group parameter stands; the command gets the group object.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, get_type_hints

Command = Callable[..., None]


def option_group(
    param: str, group: Callable[..., object], options: Mapping[str, tuple[Any, Any]]
) -> Callable[[Command], Command]:
    """Give a command ``options`` (parameter name -> its ``Annotated`` option and default)
    where its parameter ``param`` stands; it gets ``group(**their values)`` as ``param``."""

    def decorate(command: Command) -> Command:
        hints = get_type_hints(command, include_extras=True)
        params: list[inspect.Parameter] = []
        for found in inspect.signature(command).parameters.values():
            if found.name != param:
                params.append(found.replace(annotation=hints[found.name]))
                continue
            params += [
                found.replace(name=name, default=default, annotation=option)
                for name, (option, default) in options.items()
            ]

        @functools.wraps(command)
        def grouped(**kwargs: Any) -> None:
            values = {name: kwargs.pop(name) for name in options}
            command(**{param: group(**values)}, **kwargs)

        signature = inspect.Signature(params, return_annotation=None)
        grouped.__signature__ = signature  # type: ignore[attr-defined]
        grouped.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        return grouped

    return decorate
