"""Hand-built trajectories with token ids, and small RL settings, for train tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trajforge.judge.scorer import EnvVerdict, FunctionScorer, Rubric
from trajforge.schema import EvaluatorKind, Message, Outcome, Role, Task, ToolCall, Trajectory
from trajforge.train.config import RLConfig


def chat_ids(tok: Any, role: str, text: str, *, prompt_next: bool) -> list[int]:
    """Ids of one rendered turn, with the assistant generation prompt when asked."""
    out = tok.encode(f"<|im_start|>{role}\n{text}<|im_end|>\n", add_special_tokens=False)
    if prompt_next:
        out += tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    return list(out)


def qa_trajectory(
    tok: Any, question: str, answer: str, *, tool_result: str | None = None, **kw: Any
) -> Trajectory:
    """system + user (+ assistant tool call + tool result) + assistant answer, with token ids.

    Assistant ids end with ``<|im_end|>`` (what the model samples); the closing newline belongs
    to the next message, as the token layout says.
    """
    end = tok.convert_tokens_to_ids("<|im_end|>")
    msgs = [
        Message(
            role=Role.SYSTEM,
            content="sys",
            token_ids=chat_ids(tok, "system", "sys", prompt_next=False),
        ),
        Message(
            role=Role.USER,
            content=question,
            token_ids=chat_ids(tok, "user", question, prompt_next=True),
        ),
    ]
    turn = 0
    if tool_result is not None:
        call = '<tool_call>{"name": "calc", "arguments": {}}</tool_call>'
        ids = [*tok.encode(call, add_special_tokens=False), end]
        msgs.append(
            Message(
                role=Role.ASSISTANT,
                content="",
                tool_calls=[ToolCall(id=f"call_{turn}_0", name="calc")],
                token_ids=ids,
                logprobs=[-0.5] * len(ids),
            )
        )
        nl = tok.encode("\n", add_special_tokens=False)
        msgs.append(
            Message(
                role=Role.TOOL,
                content=tool_result,
                tool_call_id=f"call_{turn}_0",
                token_ids=nl + chat_ids(tok, "tool", tool_result, prompt_next=True),
            )
        )
        turn += 1
    ids = [*tok.encode(answer, add_special_tokens=False), end]
    msgs.append(
        Message(role=Role.ASSISTANT, content=answer, token_ids=ids, logprobs=[-1.0] * len(ids))
    )
    return Trajectory(
        task=Task(id=kw.pop("task_id", question), prompt=question),
        messages=msgs,
        outcome=Outcome(reward=kw.pop("reward", 1.0)),
        **kw,
    )


def raw_trajectory(segments: list[tuple[str, list[int]]], **kw: Any) -> Trajectory:
    """A trajectory from (role, ids) segments; assistant logprobs are -0.1 * position."""
    msgs = []
    for role, ids in segments:
        if role == "assistant":
            msgs.append(
                Message(
                    role=Role.ASSISTANT,
                    token_ids=ids,
                    logprobs=[-0.1 * (i + 1) for i in range(len(ids))],
                )
            )
        else:
            msgs.append(Message(role=Role(role), token_ids=ids))
    return Trajectory(task=Task(id=kw.pop("task_id", "t"), prompt="p"), messages=msgs, **kw)


def token_id_reward(traj: Trajectory) -> float:
    # A reward that differs between samples of a group, so advantages (and updates) are
    # nonzero. The mean of ids mod 1000 ties between two samples about once in a thousand
    # groups; the share of even ids tied often enough (one group in ten at 64 tokens) that
    # whole steps trained nothing now and then.
    ids = [i for m in traj.messages if m.role is Role.ASSISTANT for i in m.token_ids or ()]
    return sum(i % 1000 for i in ids) / (1000 * max(1, len(ids)))


def token_id_rubric() -> Rubric:
    """The env's verdict plus the token-id reward, weight 1 each."""
    spread = FunctionScorer(token_id_reward, "token_id", EvaluatorKind.RULE)
    return Rubric([(EnvVerdict(), 1.0), (spread, 1.0)])


def small_rl_config(tmp_path: Path, **overrides: Any) -> RLConfig:
    """One short RL step on two calculator tasks; ``overrides`` replace any key."""
    settings: dict[str, Any] = {
        "output_dir": tmp_path,
        "env": "calculator",
        "num_tasks": 2,
        "groups_per_step": 2,
        "samples_per_group": 2,
        "steps": 1,
        "max_new_tokens": 8,
        "max_turns": 1,
        "tensorboard": False,
        "progress": False,
    }
    return RLConfig.model_validate({**settings, **overrides})
