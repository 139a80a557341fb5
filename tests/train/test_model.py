"""Model-dependent settings are checked against the loaded model before the first step, each
error naming the key and the valid range (not PEFT's or torch's words)."""

from __future__ import annotations

import pytest

from trajforge.errors import ConfigError
from trajforge.policy.models.tiny import SCRATCH_SIZES
from trajforge.train.config import LoraSettings, ModelSettings, SFTConfig
from trajforge.train.model import build_train_parts

TINY_LAYERS = SCRATCH_SIZES["tiny"].layers
TINY_MAX_POSITIONS = SCRATCH_SIZES["tiny"].max_positions


def _build(**kw: object) -> None:
    build_train_parts(SFTConfig(progress=False, tensorboard=False, **kw), 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("layers", "said"),
    [
        ([TINY_LAYERS], f"{TINY_LAYERS} is not a decoder layer"),
        ([-1, TINY_LAYERS + 5], f"-1, {TINY_LAYERS + 5} are not decoder layers"),
    ],
)
def test_lora_layers_outside_the_model_name_its_range(layers: list[int], said: str) -> None:
    lora = LoraSettings(r=2, alpha=4, layers=layers)
    with pytest.raises(ConfigError) as err:
        _build(model=ModelSettings(lora=lora))
    assert str(err.value) == (
        f"model.lora.layers: {said} of model 'tiny', which has {TINY_LAYERS} "
        f"(0 to {TINY_LAYERS - 1})"
    )


def test_lora_layers_inside_the_model_train() -> None:
    _build(model=ModelSettings(lora=LoraSettings(r=2, alpha=4, layers=[TINY_LAYERS - 1])))


def test_lora_target_modules_the_model_lacks_are_named_with_its_linear_layers() -> None:
    lora = LoraSettings(r=2, alpha=4, target_modules=["q_proj", "qproj"])
    with pytest.raises(ConfigError) as err:
        _build(model=ModelSettings(lora=lora))
    assert str(err.value).startswith(
        "model.lora.target_modules: 'qproj' is not a linear layer of model 'tiny' (did you mean "
        "'q_proj'?); its linear layers: down_proj, gate_proj, k_proj, lm_head, o_proj, q_proj"
    )


def test_max_seq_len_beyond_the_models_positions_is_refused() -> None:
    with pytest.raises(ConfigError, match=f"at most {TINY_MAX_POSITIONS}$"):
        _build(max_seq_len=TINY_MAX_POSITIONS + 1)
