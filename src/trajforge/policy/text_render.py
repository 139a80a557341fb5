"""Text-only trajectories (imports from formats without token ids) made trainable by an explicit
rendering with a named tokenizer.

Every message gets the ids the tokenizer's chat template gives it, exactly as a live episode
would have added them; assistant turns get no logprobs, which marks them as written, not
sampled (RL never treats them as its own samples). ``metadata["rendered_with"]`` names the
tokenizer, so ``check`` replays them with it. A trajectory that already has its ids is never
rendered again.
"""

from __future__ import annotations

from trajforge.errors import DataError
from trajforge.policy.renderer import ChatRenderer, RenderError
from trajforge.policy.session import RenderedSession
from trajforge.schema import Exactness, ExactnessKind, Trajectory

RENDERED_WITH = "rendered_with"


def render_text_only(traj: Trajectory, renderer: ChatRenderer, tokenizer_name: str) -> Trajectory:
    """``traj`` with every message's ids from ``renderer`` (``traj`` itself if it has ids)."""
    if any(m.token_ids is not None for m in traj.messages):
        return traj
    try:
        session = RenderedSession(renderer, traj.messages, traj.tools, task=traj.task)
    except RenderError as exc:
        raise DataError(
            f"trajectory {traj.id}: cannot be rendered with {tokenizer_name}: {exc}"
        ) from None
    return traj.model_copy(
        update={
            "messages": session.messages,
            "metadata": {**traj.metadata, RENDERED_WITH: tokenizer_name},
            "exactness": Exactness(
                kind=ExactnessKind.RE_RENDERED,
                reason=f"imported as text; ids rendered by {tokenizer_name}'s chat template",
                rendered_prefix=len(session.messages),
            ),
        }
    )
