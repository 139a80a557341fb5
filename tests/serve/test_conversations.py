"""Every message order and shape OpenAI's chat API takes, through the official ``openai`` SDK:
answered, recorded as one token-exact trajectory per run, or refused with a 400 naming the
message the model's chat template cannot render; request fields the gateway cannot honour."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI
from serve_helpers import ADD_TOOL, MODEL, add, assert_token_exact, recorded

from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import Message, OutcomeStatus, Role, Task
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving
from trajforge.store import TrajectoryStore

QUESTION = "What is 2 plus 3?"
OPENINGS: dict[str, list[dict[str, Any]]] = {
    "greeting after system": [
        {"role": "system", "content": "You add numbers."},
        {"role": "assistant", "content": "Hello! Which numbers shall I add?"},
        {"role": "user", "content": QUESTION},
    ],
    "assistant first": [
        {"role": "assistant", "content": "Hello! Which numbers shall I add?"},
        {"role": "user", "content": QUESTION},
    ],
    "two system messages": [
        {"role": "system", "content": "You add numbers."},
        {"role": "developer", "content": "Use the add tool."},
        {"role": "user", "content": QUESTION},
    ],
    "system mid-conversation": [
        {"role": "user", "content": "Hi."},
        {"role": "assistant", "content": "Hello!"},
        {"role": "system", "content": "Use the add tool."},
        {"role": "user", "content": QUESTION},
    ],
    "system last": [
        {"role": "user", "content": QUESTION},
        {"role": "system", "content": "Use the add tool."},
    ],
    "consecutive users": [
        {"role": "user", "content": QUESTION},
        {"role": "user", "content": "Please be quick."},
    ],
    "consecutive assistants": [
        {"role": "user", "content": "Hi."},
        {"role": "assistant", "content": "Hello!"},
        {"role": "assistant", "content": "I add numbers."},
        {"role": "user", "content": QUESTION},
    ],
    "content parts": [
        {"role": "system", "content": [{"type": "text", "text": "You add numbers."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is 2 "},
                {"type": "text", "text": "plus 3?"},
            ],
        },
    ],
    "empty and whitespace content": [
        {"role": "system", "content": ""},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "  "},
        {"role": "user", "content": " \n"},
    ],
}


def _question_reply(task: Task | None, messages: list[Message]) -> str:
    """The adder for 2 + 3, whatever comes before the question."""
    if any(m.role is Role.TOOL for m in messages):
        return "The total is 5."
    return '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


@pytest.fixture
def served(store_path: Path, request: pytest.FixtureRequest) -> Iterator[OpenAI]:
    reply = getattr(request, "param", _question_reply)
    store = TrajectoryStore(store_path)
    gateway = Gateway(ScriptedPolicy(reply, load_tokenizer(), name=MODEL), store, run_id="gw")
    with serving(gateway) as url:
        yield OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    store.close()


@pytest.mark.parametrize("opening", list(OPENINGS))
def test_every_opening_openai_takes_is_one_token_exact_trajectory(
    served: OpenAI, store_path: Path, opening: str
) -> None:
    messages = copy.deepcopy(OPENINGS[opening])
    while True:
        reply = served.chat.completions.create(model=MODEL, messages=messages, tools=[ADD_TOOL])
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": add(call.function.arguments)}
            )
    assert message.content == "The total is 5."
    (traj,) = recorded(store_path)  # the second call continued the first one's trajectory
    turns = sum(m["role"] == "assistant" for m in messages)
    assert traj.outcome.status is OutcomeStatus.OK and traj.num_turns == turns
    assert len(traj.messages) == len(messages)
    assert_token_exact(store_path)


def _whitespace(task: Task | None, messages: list[Message]) -> str:
    return " \n "


@pytest.mark.parametrize("served", [_whitespace], indirect=True)
def test_a_reply_sampled_as_whitespace_is_sent_as_that_whitespace(served: OpenAI) -> None:
    asked: list[Any] = [{"role": "user", "content": "Say nothing."}]
    reply = served.chat.completions.create(model=MODEL, messages=asked)
    assert reply.choices[0].message.content == " \n "
    stream = served.chat.completions.create(model=MODEL, messages=asked, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == " \n "


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("presence_penalty", 0.5),
        ("frequency_penalty", -1.0),
        ("logit_bias", {"42": 5}),
        ("top_logprobs", 3),
        ("response_format", {"type": "json_object"}),
        ("reasoning_effort", "high"),
    ],
)
def test_a_field_the_gateway_cannot_honour_is_refused_as_unsupported(
    served: OpenAI, field: str, value: Any
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        served.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": QUESTION}], extra_body={field: value}
        )
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == field, error
    assert error["message"].startswith(f"{field}: not supported"), error


def test_fields_set_to_what_changes_nothing_are_accepted(served: OpenAI) -> None:
    reply = served.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        presence_penalty=0,
        frequency_penalty=0.0,
        logit_bias={},
        response_format={"type": "text"},
        user="someone",
    )
    assert reply.choices[0].finish_reason == "tool_calls"


ALTERNATING = (
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' and (loop.first or messages[loop.index0 - 1]['role'] != 'user') %}"
    "{{ raise_exception('an assistant turn must follow a user turn') }}{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_what_the_template_cannot_render_is_a_400_naming_the_message(store_path: Path) -> None:
    tokenizer = copy.deepcopy(load_tokenizer())
    tokenizer.chat_template = ALTERNATING
    policy = ScriptedPolicy(_question_reply, tokenizer, name=MODEL)
    with serving(Gateway(policy, None, run_id="gw")) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model=MODEL, messages=OPENINGS["consecutive assistants"])
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": QUESTION}]
        )
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == "messages[2]", error
    assert "must follow a user turn" in error["message"] and MODEL in error["message"]
    assert reply.choices[0].finish_reason == "tool_calls"
