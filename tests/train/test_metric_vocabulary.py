"""docs/metrics.md is the whole metric vocabulary: what a tiny SFT, DPO and RL write to
metrics.jsonl is in its table under the trainer that wrote it, and every key the table lists
for a trainer is one that trainer writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from train_helpers import qa_trajectory, small_rl_config, token_id_rubric

from trajforge.curate import preference_pairs
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.train.config import DPOConfig, SFTConfig
from trajforge.train.dpo import DPOTrainer
from trajforge.train.rl import RLTrainer
from trajforge.train.sft import SFTTrainer

DOC = Path(__file__).parents[2] / "docs" / "metrics.md"
RL_SOURCE = Path(__file__).parents[2] / "src" / "trajforge" / "train" / "rl" / "trainer.py"
ROW = re.compile(r"^\| `(\w+)` \| ([a-z, ]+) \|")
# Keys a tiny run on one CPU cannot produce; the RL trainer's source must still write them
# (the weights version every sampled turn records now gives ``policy_staleness_max`` here too).
ONLY_ON_RAY: set[str] = set()


def documented() -> dict[str, set[str]]:
    """Each trainer's keys as docs/metrics.md's table lists them."""
    out: dict[str, set[str]] = {"sft": set(), "dpo": set(), "rl": set()}
    for line in DOC.read_text().splitlines():
        m = ROW.match(line)
        if m:
            for trainer in m.group(2).split(","):
                out[trainer.strip()].add(m.group(1))
    return out


def logged(output_dir: Path) -> set[str]:
    """Every key of every line of a run's metrics.jsonl."""
    lines = (output_dir / "metrics.jsonl").read_text().splitlines()
    return {key for line in lines for key in json.loads(line)}


def sft_keys(tmp_path: Path) -> set[str]:
    tok = tiny_model_and_tokenizer()[1]
    data = [qa_trajectory(tok, f"What is {a} plus 1?", f"It is {a + 1}.") for a in range(4)]
    cfg = SFTConfig(output_dir=tmp_path, batch_size=2, tensorboard=False, progress=False)
    SFTTrainer(cfg, data).train()
    return logged(tmp_path)


def dpo_keys(tmp_path: Path) -> set[str]:
    tok = tiny_model_and_tokenizer()[1]
    trajs = []
    for a in range(2):
        q = f"What is {a} plus 1?"
        trajs.append(qa_trajectory(tok, q, f"It is {a + 1}.", group_id=f"g{a}", reward=1.0))
        trajs.append(qa_trajectory(tok, q, "No idea.", group_id=f"g{a}", reward=0.0))
    cfg = DPOConfig(output_dir=tmp_path, batch_size=2, tensorboard=False, progress=False)
    DPOTrainer(cfg, preference_pairs(trajs, min_margin=0.5)).train()
    return logged(tmp_path)


def rl_keys(tmp_path: Path) -> set[str]:
    """Three runs between them switch on every optional RL metric but Ray's."""
    full = small_rl_config(
        tmp_path / "grpo",
        steps=2,
        kl_coef=0.05,
        replay={"enabled": True},
        revisit={"enabled": True},
        difficulty={"refill": True, "band": [0.1, 0.9]},
        validation={"tasks": 1},
    )
    RLTrainer(full, rubric=token_id_rubric()).train()
    gigpo = small_rl_config(
        tmp_path / "gigpo",
        estimator="gigpo",
        max_turns=2,
        rollout_correction="seq_mis",
        stale_samples="resample",
    )
    RLTrainer(gigpo, rubric=token_id_rubric()).train()
    distill = {"teacher": "self", "privileged": "expert"}
    tree = {"branches": 1}
    RLTrainer(small_rl_config(tmp_path / "distill", distill=distill, tree=tree)).train()
    return logged(tmp_path / "grpo") | logged(tmp_path / "gigpo") | logged(tmp_path / "distill")


def test_every_key_a_trainer_writes_is_documented_and_every_documented_key_is_written(
    tmp_path: Path,
) -> None:
    docs = documented()
    written = {
        "sft": sft_keys(tmp_path / "sft"),
        "dpo": dpo_keys(tmp_path / "dpo"),
        "rl": rl_keys(tmp_path / "rl"),
    }
    for trainer, keys in written.items():
        assert not keys - docs[trainer], f"{trainer} writes keys docs/metrics.md lacks"
    assert not docs["sft"] - written["sft"], "docs/metrics.md lists keys SFT never writes"
    assert not docs["dpo"] - written["dpo"], "docs/metrics.md lists keys DPO never writes"
    unwritten = docs["rl"] - written["rl"]
    assert unwritten == ONLY_ON_RAY, "docs/metrics.md lists keys RL never writes"
    source = RL_SOURCE.read_text()
    assert all(f'"{key}"' in source for key in ONLY_ON_RAY)


def test_the_table_parses_and_names_each_key_once() -> None:
    rows = [ROW.match(line) for line in DOC.read_text().splitlines()]
    keys = [m.group(1) for m in rows if m]
    assert len(keys) == len(set(keys)) > 40
    assert {"kl_ref", "zero_adv_frac", "reward_std", "rollout_logprob_gap"} <= set(keys)
    # The merged names are gone for good.
    assert not {"kl", "adv_zero_adv_group_frac", "adv_reward_std"} & set(keys)
