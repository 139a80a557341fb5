"""Errors the Tinker server reports, in the two shapes the SDK turns into its own exceptions."""

from __future__ import annotations

from trajforge.errors import TrajforgeError


class UserError(TrajforgeError):
    """The request is wrong (a field, a name, an id). Raised while a future runs, the SDK's
    ``RequestFailedError`` carries it with category ``user``; raised while a request is
    accepted, it answers 400 (``tinker.BadRequestError``)."""


class NotFound(TrajforgeError):
    """An id that names nothing here: 404 (``tinker.NotFoundError``)."""
