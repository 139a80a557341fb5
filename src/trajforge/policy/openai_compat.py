"""``OpenAIPolicy``: any OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp server, hosted APIs).

Conversations go to ``/v1/chat/completions`` with the env's tools as OpenAI function schemas.
Replies become assistant messages: structured ``tool_calls`` are parsed with
``parse_openai_tool_calls``, and ``<tool_call>`` blocks in the text with the text protocol. Call
ids are always ``call_{turn}_{k}``.

Token ids: the policy asks for logprobs and (vLLM extensions) ``return_token_ids`` and
``return_tokens_as_token_ids``. When the reply carries the prompt's ids and the sampled ids,
the trajectory is trainable (see ``OpenAISession``); otherwise it is text-only. A server that
rejects those extension fields (HTTP 400 naming one) is asked again without them, and the
policy stops sending them.

``generate`` sends token ids to ``/v1/completions`` (``prompt`` as a list of ids), which vLLM and
SGLang accept.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import httpx

from trajforge.errors import TrajforgeError
from trajforge.formats import parse_openai_tool_calls, parse_tool_calls
from trajforge.policy.base import ChatSession, Completion, FinishReason, Policy, SamplingParams
from trajforge.policy.openai_session import OpenAISession
from trajforge.schema import Message, Role, Task, Timing, ToolCall, ToolSpec

TOKEN_ID_FIELDS = ("return_token_ids", "return_tokens_as_token_ids")
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 20.0


class OpenAIError(TrajforgeError):
    """The endpoint failed, refused the request or answered something unreadable."""


class OpenAIPolicy(Policy):
    """A chat-completions endpoint behind the policy contract.

    Args:
        base_url: the server root, with or without ``/v1`` (``http://127.0.0.1:8000``).
        model: the model name the server expects.
        api_key: sent as a bearer token when given.
        timeout_s: per-request timeout.
        max_retries: further attempts after a timeout, a connection error, 429 or 5xx, with
            exponential backoff (a ``Retry-After`` header is honoured).
        token_ids: ask for token ids and logprobs (needed for trainable trajectories).
        extra_body: more request fields, sent with every request.
        name: the policy's name (recorded as the trajectory's model; default
            ``openai:<model>``).
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        *,
        token_ids: bool = True,
        extra_body: dict[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        root = base_url.rstrip("/")
        self.base_url = root if root.endswith("/v1") else f"{root}/v1"
        self.model = model
        self.name = name or f"openai:{model}"
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.token_ids = token_ids
        self.extra_body = dict(extra_body or {})
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    # --- conversation level ---------------------------------------------------------------

    def start_session(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, task: Task | None = None
    ) -> OpenAISession:
        return OpenAISession(messages, tools, task=task)

    async def respond(
        self, session: ChatSession, sampling: SamplingParams, *, turn: int = 0
    ) -> Message:
        if not isinstance(session, OpenAISession):
            raise OpenAIError(f"policy {self.name!r} can only continue sessions it started")
        body: dict[str, Any] = {"model": self.model, "messages": session.payload()}
        if session.tools:
            body["tools"] = [t.to_openai() for t in session.tools]
        body.update(_sampling_fields(sampling))
        if self.token_ids:
            body.update({"logprobs": True, "return_token_ids": True})
            body["return_tokens_as_token_ids"] = True
        started, clock = time.time(), time.perf_counter()
        reply = await self._post("/chat/completions", body)
        choice = _first_choice(reply)
        raw = choice.get("message")
        if not isinstance(raw, dict):
            raise OpenAIError(f"{self.base_url}/chat/completions: choices[0].message is missing")
        content = raw.get("content") if isinstance(raw.get("content"), str) else ""
        calls = _tool_calls(raw, content or "", turn)
        if calls and not raw.get("tool_calls"):
            content = parse_tool_calls(content or "", "text", id_prefix=f"call_{turn}").content
        sampled, logprobs = _sampled_ids(choice, chat=True)
        reasoning = raw.get("reasoning_content") or raw.get("reasoning")
        message = Message(
            role=Role.ASSISTANT,
            content=(content or "").strip(),
            reasoning=reasoning if isinstance(reasoning, str) else None,
            tool_calls=calls,
            token_ids=sampled,
            logprobs=logprobs,
            timing=Timing(started_at=started, duration_s=time.perf_counter() - clock),
        )
        echoed = _echo(raw, calls)
        usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
        total = usage.get("total_tokens") if isinstance(usage, dict) else None
        return session.add_reply(
            message,
            echoed,
            prompt_ids=_prompt_ids(reply, choice),
            usage_tokens=total if isinstance(total, int) else None,
        )

    # --- token level ----------------------------------------------------------------------

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        *,
        model: str | None = None,
    ) -> Completion:
        """``model`` (default: the policy's) is the served model to sample from."""
        body: dict[str, Any] = {"model": model or self.model, "prompt": list(prompt_ids)}
        body.update(_sampling_fields(sampling))
        if self.token_ids:
            body.update({"logprobs": 1, "return_token_ids": True})
            body["return_tokens_as_token_ids"] = True
        choice = _first_choice(await self._post("/completions", body))
        text = choice.get("text") if isinstance(choice.get("text"), str) else ""
        sampled, logprobs = _sampled_ids(choice, chat=False)
        return Completion(
            token_ids=sampled or [],
            logprobs=logprobs,
            text=text or "",
            finish_reason=FinishReason.LENGTH
            if choice.get("finish_reason") == "length"
            else FinishReason.STOP,
        )

    # --- transport ------------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        # A client's connections belong to the event loop that opened them; a sync caller
        # that runs several loops one after another gets a fresh client for each.
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.AsyncClient(timeout=self.timeout_s, headers=headers)
            self._client_loop = loop
        return self._client

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        body = {**body, **self.extra_body}
        attempt = 0
        while True:
            try:
                response = await self._http().post(url, json=body)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                if attempt >= self.max_retries:
                    kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "failed"
                    raise OpenAIError(
                        f"{url}: request {kind} after {attempt + 1} attempts "
                        f"(timeout {self.timeout_s}s): {exc!r}"
                    ) from exc
                await asyncio.sleep(_backoff(attempt, None))
                attempt += 1
                continue
            if response.status_code == 400 and self._drop_rejected_fields(response.text, body):
                continue
            if response.status_code in RETRY_STATUSES and attempt < self.max_retries:
                await asyncio.sleep(_backoff(attempt, response.headers.get("retry-after")))
                attempt += 1
                continue
            if response.status_code != 200:
                raise OpenAIError(
                    f"{url}: HTTP {response.status_code} after {attempt + 1} attempts: "
                    f"{response.text[:300]}"
                )
            try:
                data = response.json()
            except ValueError as exc:
                raise OpenAIError(
                    f"{url}: the response is not JSON: {response.text[:200]}"
                ) from exc
            if not isinstance(data, dict):
                raise OpenAIError(f"{url}: the response is not a JSON object")
            return data

    def _drop_rejected_fields(self, error_text: str, body: dict[str, Any]) -> bool:
        """Forget extension fields the server says it does not know; True to ask again."""
        rejected = [f for f in TOKEN_ID_FIELDS if f in body and f in error_text]
        if not rejected:
            return False
        self.token_ids = False
        for field_name in TOKEN_ID_FIELDS:
            body.pop(field_name, None)
        return True

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._client_loop is asyncio.get_running_loop():
            await client.aclose()
        self._client_loop = None


