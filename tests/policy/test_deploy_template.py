"""A saved model folder renders, through plain transformers, exactly the ids trajforge
rendered: every template-check shape, tools, calls, results and reasoning included."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jinja2.ext
import jinja2.sandbox
import pytest
from transformers import AutoTokenizer

from trajforge.chat_templates.shapes import SHAPES, WEATHER_TOOL, Shape, ShapeName
from trajforge.formats.openai_chat import messages_from_openai
from trajforge.policy.chat_template import unwrap
from trajforge.policy.renderer import ChatRenderer, ToolProtocol
from trajforge.policy.saved import save_tokenizer
from trajforge.policy.session import RenderedSession
from trajforge.schema import Role, ToolSpec

SHAPE_LIST = list(SHAPES.values())


def _saved(tokenizer: Any, folder: Path) -> Any:
    save_tokenizer(tokenizer, folder)
    return AutoTokenizer.from_pretrained(str(folder))


def _hf_ids(tokenizer: Any, shape: Shape, upto: int, gen: bool) -> list[int]:
    out = tokenizer.apply_chat_template(
        shape.messages[:upto], tools=shape.tools or None, add_generation_prompt=gen
    )
    ids = out["input_ids"] if not isinstance(out, list) else out
    return list(ids)


def _assert_same_ids(renderer: ChatRenderer, saved: Any, shape: Shape) -> int:
    """Every prompt a reply is generated from, and every conversation after a reply, in
    trajforge's ids and in the saved folder's ``apply_chat_template``; how many compared."""
    tools = [ToolSpec.model_validate(t) for t in shape.tools]
    session = RenderedSession(renderer, messages_from_openai(shape.messages), tools)
    ids: list[int] = []
    compared = 0
    for i, message in enumerate(session.messages):
        ids += message.token_ids or []
        if i + 1 < len(session.messages) and session.messages[i + 1].role is Role.ASSISTANT:
            assert _hf_ids(saved, shape, i + 1, gen=True) == ids, (shape.name, i)
            compared += 1
        if message.role is Role.ASSISTANT:
            closed = ids + renderer.closing_ids(message.token_ids or [])
            assert _hf_ids(saved, shape, i + 1, gen=False) == closed, (shape.name, i)
            compared += 1
    return compared


@pytest.mark.parametrize(
    ("fixture", "protocol"),
    [("smol_tokenizer", ToolProtocol.TEXT), ("native_tokenizer", ToolProtocol.NATIVE)],
)
@pytest.mark.parametrize("shape", SHAPE_LIST, ids=[s.name.value for s in SHAPE_LIST])
def test_every_shape_renders_the_same_ids_through_the_saved_folder(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    fixture: str,
    protocol: ToolProtocol,
    shape: Shape,
) -> None:
    tokenizer = request.getfixturevalue(fixture)
    renderer = ChatRenderer(tokenizer)
    assert renderer.tool_protocol is protocol
    assert _assert_same_ids(renderer, _saved(tokenizer, tmp_path), shape) >= 2


def test_the_saved_template_renders_the_tools_it_was_given(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    saved = _saved(smol_tokenizer, tmp_path)
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    bare = saved.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    with_tools = saved.apply_chat_template(
        messages, tools=[WEATHER_TOOL], tokenize=False, add_generation_prompt=True
    )
    assert '"name": "get_weather"' in with_tools and "get_weather" not in bare
    # the model's own default system prompt gives way to the tool block, as in training
    assert "SmolLM" in bare and "SmolLM" not in with_tools


def test_trajforge_reads_a_saved_folder_with_the_models_own_template(
    smol_tokenizer: Any, native_tokenizer: Any, tmp_path: Path
) -> None:
    for name, tokenizer in (("smol", smol_tokenizer), ("native", native_tokenizer)):
        own = ChatRenderer(tokenizer)
        once = _saved(tokenizer, tmp_path / name)
        again = _saved(once, tmp_path / f"{name}-again")
        reread = ChatRenderer(again)
        assert reread.template == own.template
        assert reread.tool_protocol is own.tool_protocol
        assert again.chat_template == once.chat_template  # saving twice wraps once
        assert unwrap(once.chat_template)[1:] == (own.tool_protocol.value, own.tool_role)
    assert smol_tokenizer.chat_template == ChatRenderer(smol_tokenizer).template


def test_a_tool_result_becomes_a_labelled_user_turn_where_the_template_drops_tool_roles(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    tokenizer = copy.deepcopy(smol_tokenizer)
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] in ['system', 'user', 'assistant'] %}"
        "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
        "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    renderer = ChatRenderer(tokenizer)
    assert renderer.tool_role == "user"
    saved = _saved(tokenizer, tmp_path)
    tool_shapes = (ShapeName.TOOL_CALL, ShapeName.PARALLEL_CALLS, ShapeName.TOOLS_THEN_USER)
    for name in tool_shapes:
        _assert_same_ids(renderer, saved, SHAPES[name])
    text = saved.apply_chat_template(SHAPES[ShapeName.TOOL_CALL].messages, tokenize=False)
    assert "Tool result (get_weather):\n18C, sunny" in text


def test_openai_client_forms_render_as_trajforge_renders_them(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    """What an OpenAI client sends: null content beside calls, text parts, a developer
    message, a tool without a description, non-ASCII and control characters in arguments."""
    tool = {
        "type": "function",
        "function": {"name": "echo", "parameters": WEATHER_TOOL["function"]["parameters"]},
    }
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "echo", "arguments": {"city": 'Zürich "\\\n\t\x01', "n": 1.5}},
    }
    raw = [
        {
            "role": "developer",
            "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
        },
        {"role": "user", "content": "Echo."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    renderer = ChatRenderer(smol_tokenizer)
    tools = [ToolSpec.model_validate(tool)]
    expected = renderer.render_text(messages_from_openai(raw), tools, add_generation_prompt=True)
    saved = _saved(smol_tokenizer, tmp_path)
    got = saved.apply_chat_template(raw, tools=[tool], tokenize=False, add_generation_prompt=True)
    assert got == expected
    assert '"description": ""' in got and 'Zürich \\"\\\\\\n\\t\\u0001' in got


def _every_prefix(saved: Any) -> list[tuple[Shape, int, bool, str]]:
    """Each shape's every prefix, with and without the generation prompt, and the text the
    saved folder's ``apply_chat_template`` gives it."""
    return [
        (
            shape,
            upto,
            gen,
            saved.apply_chat_template(
                shape.messages[:upto],
                tools=shape.tools or None,
                tokenize=False,
                add_generation_prompt=gen,
            ),
        )
        for shape in SHAPE_LIST
        for upto in range(1, len(shape.messages) + 1)
        for gen in (True, False)
    ]


