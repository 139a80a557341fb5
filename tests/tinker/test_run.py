"""The models ``trajforge serve --tinker`` offers, and the command's refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajforge.errors import ConfigError
from trajforge.tinker.run import offered_models


def test_the_embedded_model_tiny_and_folders_by_name_and_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAJFORGE_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "my-model"
    folder.mkdir()
    models = offered_models([folder])
    assert models["smollm2-135m-instruct"] == models["embedded"] == "embedded"
    # the embedded model's safetensors folder, so a recipe's tokenizer loads by the model name
    assert models[str(tmp_path / "cache" / "models" / "smollm2-135m-instruct")] == "embedded"
    assert models["tiny"] == "tiny"
    assert models["my-model"] == models[str(folder.resolve())] == str(folder.resolve())


def test_a_missing_folder_or_a_name_served_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--tinker-model: .*nope is not a model folder"):
        offered_models([tmp_path / "nope"])
    twice = tmp_path / "tiny"
    twice.mkdir()
    with pytest.raises(ConfigError, match="a model named 'tiny' is already served"):
        offered_models([twice])
