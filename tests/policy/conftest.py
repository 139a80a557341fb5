"""Shared fixtures: SmolLM2's tokenizer, a copy of it with a native tool-calling template."""

from __future__ import annotations

import copy

import pytest

from trajforge.schema import FunctionSpec, Message, Role, ToolSpec

# A Hermes/Qwen-style ChatML template with native tools: tools are listed in the system turn,
# calls are rendered from ``tool_calls``, and consecutive tool results share one user turn.
NATIVE_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + message.content }}"
    "{%- for call in message.tool_calls | default([]) %}"
    "{%- if loop.first and message.content %}{{- '\\n' }}{%- endif %}"
    '{{- \'<tool_call>\\n{"name": "\' + call.function.name + \'", "arguments": \''
    " + (call.function.arguments | tojson) + '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif message.role != 'system' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture(scope="session")
def smol_tokenizer():  # type: ignore[no-untyped-def]
    from trajforge.policy.models.smollm2 import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def native_tokenizer(smol_tokenizer):  # type: ignore[no-untyped-def]
    tokenizer = copy.deepcopy(smol_tokenizer)
    tokenizer.chat_template = NATIVE_TEMPLATE
    return tokenizer


@pytest.fixture
def tools() -> list[ToolSpec]:
    return [
        ToolSpec(
            function=FunctionSpec(
                name="add",
                description="Add two integers.",
                parameters={
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                },
            )
        ),
        ToolSpec(
            function=FunctionSpec(
                name="lookup",
                description="Look a word up.",
                parameters={
                    "type": "object",
                    "properties": {"word": {"type": "string"}},
                    "required": ["word"],
                },
            )
        ),
    ]


@pytest.fixture
def opening() -> list[Message]:
    return [
        Message(role=Role.SYSTEM, content="You are a careful calculator."),
        Message(role=Role.USER, content="What is 1 + 2, and what does 'sum' mean?"),
    ]
