"""Policies by name, as configs and the CLI write them.

- ``embedded``: SmolLM2-135M-Instruct from the installed wheel, through ``HFPolicy``;
- ``tiny``, ``pocket``: small random models built in code (tests; training from scratch),
  through ``HFPolicy``;
- ``tiny-vlm``: a small random vision-language model built in code (tests), through
  ``VisionPolicy``;
- ``expert``: an environment's scripted expert through ``ScriptedPolicy`` (pass ``expert=``);
- ``script:<module:function>`` or ``script:<file.py:function>``: a scripted teacher of the
  user's, a function of the task and the conversation like an environment's expert;
- a local folder holding a transformers model and tokenizer, or a training checkpoint
  (``runs/x/checkpoints/step-N``: its base model with the checkpoint's weights or adapter
  merged in), also as the ``checkpoints/`` folder or its ``latest`` pointer (the newest
  checkpoint), through ``HFPolicy``; a vision-language model's folder (with its processor)
  through ``VisionPolicy``;
- ``openai:<base_url>#<model>``: an OpenAI-compatible chat-completions endpoint;
- ``vllm:<folder or name>``, ``vllm:http://host:port``: a vLLM server started here for a model
  folder (or ``embedded``, ``tiny``, ``pocket``), or one running, token ids in and out
  (``VLLMPolicy``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from trajforge.errors import ConfigError
from trajforge.policy.base import Policy
from trajforge.policy.models.checkpoint import is_checkpoint, resolve_checkpoint
from trajforge.policy.models.kinds import TINY_VLM, is_vision_folder
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.openai_compat import OpenAIPolicy
from trajforge.policy.renderer import ChatRenderer, ToolProtocol
from trajforge.policy.scripted import ReplyFn, ScriptedPolicy, ScriptError
from trajforge.policy.vllm_server import VLLM_PREFIX
from trajforge.registry import Registry, did_you_mean, is_ref, load_ref
from trajforge.schema import ExpertFn, Message, Task

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

OPENAI_PREFIX = "openai:"
SCRIPT_PREFIX = "script:"
SMOLLM2_NAMES = frozenset({"embedded", "tiny", "pocket", "expert", "scripted"})


def is_scripted(spec: str) -> bool:
    """Whether ``spec`` names a scripted policy (the env's expert or a ``script:`` teacher),
    which has no weights."""
    return spec == "expert" or spec.startswith(SCRIPT_PREFIX)


def load_script(spec: str) -> ExpertFn:
    """The function ``script:<module:function>`` or ``script:<file.py:function>`` names."""
    ref = spec.removeprefix(SCRIPT_PREFIX)
    if not is_ref(ref):
        raise ConfigError(
            f"policy {spec!r}: write a scripted teacher as script:file.py:function or "
            "script:module:function"
        )
    script = load_ref(ref, "policy")
    if not callable(script):
        raise ConfigError(f"policy {spec!r}: {ref} is not a function of (task, messages)")
    return cast(ExpertFn, script)


def parse_openai_spec(spec: str) -> tuple[str, str]:
    """``openai:<base_url>#<model>`` -> (base_url, model)."""
    body = spec[len(OPENAI_PREFIX) :]
    base_url, sep, model = body.rpartition("#")
    if not sep or not base_url or not model:
        raise ConfigError(
            f"policy {spec!r}: write an OpenAI-compatible endpoint as openai:<base_url>#<model>, "
            "e.g. openai:http://127.0.0.1:8000/v1#my-model"
        )
    return base_url, model


def bind_expert(expert: ExpertFn) -> ReplyFn:
    """An environment's expert ``(task, messages)`` as a scripted reply function; the expert
    plans from the task, so a session started without one is refused."""

    def reply(task: Task | None, messages: list[Message]) -> str | None:
        if task is None:
            raise ScriptError("the scripted expert needs the task: start the session with task=")
        return expert(task, messages)

    return reply


PolicyLoader = Callable[[str, ExpertFn | None, dict[str, Any]], Policy]
"""``loader(spec, expert, options) -> Policy``; it pops the options it consumes itself."""

POLICIES: Registry[PolicyLoader] = Registry("policy", plural="policies")
"""Policy loaders by name; a name ending in ``:`` is a prefix (``openai:<base_url>#<model>``)."""


@POLICIES.register("expert")
def _load_expert(spec: str, expert: ExpertFn | None, kw: dict[str, Any]) -> Policy:
    if expert is None:
        raise ConfigError(
            "policy 'expert' needs the environment's scripted expert (expert=...); "
            "this environment may have none"
        )
    tokenizer = kw.pop("tokenizer", None) or load_tokenizer()
    name = kw.pop("name", "expert")
    return ScriptedPolicy(bind_expert(expert), tokenizer, name=name, **kw)


@POLICIES.register(SCRIPT_PREFIX)
def _load_script(spec: str, expert: ExpertFn | None, kw: dict[str, Any]) -> Policy:
    tokenizer = kw.pop("tokenizer", None) or load_tokenizer()
    name = kw.pop("name", spec)
    return ScriptedPolicy(bind_expert(load_script(spec)), tokenizer, name=name, **kw)


@POLICIES.register(OPENAI_PREFIX)
def _load_openai(spec: str, expert: ExpertFn | None, kw: dict[str, Any]) -> Policy:
    base_url, model_name = parse_openai_spec(spec)
    return OpenAIPolicy(base_url, model_name, **kw)


@POLICIES.register(VLLM_PREFIX)
def _load_vllm(spec: str, expert: ExpertFn | None, kw: dict[str, Any]) -> Policy:
    return _loaders().vllm_policy(spec, kw)


# The loaders of policies with weights import them on call: torch and the model code cost
# seconds at start-up, which a command using the expert or an endpoint never pays.


def _loaders() -> ModuleType:
    """The loaders of policies with weights (the module loads torch and the model code)."""
    from trajforge.policy.models import loaders  # lazy: torch costs seconds at start-up

    return loaders


@POLICIES.register("embedded")
def _load_embedded(spec: str, expert: ExpertFn | None, kw: dict[str, Any]) -> Policy:
    return _loaders().embedded_policy(spec, kw)


@POLICIES.register("tiny")
@POLICIES.register("pocket")
@POLICIES.register("tiny-vlm")
def _load_scratch(spec: str, expert: ExpertFn | None, kw: dict[str, Any]) -> Policy:
    return _loaders().scratch_policy(spec, kw)


def _loader_for(spec: str) -> PolicyLoader | None:
    if spec in POLICIES:
        return POLICIES.get(spec)
    scheme, sep, _ = spec.partition(":")
    prefix = scheme + sep
    return POLICIES.get(prefix) if sep and prefix in POLICIES else None


def load_policy(spec: str, *, expert: ExpertFn | None = None, **kw: Any) -> Policy:
    """The policy named by ``spec``: a name in ``POLICIES`` (or one of its prefixes), else a
    local model folder. ``kw`` goes to the policy's constructor (``seed`` picks the tiny
    model's weights, ``dtype`` a model's dtype, ``tokenizer`` the expert's)."""
    loader = _loader_for(spec)
    if loader is not None:
        return loader(spec, expert, kw)
    check_policy_name(spec)
    return _load_folder(model_path(spec), **kw)


def model_path(spec: str) -> Path:
    """The folder a local model name means: a checkpoints folder or its ``latest`` pointer
    means the checkpoint it names."""
    return resolve_checkpoint(Path(spec).expanduser())


def check_policy_name(spec: str) -> None:
    """Refuse a policy name that names nothing (no registered name or prefix, no folder),
    without loading anything: what a command checks before it creates a run.

    Raises:
        ConfigError: the name is unknown; the message gives the closest name and every kind.
    """
    if _loader_for(spec) is not None or model_path(spec).is_dir():
        return
    names = [n for n in POLICIES.names() if not n.endswith(":")]
    raise ConfigError(
        f"unknown policy {spec!r}{did_you_mean(spec, names)}: expected {', '.join(names)}, "
        "a local model folder, script:file.py:function, openai:<base_url>#<model>, or "
        "vllm:<model folder or name>"
    )


EMBEDDER_NAMES = ("embedded", "tiny", "pocket")
"""The named models a text embedder (``policy.embed``) can read: those with weights."""


def check_embedder_name(spec: str) -> None:
    """Refuse a text embedder name (``policy.embed``) that names no weights, without loading
    anything.

    Raises:
        ConfigError: ``spec`` is no named model with weights, model folder or checkpoint.
    """
    if spec in EMBEDDER_NAMES:
        return
    folder = Path(spec).expanduser()
    if (folder / "config.json").is_file() or is_checkpoint(folder):
        return
    raise ConfigError(
        f"unknown embedding model {spec!r}{did_you_mean(spec, list(EMBEDDER_NAMES))}: expected "
        f"{', '.join(EMBEDDER_NAMES)} or a local model folder (an encoder's, e.g. a "
        "sentence-transformers folder, embeds best)"
    )


def _load_folder(folder: Path, **kw: Any) -> Policy:
    if not ((folder / "config.json").is_file() or is_checkpoint(folder)):
        raise ConfigError(
            f"policy folder {folder} holds no transformers model (no config.json) and is no "
            "training checkpoint (no state.json and trainable.pt)"
        )
    return _loaders().folder_policy(folder, kw)


def tokenizer_for(model: str | None) -> PreTrainedTokenizerBase | None:
    """The tokenizer a trajectory made by policy ``model`` was rendered with: a local
    folder's own (a vision-language model's: its processor's), ``tiny-vlm``'s own, ``None``
    for an OpenAI endpoint (its tokenizer is unknown here), else SmolLM2's (the embedded, tiny
    and scripted policies all use it)."""
    if model and model.startswith(OPENAI_PREFIX):
        return None
    if model and model.startswith(VLLM_PREFIX):
        # A vLLM policy renders with its model's tokenizer, as the model it names would.
        model = model.removeprefix(VLLM_PREFIX)
        if model.startswith(("http://", "https://")):
            return None
    if model and _has_own_tokenizer(model):
        return cast("PreTrainedTokenizerBase", _loaders().saved_tokenizer(model))
    return load_tokenizer()


def chat_renderer_for(model: str | None, tool_protocol: ToolProtocol) -> ChatRenderer | None:
    """The renderer a trajectory made by policy ``model`` was rendered with (see
    ``tokenizer_for``): a vision-language model's renders its images' placeholders."""
    if model and _has_own_tokenizer(model) and is_vision_model(model):
        return cast(ChatRenderer, _loaders().vision_renderer(model, tool_protocol))
    tokenizer = tokenizer_for(model)
    return None if tokenizer is None else ChatRenderer(tokenizer, tool_protocol)


def is_vision_model(spec: str) -> bool:
    """Whether ``spec`` names a vision-language model (``tiny-vlm`` or such a folder)."""
    return spec == TINY_VLM or is_vision_folder(model_path(spec))


def _has_own_tokenizer(model: str) -> bool:
    if model == TINY_VLM:
        return True
    return model not in SMOLLM2_NAMES and (model_path(model) / "tokenizer_config.json").is_file()
