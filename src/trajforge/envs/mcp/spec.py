"""How an MCP server is reached and which of its tools an environment offers (data only).

A server is a local process spoken to over stdio (``command``, ``args``, ``env``, ``cwd``) or a
streamable-HTTP endpoint (``url``, ``headers``). ``scope`` says whether every episode gets a
server of its own (``episode``: the right choice for stateful servers) or the episodes of one
process share one (``shared``). Nothing here imports the MCP SDK.
"""

from __future__ import annotations

import hashlib
import re
import sys
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


class Scope(StrEnum):
    """Who a server's process (or HTTP session) belongs to."""

    EPISODE = "episode"
    SHARED = "shared"


class ToolSelection(BaseModel):
    """Which of a server's tools the environment offers, and under what names.

    Args:
        include: Only these tools (by the server's names); ``None``: all of them.
        exclude: Never these tools.
        rename: ``{server name: name the model sees}``.
        prefix: Put before every name not renamed (to tell two servers' tools apart).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    include: list[str] | None = None
    exclude: list[str] = Field(default_factory=list)
    rename: dict[str, str] = Field(default_factory=dict)
    prefix: str = ""

    def chosen(self, server_name: str) -> bool:
        if server_name in self.exclude:
            return False
        return self.include is None or server_name in self.include

    def exposed_name(self, server_name: str) -> str:
        return self.rename.get(server_name, f"{self.prefix}{server_name}")


class MCPServerSpec(BaseModel):
    """One MCP server: how to reach it, its lifecycle and its time limits.

    Args:
        name: What errors and logs call the server.
        command: The executable of a stdio server; ``python`` means the interpreter trajforge
            itself runs on (so a server installed beside trajforge is found).
        args: Its arguments.
        env: Extra environment variables for it (over a minimal inherited set: PATH, HOME...).
        cwd: Its working directory.
        url: The endpoint of a streamable-HTTP server (instead of ``command``).
        headers: HTTP headers sent with every request (authorization, for instance).
        scope: ``episode``: a server per episode; ``shared``: one per process for all episodes.
        tools: Which tools to offer and their names.
        startup_timeout_s: How long connecting (start-up, handshake, tool listing) may take.
        call_timeout_s: How long one tool call may take, not counting a (re)start of the server
            before it (default: the environment's ``tool_timeout``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: Path | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    scope: Scope = Scope.EPISODE
    tools: ToolSelection = Field(default_factory=ToolSelection)
    startup_timeout_s: float = Field(default=30.0, gt=0)
    call_timeout_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a stdio server) or url (an HTTP server)")
        if self.url is not None and (self.args or self.env or self.cwd is not None):
            raise ValueError("args, env and cwd are for stdio servers; this one has a url")
        if self.command is not None and self.headers:
            raise ValueError("headers are for HTTP servers; this one has a command")
        return self

    @property
    def executable(self) -> str:
        """The command to spawn (``python`` resolved to this interpreter)."""
        assert self.command is not None
        return sys.executable if self.command == "python" else self.command

    @property
    def key(self) -> str:
        """Identifies the server and its selection: equal specs share listings and servers."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]

    def describe(self) -> str:
        """``name (command args...)`` or ``name (url)``, for messages."""
        where = self.url or " ".join([self.command or "", *self.args])
        return f"MCP server {self.name!r} ({where})"