def _backoff(attempt: int, retry_after: str | None) -> float:
    if retry_after is not None:
        try:
            return min(float(retry_after), BACKOFF_MAX_S)
        except ValueError:
            pass
    return float(min(BACKOFF_BASE_S * 2**attempt, BACKOFF_MAX_S))


def _sampling_fields(sampling: SamplingParams) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_new_tokens,
    }
    if sampling.top_k > 0:  # vLLM's extension, sent only when asked (OpenAI refuses it)
        fields["top_k"] = sampling.top_k
    if sampling.stop:
        fields["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        fields["seed"] = sampling.seed
    return fields


def _first_choice(reply: dict[str, Any]) -> dict[str, Any]:
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise OpenAIError(f"the response has no choices: {str(reply)[:200]}")
    return choices[0]


def _tool_calls(raw: dict[str, Any], content: str, turn: int) -> list[ToolCall]:
    prefix = f"call_{turn}"
    structured = raw.get("tool_calls")
    if structured:
        calls = parse_openai_tool_calls(structured, id_prefix=prefix)
        # Ids are ours, not the server's: equal seeds must give equal trajectories.
        return [c.model_copy(update={"id": f"{prefix}_{k}"}) for k, c in enumerate(calls)]
    return parse_tool_calls(content, "text", id_prefix=prefix).tool_calls


def _echo(raw: dict[str, Any], calls: list[ToolCall]) -> dict[str, Any]:
    """The assistant message to send back: the server's own, with this session's call ids."""
    echoed: dict[str, Any] = {"role": "assistant", "content": raw.get("content")}
    structured = raw.get("tool_calls")
    if isinstance(structured, list) and structured:
        echoed["tool_calls"] = [
            {**item, "id": call.id} if isinstance(item, dict) else item
            for item, call in zip(structured, calls, strict=False)
        ]
    return echoed


def _token_id(token: Any) -> int | None:
    if isinstance(token, str) and token.startswith("token_id:"):
        try:
            return int(token.removeprefix("token_id:"))
        except ValueError:
            return None
    return None


def _sampled_ids(
    choice: dict[str, Any], *, chat: bool
) -> tuple[list[int] | None, list[float] | None]:
    """Sampled ids (from ``token_ids`` or ``token_id:N`` logprob tokens) and their logprobs
    (None when the server sent none that line up with the ids)."""
    entries = choice.get("logprobs")
    logprobs: list[float] = []
    from_tokens: list[int | None] = []
    if isinstance(entries, dict):
        if chat and isinstance(entries.get("content"), list):
            items = [e for e in entries["content"] if isinstance(e, dict)]
            logprobs = [float(e.get("logprob", 0.0)) for e in items]
            from_tokens = [_token_id(e.get("token")) for e in items]
        elif not chat and isinstance(entries.get("token_logprobs"), list):
            logprobs = [float(x or 0.0) for x in entries["token_logprobs"]]
            from_tokens = [_token_id(t) for t in entries.get("tokens") or []]
    ids = choice.get("token_ids")
    if isinstance(ids, list) and ids and all(isinstance(i, int) for i in ids):
        sampled = list(ids)
    elif from_tokens and all(i is not None for i in from_tokens):
        sampled = [i for i in from_tokens if i is not None]
    else:
        return None, None
    return sampled, logprobs if len(logprobs) == len(sampled) else None


def _prompt_ids(reply: dict[str, Any], choice: dict[str, Any]) -> list[int] | None:
    for source in (choice, reply):
        ids = source.get("prompt_token_ids")
        if isinstance(ids, list) and ids and all(isinstance(i, int) for i in ids):
            return list(ids)
    return None
