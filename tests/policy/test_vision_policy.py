"""The tiny VLM as a token-exact policy: screenshots render into placeholder tokens in the
recorded prompt ids, the sampled logprobs are the model's own under a teacher-forced forward
with the pixels recomputed from the stored images, and ``check`` replays every prompt."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from trajforge.errors import ConfigError
from trajforge.policy import (
    ChatRenderer,
    ToolProtocol,
    chat_renderer_for,
    load_policy,
    tokenizer_for,
)
from trajforge.policy.base import SamplingParams
from trajforge.policy.check import check_trajectories, check_trajectory
from trajforge.policy.models.tiny_vlm import IMAGE_TOKEN, tiny_vlm_and_processor
from trajforge.policy.renderer import RenderError
from trajforge.policy.vision import VisionPolicy
from trajforge.policy.vision_render import VisionRenderer, pixel_inputs
from trajforge.schema import Message, Role, TextPart, Trajectory
from trajforge.store import TrajectoryStore
from trajforge.train.batch import TokenBatch, encode_trajectory
from trajforge.train.logprobs import TokenLogprobModel
from vision_doubles import screen_episodes, screenshot

TOKENS_PER_IMAGE = 4  # 28 x 28 pixels in 14-pixel patches


@pytest.fixture(scope="module")
def policy() -> VisionPolicy:
    model, processor = tiny_vlm_and_processor()
    return VisionPolicy(model, processor, name="tiny-vlm")


@pytest.fixture(scope="module")
def episodes(policy: VisionPolicy) -> list[Trajectory]:
    return screen_episodes(policy)


def image_token_id(policy: VisionPolicy) -> int:
    return int(policy.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN))


def test_prompt_ids_hold_each_screenshots_expanded_placeholder(
    episodes: list[Trajectory], policy: VisionPolicy
) -> None:
    image_id = image_token_id(policy)
    assert len(episodes) == 4
    for traj in episodes:
        assert traj.outcome.status.value == "ok", traj.outcome.error
        images = [image for m in traj.messages for image in m.images]
        ids = [t for m in traj.messages for t in m.token_ids or ()]
        assert images and all(image.data for image in images)
        assert ids.count(image_id) == TOKENS_PER_IMAGE * len(images)
        for message in traj.messages:
            expected = TOKENS_PER_IMAGE * len(message.images)
            assert (message.token_ids or []).count(image_id) == expected
    # Wrong answers got a second screenshot: the incremental rendering expanded it too.
    assert any(len([m for m in t.messages if m.images]) == 2 for t in episodes)


def test_sampled_logprobs_match_a_teacher_forced_forward(
    episodes: list[Trajectory], policy: VisionPolicy
) -> None:
    forward = TokenLogprobModel(policy.model, reference_path=True)
    for traj in episodes:
        seq = encode_trajectory(traj)
        batch = TokenBatch.collate(
            [seq], pixels=lambda images: pixel_inputs(policy.processor, images)
        )
        assert batch.vision is not None
        assert batch.vision["pixel_values"].shape[0] == len(seq.images)
        with torch.no_grad():
            recomputed, _ = forward(
                batch.input_ids, batch.attention_mask, batch.loss_mask, vision=batch.vision
            )
        mask = batch.loss_mask
        assert int(mask.sum()) > 0
        gap = (recomputed - batch.old_logprobs).abs()[mask]
        # fp32 forwards with and without a key-value cache differ in rounding only.
        assert float(gap.max()) < 1e-4
        # Without the pixels the same ids give other logprobs: the images are really seen.
        with torch.no_grad():
            blind, _ = forward(batch.input_ids, batch.attention_mask, mask)
        assert float((blind - batch.old_logprobs).abs()[mask].max()) > 1e-3


def test_check_replays_every_prompt_with_its_placeholders(
    episodes: list[Trajectory], policy: VisionPolicy
) -> None:
    for traj in episodes:
        assert check_trajectory(traj, policy.renderer) == []


def test_stored_episodes_check_token_exact_with_the_models_own_renderer(
    episodes: list[Trajectory], tmp_path: Path
) -> None:
    # What ``trajforge check`` does: the store keeps each image once, apart from the rows.
    with TrajectoryStore(tmp_path / "s.db") as store:
        store.add_many(episodes)
        stored = list(store.iter_query())
    assert [t.model for t in stored] == ["tiny-vlm"] * len(episodes)
    report = check_trajectories(stored, lambda t: chat_renderer_for(t.model, ToolProtocol.AUTO))
    assert report.checked == len(episodes)
    assert report.ok
    # The text renderer of the same tokenizer never vouches for them: it cannot place images.
    text = ChatRenderer(tokenizer_for("tiny-vlm"))
    by_text = check_trajectories(stored, lambda t: text)
    assert not (by_text.ok and by_text.checked == len(episodes))


def test_a_changed_image_changes_what_the_model_sees_not_the_ids(policy: VisionPolicy) -> None:
    def prompt(colour: str) -> list[int]:
        question = Message(role=Role.USER, content=[TextPart(text="Which?"), screenshot(colour)])
        return policy.start_session([question], []).prompt_ids()

    assert prompt("red") == prompt("green")

    async def sample(colour: str) -> list[float]:
        question = Message(role=Role.USER, content=[TextPart(text="Which?"), screenshot(colour)])
        session = policy.start_session([question], [])
        reply = await policy.respond(session, SamplingParams(max_new_tokens=3, temperature=0))
        return reply.logprobs or []

    assert asyncio.run(sample("red")) != asyncio.run(sample("green"))


def test_the_renderer_refuses_what_it_cannot_render(policy: VisionPolicy) -> None:
    renderer = policy.renderer
    shown = Message(role=Role.ASSISTANT, content=[screenshot("red")])
    with pytest.raises(RenderError, match="assistant message cannot carry images"):
        renderer.template_messages([shown], [])
    literal = Message(role=Role.USER, content=f"what is {IMAGE_TOKEN}?")
    with pytest.raises(RenderError, match="1 image placeholder"):
        renderer.render_text([literal], [], add_generation_prompt=True)
    with pytest.raises(ConfigError, match="image processor"):
        VisionRenderer(policy.tokenizer)


def test_tiny_vlm_loads_by_name() -> None:
    loaded = load_policy("tiny-vlm", max_batch_size=4)
    assert isinstance(loaded, VisionPolicy)
    assert loaded.name == "tiny-vlm"
