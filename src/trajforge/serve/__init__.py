"""Layer 8: the gateway. Any agent program, in any framework, talks to an OpenAI-compatible
server whose model is a trajforge policy; every call is recorded as token-exact trajectories.

- ``wire`` — the chat-completions wire format: requests checked field by field (fields it
  cannot honour refused as unsupported), replies;
- ``recorder`` — sessions and the trajectories their calls grow (merged while the history is
  only appended to), a reply cut at its token cap truncated as in an episode; ``recording`` —
  what it keeps of a session and of each trajectory;
- ``gateway`` — ``Gateway.chat``: sample and record one ``ChatCall`` (whatever API it came
  by), all sessions sharing one policy;
- ``reply_text`` — a reply's prose exactly as sampled, and what of it may be streamed;
  ``chat_stream`` — a streamed call, its text sent token by token as it is sampled;
- ``app`` — the FastAPI routes (``/v1`` and ``/sessions/{id}/v1``, rewards); ``responses`` —
  the Responses API (its request in ``responses_wire``, output items in ``responses_reply``,
  events in ``responses_stream``); ``adapter_routing`` — ``BASE:ADAPTER`` model names to a
  policy's LoRA adapters; ``anthropic_messages`` — the Anthropic Messages API (its request in
  ``anthropic_wire``, replies in ``anthropic_reply``, events in ``anthropic_stream``);
  ``gemini_api`` — the Gemini API (its request in ``gemini_wire``, replies in
  ``gemini_reply``, chunks in ``gemini_stream``); ``wire_content`` — images and text content
  as every API sends them;
  ``client_info`` — which client called; ``server`` — uvicorn in the foreground or on a thread.

Agent programs run against it as rollouts in ``trajforge.agent_programs``; the MCP server of an
env's tools is ``trajforge.envs.mcp.server`` and the OTLP receiver
``trajforge.formats.otel_receiver``.
"""

from typing import TYPE_CHECKING

from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.serve.adapter_routing import load_adapters
    from trajforge.serve.gateway import ChatCall, ChatGateway, Gateway
    from trajforge.serve.recorder import SERVER_SESSIONS
    from trajforge.serve.server import serve_app_forever, serve_forever, serving
    from trajforge.serve.upstream import open_gateway

__all__ = [
    "SERVER_SESSIONS",
    "ChatCall",
    "ChatGateway",
    "Gateway",
    "load_adapters",
    "open_gateway",
    "serve_app_forever",
    "serve_forever",
    "serving",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "ChatCall": "gateway",
        "ChatGateway": "gateway",
        "Gateway": "gateway",
        "SERVER_SESSIONS": "recorder",
        "load_adapters": "adapter_routing",
        "open_gateway": "upstream",
        "serve_app_forever": "server",
        "serve_forever": "server",
        "serving": "server",
    },
)