def test_a_bare_jinja2_sandbox_renders_the_saved_template_alike(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    """llama-cpp-python's ``Jinja2ChatFormatter`` (0.3.36) renders in a Jinja2 sandbox with
    ``trim_blocks``, ``lstrip_blocks`` and loop controls, its own ``tojson`` and none of
    transformers' other helpers. The saved template needs none of them: a bare sandbox, with
    Jinja2's own (HTML-escaping, key-sorting) ``tojson``, renders it alike."""
    saved = _saved(smol_tokenizer, tmp_path)
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(),
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols],
    )
    template = env.from_string(saved.chat_template)
    for shape, upto, gen, expected in _every_prefix(saved):
        got = template.render(
            messages=shape.messages[:upto],
            tools=shape.tools or None,
            add_generation_prompt=gen,
            bos_token=saved.bos_token,
            eos_token=saved.eos_token,
        )
        assert got == expected, (shape.name, upto, gen)


def test_llama_cpp_python_renders_the_saved_template_alike(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    chat_format = pytest.importorskip(
        "llama_cpp.llama_chat_format", reason="llama-cpp-python is not installed"
    )
    saved = _saved(smol_tokenizer, tmp_path)
    for shape, upto, gen, expected in _every_prefix(saved):
        formatter = chat_format.Jinja2ChatFormatter(
            template=saved.chat_template,
            eos_token=saved.eos_token,
            bos_token=saved.bos_token,
            add_generation_prompt=gen,
        )
        got = formatter(messages=shape.messages[:upto], tools=shape.tools or None).prompt
        assert got == expected, (shape.name, upto, gen)
