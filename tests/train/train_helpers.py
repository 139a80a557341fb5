"""Hand-built trajectories with token ids, for train tests."""

from __future__ import annotations

from typing import Any

from trajforge.schema import Message, Outcome, Role, Task, ToolCall, Trajectory


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
