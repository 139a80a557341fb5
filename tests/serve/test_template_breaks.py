"""What docs/templates.md says the gateway does where a template is not prefix-safe: a template
that rewrites the history is refused at the break (no wrong ids recorded), and one whose
generation prompt opens text the reply's rendering drops keeps the sampled ids, exactly."""

from __future__ import annotations

import asyncio
import copy

import pytest
from serve_helpers import MODEL

from trajforge.policy.check import check_trajectory
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import Message, Role, Task
from trajforge.serve.gateway import Gateway
from trajforge.serve.wire import ChatRequest, WireError

_TURN = "<|im_start|>{{ m.role }}\n"
_GEN = "{% if add_generation_prompt %}<|im_start|>assistant\n{{ opening }}{% endif %}"
# Past replies are shortened once a later message exists, as reasoning templates drop thinking.
REWRITES_HISTORY = (
    "{% for m in messages %}" + _TURN + "{% if m.role == 'assistant' and not loop.last %}"
    "(earlier reply){% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    + _GEN.replace("{{ opening }}", "")
)
# The generation prompt opens a thinking block that the reply's rendering never shows.
OPENS_IN_PROMPT = (
    "{% for m in messages %}"
    + _TURN
    + "{{ m.content }}<|im_end|>\n{% endfor %}"
    + _GEN.replace("{{ opening }}", "<think>\n")
)


def _reply(task: Task | None, messages: list[Message]) -> str:
    return f"answer {sum(1 for m in messages if m.role is Role.USER)}"


def _gateway(template: str) -> Gateway:
    tokenizer = copy.deepcopy(load_tokenizer())
    tokenizer.chat_template = template
    return Gateway(ScriptedPolicy(_reply, tokenizer, name=MODEL), None, run_id="gw")


def _call(gateway: Gateway, messages: list[Message]) -> None:
    request = ChatRequest(model=MODEL, messages=[{"role": "user", "content": "-"}])
    asyncio.run(gateway.chat("s", request, messages, []))


def _turns(*texts: str) -> list[Message]:
    roles = [Role.USER, Role.ASSISTANT] * len(texts)
    return [Message(role=r, content=t) for r, t in zip(roles, texts, strict=False)]


def test_a_template_that_rewrites_the_history_is_refused_at_the_break() -> None:
    gateway = _gateway(REWRITES_HISTORY)
    _call(gateway, _turns("hi"))
    with pytest.raises(WireError, match="cannot render this conversation") as raised:
        _call(gateway, _turns("hi", "answer 1", "more"))
    assert raised.value.status == 400
    (only,) = gateway.recorder.trajectories(gateway.recorder.session("s"))
    assert len(only.messages) == 2 and only.exactness.is_exact


def test_a_prompt_that_opens_thinking_keeps_the_sampled_ids_exactly() -> None:
    gateway = _gateway(OPENS_IN_PROMPT)
    _call(gateway, _turns("hi"))
    _call(gateway, _turns("hi", "answer 1", "more"))
    (traj,) = gateway.recorder.trajectories(gateway.recorder.session("s"))
    assert [m.role for m in traj.messages] == [Role.USER, Role.ASSISTANT] * 2
    assert traj.exactness.is_exact
    assert check_trajectory(traj, gateway.policy.renderer) == []
    text = gateway.policy.renderer.decode([t for m in traj.messages for t in m.token_ids or []])
    assert text.count("<think>\n") == 2
