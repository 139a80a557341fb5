"""Layer 3: policies. The contract first, then the implementations.

- ``base`` — ``Policy`` (token level ``generate``, conversation level ``start_session`` and
  ``respond``), ``ChatSession``, ``SamplingParams``, ``Completion``;
- ``renderer``, ``session``, ``tool_prompt``, ``token_policy`` — token-exact chat rendering and
  the token-level policies built on it (each turn asked for as a ``TurnRequest``);
- ``hf`` (a local transformers model over the decode engine in ``engine/``), ``openai_compat``
  and ``openai_session`` (any OpenAI-compatible server), ``scripted`` (a script or an expert);
- ``vision`` and ``vision_render`` — a vision-language model (processor plus model) as a
  token-exact policy, its images' placeholders rendered into the prompt ids;
- ``models/`` — the embedded SmolLM2 and the tiny test models; ``naming`` — policies by name;
- ``check`` — token exactness of stored trajectories.
"""

from typing import TYPE_CHECKING

from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.policy.adapter_seat import AdapterSeat
    from trajforge.policy.base import (
        ChatSession,
        Completion,
        FinishReason,
        Policy,
        SamplingParams,
        TokenSink,
    )
    from trajforge.policy.branch import ReplayedPrefix, replayed_turns
    from trajforge.policy.check import RAW_RENDERING, CheckReport, check_trajectories
    from trajforge.policy.embed import TextEmbedder
    from trajforge.policy.forced import ForcedTurns
    from trajforge.policy.hf import HFPolicy
    from trajforge.policy.models.checkpoint import is_checkpoint
    from trajforge.policy.models.embedded import load_embedded
    from trajforge.policy.models.kinds import TINY_VLM, is_vision_folder
    from trajforge.policy.models.loaders import checkpoint_model, vision_model
    from trajforge.policy.models.smollm2 import (
        EMBEDDED_NAME,
        cache_root,
        gguf_path,
        load_tokenizer,
        model_folder,
    )
    from trajforge.policy.models.tiny import SCRATCH_SIZES, scratch_model_and_tokenizer
    from trajforge.policy.naming import (
        OPENAI_PREFIX,
        SCRIPT_PREFIX,
        SMOLLM2_NAMES,
        bind_expert,
        chat_renderer_for,
        check_embedder_name,
        check_policy_name,
        is_scripted,
        load_policy,
        load_script,
        parse_openai_spec,
        tokenizer_for,
    )
    from trajforge.policy.renderer import ChatRenderer, HistoryRewritten, RenderError
    from trajforge.policy.saved import save_tokenizer
    from trajforge.policy.scripted import ScriptedPolicy
    from trajforge.policy.session import RenderedSession
    from trajforge.policy.template_dicts import ToolProtocol
    from trajforge.policy.text_render import RENDERED_WITH, render_text_only
    from trajforge.policy.token_policy import TokenPolicy, TurnRequest
    from trajforge.policy.vision import VisionPolicy
    from trajforge.policy.vision_render import (
        VisionRenderer,
        forward_inputs,
        is_vision_processor,
        pixel_inputs,
    )
    from trajforge.policy.vllm import VLLMPolicy
    from trajforge.policy.vllm_server import VLLM_PREFIX
    from trajforge.policy.whole_render import break_reason

__all__ = [
    "EMBEDDED_NAME",
    "OPENAI_PREFIX",
    "RAW_RENDERING",
    "RENDERED_WITH",
    "SCRATCH_SIZES",
    "SCRIPT_PREFIX",
    "SMOLLM2_NAMES",
    "TINY_VLM",
    "VLLM_PREFIX",
    "AdapterSeat",
    "ChatRenderer",
    "ChatSession",
    "CheckReport",
    "Completion",
    "FinishReason",
    "ForcedTurns",
    "HFPolicy",
    "HistoryRewritten",
    "Policy",
    "RenderError",
    "RenderedSession",
    "ReplayedPrefix",
    "SamplingParams",
    "ScriptedPolicy",
    "TextEmbedder",
    "TokenPolicy",
    "TokenSink",
    "ToolProtocol",
    "TurnRequest",
    "VLLMPolicy",
    "VisionPolicy",
    "VisionRenderer",
    "bind_expert",
    "break_reason",
    "cache_root",
    "chat_renderer_for",
    "check_embedder_name",
    "check_policy_name",
    "check_trajectories",
    "checkpoint_model",
    "forward_inputs",
    "gguf_path",
    "is_checkpoint",
    "is_scripted",
    "is_vision_folder",
    "is_vision_processor",
    "load_embedded",
    "load_policy",
    "load_script",
    "load_tokenizer",
    "model_folder",
    "parse_openai_spec",
    "pixel_inputs",
    "render_text_only",
    "replayed_turns",
    "save_tokenizer",
    "scratch_model_and_tokenizer",
    "tokenizer_for",
    "vision_model",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "AdapterSeat": "adapter_seat",
        "ChatRenderer": "renderer",
        "ChatSession": "base",
        "CheckReport": "check",
        "Completion": "base",
        "EMBEDDED_NAME": "models.smollm2",
        "FinishReason": "base",
        "ForcedTurns": "forced",
        "ReplayedPrefix": "branch",
        "replayed_turns": "branch",
        "HFPolicy": "hf",
        "HistoryRewritten": "renderer",
        "OPENAI_PREFIX": "naming",
        "Policy": "base",
        "RAW_RENDERING": "check",
        "RENDERED_WITH": "text_render",
        "RenderError": "renderer",
        "RenderedSession": "session",
        "SCRATCH_SIZES": "models.tiny",
        "SCRIPT_PREFIX": "naming",
        "SMOLLM2_NAMES": "naming",
        "VLLM_PREFIX": "vllm_server",
        "VLLMPolicy": "vllm",
        "SamplingParams": "base",
        "ScriptedPolicy": "scripted",
        "TINY_VLM": "models.kinds",
        "TextEmbedder": "embed",
        "TokenPolicy": "token_policy",
        "TokenSink": "base",
        "ToolProtocol": "template_dicts",
        "TurnRequest": "token_policy",
        "VisionPolicy": "vision",
        "VisionRenderer": "vision_render",
        "bind_expert": "naming",
        "break_reason": "whole_render",
        "cache_root": "models.smollm2",
        "chat_renderer_for": "naming",
        "check_embedder_name": "naming",
        "check_policy_name": "naming",
        "check_trajectories": "check",
        "checkpoint_model": "models.loaders",
        "forward_inputs": "vision_render",
        "gguf_path": "models.smollm2",
        "is_checkpoint": "models.checkpoint",
        "is_scripted": "naming",
        "is_vision_folder": "models.kinds",
        "is_vision_processor": "vision_render",
        "load_embedded": "models.embedded",
        "load_policy": "naming",
        "load_script": "naming",
        "load_tokenizer": "models.smollm2",
        "model_folder": "models.smollm2",
        "parse_openai_spec": "naming",
        "pixel_inputs": "vision_render",
        "render_text_only": "text_render",
        "save_tokenizer": "saved",
        "scratch_model_and_tokenizer": "models.tiny",
        "tokenizer_for": "naming",
        "vision_model": "models.loaders",
    },
)
