"""``ToolEnv``: the common environment — a few ``@tool`` functions, a verifier and limits.

Every tool call is answered by exactly one tool message. Whatever goes wrong with a call (it
could not be parsed, names no tool, has bad arguments, raises, or runs past its timeout) becomes
a tool message starting with ``Error:`` that says precisely what went wrong, and the episode
goes on; a tool that raises ``InfraError`` (its server crashed or did not start) also marks the
step's ``infra_fault``, so the episode is recorded as lost to the infrastructure. The episode ends when the assistant answers without a tool call (reward = the
verifier's verdict), or after ``max_turns`` assistant turns (``info["truncated"] = True``, reward
still the verifier's verdict on the conversation so far). The verifier receives the episode's
``Evidence`` (task, messages, and the tools' per-episode state); see ``trajforge.schema.evidence``.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from trajforge.envs.base import Env, StepResult
from trajforge.envs.tool import Tool, ToolArgumentError, ToolContext, ToolError, tool
from trajforge.errors import ConfigError, InfraError, TrajforgeError
from trajforge.schema import (
    Evidence,
    ExpertFn,
    Message,
    Role,
    Score,
    Task,
    Timing,
    ToolCall,
    Verifier,
    check_verifier,
    contains_answer,
    run_verifier,
)

Hook = Callable[[ToolContext], Awaitable[None] | None]

DEFAULT_SYSTEM_PROMPT = (
    "Solve the task using the tools. Call a tool, read its result, and repeat as needed. "
    "When you know the answer, reply with it and call no tool."
)
ERROR_PREFIX = "Error:"


class EnvError(TrajforgeError):
    """An environment was used out of order or misbehaved (not a tool failure)."""


def exact_match_verifier(evidence: Evidence) -> float:
    """1.0 when the final answer contains ``task.answer`` as whole words, both normalised."""
    gold = evidence.task.answer
    return float(gold is not None and contains_answer(evidence.answer or "", str(gold)))


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class ToolEnv(Env):
    """An environment made of tools.

    Args:
        tools: ``Tool`` objects (plain typed functions are wrapped with ``@tool``).
        tasks: The tasks this environment poses (kept as ``self.tasks``; optional).
        verifier: ``(evidence) -> float | Score`` in [0, 1], sync or async, called once when the
            episode ends (``(task, messages) -> float`` also works). Default: the final answer
            matches ``task.answer`` after normalisation.
        max_turns: Assistant turns before the episode is cut off.
        tool_timeout: Seconds a tool may run unless the tool sets its own ``timeout``.
        system_prompt: Opening system message (``task.system`` wins when set).
        name: The environment's name.
        description: One line saying what the environment is.
        expert: ``(task, messages) -> str | None``: the scripted expert's next reply.
        setup: Called with the episode's ``ToolContext`` on every reset (sync or async).
        teardown: Called with the episode's ``ToolContext`` on close (sync or async).
        max_result_chars: Longer tool results are cut to this length, with a note saying so.
    """

    times_out_tools = True

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any]],
        tasks: Iterable[Task] | None = None,
        verifier: Verifier | None = None,
        max_turns: int = 8,
        tool_timeout: float = 10.0,
        system_prompt: str | None = None,
        name: str = "tool_env",
        *,
        description: str = "",
        expert: ExpertFn | None = None,
        setup: Hook | None = None,
        teardown: Hook | None = None,
        max_result_chars: int = 20_000,
    ) -> None:
        super().__init__()
        if max_turns < 1:
            raise EnvError(f"max_turns: must be at least 1, got {max_turns}")
        if tool_timeout <= 0:
            raise EnvError(f"tool_timeout: must be positive, got {tool_timeout}")
        self.name = name
        self.description = description
        self.tool_map: dict[str, Tool] = {}
        self.add_tools(tools)
        self.tasks: list[Task] = list(tasks) if tasks is not None else []
        self.verifier: Verifier = verifier or exact_match_verifier
        try:
            check_verifier(self.verifier)
        except ConfigError as exc:
            raise EnvError(f"env {name!r}: {exc}") from None
        self.max_turns = max_turns
        self.tool_timeout = tool_timeout
        self.system_prompt = system_prompt if system_prompt is not None else DEFAULT_SYSTEM_PROMPT
        self.max_result_chars = max_result_chars
        self._expert = expert
        self._setup = setup
        self._teardown = teardown
        self.context: ToolContext | None = None
        self.messages: list[Message] = []
        self.turn = 0
        self.done = False
        self._history: list[tuple[str, str, str]] = []
        self._infra_faults: list[str] = []

    def add_tools(self, tools: Iterable[Tool | Callable[..., Any]]) -> None:
        """Offer more tools (an env whose tools are listed at reset adds them there).

        Raises:
            EnvError: two tools would have the same name.
        """
        for item in tools:
            t = item if isinstance(item, Tool) else tool(item)
            if t.name in self.tool_map:
                raise EnvError(f"env {self.name!r}: two tools are named {t.name!r}")
            self.tool_map[t.name] = t
        self.tools = [t.spec for t in self.tool_map.values()]

    @property
    def task(self) -> Task:
        if self.context is None:
            raise EnvError(
                f"env {self.name!r}: reset(task) must be called before the episode starts"
            )
        return self.context.task

    def adopt_limits(self, *, max_turns: int | None, tool_timeout_s: float | None) -> None:
        # Enforced here rather than by the engine: a slow tool becomes a message the model
        # reads, and the verifier still scores a conversation cut at max_turns.
        if tool_timeout_s is not None:
            self.tool_timeout = tool_timeout_s
        if max_turns is not None:
            self.max_turns = max_turns

    async def reset(self, task: Task) -> list[Message]:
        if self.context is not None:
            await self._run_teardown()
        self.context = ToolContext(task=task)
        self.turn = 0
        self.done = False
        self._history = []
        self._infra_faults = []
        await self.setup(self.context)
        system = task.system if task.system is not None else self.system_prompt
        opening = [Message(role=Role.USER, content=task.prompt)]
        if system:
            opening.insert(0, Message(role=Role.SYSTEM, content=system))
        self.messages = list(opening)
        return opening

    async def setup(self, context: ToolContext) -> None:
        """Prepare the episode's state; subclasses override, or pass ``setup=`` instead."""
        if self._setup is not None:
            await _maybe_await(self._setup(context))

    async def close(self) -> None:
        await self._run_teardown()

    async def _run_teardown(self) -> None:
        if self.context is not None and self._teardown is not None:
            context, self.context = self.context, None
            await _maybe_await(self._teardown(context))

    def state_key(self) -> str:
        """A stable hash of the state before the next action: the task id plus every tool call
        and result so far, in order. Environments with a real state override this."""
        payload = json.dumps([self.task.id, self._history], ensure_ascii=False, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    async def step(self, action: Message) -> StepResult:
        if self.context is None:
            raise EnvError(f"env {self.name!r}: reset(task) must be called before step()")
        if self.done:
            raise EnvError(f"env {self.name!r}: step() after the episode ended; call reset(task)")
        if action.role is not Role.ASSISTANT:
            raise EnvError(
                f"env {self.name!r}: step() takes an assistant message, got {action.role}"
            )
        key = self.state_key()
        self.turn += 1
        self.messages.append(action)
        if not action.tool_calls:
            return await self._finish(key, [], truncated=False, info={})
        started = time.perf_counter()
        observations = list(await asyncio.gather(*(self._answer(c) for c in action.tool_calls)))
        self.messages.extend(observations)
        for call, obs in zip(action.tool_calls, observations, strict=True):
            args = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False, default=repr)
            self._history.append(
                (call.name, args if not call.parse_error else call.raw or "", obs.text)
            )
        info: dict[str, Any] = {
            "tool_calls": len(observations),
            "tool_errors": sum(o.text.startswith(ERROR_PREFIX) for o in observations),
            "tool_time_s": time.perf_counter() - started,
        }
        if self.turn >= self.max_turns:
            return await self._finish(key, observations, truncated=True, info=info)
        return StepResult(
            observations=observations,
            reward=0.0,
            done=False,
            info=info,
            state_key=key,
            infra_fault=self._infra_fault(),
        )

    async def _finish(
        self, key: str, observations: list[Message], *, truncated: bool, info: dict[str, Any]
    ) -> StepResult:
        self.done = True
        assert self.context is not None  # step() checked it
        evidence = Evidence(self.task, list(self.messages), self.context.state)
        verdict = await run_verifier(self.verifier, evidence)
        if isinstance(verdict, Score):
            if verdict.value is None:
                raise EnvError(f"env {self.name!r}: the verifier failed: {verdict.error}")
            verdict = verdict.value
        reward = verdict
        if not 0.0 <= reward <= 1.0:
            raise EnvError(f"env {self.name!r}: the verifier returned {reward}, outside [0, 1]")
        info = {**info, "truncated": truncated, "turns": self.turn}
        return StepResult(
            observations=observations,
            reward=reward,
            done=True,
            info=info,
            state_key=key,
            infra_fault=self._infra_fault(),
        )

    async def _answer(self, call: ToolCall) -> Message:
        started = time.time()
        t0 = time.perf_counter()
        content = await self.run_call(call)
        return Message(
            role=Role.TOOL,
            content=content,
            tool_call_id=call.id,
            name=call.name or None,
            timing=Timing(started_at=started, duration_s=time.perf_counter() - t0),
        )

    async def run_call(self, call: ToolCall) -> str:
        """The text answering one call: the tool's result, or ``Error: ...`` saying what failed."""
        if call.parse_error:
            return f"{ERROR_PREFIX} could not parse the tool call: {call.parse_error}"
        return await self.call_tool(call.name, call.arguments)

    async def call_tool(self, name: str, arguments: Any) -> str:
        """Run tool ``name`` on ``arguments`` in this episode; failures come back as ``Error:`` text.

        A sync tool that times out keeps running in its worker thread until it returns; its
        result is then discarded. Tools that may hang should be async (or run a subprocess).
        """
        found = self.tool_map.get(name)
        if found is None:
            known = ", ".join(sorted(self.tool_map)) or "none"
            return f"{ERROR_PREFIX} unknown tool {name!r}; available tools: {known}"
        timeout = found.timeout if found.timeout is not None else self.tool_timeout
        try:
            await found.prepare()
            result = await asyncio.wait_for(found.invoke(arguments, self.context), timeout)
        except Exception as exc:
            if isinstance(exc, InfraError):
                self._infra_faults.append(f"tool {name!r}: {exc}")
            return f"{ERROR_PREFIX} {_failure_text(name, exc, timeout)}"
        if len(result) > self.max_result_chars:
            cut = len(result) - self.max_result_chars
            result = f"{result[: self.max_result_chars]}\n[... {cut} more characters cut]"
        return result

    def expert(self, task: Task, messages: list[Message]) -> str | None:
        return self._expert(task, messages) if self._expert is not None else None

    def _infra_fault(self) -> str | None:
        """What of the infrastructure has failed in the episode's calls so far (every step
        says it again, so a subclass's own end of the episode keeps it)."""
        return "; ".join(self._infra_faults) if self._infra_faults else None


def _failure_text(name: str, exc: Exception, timeout: float) -> str:
    """What the model reads about a call that raised ``exc``."""
    if isinstance(exc, ToolArgumentError):
        return f"invalid arguments for tool {name!r}: {exc}"
    if isinstance(exc, ToolError):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return f"tool {name!r} timed out after {timeout:g} s"
    return f"tool {name!r} raised {type(exc).__name__}: {exc}"
