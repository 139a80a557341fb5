"""Which LoRA adapter a call's ``model`` names, on a gateway serving many on one base model.

A policy that decodes rows under different adapters in one batch (``HFPolicy`` on the lean
forward) serves every adapter loaded through ``/v1/load_lora_adapter`` at once. A call picks one
by ``model``: the adapter's own name (as vLLM serves them) or ``BASE:ADAPTER``, the base name
the gateway answers to and the adapter's name; the base name alone gets the base weights. A name
of an adapter that is not loaded is a 404 naming the loaded ones. A policy that serves one
adapter at a time (``TakesAdapters``: vLLM behind ``VLLMPolicy``, or a model the lean forward
does not run) serves it for every name, as before.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol, runtime_checkable

from trajforge.errors import ConfigError
from trajforge.policy import Completion, SamplingParams, TokenPolicy, TokenSink, TurnRequest
from trajforge.serve.wire import WireError


def check_served_model(model: str, served: tuple[str, ...]) -> None:
    """A 404 (OpenAI's ``model_not_found``) for a model this gateway does not serve."""
    if model not in served:
        raise WireError(
            f"model {model!r} is not served here; this gateway serves {', '.join(served)}",
            param="model",
            status=404,
            code="model_not_found",
        )


@runtime_checkable
class TakesAdapters(Protocol):
    """A policy whose weights can follow a trainer through LoRA adapters, one at a time
    (``HFPolicy``, ``VLLMPolicy``)."""

    weights_version: int

    def load_adapter(self, path: str | Path) -> None: ...

    def unload_adapter(self) -> None: ...


@runtime_checkable
class ServesAdapters(Protocol):
    """A policy that serves many named adapters at once, each call choosing one."""

    weights_version: int

    @property
    def serves_adapters(self) -> bool: ...

    def add_adapter(self, name: str, path: str | Path) -> None: ...

    def remove_adapter(self, name: str) -> None: ...

    def adapter_names(self) -> list[str]: ...

    async def generate_with_adapter(
        self,
        adapter: str | None,
        prompt_ids: list[int],
        sampling: SamplingParams,
        *,
        on_token: TokenSink | None = None,
    ) -> Completion: ...


class LoadsAdapters(Protocol):
    """A gateway that loads adapters (``Gateway``; ``UpstreamGateway`` forwards them)."""

    async def load_adapter(self, name: str, path: str) -> None: ...


def load_adapters(gateway: LoadsAdapters, adapters: list[tuple[str, str]], flag: str) -> None:
    """Load each ``(name, folder)`` into ``gateway`` before it serves (``trajforge serve
    --lora-modules``); a folder that cannot be served is a ``ConfigError`` naming ``flag``."""
    for name, folder in adapters:
        try:
            asyncio.run(gateway.load_adapter(name, folder))
        except WireError as exc:
            raise ConfigError(f"{flag} {name}={folder}: {exc.message}") from None


def not_loaded(adapter: str, loaded: list[str], param: str = "model") -> WireError:
    """A 404 for ``adapter``, naming the adapters that are loaded."""
    return WireError(
        f"adapter {adapter!r} is not loaded; loaded adapters: {', '.join(loaded) or 'none'}",
        param=param,
        status=404,
        code="model_not_found",
    )


def adapter_named(model: str, base_names: tuple[str, ...], loaded: list[str]) -> str | None:
    """The adapter ``model`` names (None: the base weights, or a name that is neither, which
    the caller checks against what it serves). Raises a 404 for ``BASE:ADAPTER`` whose adapter
    is not loaded."""
    if model in base_names:
        return None
    if model in loaded:
        return model
    base, colon, adapter = model.rpartition(":")
    if colon and base in base_names:
        if adapter in loaded:
            return adapter
        raise not_loaded(adapter, loaded)
    return None


class AdapterEndpoints:
    """The gateway's adapter side: routing ``model`` to an adapter, and vLLM's
    ``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``."""

    policy: TokenPolicy
    base_names: tuple[str, ...]
    model_names: tuple[str, ...]
    adapter: str | None
    """The one adapter of a policy that serves one at a time."""

    def check_model(self, model: str) -> None:
        self.adapter_of(model)

    def adapter_of(self, model: str) -> str | None:
        """The adapter a call naming ``model`` decodes with (None: the base weights, or the
        one adapter of a policy that serves one at a time); a 404 for a name not served."""
        named = self._named_adapters()
        adapter = adapter_named(model, self.base_names, named.adapter_names()) if named else None
        if adapter is None:
            check_served_model(model, self.model_names)
        return adapter

    def _named_adapters(self) -> ServesAdapters | None:
        """The policy, when it serves many adapters by name at once."""
        policy = self.policy
        return policy if isinstance(policy, ServesAdapters) and policy.serves_adapters else None

    async def complete_with(self, adapter: str | None, turn: TurnRequest) -> Completion:
        """The policy's completion of ``turn``, under ``adapter`` when it names one."""
        named = self._named_adapters()
        if adapter is None or named is None:
            return await self.policy.complete(turn)
        return await named.generate_with_adapter(
            adapter, turn.prompt_ids, turn.sampling, on_token=turn.on_token
        )

    async def generate_with(
        self, adapter: str | None, prompt_ids: list[int], sampling: SamplingParams
    ) -> Completion:
        """The policy's continuation of raw ``prompt_ids``, under ``adapter`` when it names
        one (``/v1/completions``)."""
        named = self._named_adapters()
        if adapter is None or named is None:
            return await self.policy.generate(prompt_ids, sampling)
        return await named.generate_with_adapter(adapter, prompt_ids, sampling)

    async def load_adapter(self, name: str, path: str) -> None:
        """Serve the LoRA adapter in ``path`` under ``name`` too (vLLM's
        ``/v1/load_lora_adapter``). A policy that serves many adapters at once adds it beside
        the others: calls naming it (or ``BASE:name``) decode with it, the others keep theirs.
        Otherwise one adapter is served at a time, for every name: calls in flight finish on
        the old weights, calls arriving meanwhile wait for the new ones."""
        named = self._named_adapters()
        try:
            if named is not None:
                await asyncio.to_thread(named.add_adapter, name, path)
            else:
                await asyncio.to_thread(self._adapter_policy().load_adapter, path)
        except ConfigError as exc:
            raise WireError(str(exc), param="lora_path") from None
        if named is not None:
            self.model_names = (*self.base_names, *named.adapter_names())
        else:
            self.adapter = name
            self.model_names = (*self.base_names, name)

    async def unload_adapter(self, name: str) -> None:
        """Back to the base weights (vLLM's ``/v1/unload_lora_adapter``); a policy that serves
        many adapters stops serving this one."""
        named = self._named_adapters()
        loaded = (
            named.adapter_names() if named is not None else [self.adapter] if self.adapter else []
        )
        if name not in loaded:
            raise not_loaded(name, loaded, param="lora_name")
        if named is not None:
            await asyncio.to_thread(named.remove_adapter, name)
            self.model_names = (*self.base_names, *named.adapter_names())
            return
        await asyncio.to_thread(self._adapter_policy().unload_adapter)
        self.adapter, self.model_names = None, self.base_names

    def _adapter_policy(self) -> TakesAdapters:
        if not isinstance(self.policy, TakesAdapters):
            raise WireError(f"model {self.policy.name!r} takes no adapters", status=400)
        return self.policy
