"""SFT, DPO and RL with the tiny VLM on screenshot episodes: the trainers' forward gets the pixels
recomputed from the stored images, the loss is finite and the weights move, the vision tower's
included; a text model refuses trajectories with images."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from train_helpers import small_rl_config, token_id_rubric
from transformers import Idefics3ForConditionalGeneration

from trajforge.curate import PreferencePair
from trajforge.errors import DataError
from trajforge.policy import ToolProtocol, chat_renderer_for, load_policy
from trajforge.policy.check import check_trajectory
from trajforge.policy.models.checkpoint import resolve_checkpoint as loaded_folder
from trajforge.policy.models.kinds import is_vision_folder
from trajforge.policy.models.tiny_vlm import tiny_vlm_and_processor
from trajforge.policy.vision import VisionPolicy
from trajforge.policy.vision_render import pixel_inputs
from trajforge.schema import Trajectory
from trajforge.train.batch import TokenBatch, encode_trajectory
from trajforge.train.config import DPOConfig, ModelSettings, OptimSettings, SFTConfig
from trajforge.train.dpo import DPOTrainer
from trajforge.train.logprobs import TokenLogprobModel
from trajforge.train.rl import RLTrainer
from trajforge.train.sft import SFTTrainer
from vision_doubles import ENV_REF, save_tiny_idefics3, screen_episodes

VISION_WEIGHT = "model.vision_tower.encoder.layers.0.mlp.fc1.weight"
TEXT_WEIGHT = "model.language_model.layers.0.mlp.up_proj.weight"


@pytest.fixture(scope="module")
def episodes() -> list[Trajectory]:
    model, processor = tiny_vlm_and_processor()
    return screen_episodes(VisionPolicy(model, processor, name="tiny-vlm"))


def _moved(model: torch.nn.Module) -> dict[str, float]:
    """How far each watched weight is from the tiny VLM's initial one."""
    start = dict(tiny_vlm_and_processor()[0].named_parameters())
    now = dict(model.named_parameters())
    return {
        name: float((now[name].detach().cpu() - start[name].detach()).abs().max())
        for name in (VISION_WEIGHT, TEXT_WEIGHT)
    }


def _sft_config(tmp_path: Path, spec: str, **kw: object) -> SFTConfig:
    return SFTConfig.model_validate(
        {
            "output_dir": tmp_path,
            "model": ModelSettings(spec=spec),
            "optim": OptimSettings(lr=1e-2),
            "batch_size": 4,
            "epochs": 1,
            "tensorboard": False,
            "progress": False,
            **kw,
        }
    )


def test_an_sft_step_on_screenshot_episodes_trains_the_vlm(
    tmp_path: Path, episodes: list[Trajectory]
) -> None:
    trainer = SFTTrainer(_sft_config(tmp_path, "tiny-vlm", checkpoint_every=1), episodes)
    result = trainer.train()
    assert len(result.history) == 1
    assert torch.isfinite(torch.tensor(result.history[0]["loss"]))
    assert result.history[0]["loss"] > 0
    moved = _moved(trainer.parts.model)
    assert moved[TEXT_WEIGHT] > 0
    assert moved[VISION_WEIGHT] > 0  # the images' features reached the loss
    # The saved model loads as a vision-language policy again.
    trained = trainer.parts.model.state_dict()
    for saved in (tmp_path / "final", tmp_path / "checkpoints" / "latest"):
        loaded = load_policy(str(saved))
        assert isinstance(loaded, VisionPolicy)
        assert is_vision_folder(loaded_folder(saved))
        for name, value in loaded.model.state_dict().items():
            assert torch.equal(value, trained[name]), (saved, name)


def test_a_text_model_refuses_trajectories_with_images(
    tmp_path: Path, episodes: list[Trajectory]
) -> None:
    trainer = SFTTrainer(_sft_config(tmp_path, "tiny"), episodes)
    with pytest.raises(DataError, match="has images, which model 'tiny'"):
        trainer.train()


def test_an_rl_step_with_the_vlm_on_a_screen_env_updates(tmp_path: Path) -> None:
    cfg = small_rl_config(tmp_path, env=ENV_REF, model={"spec": "tiny-vlm"})
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    result = trainer.train()
    step = result.history[0]
    assert step["trained_trajectories"] > 0
    assert torch.isfinite(torch.tensor(step["loss"]))
    # The trainer's forward with recomputed pixels gives the logprobs the rollout sampled.
    assert step["rollout_logprob_gap"] < 1e-4
    moved = _moved(trainer.parts.model)
    assert moved[TEXT_WEIGHT] > 0
    assert moved[VISION_WEIGHT] > 0


def test_a_dpo_step_on_screenshot_pairs_sees_the_images(
    tmp_path: Path, episodes: list[Trajectory]
) -> None:
    by_task: dict[str, list[Trajectory]] = {}
    for traj in episodes:
        by_task.setdefault(traj.task.id, []).append(traj)
    pairs = [PreferencePair(chosen=a, rejected=b, margin=1.0) for a, b in by_task.values()]
    cfg = DPOConfig(
        output_dir=tmp_path,
        model=ModelSettings(spec="tiny-vlm"),
        optim=OptimSettings(lr=1e-2),
        batch_size=len(pairs),
        epochs=1,
        tensorboard=False,
        progress=False,
    )
    trainer = DPOTrainer(cfg, pairs)
    result = trainer.train()
    assert result.history[0]["loss"] == pytest.approx(0.6931, abs=1e-4)  # policy == reference
    assert _moved(trainer.parts.model)[VISION_WEIGHT] > 0  # the images' features reached it


def test_an_image_text_to_text_folder_of_another_architecture_works_alike(
    tmp_path: Path,
) -> None:
    folder = save_tiny_idefics3(tmp_path / "idefics3")
    policy = load_policy(str(folder))
    assert isinstance(policy, VisionPolicy)
    episodes = screen_episodes(policy)
    image_id = policy.tokenizer.convert_tokens_to_ids("<image>")
    for traj in episodes:
        images = [image for m in traj.messages for image in m.images]
        ids = [t for m in traj.messages for t in m.token_ids or ()]
        assert ids.count(image_id) == 4 * len(images)
        assert check_trajectory(traj, chat_renderer_for(str(folder), ToolProtocol.AUTO)) == []
    # Every episode in one batch: the images' pixel tensors (and Idefics3's pixel mask) meet
    # their placeholders in row order.
    batch = TokenBatch.collate(
        [encode_trajectory(t) for t in episodes],
        pixels=lambda images: pixel_inputs(policy.processor, images),
    )
    assert batch.vision is not None and "pixel_attention_mask" in batch.vision
    with torch.no_grad():
        recomputed, _ = TokenLogprobModel(policy.model)(
            batch.input_ids, batch.attention_mask, batch.loss_mask, vision=batch.vision
        )
    assert float((recomputed - batch.old_logprobs).abs()[batch.loss_mask].max()) < 1e-4
    trainer = SFTTrainer(_sft_config(tmp_path / "run", str(folder)), episodes)
    loss = trainer.train().history[0]["loss"]
    assert torch.isfinite(torch.tensor(loss))
    start = dict(Idefics3ForConditionalGeneration.from_pretrained(folder).named_parameters())
    now = dict(trainer.parts.model.named_parameters())
    name = "model.vision_model.encoder.layers.0.mlp.fc1.weight"
    assert not torch.equal(now[name].detach().cpu(), start[name].detach())
