"""Layer 3: policies. The contract first, then the implementations.

- ``base`` — ``Policy`` (token level ``generate``, conversation level ``start_session`` and
  ``respond``), ``ChatSession``, ``SamplingParams``, ``Completion``;
- ``renderer``, ``session``, ``tool_prompt``, ``token_policy`` — token-exact chat rendering and
  the token-level policies built on it;
- ``hf`` (a local transformers model over the decode engine in ``engine/``), ``openai_compat``
  and ``openai_session`` (any OpenAI-compatible server), ``scripted`` (a script or an expert);
- ``models/`` — the embedded SmolLM2 and the tiny test model; ``naming`` — policies by name;
- ``check`` — token exactness of stored trajectories.
"""

from typing import TYPE_CHECKING

from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.policy.base import (
        ChatSession,
        Completion,
        FinishReason,
        Policy,
        SamplingParams,
        TokenSink,
    )
    from trajforge.policy.check import RAW_RENDERING, CheckReport, check_trajectories
    from trajforge.policy.embed import TextEmbedder
    from trajforge.policy.forced import ForcedTurns
    from trajforge.policy.hf import HFPolicy
    from trajforge.policy.models.checkpoint import is_checkpoint
    from trajforge.policy.models.embedded import load_embedded
    from trajforge.policy.models.loaders import checkpoint_model
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
        check_embedder_name,
        check_policy_name,
        is_scripted,
        load_policy,
        load_script,
        parse_openai_spec,
        tokenizer_for,
    )
    from trajforge.policy.renderer import ChatRenderer, HistoryRewritten, RenderError, ToolProtocol
    from trajforge.policy.saved import save_tokenizer
    from trajforge.policy.scripted import ScriptedPolicy
    from trajforge.policy.session import RenderedSession
    from trajforge.policy.text_render import RENDERED_WITH, render_text_only
    from trajforge.policy.token_policy import TokenPolicy
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
    "VLLM_PREFIX",
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
    "SamplingParams",
    "ScriptedPolicy",
    "TextEmbedder",
    "TokenPolicy",
    "TokenSink",
    "ToolProtocol",
    "bind_expert",
    "break_reason",
    "cache_root",
    "check_embedder_name",
    "check_policy_name",
    "check_trajectories",
    "checkpoint_model",
    "gguf_path",
    "is_checkpoint",
    "is_scripted",
    "load_embedded",
    "load_policy",
    "load_script",
    "load_tokenizer",
    "model_folder",
    "parse_openai_spec",
    "render_text_only",
    "save_tokenizer",
    "scratch_model_and_tokenizer",
    "tokenizer_for",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "ChatRenderer": "renderer",
        "ChatSession": "base",
        "CheckReport": "check",
        "Completion": "base",
        "EMBEDDED_NAME": "models.smollm2",
        "FinishReason": "base",
        "ForcedTurns": "forced",
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
        "SamplingParams": "base",
        "ScriptedPolicy": "scripted",
        "TextEmbedder": "embed",
        "TokenPolicy": "token_policy",
        "TokenSink": "base",
        "ToolProtocol": "renderer",
        "bind_expert": "naming",
        "break_reason": "whole_render",
        "cache_root": "models.smollm2",
        "check_embedder_name": "naming",
        "check_policy_name": "naming",
        "check_trajectories": "check",
        "checkpoint_model": "models.loaders",
        "gguf_path": "models.smollm2",
        "is_checkpoint": "models.checkpoint",
        "is_scripted": "naming",
        "load_embedded": "models.embedded",
        "load_policy": "naming",
        "load_script": "naming",
        "load_tokenizer": "models.smollm2",
        "model_folder": "models.smollm2",
        "parse_openai_spec": "naming",
        "render_text_only": "text_render",
        "save_tokenizer": "saved",
        "scratch_model_and_tokenizer": "models.tiny",
        "tokenizer_for": "naming",
    },
)
