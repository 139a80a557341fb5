"""Synthetic trajectories for tests and benchmarks: valid, tool-using, tokenized, deterministic.

Pure python (no heavy imports) so any layer's tests can build realistic data cheaply.
"""

from __future__ import annotations

import random

from trajforge.schema.messages import FunctionSpec, Message, Role, ToolCall, ToolSpec
from trajforge.schema.trajectory import (
    Evaluator,
    EvaluatorKind,
    Outcome,
    OutcomeStatus,
    Score,
    Task,
    Trajectory,
    Usage,
)

CALCULATOR_TOOL = ToolSpec(
    function=FunctionSpec(
        name="calculator",
        description="Evaluate an arithmetic expression.",
        parameters={
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    )
)

_BASE_TIME = 1_767_225_600.0  # 2026-01-01T00:00:00Z, so created_at is reproducible
_STATUS_WEIGHTS = (
    (OutcomeStatus.OK, 0.85),
    (OutcomeStatus.TRUNCATED, 0.1),
    (OutcomeStatus.ERROR, 0.05),
)


def _ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(49152) for _ in range(n)]


def synthetic_trajectory(
    i: int,
    *,
    turns: int = 6,
    run_id: str = "synthetic",
    env: str = "calculator",
    samples_per_task: int = 1,
    tokens_per_message: int = 24,
) -> Trajectory:
    """The ``i``-th synthetic trajectory of a run: the same arguments always give the same result.

    It has a system and a user message, then ``turns`` assistant turns; every turn but the last
    makes one calculator call answered by a tool message, the last gives the answer. Every message
    carries ``token_ids`` (assistant messages also ``logprobs`` and a per-turn ``reward``), the
    outcome has a reward in [0, 1] and the trajectory one ``correct`` score equal to it.

    Args:
        i: Index of the trajectory within the run; picks its task and sample.
        turns: Number of assistant turns (at least 1).
        run_id: Run the trajectory belongs to; also part of its ``id``.
        env: Environment name recorded on the trajectory and its task.
        samples_per_task: Trajectories per task: task ``i // samples_per_task``, sample
            ``i % samples_per_task``, grouped by task.
        tokens_per_message: Average number of token ids per message.
    """
    if turns < 1:
        raise ValueError("turns: a trajectory needs at least one assistant turn")
    rng = random.Random(f"{run_id}/{i}")
    task_index, sample_index = divmod(i, samples_per_task)
    a, b = rng.randrange(1000), rng.randrange(1000)
    times = max(turns - 1, 1)  # one tool call per turn but the last, each adding a + b
    task = Task(
        id=f"task-{task_index}",
        prompt=f"What is ({a} + {b}) * {times}?",
        env=env,
        answer=(a + b) * times,
        split="train",
    )

    def n_tokens() -> int:
        return max(1, tokens_per_message + rng.randrange(-4, 5))

    messages = [
        Message(
            role=Role.SYSTEM,
            content="You are a careful calculator agent.",
            token_ids=_ids(rng, n_tokens()),
        ),
        Message(role=Role.USER, content=task.prompt, token_ids=_ids(rng, n_tokens())),
    ]
    completion_tokens = 0
    value = a + b
    for turn in range(turns):
        ids = _ids(rng, n_tokens())
        completion_tokens += len(ids)
        logprobs = [-round(rng.random() * 3, 4) for _ in ids]
        state_key = f"s{task_index}-{turn}"
        if turn < turns - 1:
            expression = f"{value} + {a + b}" if turn else f"{a} + {b}"
            call = ToolCall(
                id=f"call_{turn}_0", name="calculator", arguments={"expression": expression}
            )
            messages.append(
                Message(
                    role=Role.ASSISTANT,
                    content=f"Step {turn + 1}: compute {expression}.",
                    tool_calls=[call],
                    token_ids=ids,
                    logprobs=logprobs,
                    reward=0.0,
                    state_key=state_key,
                )
            )
            value = value + a + b if turn else value
            messages.append(
                Message(
                    role=Role.TOOL,
                    content=str(value),
                    tool_call_id=call.id,
                    name="calculator",
                    token_ids=_ids(rng, n_tokens()),
                )
            )
        else:
            messages.append(
                Message(
                    role=Role.ASSISTANT,
                    content=f"The answer is {value}.",
                    token_ids=ids,
                    logprobs=logprobs,
                    reward=1.0 if value == task.answer else 0.0,
                    state_key=state_key,
                )
            )
    reward = round(rng.random(), 4)
    status = rng.choices([s for s, _ in _STATUS_WEIGHTS], weights=[w for _, w in _STATUS_WEIGHTS])[
        0
    ]
    prompt_tokens = sum(len(m.token_ids or ()) for m in messages) - completion_tokens
    return Trajectory(
        id=f"{run_id}-{i:07d}",
        task=task,
        env=env,
        group_id=f"{run_id}/{task.id}",
        sample_index=sample_index,
        run_id=run_id,
        model="synthetic",
        tools=[CALCULATOR_TOOL],
        messages=messages,
        outcome=Outcome(
            status=status,
            reward=reward,
            error="synthetic failure" if status is OutcomeStatus.ERROR else None,
        ),
        scores=[
            Score(
                name="correct",
                value=reward,
                evaluator=Evaluator(kind=EvaluatorKind.RULE, name="synthetic"),
            )
        ],
        usage=Usage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            turns=turns,
            tool_calls=turns - 1,
        ),
        created_at=_BASE_TIME + i,
    )
