"""What a ``TinkerService`` holds: one load per model whatever names it is served under, and a
bounded number of unsaved-weight samplers per training client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tinker
from tinker import types
from trajforge.tinker import service as service_module
from trajforge.tinker.service import SNAPSHOTS_KEPT, TinkerService
from trajforge.train.config import ModelSettings
from trajforge.train.model import load_base_model


def test_a_model_served_under_several_names_loads_once_and_answers_to_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded: list[str] = []

    def counting_load(settings: ModelSettings) -> tuple[Any, Any]:
        loaded.append(settings.spec)
        return load_base_model(settings)

    monkeypatch.setattr(service_module, "load_base_model", counting_load)
    service = TinkerService(tmp_path, {"tiny": "tiny", "/models/also-tiny": "tiny"}, None)
    assert loaded == ["tiny"]
    assert [s.name for s in service.served.values()] == ["tiny", "/models/also-tiny"]
    for served in service.served.values():
        assert served.spec == "tiny"
        assert (served.tokenizer_dir / "tokenizer_config.json").is_file()
    assert service.served["tiny"].tokenizer_dir != service.served["/models/also-tiny"].tokenizer_dir


@pytest.mark.slow
def test_only_the_newest_snapshots_of_a_training_client_are_kept(
    client: tinker.ServiceClient, served: tuple[str, TinkerService]
) -> None:
    _, service = served
    before = len(service.samplers)
    trainer = client.create_lora_training_client(base_model="tiny", rank=2).result()
    samplers = [
        trainer.save_weights_and_get_sampling_client().result() for _ in range(SNAPSHOTS_KEPT + 1)
    ]
    assert len(service.samplers) - before == SNAPSHOTS_KEPT
    prompt = types.ModelInput.from_ints([10, 11, 12])
    params = types.SamplingParams(max_tokens=2, seed=0)
    for kept in samplers[1:]:
        assert len(kept.sample(prompt, 1, params).result().sequences) == 1
    with pytest.raises(
        tinker.BadRequestError, match=r"sampling_session_id: sampler '.*' was let go"
    ):
        samplers[0].sample(prompt, 1, params).result()
