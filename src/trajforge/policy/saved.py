"""A model folder's tokenizer as trajforge saves it: with the chat template that renders what
trajforge rendered (``ChatRenderer.deploy_template``), so the folder deploys anywhere."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trajforge.policy.renderer import ChatRenderer, RenderError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def save_tokenizer(tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    """``tokenizer.save_pretrained(folder)`` with the deploy template as its chat template; a
    tokenizer with no template trajforge can render with is saved as it is. ``tokenizer``
    itself is left unchanged."""
    own = tokenizer.chat_template
    try:
        deployed = ChatRenderer(tokenizer).deploy_template() if own else None
    except RenderError:
        deployed = None
    if deployed is not None:
        tokenizer.chat_template = deployed
    try:
        tokenizer.save_pretrained(str(folder))
    finally:
        tokenizer.chat_template = own
