"""The chat template a saved model folder carries: the model's own template behind a Jinja
preamble that turns OpenAI chat messages and ``tools=`` into exactly what ``ChatRenderer``
hands that template, so transformers, vLLM and llama.cpp render what training rendered.

``ChatRenderer`` renders with the model's own template and rewrites the conversation first
(``ChatRenderer.template_messages``): under the text tool protocol the tools become a system
message block (``tool_prompt``) and calls become ``<tool_call>`` text; under the native one
calls and results keep OpenAI's form and reasoning is left out. The preamble does the same in
Jinja, built here from the very constants and schema defaults the renderer uses. It is written
in plain Jinja (its own JSON writer, no ``tojson``, whose options differ between transformers
and Jinja2), so that every Python Jinja renderer reads it alike.

A wrapped template names its protocol and the end of the preamble in Jinja comments:
``unwrap`` gives back the model's own template, so trajforge keeps rendering (and wrapping)
with that one.
"""

from __future__ import annotations

import json
import re
from typing import Any

from trajforge.formats import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from trajforge.policy.tool_prompt import EXAMPLE_DEFAULT, EXAMPLE_VALUES, tool_prompt_parts
from trajforge.schema import FunctionSpec

_HEADER = "{#- trajforge chat template, tool protocol: %s, tool results as: %s -#}\n"
_HEADER_RE = re.compile(
    r"^\{#- trajforge chat template, tool protocol: (\w+), tool results as: (\w+) -#\}\n"
)
MARKER = "{#- trajforge: the model's own chat template follows #}\n"
"""Ends the preamble. The newline after it is the one ``trim_blocks`` (set by transformers and
llama.cpp's Python renderer alike) removes, so the model's template starts on a line of its own,
as it does alone."""


