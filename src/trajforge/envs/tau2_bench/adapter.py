"""A tau2-bench domain as a trajforge environment, scored by tau2's own evaluator.

Every episode holds a live tau2 ``Environment`` of the domain, set to the task's initial state
(its initialization data and actions, and the tool calls of its message history) as tau2's
orchestrator sets it. The agent's tool calls go to that environment unchanged (no argument
check of trajforge's, no truncation): the tool message is exactly what tau2 answers, its
``Error: ...`` included, so tau2's evaluator, which replays the calls, finds the same answers.

The verdict is ``tau2.evaluator.evaluate_simulation`` with ``EvaluationType.ALL`` (what
``tau2 run`` uses) on the conversation converted to tau2 messages: the task's message history,
then the episode's messages (calls that never reached tau2, unparseable ones, left out). The
simulated user stopping, transferring or giving up is tau2's ``user_stop``; an ending tool
(``transfer_to_human_agents``) is ``agent_stop``; a conversation cut at a turn limit is
``max_steps``, which tau2 scores 0.

What the agent sees: the domain's policy as the system message, and, for a task that starts
mid-conversation, that history written out after the policy (a trajectory's messages are what
the policy itself said or read, so earlier turns it never sampled are context, not turns).

Tasks: a domain with ``train``/``test`` splits keeps them; one with only tau2's ``base`` split
(``mock``) offers all its tasks in both. The scripted expert makes the task's gold assistant
actions in order, then says every ``communicate_info`` string; the scripted user opens with the
task's ticket (or its instructions), agrees to what it is asked and stops when told the result.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from functools import cache
from typing import Any

from tau2.data_model.message import AssistantMessage, ToolMessage, UserMessage
from tau2.data_model.message import Message as Tau2Message
from tau2.data_model.message import ToolCall as Tau2ToolCall
from tau2.data_model.simulation import SimulationRun, TerminationReason
from tau2.data_model.tasks import Task as Tau2Task
from tau2.environment.environment import Environment
from tau2.environment.toolkit import ToolType
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
from tau2.registry import registry

from trajforge.envs.registry import TAU2_PREFIX, EnvEntry, EnvSource
from trajforge.envs.taskset import TEST, TRAIN, TaskSet
from trajforge.envs.tool import ToolContext
from trajforge.envs.tool_env import EnvError
from trajforge.envs.user_sim import UserSignal, UserSimEnv, plan_reply
from trajforge.errors import ConfigError
from trajforge.registry import did_you_mean
from trajforge.schema import (
    Evaluator,
    EvaluatorKind,
    Evidence,
    FunctionSpec,
    Message,
    Role,
    Score,
    Task,
    ToolCall,
    ToolSpec,
)

ENDING_TOOL = "transfer_to_human_agents"
MAX_TURNS = 30
MAX_USER_TURNS = 15
BASE_SPLIT = "base"


def domains() -> list[str]:
    """The tau2 domains installed."""
    return list(registry.get_domains())


def check_domain(domain: str) -> None:
    """Raise a ``ConfigError`` naming the closest domain unless ``domain`` is installed."""
    known = domains()
    if domain not in known:
        raise ConfigError(
            f"unknown tau2 domain {domain!r}{did_you_mean(domain, known)}; "
            f"tau2 envs are {', '.join(TAU2_PREFIX + d for d in known)}"
        )


def _environment(domain: str) -> Environment:
    return registry.get_env_constructor(domain)()


def _history(tau2_task: Tau2Task) -> list[Tau2Message]:
    state = tau2_task.initial_state
    return list(state.message_history or []) if state is not None else []


def _transcript(history: Sequence[Tau2Message]) -> str:
    lines = []
    for m in history:
        calls = getattr(m, "tool_calls", None) or []
        said = [json.dumps({"name": c.name, "arguments": c.arguments}) for c in calls]
        text = " ".join([m.content or "", *said]).strip()
        lines.append(f"{m.role}: {text}")
    return "\n".join(lines)


def _to_task(domain: str, template: Environment, tau2_task: Tau2Task, split: str) -> Task:
    """The trajforge task of a tau2 task: tau2's own record under ``data["tau2"]``."""
    criteria = tau2_task.evaluation_criteria
    gold = [a for a in (criteria.actions or []) if a.requestor == "assistant"] if criteria else []
    tools = template.tools
    assert tools is not None
    writes = [a.name for a in gold if tools.tool_type(a.name) is ToolType.WRITE]
    told = list(criteria.communicate_info or []) if criteria else []
    plan: list[list[Any]] = [["call", a.name, dict(a.arguments)] for a in gold]
    if not any(a.name == ENDING_TOOL for a in gold):
        plan.append(["say", " ".join(["Done.", *told])])
    scenario = tau2_task.user_scenario
    opening = tau2_task.ticket or str(scenario.instructions)
    system = None
    history = _history(tau2_task)
    if history:
        system = f"{template.get_policy()}\n\n# The conversation so far\n"
        system += _transcript(history)
    return Task(
        id=tau2_task.id,
        prompt=opening,
        system=system,
        split=split,
        data={
            "tau2": tau2_task.model_dump(mode="json"),
            "domain": domain,
            "user": {"instructions": str(scenario), "opening": opening},
            "required_tools": writes,
            "plan": plan,
        },
    )


