"""Test doubles for the rollout engine: a fake policy/session and scriptable environments."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

from trajforge.envs.base import Env, StepResult
from trajforge.formats.tool_calls import format_tool_call, parse_tool_calls
from trajforge.policy.base import ChatSession, Completion, FinishReason, Policy, SamplingParams
from trajforge.rollout import RolloutSpec, run_rollout
from trajforge.schema import FunctionSpec, Message, Role, Task, ToolSpec, Trajectory
from trajforge.store.sqlite import TrajectoryStore

GEN_PROMPT_ID = 7


def fake_ids(text: str) -> list[int]:
    """A stand-in tokenizer: one id per word, from a hash (stable across processes)."""
    return [int(hashlib.md5(w.encode()).hexdigest()[:4], 16) + 100 for w in text.split()]


def unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from ``parts``."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class FakeSession(ChatSession):
    def __init__(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], task: Task | None
    ) -> None:
        self.messages = []
        self.tools = list(tools)
        self.task = task
        self._tokens = 0
        self.add_observations(messages)

    @property
    def num_tokens(self) -> int:
        return self._tokens

    def add_observations(self, observations: Sequence[Message]) -> list[Message]:
        added = []
        for obs in observations:
            ids = [*fake_ids(obs.content), GEN_PROMPT_ID]
            msg = obs.model_copy(update={"token_ids": ids})
            self.messages.append(msg)
            self._tokens += len(ids)
            added.append(msg)
        return added

    def append_assistant(self, msg: Message) -> None:
        self.messages.append(msg)
        self._tokens += len(msg.token_ids or [])


ReplyFn = Callable[[Task | None, list[Message], int], str]


def echo_reply(task: Task | None, messages: list[Message], seed: int) -> str:
    """Calls the ``echo`` tool with a value depending only on the sampling seed."""
    return "thinking " + format_tool_call("echo", {"x": seed % 1000})


class FakePolicy(Policy):
    """Replies ``reply_fn(task, messages, seed)``; ``words`` ids per reply (capped by the budget)."""

    name = "fake"

    def __init__(
        self,
        reply_fn: ReplyFn = echo_reply,
        *,
        delay_s: float = 0.0,
        fail_on_turn: int | None = None,
        hang_on_turn: int | None = None,
    ) -> None:
        self.reply_fn = reply_fn
        self.delay_s = delay_s
        self.fail_on_turn = fail_on_turn
        self.hang_on_turn = hang_on_turn
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        text = self.reply_fn(None, [], sampling.seed or 0)
        ids = fake_ids(text)[: sampling.max_new_tokens]
        reason = FinishReason.LENGTH if len(ids) == sampling.max_new_tokens else FinishReason.STOP
        return Completion(
            token_ids=ids, logprobs=[-0.5] * len(ids), text=text, finish_reason=reason
        )

    def start_session(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, task: Task | None = None
    ) -> ChatSession:
        return FakeSession(messages, tools, task)

    async def respond(
        self, session: ChatSession, sampling: SamplingParams, *, turn: int = 0
    ) -> Message:
        assert isinstance(session, FakeSession)
        self.calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if turn == self.fail_on_turn:
                raise RuntimeError(f"policy exploded on turn {turn}")
            if turn == self.hang_on_turn:
                await asyncio.sleep(3600)
            text = self.reply_fn(session.task, list(session.messages), sampling.seed or 0)
        finally:
            self.in_flight -= 1
        ids = fake_ids(text)[: sampling.max_new_tokens]
        parsed = parse_tool_calls(text, "text", id_prefix=f"call_{turn}")
        msg = Message(
            role=Role.ASSISTANT,
            content=parsed.content,
            tool_calls=parsed.tool_calls,
            token_ids=ids,
            logprobs=[-0.5] * len(ids),
        )
        session.append_assistant(msg)
        return msg


ECHO_SPEC = ToolSpec(function=FunctionSpec(name="echo", description="Echo x."))


class TurnsEnv(Env):
    """Answers every call with its arguments; ends after ``turns`` steps (reward 1.0).

    ``delay(task_id, turn)`` seconds of ``asyncio.sleep`` per step. ``faults`` maps a task id to
    ``"reset"`` (reset raises), ``"step"`` (the second step raises) or ``"hang"`` (the second
    step sleeps for an hour).
    """

    name = "turns"

    def __init__(
        self,
        turns: int = 3,
        *,
        delay: Callable[[str, int], float] | None = None,
        faults: dict[str, str] | None = None,
        close_log: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.tools = [ECHO_SPEC]
        self.turns = turns
        self.delay = delay
        self.faults = faults or {}
        self.close_log = close_log
        self.task: Task | None = None
        self.turn = 0

    async def reset(self, task: Task) -> list[Message]:
        if self.faults.get(task.id) == "reset":
            raise ValueError("reset failed on purpose")
        self.task = task
        self.turn = 0
        return [
            Message(role=Role.SYSTEM, content="be brief"),
            Message(role=Role.USER, content=task.prompt),
        ]

    async def step(self, action: Message) -> StepResult:
        assert self.task is not None
        turn = self.turn
        self.turn += 1
        if self.delay is not None:
            await asyncio.sleep(self.delay(self.task.id, turn))
        fault = self.faults.get(self.task.id) if turn == 1 else None
        if fault == "step":
            raise KeyError("tool table missing")
        if fault == "hang":
            await asyncio.sleep(3600)
        obs = [
            Message(role=Role.TOOL, content=f"echo {c.arguments}", tool_call_id=c.id, name=c.name)
            for c in action.tool_calls
        ] or [Message(role=Role.USER, content="please call a tool")]
        done = self.turn >= self.turns
        reward = 1.0 if done else 0.1 * self.turn
        return StepResult(
            observations=obs, reward=reward, done=done, state_key=f"{self.task.id}:{turn}"
        )

    async def close(self) -> None:
        if self.close_log is not None and self.task is not None:
            self.close_log.append(self.task.id)


class SandboxCrashed(RuntimeError):
    """The sandbox process of a tool died."""


class ToolFailure(RuntimeError):
    """A tool raised."""


class FaultyEnv(Env):
    """Tools run in a real sandbox process (``sh``), with faults decided by a seeded hash.

    For each step, ``u = unit(fault_seed, task, turn, action text)`` picks: ``u < p_raise``: the
    tool raises; next ``p_hang``: the sandbox sleeps far past any timeout; next ``p_kill``: the
    sandbox kills itself with SIGKILL. The action text depends only on the sample's seed, so a
    (task, sample, turn) gets the same verdict in every run.
    """

    name = "faulty"

    def __init__(
        self,
        turns: int = 3,
        *,
        p_raise: float = 0.0,
        p_hang: float = 0.0,
        p_kill: float = 0.0,
        fault_seed: int = 0,
    ) -> None:
        super().__init__()
        self.tools = [ECHO_SPEC]
        self.turns = turns
        self.p_raise, self.p_hang, self.p_kill = p_raise, p_hang, p_kill
        self.fault_seed = fault_seed
        self.proc: asyncio.subprocess.Process | None = None
        self.task: Task | None = None
        self.turn = 0

    def fault(self, task_id: str, turn: int, text: str) -> str | None:
        u = unit(self.fault_seed, task_id, turn, text)
        for name, p in (("raise", self.p_raise), ("hang", self.p_hang), ("kill", self.p_kill)):
            if u < p:
                return name
            u -= p
        return None

    async def reset(self, task: Task) -> list[Message]:
        self.task = task
        self.turn = 0
        self.proc = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            'while IFS= read -r line; do eval "$line"; done',
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        return [Message(role=Role.USER, content=task.prompt)]

    async def _sandbox(self, command: str) -> str:
        assert (
            self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        )
        self.proc.stdin.write((command + "\n").encode())
        await self.proc.stdin.drain()
        line = await self.proc.stdout.readline()
        if not line:
            code = await self.proc.wait()
            raise SandboxCrashed(f"sandbox process exited with {code} (signal {-code})")
        return line.decode().strip()

    async def step(self, action: Message) -> StepResult:
        assert self.task is not None
        turn = self.turn
        self.turn += 1
        fault = self.fault(self.task.id, turn, action.content + repr(action.tool_calls))
        if fault == "raise":
            raise ToolFailure(f"echo failed on turn {turn}")
        if fault == "hang":
            await self._sandbox("sleep 60; echo late")
        if fault == "kill":
            await self._sandbox(f"kill -{int(signal.SIGKILL)} $$")
        outputs = [
            await self._sandbox(f"echo out-{c.arguments.get('x')}") for c in action.tool_calls
        ]
        obs = [
            Message(role=Role.TOOL, content=out, tool_call_id=c.id, name=c.name)
            for c, out in zip(action.tool_calls, outputs, strict=True)
        ] or [Message(role=Role.USER, content="please call a tool")]
        done = self.turn >= self.turns
        reward = unit("reward", self.task.id, action.content) if done else 0.0
        return StepResult(
            observations=obs, reward=reward, done=done, state_key=f"{self.task.id}:{turn}"
        )

    async def close(self) -> None:
        if self.proc is not None:
            # The whole process group: a hung command's children hold the pipes open too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            await self.proc.wait()
        self.proc = None


def make_tasks(n: int, prefix: str = "t") -> list[Task]:
    return [Task(id=f"{prefix}{i}", prompt=f"task number {i}") for i in range(n)]


def run_live(
    make_env: Callable[[], Env],
    policy: Policy,
    tasks: list[Task],
    *,
    store: TrajectoryStore | None = None,
    **fields: Any,
) -> list[Trajectory]:
    """``run_rollout`` of the spec over ``tasks`` (its other fields as keywords), with a live
    environment factory, policy and (when given) store."""
    spec = RolloutSpec(tasks=tasks, **fields)
    if store is None:
        return run_rollout(spec, env=make_env, policy=policy)
    return run_rollout(spec, env=make_env, policy=policy, store=store)
