"""Blueprint synthesis for tool environments (APIGen-MT): propose a task with its ground-truth
actions, validate it by executing the actions against the environment, then play the
conversation with the simulated user; each invalid blueprint is counted by its reason.

1. Proposal: the env's proposer draws ``count`` blueprints (``trajforge.envs.PROPOSERS``).
2. Execution: each blueprint's actions run in order as tool calls in a fresh env; the first
   that the env answers with an error rejects it (reason: the tool and what it said, with
   ids and numbers blanked so that like failures count together). What they found settles
   the task (the answer an answer-checking verifier needs), or rejects it.
3. Conversation: the expert plays each remaining task (its gold plan) against the simulated
   user (the env's scripted user, or ``user``, a policy) in a fresh env; the env's verifier
   must pass it.
4. Duplicates are kept once.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections import Counter
from collections.abc import Sequence

from trajforge.envs import ERROR_PREFIX, Blueprint, get_env, proposer_for
from trajforge.formats import format_tool_call
from trajforge.rollout import PolicyRef, RolloutHook, RolloutSpec, run_rollout
from trajforge.schema import Message, Role, Task, ToolCall, is_success
from trajforge.synthesis.report import SynthesisReport

_SPECIFIC = re.compile(r"'[^']*'|\"[^\"]*\"|#\w+|\$?\d+(?:\.\d+)?")


def _general(text: str) -> str:
    """``text`` with quoted names, ids and numbers blanked (``_``)."""
    return _SPECIFIC.sub("_", text.removeprefix(ERROR_PREFIX).strip())


async def execute(env: str, blueprint: Blueprint) -> Task | str:
    """The settled task once ``blueprint``'s actions all ran in a fresh ``env``, or why not."""
    made = get_env(env).make()
    try:
        await made.reset(blueprint.task)
        for k, (name, arguments) in enumerate(blueprint.actions, start=1):
            call = ToolCall(id=f"blueprint-{k}", name=name, arguments=arguments)
            action = Message(
                role=Role.ASSISTANT, content=format_tool_call(name, arguments), tool_calls=[call]
            )
            step = await made.step(action)
            said = next((m.text for m in step.observations if m.role is Role.TOOL), "")
            if said.startswith(ERROR_PREFIX):
                return f"{name} failed: {_general(said)}"
            if step.done:
                return f"the episode ended at action {k} ({name})"
    finally:
        await made.close()
    return blueprint.settle(blueprint.task)


def play_conversations(
    env: str, tasks: list[Task], user: str | None, hooks: Sequence[RolloutHook] = ()
) -> dict[str, str | None]:
    """Per task, ``None`` when the expert's conversation with the simulated user passed the
    verifier, else why it did not."""
    if not tasks:
        return {}
    spec = RolloutSpec(
        env=env,
        policy=PolicyRef(name="expert"),
        user=None if user is None else PolicyRef(name=user),
        tasks=tasks,
    )
    verdicts: dict[str, str | None] = {}
    for t in run_rollout(spec, hooks=list(hooks)):
        if is_success(t.outcome.status, t.outcome.reward):
            verdicts[t.task.id] = None
        else:
            why = t.outcome.reason or t.outcome.error or f"reward {t.outcome.reward}"
            verdicts[t.task.id] = f"the conversation failed: {_general(str(why))}"
    return verdicts


def synthesize_blueprints(
    env: str, count: int, *, seed: int, user: str | None = None,
    hooks: Sequence[RolloutHook] = (),
) -> SynthesisReport:  # fmt: skip
    """``count`` proposed blueprints of ``env``: the valid ones as the report's tasks (each
    naming its draw in ``data["synthesis"]``), the others counted by reason.

    Raises:
        ConfigError: the env has no proposer.
    """
    propose = proposer_for(env)
    report = SynthesisReport(env=env, run_id="", explored=count, source="blueprints")
    settled: dict[str, Task] = {}
    for i in range(count):
        blueprint = propose(random.Random(f"blueprint:{env}:{seed}:{i}"))
        made = asyncio.run(execute(env, blueprint))
        if isinstance(made, str):
            report.dropped[made] += 1
        elif made.id in settled:
            report.dropped["a duplicate"] += 1
        else:
            drawn = {**made.data, "synthesis": {"blueprint": i, "seed": seed}}
            settled[made.id] = made.model_copy(update={"data": drawn})
    verdicts = play_conversations(env, list(settled.values()), user, hooks)
    report.dropped.update(Counter(v for v in verdicts.values() if v is not None))
    report.tasks = [t for t in settled.values() if verdicts[t.id] is None]
    return report
