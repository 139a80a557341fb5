"""Datasets exported for TRL, trained on by TRL itself: an ``SFTTrainer`` step on the
conversational and prompt/completion exports and a ``DPOTrainer`` step on the preference pairs,
each from a Parquet file ``datasets`` reads as it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from datasets import load_dataset
from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.formats.records import FORMATS, read_records
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.schema import Message, Outcome, Role, Task, ToolCall, Trajectory
from trajforge.store import TrajectoryStore

TRAINING = {
    "max_steps": 1,
    "per_device_train_batch_size": 2,
    "learning_rate": 1e-4,
    "report_to": [],
    "save_strategy": "no",
    "use_cpu": True,
    "disable_tqdm": True,
    "dataloader_num_workers": 0,
}


def _trajectory(k: int, right: bool) -> Trajectory:
    answer = k + 1 if right else k + 2
    call = ToolCall(id="call_0_0", name="calculator", arguments={"expression": f"{k} + 1"})
    messages = [
        Message(role=Role.SYSTEM, content="Use the calculator."),
        Message(role=Role.USER, content=f"What is {k} + 1?"),
        Message(role=Role.ASSISTANT, content="", tool_calls=[call]),
        Message(role=Role.TOOL, content=str(answer), tool_call_id="call_0_0"),
        Message(role=Role.ASSISTANT, content=f"The answer is {answer}."),
    ]
    return Trajectory(
        task=Task(id=f"t{k}", prompt=messages[1].content, answer=k + 1),
        messages=messages,
        group_id=f"g{k}",
        run_id="pairs",
        outcome=Outcome(reward=1.0 if right else 0.0),
    )


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("trl")
    store = folder / "s.db"
    with TrajectoryStore(store) as db:
        db.add_many([_trajectory(k, right) for k in range(4) for right in (True, False)])
    out = {}
    for fmt in ("openai", "trl-prompt-completion", "trl-preference"):
        out[fmt] = folder / f"{fmt}.parquet"
        args = ["export", "--out", str(out[fmt]), "-f", fmt, "--store", str(store)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    return out


def test_the_exports_hold_what_trl_expects(exports: dict[str, Path]) -> None:
    pairs = load_dataset("parquet", data_files=str(exports["trl-preference"]))["train"]
    assert len(pairs) == 4 and set(pairs.column_names) == {"prompt", "chosen", "rejected", "tools"}
    first = pairs[0]
    assert [m["role"] for m in first["prompt"]] == ["system", "user"]
    assert first["chosen"][-1]["content"].startswith("The answer is")
    assert first["chosen"][-1]["content"] != first["rejected"][-1]["content"]
    completions = load_dataset("parquet", data_files=str(exports["trl-prompt-completion"]))["train"]
    row = completions[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user", "assistant", "tool"]
    assert row["completion"][0]["role"] == "assistant" and json.loads(row["tools"]) == []
    # The Parquet files read back as the same conversations.
    back = list(
        read_records(exports["trl-prompt-completion"], FORMATS.get("trl-prompt-completion"))
    )
    assert len(back) == 8 and [m.role for m in back[0].messages][-1] is Role.ASSISTANT


@pytest.mark.parametrize("fmt", ["openai", "trl-prompt-completion"])
def test_trl_sft_trains_on_the_export(exports: dict[str, Path], fmt: str, tmp_path: Path) -> None:
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    dataset = load_dataset("parquet", data_files=str(exports[fmt]))["train"]
    trainer = SFTTrainer(
        model=model,
        args=SFTConfig(output_dir=str(tmp_path), **TRAINING),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    result = trainer.train()
    assert result.global_step == 1 and result.training_loss > 0


def test_trl_dpo_trains_on_the_pairs(exports: dict[str, Path], tmp_path: Path) -> None:
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    reference, _ = tiny_model_and_tokenizer(seed=0)  # built in code: TRL cannot load it by path
    dataset = load_dataset("parquet", data_files=str(exports["trl-preference"]))["train"]
    trainer = DPOTrainer(
        model=model,
        ref_model=reference,
        args=DPOConfig(output_dir=str(tmp_path), **TRAINING),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    result = trainer.train()
    assert result.global_step == 1 and result.training_loss > 0