@cache
def _tasks(domain: str) -> dict[str, tuple[Task, ...]]:
    loaded = registry.get_tasks_loader(domain)(None)
    splits_loader = registry.get_task_splits_loader(domain)
    splits = splits_loader() if splits_loader is not None else {}
    template = _environment(domain)
    chosen: dict[str, tuple[Task, ...]] = {}
    for split in (TRAIN, TEST):
        ids = set(splits.get(split) or splits.get(BASE_SPLIT) or [t.id for t in loaded])
        chosen[split] = tuple(_to_task(domain, template, t, split) for t in loaded if t.id in ids)
    return chosen


def tau2_task(task: Task) -> Tau2Task:
    """The tau2 task a trajforge task of this adapter carries."""
    record = task.data.get("tau2")
    if not isinstance(record, dict):
        raise EnvError(f"task {task.id!r} is not a tau2 task (data.tau2 is missing)")
    return Tau2Task.model_validate(record)


def _reached_tau2(call: ToolCall) -> bool:
    return call.parse_error is None


def to_tau2_messages(task: Task, messages: Sequence[Message]) -> list[Tau2Message]:
    """The full conversation as tau2 records it: the task's history, then the episode's
    messages (system messages and calls that never reached tau2 left out)."""
    out: list[Tau2Message] = list(_history(tau2_task(task)))
    skipped: set[str] = set()
    for m in messages:
        if m.role is Role.USER:
            out.append(UserMessage(role="user", content=m.text))
        elif m.role is Role.ASSISTANT:
            calls = [c for c in m.tool_calls if _reached_tau2(c)]
            skipped |= {c.id for c in m.tool_calls if not _reached_tau2(c)}
            out.append(
                AssistantMessage(
                    role="assistant",
                    content=m.text or None,
                    tool_calls=[
                        Tau2ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in calls
                    ]
                    or None,
                )
            )
        elif m.role is Role.TOOL and m.tool_call_id not in skipped:
            error = m.text.startswith("Error:")
            out.append(
                ToolMessage(id=m.tool_call_id or "", role="tool", content=m.text, error=error)
            )
    return out


def _termination(signal: Any) -> TerminationReason:
    if isinstance(signal, str) and signal.startswith("tool:"):
        return TerminationReason.AGENT_STOP
    if signal in {s.value for s in UserSignal}:
        return TerminationReason.USER_STOP
    return TerminationReason.MAX_STEPS


def verify(evidence: Evidence) -> Score:
    """tau2's reward for the episode (``evaluate_simulation``, ``EvaluationType.ALL``)."""
    task = evidence.task
    domain = str(task.data["domain"])
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    run = SimulationRun(
        id=task.id,
        task_id=task.id,
        start_time=now,
        end_time=now,
        duration=0.0,
        termination_reason=_termination(evidence.state.get("signal")),
        messages=to_tau2_messages(task, evidence.messages),
    )
    info = evaluate_simulation(
        simulation=run,
        task=tau2_task(task),
        evaluation_type=EvaluationType.ALL,
        solo_mode=False,
        domain=domain,
    )
    breakdown = {str(k.value): float(v) for k, v in (info.reward_breakdown or {}).items()}
    note = json.dumps(info.info, default=str) if info.info else ""
    return Score(
        name=TAU2_PREFIX + domain,
        value=float(info.reward),
        explanation=f"tau2 reward {info.reward:g} ({run.termination_reason.value}) {note}".strip(),
        evaluator=Evaluator(kind=EvaluatorKind.ENV, name=TAU2_PREFIX + domain),
        dimensions=breakdown,
    )


