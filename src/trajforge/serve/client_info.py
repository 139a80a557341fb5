"""Which client made a gateway call: its name and version, from the ``User-Agent`` header
(``claude-cli/2.1.3 (external, cli)``, ``Anthropic/Python 2.14.0``), recorded with the
session's trajectories in ``metadata["gateway"]["client"]`` so a run says which harness made
it."""

from __future__ import annotations

import re
from collections.abc import Mapping

from trajforge.serve.recorder import Recorder

_PRODUCT = re.compile(r"^(?P<name>[^\s/]+(?:/[A-Za-z]+)?)[/ ](?P<version>\d[\w.+-]*)")


def client_of(headers: Mapping[str, str]) -> dict[str, str] | None:
    """The client's ``name`` and ``version`` (the whole ``user_agent`` too), or ``None`` where
    it sent no ``User-Agent``."""
    agent = headers.get("user-agent", "").strip()
    if not agent:
        return None
    found = _PRODUCT.match(agent)
    if found is None:
        return {"name": agent, "user_agent": agent}
    return {"name": found["name"], "version": found["version"], "user_agent": agent}


def note_client(recorder: Recorder, session_id: str, headers: Mapping[str, str]) -> None:
    """Record the calling client on the session (its latest, where several share one)."""
    client = client_of(headers)
    if client is not None:
        recorder.session(session_id).metadata["client"] = client
