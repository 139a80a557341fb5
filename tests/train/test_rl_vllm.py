"""RL with a real vLLM server sampling (``rollout_server: vllm``, the CPU build in ``make
setup``'s ``.venv-vllm``): its LoRA adapter, or its full weights by a restart, follow the
trainer, every turn records the update it was sampled after, and nothing is left running. SmolLM2 in fp32 (vLLM's CPU attention takes
head sizes of 32 and up, the tiny model's are 16). Skipped with the reason where no vLLM is
here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError
from train_helpers import small_rl_config, token_id_rubric

from trajforge.errors import ConfigError
from trajforge.policy import VLLMPolicy
from trajforge.policy.vllm_server import vllm_python
from trajforge.store import TrajectoryStore
from trajforge.train.rl import RLTrainer
from trajforge.train.rl.staleness import turn_versions

LORA = {"r": 8, "alpha": 16, "layers": [28, 29]}
GAP_TOLERANCE = 2e-3
"""fp32 on both sides (measured 4e-6: vLLM's CPU kernels sum in another order). Step 1's update
(lr 5e-3) moves the sampled tokens' logprobs by 3e-2 on average: an adapter that did not follow
would show that gap at step 2."""


@pytest.mark.slow
# Full weights start vLLM twice; its CPU build takes minutes to start on 2 busy cores.
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("weights", ["lora", "full"])
def test_a_vllm_server_samples_from_the_weights_the_trainer_just_updated(
    tmp_path: Path, weights: str
) -> None:
    try:
        vllm_python()
    except ConfigError as exc:
        pytest.skip(str(exc))
    store = tmp_path / "rollouts.db"
    lora = {"lora": LORA} if weights == "lora" else {}
    cfg = small_rl_config(
        tmp_path,
        model={"spec": "embedded", "precision": "fp32", **lora},
        rollout_server="vllm",
        steps=2,
        max_new_tokens=16,
        temperature=1.0,
        optim={"lr": 5e-3 if lora else 1e-5},
        store=store,
    )
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    policy = trainer.weights.policy
    assert isinstance(policy, VLLMPolicy) and policy.server is not None
    folder = trainer.weights.folder
    assert folder is not None

    trainer.train()

    steps = [json.loads(line) for line in (tmp_path / "metrics.jsonl").open()]
    assert [s["step"] for s in steps] == [1, 2]
    assert steps[0]["loss"] != 0.0  # step 1 trained: step 2 samples from new weights
    for step in steps:
        assert step["rollout_logprob_gap"] < GAP_TOLERANCE, step
        assert step["stale_samples"] == 0
    with TrajectoryStore(store) as db:
        runs = [r["run_id"] for r in db.list_runs()]
        assert [r.rsplit("-", 1)[1] for r in runs] == ["step1", "step2"]
        for step, run in enumerate(runs, start=1):
            trajs = db.query(run=run)
            assert len(trajs) == 4
            assert all(turn_versions(t) == [step - 1] for t in trajs)
            assert all(t.model == "vllm" for t in trajs)
    # Every server the run started (full weights: one more on step 1's) is gone.
    left = subprocess.run(["pgrep", "-f", str(folder)], capture_output=True, text=True)
    assert left.stdout == "", "a vLLM server outlived the run"
    assert not folder.exists(), "the base weights and adapters saved for the server remain"


def test_a_rollout_server_is_checked_with_the_config(tmp_path: Path) -> None:
    lora = {"spec": "tiny", "lora": LORA}
    for full in ({"async_staleness": 1}, {"rollout_server": "vllm:http://127.0.0.1:8000"}):
        with pytest.raises(ValidationError, match=r"rollout_server: .* else set model.lora"):
            small_rl_config(tmp_path, **{"rollout_server": "vllm", **full})
    small_rl_config(tmp_path, rollout_server="vllm")  # full weights, reloaded each step
    with pytest.raises(ValidationError, match=r"'sglang': write vllm .* or vllm:http"):
        small_rl_config(tmp_path, model=lora, rollout_server="sglang")
    with pytest.raises(ValidationError, match=r"rollout_server: .* \(not with ray"):
        small_rl_config(tmp_path, model=lora, rollout_server="vllm", ray={})
    cfg = small_rl_config(tmp_path, model=lora, rollout_server="vllm:http://127.0.0.1:8000")
    assert cfg.rollout_server == "vllm:http://127.0.0.1:8000"