class Tau2Env(UserSimEnv):
    """One tau2 domain's episode: a live tau2 environment behind the agent's tools.

    Args:
        domain: The tau2 domain (``mock``, ``retail``, ``airline``, ``telecom``).
        **options: As ``UserSimEnv`` (max_turns, max_user_turns, tool_timeout...).
    """

    def __init__(self, domain: str, **options: Any) -> None:
        check_domain(domain)
        template = _environment(domain)
        options.setdefault("max_turns", MAX_TURNS)
        options.setdefault("max_user_turns", MAX_USER_TURNS)
        super().__init__(
            [],
            verifier=verify,
            name=TAU2_PREFIX + domain,
            description=f"tau2-bench's {domain} domain, scored by tau2's evaluator",
            expert=expert,
            user_script=scripted_user,
            system_prompt=template.get_policy(),
            **options,
        )
        self.domain = domain
        self.tools = [
            ToolSpec(function=FunctionSpec(**t.openai_schema["function"]))
            for t in template.get_tools()
        ]
        self.ending_tools = frozenset({ENDING_TOOL} & {t.name for t in self.tools})
        self.tau2_env: Environment | None = None

    async def setup(self, context: ToolContext) -> None:
        record = tau2_task(context.task)
        env = _environment(self.domain)
        state = record.initial_state
        env.set_state(
            initialization_data=state.initialization_data if state else None,
            initialization_actions=state.initialization_actions if state else None,
            message_history=_history(record),
        )
        self.tau2_env = env

    async def run_call(self, call: ToolCall) -> str:
        """tau2's answer to the call, verbatim (an unparseable call never reaches tau2)."""
        if not _reached_tau2(call) or self.tau2_env is None:
            return await super().run_call(call)
        answer = self.tau2_env.get_response(
            Tau2ToolCall(id=call.id, name=call.name, arguments=call.arguments)
        )
        return answer.content or ""


def expert(task: Task, messages: list[Message]) -> str | None:
    """The task's gold assistant actions, then the information it must communicate."""
    return plan_reply(task.data["plan"], messages)


def scripted_user(task: Task, view: list[Message]) -> str | None:
    """Opens with the task's request, agrees to what it is asked, stops when told the result
    (and gives up when the env refused that stop)."""
    said = [m.text for m in view if m.role is Role.ASSISTANT]
    if not said:
        return str(task.data["user"]["opening"])
    if UserSignal.STOP.value in said[-1]:
        return UserSignal.OUT_OF_SCOPE.value
    text = view[-1].text.lower()
    if "transferr" in text:
        return UserSignal.TRANSFER.value
    if "anything else" in text or "?" not in text:
        return f"No, that's all. Thank you! {UserSignal.STOP.value}"
    return "Yes, please go ahead."


def entry(domain: str) -> EnvEntry:
    """The registry entry of ``tau2-<domain>``."""
    check_domain(domain)

    def tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
        pool = TaskSet(list(_tasks(domain)[split]), name=TAU2_PREFIX + domain)
        if n > len(pool):
            raise ConfigError(
                f"env {TAU2_PREFIX}{domain} has {len(pool)} {split} tasks; {n} were asked"
            )
        return list(pool.shuffled(seed).take(n))

    def make(**kwargs: Any) -> Tau2Env:
        return Tau2Env(domain, **kwargs)

    return EnvEntry(
        TAU2_PREFIX + domain,
        make,
        tasks,
        expert,
        f"tau2-bench's {domain} domain (tasks, db, policy, tools), scored by tau2's evaluator",
        scripted_user,
        EnvSource.TAU2,
    )
