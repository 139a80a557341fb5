"""ChatRenderer / RenderedSession: incremental ids are exactly the template's full rendering."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from policy_doubles import PresetPolicy, sampled

from trajforge.policy.base import Completion, FinishReason, SamplingParams
from trajforge.policy.check import check_trajectory
from trajforge.policy.renderer import ChatRenderer, RenderError, ToolProtocol
from trajforge.policy.tool_prompt import tools_system_prompt
from trajforge.schema import Message, Role, Task, ToolSpec, Trajectory

EOS = 2  # <|im_end|> in SmolLM2's vocabulary
NL = 198  # "\n"
IM_START = 1


def call_text(name: str, arguments: dict[str, Any], native: bool = False) -> str:
    body = json.dumps({"name": name, "arguments": arguments})
    return f"<tool_call>\n{body}\n</tool_call>" if native else f"<tool_call>{body}</tool_call>"


def tool_msg(call_id: str, content: str, name: str) -> Message:
    return Message(role=Role.TOOL, content=content, tool_call_id=call_id, name=name)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_protocol_detection(smol_tokenizer: Any, native_tokenizer: Any) -> None:
    smol = ChatRenderer(smol_tokenizer)
    assert smol.tool_protocol is ToolProtocol.TEXT
    assert not smol.supports_native_tools
    assert smol.tool_role == "tool"  # ChatML renders any role
    assert smol.end_suffix_ids == [EOS, NL]
    assert smol.end_of_turn_ids == [EOS]
    native = ChatRenderer(native_tokenizer)
    assert native.tool_protocol is ToolProtocol.NATIVE
    forced = ChatRenderer(native_tokenizer, tool_protocol="text")
    assert forced.tool_protocol is ToolProtocol.TEXT


def test_text_protocol_multi_turn_equals_full_render(
    smol_tokenizer: Any, tools: list[ToolSpec], opening: list[Message]
) -> None:
    """The key invariant on SmolLM2's template (no native tools): EOS-ended turns, a turn
    stopped on a stop string, two calls in one turn, a user observation."""
    enc = ChatRenderer(smol_tokenizer).encode
    replies = [
        "I will use tools.\n"
        + call_text("add", {"a": 1, "b": 2})
        + "\n"
        + call_text("lookup", {"word": "sum"}),
        call_text("add", {"a": 3, "b": 4}),
        "1 + 2 = 3, and a sum is the result of adding.",
        "2 + 2 = 4.",
    ]
    completions = [
        sampled([*enc(replies[0]), EOS]),
        sampled(enc(replies[1])),  # stopped on the "</tool_call>" stop string: no EOS sampled
        sampled([*enc(replies[2]), EOS]),
        sampled([*enc(replies[3]), EOS]),
    ]
    policy = PresetPolicy(smol_tokenizer, completions)
    session = policy.start_session(opening, tools)
    sp = SamplingParams(stop=["</tool_call>"])

    first = run(policy.respond(session, sp, turn=0))
    assert [c.id for c in first.tool_calls] == ["call_0_0", "call_0_1"]
    assert [c.name for c in first.tool_calls] == ["add", "lookup"]
    assert first.content == "I will use tools."
    session.add_observations(
        [tool_msg("call_0_0", "3", "add"), tool_msg("call_0_1", "a total", "lookup")]
    )
    second = run(policy.respond(session, sp, turn=1))
    assert second.tool_calls[0].arguments == {"a": 3, "b": 4}
    session.add_observations([tool_msg("call_1_0", "7", "add")])
    run(policy.respond(session, sp, turn=2))
    session.add_observations([Message(role=Role.USER, content="And 2 + 2?")])
    run(policy.respond(session, sp, turn=3))
    session.add_observations([Message(role=Role.USER, content="Thanks.")])

    conversation = [
        {"role": "system", "content": opening[0].content + "\n\n" + tools_system_prompt(tools)},
        {"role": "user", "content": opening[1].content},
        {"role": "assistant", "content": replies[0]},
        {"role": "tool", "content": "3"},
        {"role": "tool", "content": "a total"},
        {"role": "assistant", "content": replies[1]},
        {"role": "tool", "content": "7"},
        {"role": "assistant", "content": replies[2]},
        {"role": "user", "content": "And 2 + 2?"},
        {"role": "assistant", "content": replies[3]},
        {"role": "user", "content": "Thanks."},
    ]
    text = smol_tokenizer.apply_chat_template(
        conversation, tokenize=False, add_generation_prompt=True
    )
    assert session.token_ids() == enc(text)
    # Every prompt the policy was given is the context up to that turn, as it was then.
    for prompt in policy.prompts:
        assert session.token_ids()[: len(prompt)] == prompt
    # Assistant messages hold exactly the sampled ids and logprobs.
    assistants = [m for m in session.messages if m.role is Role.ASSISTANT]
    for message, completion in zip(assistants, completions, strict=True):
        assert message.token_ids == completion.token_ids
        assert message.logprobs == completion.logprobs
    # The unsampled closing goes to the observation: "\n" after an EOS, "<|im_end|>\n" after a
    # stop string.
    after_eos = session.messages[3].token_ids or []
    after_stop = session.messages[6].token_ids or []
    assert after_eos[:2] == [NL, IM_START]
    assert after_stop[:3] == [EOS, NL, IM_START]
    traj = Trajectory(task=Task(id="t", prompt="1+2"), tools=tools, messages=session.messages)
    assert check_trajectory(traj, smol_tokenizer) == []


def test_native_tools_multi_turn_equals_full_render(
    native_tokenizer: Any, tools: list[ToolSpec], opening: list[Message]
) -> None:
    """The key invariant on a template with native tools (calls rendered from ``tool_calls``,
    consecutive tool results grouped into one turn)."""
    renderer = ChatRenderer(native_tokenizer)
    enc = renderer.encode
    reply0 = (
        "Using tools.\n"
        + call_text("add", {"a": 1, "b": 2}, native=True)
        + call_text("lookup", {"word": "sum"}, native=True)
    )
    reply1 = "It is 3."
    policy = PresetPolicy(
        native_tokenizer, [sampled([*enc(reply0), EOS]), sampled([*enc(reply1), EOS])]
    )
    session = policy.start_session(opening, tools)
    first = run(policy.respond(session, SamplingParams(), turn=0))
    assert [(c.name, c.arguments) for c in first.tool_calls] == [
        ("add", {"a": 1, "b": 2}),
        ("lookup", {"word": "sum"}),
    ]
    added = session.add_observations(
        [tool_msg("call_0_0", "3", "add"), tool_msg("call_0_1", "a total", "lookup")]
    )
    assert renderer.decode(added[0].token_ids or []) == (
        "\n<|im_start|>user\n<tool_response>\n3\n</tool_response>"
    )
    assert renderer.decode(added[1].token_ids or []) == (
        "\n<tool_response>\na total\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    run(policy.respond(session, SamplingParams(), turn=1))
    session.add_observations([Message(role=Role.USER, content="Thanks.")])

    calls = [
        {
            "id": "call_0_0",
            "type": "function",
            "function": {"name": "add", "arguments": {"a": 1, "b": 2}},
        },
        {
            "id": "call_0_1",
            "type": "function",
            "function": {"name": "lookup", "arguments": {"word": "sum"}},
        },
    ]
    conversation = [
        {"role": "system", "content": opening[0].content},
        {"role": "user", "content": opening[1].content},
        {"role": "assistant", "content": "Using tools.", "tool_calls": calls},
        {"role": "tool", "content": "3", "tool_call_id": "call_0_0"},
        {"role": "tool", "content": "a total", "tool_call_id": "call_0_1"},
        {"role": "assistant", "content": reply1},
        {"role": "user", "content": "Thanks."},
    ]
    text = native_tokenizer.apply_chat_template(
        conversation,
        tools=[t.to_openai() for t in tools],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert "<tools>" in text and session.token_ids() == enc(text)
    traj = Trajectory(task=Task(id="t", prompt="1+2"), tools=tools, messages=session.messages)
    assert check_trajectory(traj, native_tokenizer) == []


def test_stop_string_and_eos_give_the_same_context(
    smol_tokenizer: Any, tools: list[ToolSpec], opening: list[Message]
) -> None:
    enc = ChatRenderer(smol_tokenizer).encode
    reply = enc(call_text("add", {"a": 1, "b": 2}))
    contexts = []
    for ids in ([*reply, EOS], reply):
        policy = PresetPolicy(smol_tokenizer, [sampled(ids)])
        session = policy.start_session(opening, tools)
        message = run(policy.respond(session, SamplingParams(), turn=0))
        observation = session.add_observations([tool_msg("call_0_0", "3", "add")])[0]
        assert message.token_ids == ids
        closing = [NL] if ids[-1] == EOS else [EOS, NL]
        assert (observation.token_ids or [])[: len(closing) + 1] == [*closing, IM_START]
        contexts.append(session.token_ids())
    assert contexts[0] == contexts[1]


def test_length_cut_call_is_a_parse_error_that_round_trips(
    smol_tokenizer: Any, tools: list[ToolSpec], opening: list[Message]
) -> None:
    enc = ChatRenderer(smol_tokenizer).encode
    cut = enc('Checking. <tool_call>{"name": "add", "argu')
    policy = PresetPolicy(
        smol_tokenizer, [sampled(cut, FinishReason.LENGTH), sampled([*enc("Sorry."), EOS])]
    )
    session = policy.start_session(opening, tools)
    message = run(policy.respond(session, SamplingParams(max_new_tokens=len(cut)), turn=0))
    (call,) = message.tool_calls
    assert call.id == "call_0_0"
    assert call.parse_error is not None and "invalid JSON" in call.parse_error
    assert call.raw == '<tool_call>{"name": "add", "argu'
    answer = tool_msg("call_0_0", f"error: {call.parse_error}", "add")
    observation = session.add_observations([answer])[0]
    assert (observation.token_ids or [])[:3] == [EOS, NL, IM_START]
    run(policy.respond(session, SamplingParams(), turn=1))
    traj = Trajectory(task=Task(id="t", prompt="1+2"), tools=tools, messages=session.messages)
    again = Trajectory.model_validate_json(traj.model_dump_json())
    assert again.messages[2].tool_calls[0].parse_error == call.parse_error
    assert again.messages[2].tool_calls[0].raw == call.raw
    assert check_trajectory(again, smol_tokenizer) == []


def test_sampled_ids_are_never_retokenized(
    smol_tokenizer: Any, tools: list[ToolSpec], opening: list[Message]
) -> None:
    renderer = ChatRenderer(smol_tokenizer)
    canonical = renderer.encode(" Hello")
    odd = renderer.encode(" Hel") + renderer.encode("lo")  # same text, other tokens
    assert odd != canonical and renderer.decode(odd) == renderer.decode(canonical)
    policy = PresetPolicy(smol_tokenizer, [sampled([*odd, EOS])])
    session = policy.start_session(opening, tools)
    message = run(policy.respond(session, SamplingParams(), turn=0))
    session.add_observations([Message(role=Role.USER, content="Hi.")])
    assert message.token_ids == [*odd, EOS]
    assert message.content == "Hello"
    traj = Trajectory(task=Task(id="t", prompt="x"), tools=tools, messages=session.messages)
    assert check_trajectory(traj, smol_tokenizer) == []


def test_observations_added_in_two_calls_render_as_one_batch(
    smol_tokenizer: Any, tools: list[ToolSpec], opening: list[Message]
) -> None:
    enc = ChatRenderer(smol_tokenizer).encode
    reply = [*enc(call_text("add", {"a": 1, "b": 2}) + call_text("add", {"a": 2, "b": 2})), EOS]
    contexts = []
    for split in (True, False):
        policy = PresetPolicy(smol_tokenizer, [sampled(reply)])
        session = policy.start_session(opening, tools)
        run(policy.respond(session, SamplingParams(), turn=0))
        results = [tool_msg("call_0_0", "3", "add"), tool_msg("call_0_1", "4", "add")]
        if split:
            session.add_observations(results[:1])
            session.add_observations(results[1:])
        else:
            session.add_observations(results)
        contexts.append(session.token_ids())
    assert contexts[0] == contexts[1]
    assert contexts[0].count(IM_START) == 6  # system, user, assistant, tool, tool, assistant


def test_text_assistant_messages_are_not_sampled(
    smol_tokenizer: Any, tools: list[ToolSpec], opening: list[Message]
) -> None:
    shot = [
        *opening,
        Message(role=Role.ASSISTANT, content="Let me think."),
        Message(role=Role.USER, content="Go on."),
    ]
    policy = PresetPolicy(
        smol_tokenizer,
        [Completion(token_ids=[], logprobs=None, text="It is 3.", finish_reason=FinishReason.STOP)],
    )
    session = policy.start_session(shot, tools)
    given = session.messages[2]
    renderer = policy.renderer
    assert given.logprobs is None and given.token_ids == [*renderer.encode("Let me think."), EOS]
    reply = run(policy.respond(session, SamplingParams(), turn=1))
    assert reply.logprobs is None and reply.token_ids == [*renderer.encode("It is 3."), EOS]
    session.add_observations([Message(role=Role.USER, content="Ok.")])
    conversation = [
        {"role": "system", "content": opening[0].content + "\n\n" + tools_system_prompt(tools)},
        {"role": "user", "content": opening[1].content},
        {"role": "assistant", "content": "Let me think."},
        {"role": "user", "content": "Go on."},
        {"role": "assistant", "content": "It is 3."},
        {"role": "user", "content": "Ok."},
    ]
    text = smol_tokenizer.apply_chat_template(
        conversation, tokenize=False, add_generation_prompt=True
    )
    assert session.token_ids() == renderer.encode(text)
    expert = session.add_assistant_text("Done.\n" + call_text("add", {"a": 1, "b": 1}), turn=2)
    assert expert.logprobs is None and expert.tool_calls[0].id == "call_2_0"
    assert expert.token_ids == [*renderer.encode(renderer.completion_text(expert.token_ids)), EOS]


def test_opening_without_system_keeps_the_default_or_describes_tools(
    smol_tokenizer: Any, tools: list[ToolSpec]
) -> None:
    renderer = ChatRenderer(smol_tokenizer)
    user = [Message(role=Role.USER, content="Hi")]
    (plain,) = renderer.render_observations([], user, [])
    assert "You are a helpful AI assistant named SmolLM" in renderer.decode(plain)
    (with_tools,) = renderer.render_observations([], user, tools)
    text = renderer.decode(with_tools)
    assert text.startswith("<|im_start|>system\nYou can call tools.")
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_tool_results_become_user_turns_when_the_template_rejects_the_tool_role(
    smol_tokenizer: Any, tools: list[ToolSpec], opening: list[Message]
) -> None:
    strict = copy.deepcopy(smol_tokenizer)
    strict.chat_template = (
        "{% for m in messages %}{% if m.role not in ['system', 'user', 'assistant'] %}"
        "{{ raise_exception('unsupported role ' + m.role) }}{% endif %}"
        "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    renderer = ChatRenderer(strict)
    assert renderer.tool_role == "user"
    policy = PresetPolicy(strict, [sampled(renderer.encode(call_text("add", {"a": 1, "b": 2})))])
    session = policy.start_session(opening, tools)
    run(policy.respond(session, SamplingParams(), turn=0))
    observation = session.add_observations([tool_msg("call_0_0", "3", "add")])[0]
    assert renderer.decode(observation.token_ids or []) == (
        "<|im_end|>\n<|im_start|>user\nTool result (add):\n3<|im_end|>\n<|im_start|>assistant\n"
    )


def test_render_errors_name_the_problem(smol_tokenizer: Any, opening: list[Message]) -> None:
    untemplated = copy.deepcopy(smol_tokenizer)
    untemplated.chat_template = None
    with pytest.raises(RenderError, match="no chat template"):
        ChatRenderer(untemplated)
    unstable = copy.deepcopy(smol_tokenizer)
    unstable.chat_template = (
        "{{ '<|im_start|>system\\n' + (messages | length | string) + '<|im_end|>\\n' }}"
        "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    policy = PresetPolicy(unstable, [sampled([*ChatRenderer(unstable).encode("ok"), EOS])])
    session = policy.start_session(opening, [])
    run(policy.respond(session, SamplingParams(), turn=0))
    with pytest.raises(RenderError, match="not prefix-stable"):
        session.add_observations([Message(role=Role.USER, content="again")])
    with pytest.raises(RenderError, match="right after an assistant message"):
        run(policy.respond(session, SamplingParams(), turn=1))
