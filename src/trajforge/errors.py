"""Exceptions a user can act on. The CLI prints them as one line (a traceback with --debug)."""

from __future__ import annotations


class TrajforgeError(Exception):
    """Base of every error trajforge raises on purpose."""


class ConfigError(TrajforgeError):
    """A config file or option is wrong; the message names the key."""


class DataError(TrajforgeError):
    """A record in a file is bad; the message names file, line and field."""


class StoreError(TrajforgeError):
    """The trajectory store cannot do what was asked."""


class InfraError(TrajforgeError):
    """The infrastructure failed, not the policy: a tool's server crashed or did not start, a
    sandbox did not start. A tool raising it still answers the model with an error message, and
    the episode is marked lost to the infrastructure (``Outcome.fault``)."""


class EpisodeError(TrajforgeError):
    """Episodes could not be played at all (every one of a batch ended in an error)."""