def jinja_literal(value: Any) -> str:
    """``value`` (JSON data) as a Jinja expression: JSON, with ``none`` for null."""
    if value is None:
        return "none"
    if isinstance(value, dict):
        items = ", ".join(f"{json.dumps(k)}: {jinja_literal(v)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, list):
        return "[" + ", ".join(jinja_literal(v) for v in value) + "]"
    # ASCII-escaped JSON strings read back the same in Jinja (it decodes unicode escapes)
    return json.dumps(value)


def _escapes() -> list[list[str]]:
    """What ``json.dumps(ensure_ascii=False)`` escapes in a string, backslash first."""
    pairs = [["\\", "\\\\"], ['"', '\\"']]
    short = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
    for code in range(0x20):
        char = chr(code)
        pairs.append([char, short.get(char, f"\\u{code:04x}")])
    return pairs


# json.dumps(value, ensure_ascii=False), keys sorted when ``sort``.
_JSON_MACRO = """
{%- macro tf_json(v, sort) -%}
{%- if v is none -%}{{ "null" }}
{%- elif v is boolean -%}{{ "true" if v else "false" }}
{%- elif v is string -%}
{%- set s = namespace(text=v) -%}
{%- for pair in ESCAPES -%}{%- set s.text = s.text|replace(pair[0], pair[1]) -%}{%- endfor -%}
{{ '"' + s.text + '"' }}
{%- elif v is number -%}{{ v|string }}
{%- elif v is mapping -%}
{%- set s = namespace(parts=[]) -%}
{%- for key, item in (v|dictsort(true) if sort else v.items()) -%}
{%- set s.parts = s.parts + [tf_json(key|string, sort) + ": " + tf_json(item, sort)] -%}
{%- endfor -%}
{{ "{" + s.parts|join(", ") + "}" }}
{%- else -%}
{%- set s = namespace(parts=[]) -%}
{%- for item in v -%}{%- set s.parts = s.parts + [tf_json(item, sort)] -%}{%- endfor -%}
{{ "[" + s.parts|join(", ") + "]" }}
{%- endif -%}
{%- endmacro -%}
{%- macro tf_call(name, arguments) -%}
{{ OPEN + '{"name": ' + tf_json(name, false) + ', "arguments": ' + (arguments if arguments is string
   else tf_json(arguments if arguments is defined and arguments is not none else {}, false))
   + '}' + CLOSE }}
{%- endmacro -%}
"""

# Tools as ToolSpec.to_openai() writes them, their functions' defaults filled in.
_TOOLS = """
{%- set tf = namespace(messages=[], functions=[]) -%}
{%- for t in (tools or []) -%}
{%- set f = t["function"] if t["function"] is defined else t -%}
{%- set tf.functions = tf.functions + [FUNCTION] -%}
{%- endfor -%}
"""

# policy.template_dicts.template_message, message by message.
_MESSAGES = """
{%- for m in messages -%}
{%- set c = m["content"] -%}
{%- if c is string -%}{%- set text = c -%}
{%- elif c is iterable and c is not mapping -%}
{%- set p = namespace(texts=[]) -%}
{%- for part in c -%}{%- set p.texts = p.texts + [part["text"] or ""] -%}{%- endfor -%}
{%- set text = p.texts|join("") -%}
{%- else -%}{%- set text = "" -%}
{%- endif -%}
{%- set calls = m["tool_calls"] or [] -%}
{%- if m["role"] == "assistant" and PROTOCOL == "text" -%}
{%- set p = namespace(parts=([text] if text else [])) -%}
{%- for call in calls -%}
{%- set fc = call["function"] if call["function"] is defined else call -%}
{%- set p.parts = p.parts + [tf_call(fc["name"], fc["arguments"])] -%}
{%- endfor -%}
{%- set tf.messages = tf.messages + [{"role": "assistant", "content": p.parts|join("\\n")}] -%}
{%- elif m["role"] == "assistant" and calls -%}
{%- set p = namespace(calls=[]) -%}
{%- for call in calls -%}
{%- set fc = call["function"] if call["function"] is defined else call -%}
{%- set p.calls = p.calls + [{"id": call["id"], "type": "function",
    "function": {"name": fc["name"], "arguments": fc["arguments"]}}] -%}
{%- endfor -%}
{%- set tf.messages = tf.messages + [{"role": "assistant", "content": text,
    "tool_calls": p.calls}] -%}
{%- elif m["role"] == "tool" and PROTOCOL == "native" and m["name"] -%}
{%- set tf.messages = tf.messages + [{"role": "tool", "content": text,
    "tool_call_id": m["tool_call_id"], "name": m["name"]}] -%}
{%- elif m["role"] == "tool" and PROTOCOL == "native" -%}
{%- set tf.messages = tf.messages + [{"role": "tool", "content": text,
    "tool_call_id": m["tool_call_id"]}] -%}
{%- elif m["role"] == "tool" and TOOL_ROLE == "user" -%}
{%- set label = "Tool result (" + m["name"] + ")" if m["name"] else "Tool result" -%}
{%- set tf.messages = tf.messages + [{"role": "user", "content": label + ":\\n" + text}] -%}
{%- else -%}
{%- set role = "system" if m["role"] == "developer" else m["role"] -%}
{%- set tf.messages = tf.messages + [{"role": role, "content": text}] -%}
{%- endif -%}
{%- endfor -%}
"""

# tool_prompt.tools_system_prompt, added to (or as) the system message.
_TEXT_TOOLS = """
{%- if tf.messages and tf.functions -%}
{%- set params = tf.functions[0]["parameters"] -%}
{%- set props = (params["properties"] if params is mapping else none) or {} -%}
{%- set ex = namespace(parts=[]) -%}
{%- if props is mapping -%}
{%- for name in ((params["required"] if params is mapping else none) or props|list) -%}
{%- set prop = props[name] -%}
{%- set kind = (prop["type"] if prop["type"] is defined else "string")
    if prop is mapping else "string" -%}
{%- if kind is iterable and kind is not string and kind is not mapping -%}
{%- set kind = (kind|reject("equalto", "null")|list + ["string"])|first -%}
{%- endif -%}
{%- if prop is mapping and prop["enum"] -%}{%- set value = prop["enum"][0] -%}
{%- elif (kind|string) in VALUES -%}{%- set value = VALUES[kind|string] -%}
{%- else -%}{%- set value = DEFAULT -%}
{%- endif -%}
{%- set ex.parts = ex.parts + [tf_json(name, false) + ": " + tf_json(value, false)] -%}
{%- endfor -%}
{%- endif -%}
{%- set p = namespace(schemas=[]) -%}
{%- for f in tf.functions -%}{%- set p.schemas = p.schemas + [tf_json(f, true)] -%}{%- endfor -%}
{%- set block = HEAD + tf_call(tf.functions[0]["name"], "{" + ex.parts|join(", ") + "}")
    + MIDDLE + p.schemas|join("\\n") + TAIL -%}
{%- set first = tf.messages[0] -%}
{%- if first["role"] == "system" -%}
{%- set content = first["content"] + "\\n\\n" + block if first["content"] else block -%}
{%- set tf.messages = [{"role": "system", "content": content}] + tf.messages[1:] -%}
{%- else -%}
{%- set tf.messages = [{"role": "system", "content": block}] + tf.messages -%}
{%- endif -%}
{%- endif -%}
{%- set messages = tf.messages -%}
{%- set tools = none -%}
"""

_NATIVE_TOOLS = """
{%- set p = namespace(tools=[]) -%}
{%- for f in tf.functions -%}
{%- set p.tools = p.tools + [{"type": "function", "function": f}] -%}
{%- endfor -%}
{%- set messages = tf.messages -%}
{%- set tools = p.tools or none -%}
"""


def _function_expression() -> str:
    """A FunctionSpec's fields read from ``f`` in Jinja, each missing one as its default."""
    fields = []
    for name, field in FunctionSpec.model_fields.items():
        read = f"f[{json.dumps(name)}]"
        if field.is_required():
            fields.append(f"{json.dumps(name)}: {read}")
        else:
            default = jinja_literal(field.get_default(call_default_factory=True))
            fields.append(
                f"{json.dumps(name)}: ({read} if {read} is defined and {read} is not none "
                f"else {default})"
            )
    return "{" + ", ".join(fields) + "}"


def _fill(text: str, names: dict[str, str]) -> str:
    """``text`` with each placeholder of ``names`` (a capitalised word) replaced, in one pass."""
    pattern = re.compile(r"\b(" + "|".join(names) + r")\b")
    return pattern.sub(lambda found: names[found.group(1)], text)


def wrap(template: str, protocol: str, tool_role: str) -> str:
    """``template`` (a model's own) behind the preamble that rewrites messages and tools as
    ``ChatRenderer`` does under tool ``protocol`` (``text`` or ``native``), tool results as
    ``tool_role`` messages."""
    head, middle, tail = tool_prompt_parts()
    names = {
        "ESCAPES": jinja_literal(_escapes()),
        "OPEN": jinja_literal(TOOL_CALL_OPEN),
        "CLOSE": jinja_literal(TOOL_CALL_CLOSE),
        "FUNCTION": _function_expression(),
        "PROTOCOL": jinja_literal(protocol),
        "TOOL_ROLE": jinja_literal(tool_role),
        "VALUES": jinja_literal(EXAMPLE_VALUES),
        "DEFAULT": jinja_literal(EXAMPLE_DEFAULT),
        "HEAD": jinja_literal(head),
        "MIDDLE": jinja_literal(middle),
        "TAIL": jinja_literal(tail),
    }
    tools = _TEXT_TOOLS if protocol == "text" else _NATIVE_TOOLS
    body = "".join(
        _fill(part, names).strip() + "\n" for part in (_JSON_MACRO, _TOOLS, _MESSAGES, tools)
    )
    return _HEADER % (protocol, tool_role) + body + MARKER + unwrap(template)[0]


def unwrap(template: str) -> tuple[str, str | None, str | None]:
    """``(own template, tool protocol, tool results' role)`` of a template ``wrap`` wrote;
    ``(template, None, None)`` for any other."""
    found = _HEADER_RE.match(template)
    at = template.find(MARKER)
    if found is None or at < 0:
        return template, None, None
    return template[at + len(MARKER) :], found.group(1), found.group(2)
