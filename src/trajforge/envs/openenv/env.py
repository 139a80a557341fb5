"""``OpenEnvEnv``: an OpenEnv environment's episode as a trajforge ``Env``.

Each episode is one WebSocket session of OpenEnv's own client (``GenericEnvClient``), so the
server gives it an environment instance of its own. ``reset(task)`` resets it with the task's
seed (``task.data["seed"]``), its id as the episode id and any further arguments in
``task.data["reset"]``; the opening user message is the task's prompt, if any, and the first
observation. The action is offered one of two ways:

- ``tool``: one tool whose parameters are the action model's JSON schema (without OpenEnv's
  ``metadata``); each call is one ``step``, its observation the call's tool message, and a
  turn's reward its last step's. A reply without a call ends the episode (reward 0: the
  environment did not finish it).
- ``text``: the assistant's text is the action: the value of an action with one string field,
  else a JSON object of its fields; the observation comes back as a user message.

A step's reward is the observation's; the episode ends when an observation is ``done``, its
reward the episode's, and the final step's ``info["state"]`` holds the server's ``state``.
An action the server refuses (it fails the model's validation) is an ``Error:`` message and
the episode goes on; a server that is gone or stops answering raises ``OpenEnvServerError``
(an ``InfraError``: the episode is lost to the infrastructure, not the policy's failure).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from openenv.core import client_types
from openenv.core.generic_client import GenericEnvClient
from websockets.exceptions import ConnectionClosedOK, WebSocketException

from trajforge.envs.base import Env, StepResult
from trajforge.envs.openenv.process import OpenEnvServerError
from trajforge.envs.tool_env import ERROR_PREFIX, EnvError
from trajforge.schema import FunctionSpec, Message, Role, Task, ToolCall, ToolSpec

MESSAGE_TIMEOUT_S = 300.0
# How long an episode waits for a session of a server that serves few at once.
SESSION_WAIT_S = 600.0
SESSION_POLL_S = 0.25
CAPACITY_CODE = "CAPACITY_REACHED"
# OpenEnv's base Action field: plumbing of its own, not something the model chooses.
ACTION_BASE_FIELDS = ("metadata",)

EMPTY_OBSERVATION = "(the environment's observation is empty)"

T = TypeVar("T")


class ActionMode(StrEnum):
    """How the model acts in an OpenEnv environment."""

    TOOL = "tool"
    TEXT = "text"


@dataclass(frozen=True)
class ServerInfo:
    """What an OpenEnv server says about itself (``/metadata`` and ``/schema``)."""

    name: str
    description: str
    action_schema: dict[str, Any]

    def tool(self) -> ToolSpec:
        """The action as one tool: its name from the action model's, its schema the model's."""
        schema = json.loads(json.dumps(self.action_schema))
        for field in ACTION_BASE_FIELDS:
            schema.get("properties", {}).pop(field, None)
            if field in schema.get("required", []):
                schema["required"].remove(field)
        schema.pop("title", None)
        description = schema.pop("description", "") or f"Take one action in {self.name}."
        return ToolSpec(
            function=FunctionSpec(name=self.tool_name, description=description, parameters=schema)
        )

    @property
    def tool_name(self) -> str:
        title = str(self.action_schema.get("title") or "step")
        snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in title).lstrip("_")
        return "".join(c if c.isalnum() or c == "_" else "_" for c in snake)

    def text_field(self) -> str | None:
        """The one field a text action fills, when the action has exactly one, a string."""
        fields = {
            name: prop
            for name, prop in self.action_schema.get("properties", {}).items()
            if name not in ACTION_BASE_FIELDS
        }
        if len(fields) == 1:
            [(name, prop)] = fields.items()
            if prop.get("type") == "string":
                return name
        return None


def observation_text(observation: dict[str, Any]) -> str:
    """An observation as the model reads it: a lone string field as itself, else its JSON."""
    if len(observation) == 1 and isinstance(next(iter(observation.values())), str):
        text = str(next(iter(observation.values())))
    else:
        text = json.dumps(observation, ensure_ascii=False)
    return text or EMPTY_OBSERVATION


class OpenEnvEnv(Env):
    """One episode of an OpenEnv environment.

    Args:
        connect: Returns the server's base URL (starting it first where trajforge runs it).
        describe: Returns the server's ``ServerInfo``.
        mode: How the model acts (``tool`` or ``text``).
        name: The environment's name.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[str]],
        describe: Callable[[], Awaitable[ServerInfo]],
        mode: ActionMode,
        name: str,
    ) -> None:
        super().__init__()
        self.name = name
        self.mode = mode
        self._connect = connect
        self._describe = describe
        self._client: GenericEnvClient | None = None
        self._info: ServerInfo | None = None
        self._observation: dict[str, Any] = {}
        self._task_id = ""
        self.done = False

    async def list_tools(self) -> list[ToolSpec]:
        return [(await self._describe()).tool()] if self.mode is ActionMode.TOOL else []

    async def reset(self, task: Task) -> list[Message]:
        await self.close()
        url = await self._connect()
        self._info = info = await self._describe()
        self.tools = [info.tool()] if self.mode is ActionMode.TOOL else []
        self._client = GenericEnvClient(base_url=url, message_timeout_s=MESSAGE_TIMEOUT_S)
        arguments: dict[str, Any] = {"episode_id": task.id, **task.data.get("reset", {})}
        if task.data.get("seed") is not None:
            arguments["seed"] = task.data["seed"]
        result = await self._open_session(arguments)
        self._observation, self._task_id, self.done = dict(result.observation), task.id, False
        opening = "\n\n".join(p for p in (task.prompt, observation_text(self._observation)) if p)
        system = task.system if task.system is not None else self._system_prompt(info)
        return [
            Message(role=Role.SYSTEM, content=system),
            Message(role=Role.USER, content=opening),
        ]

    async def _open_session(
        self, arguments: dict[str, Any]
    ) -> client_types.StepResult[dict[str, Any]]:
        """Reset in a session of the episode's own, waiting while the server has none free
        (it serves as many sessions at once as its environment allows, often one)."""
        assert self._client is not None  # reset() made it
        deadline = time.monotonic() + SESSION_WAIT_S
        while True:
            try:
                return await self._call(self._client.reset(**arguments), closed_is_busy=True)
            except _Refused as exc:
                if CAPACITY_CODE not in str(exc):
                    raise OpenEnvServerError(
                        f"env {self.name!r}: the OpenEnv server refused the reset: {exc}"
                    ) from None
                if time.monotonic() > deadline:
                    raise OpenEnvServerError(
                        f"env {self.name!r}: no session of the OpenEnv server came free "
                        f"within {SESSION_WAIT_S:g} s ({exc})"
                    ) from None
            # The server closed this connection; the next request opens another.
            await self._client.disconnect()
            await asyncio.sleep(SESSION_POLL_S)

    async def step(self, action: Message) -> StepResult:
        if self._client is None or self._info is None:
            raise EnvError(f"env {self.name!r}: reset(task) must be called before step()")
        if self.done:
            raise EnvError(f"env {self.name!r}: step() after the episode ended; call reset(task)")
        key = self.state_key()
        if self.mode is ActionMode.TEXT:
            observations, reward = await self._text_step(action.text)
        elif not action.tool_calls:
            # The model stopped before the environment ended the episode: not a success.
            self.done = True
            return StepResult([], 0.0, True, {"env_done": False}, key)
        else:
            observations, reward = [], 0.0
            for call in action.tool_calls:
                text, step_reward = await self._tool_step(call)
                observations.append(
                    Message(role=Role.TOOL, content=text, tool_call_id=call.id, name=call.name)
                )
                reward = step_reward if step_reward is not None else reward
        info: dict[str, Any] = {"env_done": self.done}
        if self.done:
            info["state"] = await self._must(self._client.state(), "state")
        return StepResult(observations, reward, self.done, info, key)

    async def state(self) -> dict[str, Any]:
        """The server's ``state`` of the episode."""
        if self._client is None:
            raise EnvError(f"env {self.name!r}: reset(task) must be called before state()")
        return dict(await self._must(self._client.state(), "state"))

    def state_key(self) -> str:
        """A hash of the task and the last observation: the state before the next action."""
        payload = json.dumps([self._task_id, self._observation], sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def _tool_step(self, call: ToolCall) -> tuple[str, float | None]:
        assert self._info is not None  # step() checked it
        if self.done:
            return f"{ERROR_PREFIX} the episode ended before this call", None
        if call.parse_error:
            return f"{ERROR_PREFIX} could not parse the tool call: {call.parse_error}", None
        if call.name != self._info.tool_name:
            known = self._info.tool_name
            return f"{ERROR_PREFIX} unknown tool {call.name!r}; available tools: {known}", None
        return await self._act(call.arguments)

    async def _text_step(self, text: str) -> tuple[list[Message], float]:
        assert self._info is not None  # step() checked it
        field = self._info.text_field()
        arguments = {field: text} if field is not None else _json_action(text)
        if isinstance(arguments, str):
            content, reward = arguments, None
        else:
            content, reward = await self._act(arguments)
        return [Message(role=Role.USER, content=content)], reward or 0.0

    async def _act(self, arguments: dict[str, Any]) -> tuple[str, float | None]:
        """One OpenEnv step: the observation's text and its reward."""
        assert self._client is not None  # step() checked it
        try:
            result = await self._call(self._client.step(arguments))
        except _Refused as exc:
            return f"{ERROR_PREFIX} the environment refused the action: {exc}", None
        self._observation, self.done = dict(result.observation), bool(result.done)
        reward = float(result.reward) if result.reward is not None else None
        return observation_text(self._observation), reward

    async def _must(self, request: Awaitable[T], what: str) -> T:
        """A request the server must answer (``state``): a refusal means it is broken."""
        try:
            return await self._call(request)
        except _Refused as exc:
            raise OpenEnvServerError(
                f"env {self.name!r}: the OpenEnv server refused the {what}: {exc}"
            ) from None

    async def _call(self, request: Awaitable[T], *, closed_is_busy: bool = False) -> T:
        """``request``'s answer; an error the server answered with raises ``_Refused``, a
        server gone ``OpenEnvServerError``. With ``closed_is_busy`` (a new connection's first
        request) a connection the server closed normally is a refusal for want of a session:
        the server sends its error and closes, at times before the request has gone out."""
        try:
            return await request
        except RuntimeError as exc:
            # OpenEnv's client raises RuntimeError for an error the server answered with.
            raise _Refused(str(exc).removeprefix("Server error: ")) from None
        except ConnectionClosedOK as exc:
            if closed_is_busy:
                raise _Refused(f"the server closed a new connection ({CAPACITY_CODE})") from None
            raise self._gone(exc) from None
        except (ConnectionError, TimeoutError, OSError, WebSocketException) as exc:
            raise self._gone(exc) from None

    def _gone(self, exc: BaseException) -> OpenEnvServerError:
        return OpenEnvServerError(
            f"env {self.name!r}: the OpenEnv server stopped answering ({type(exc).__name__}: {exc})"
        )

    def _system_prompt(self, info: ServerInfo) -> str:
        what = f"You act in the environment {info.name}"
        # OpenEnv's default description only repeats the name.
        said = info.description not in ("", f"{info.name} environment")
        what += f": {info.description.rstrip('.')}." if said else "."
        if self.mode is ActionMode.TOOL:
            how = f"Each call of the tool {info.tool_name} is one action"
        elif info.text_field() is not None:
            how = "Each reply of yours is one action"
        else:
            how = "Each reply of yours is one action, a JSON object of the action's fields"
        return f"{what} {how}; read the result and go on until the episode ends."


def _json_action(text: str) -> dict[str, Any] | str:
    """The action a text reply spells as a JSON object, or the error message saying why not."""
    try:
        arguments = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"{ERROR_PREFIX} the action is not JSON ({exc})"
    if not isinstance(arguments, dict):
        return f"{ERROR_PREFIX} the action must be a JSON object of the action's fields"
    return arguments


class _Refused(Exception):
    """The server answered a request with an error (an action it did not accept)."""
