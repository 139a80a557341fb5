"""The step loop tells the truth: ``max_steps`` is the number of steps, a run says what it
loaded, Ctrl-C says where it stopped and where it resumes, a used output folder is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from train_helpers import qa_trajectory

from trajforge.curate import preference_pairs
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.schema import Trajectory
from trajforge.train.checkpoint import CheckpointError, OutputDirError, latest_checkpoint
from trajforge.train.config import DPOConfig, OptimSettings, SFTConfig
from trajforge.train.dpo import DPOTrainer
from trajforge.train.interrupted import TrainingInterrupted
from trajforge.train.sft import SFTTrainer


@pytest.fixture(scope="module")
def data() -> list[Trajectory]:
    tok = tiny_model_and_tokenizer()[1]
    return [qa_trajectory(tok, f"What is {a} plus 1?", f"It is {a + 1}.") for a in range(4)]


def _cfg(out: Path, **kw: object) -> SFTConfig:
    base: dict[str, object] = {
        "output_dir": out,
        "optim": OptimSettings(lr=1e-3),
        "batch_size": 2,
        "micro_batch_tokens": 256,
        "tensorboard": False,
        "progress": False,
    }
    return SFTConfig(**{**base, **kw})


def _steps(out: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_max_steps_beyond_one_epoch_cycles_the_data(
    tmp_path: Path, data: list[Trajectory], capsys: pytest.CaptureFixture[str]
) -> None:
    # 4 trajectories, 2 per step: an epoch is 2 steps; 5 asked for are 5 made (epochs ignored).
    result = SFTTrainer(_cfg(tmp_path, max_steps=5, epochs=1), data).train()
    assert result.steps == 5 and _steps(tmp_path) == [1, 2, 3, 4, 5]
    assert [h["epoch"] for h in result.history] == [0, 0, 1, 1, 2]
    said = capsys.readouterr().err
    assert "sft: 4 trajectories loaded, 2 per step: 5 steps (2.5 epochs); precision fp32" in said
    assert result.plan in said


def test_epochs_without_max_steps_are_whole_passes(tmp_path: Path, data: list[Trajectory]) -> None:
    result = SFTTrainer(_cfg(tmp_path, epochs=3), data).train()
    assert result.steps == 6 and "6 steps (3 epochs)" in result.plan


def test_dpo_max_steps_beyond_the_pairs_are_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tok = tiny_model_and_tokenizer()[1]
    trajs = [
        qa_trajectory(tok, "What is 1 plus 1?", answer, group_id="g", reward=reward)
        for answer, reward in (("It is 2.", 1.0), ("No idea.", 0.0))
    ]
    cfg = DPOConfig(
        output_dir=tmp_path, batch_size=4, max_steps=3, tensorboard=False, progress=False
    )
    result = DPOTrainer(cfg, preference_pairs(trajs)).train()
    assert result.steps == 3 and len(result.history) == 3
    assert "dpo: 1 pairs loaded, 4 per step: 3 steps" in capsys.readouterr().err


def _stop_at(step: int):  # type: ignore[no-untyped-def]
    def callback(at: int, metrics: dict[str, float]) -> None:
        if at == step:
            raise KeyboardInterrupt

    return callback


def test_ctrl_c_says_the_step_and_the_last_checkpoint_and_resume_says_where(
    tmp_path: Path, data: list[Trajectory], capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _cfg(tmp_path, max_steps=6, checkpoint_every=2)
    with pytest.raises(TrainingInterrupted) as stopped:
        SFTTrainer(cfg, data, callbacks=[_stop_at(3)]).train()
    exc = stopped.value
    assert isinstance(exc, KeyboardInterrupt)
    assert (exc.step, exc.total, exc.checkpoint_step) == (3, 6, 2)
    exc.hint = "trajforge train sft --config c.yaml --resume"
    assert str(exc) == (
        f"sft stopped at step 3 of 6; the last checkpoint is step 2 "
        f"({tmp_path / 'checkpoints' / 'step-0000002'}); "
        "resume with: trajforge train sft --config c.yaml --resume"
    )
    capsys.readouterr()
    result = SFTTrainer(cfg, data).train(resume=True)
    assert result.resumed_from == 2 and _steps(tmp_path) == [1, 2, 3, 4, 5, 6]
    said = capsys.readouterr().err
    assert "sft: resuming from step 2 (" in said and "); 4 steps to go" in said


def test_ctrl_c_without_a_checkpoint_says_so(tmp_path: Path, data: list[Trajectory]) -> None:
    with pytest.raises(TrainingInterrupted) as stopped:
        SFTTrainer(_cfg(tmp_path, max_steps=4), data, callbacks=[_stop_at(1)]).train()
    assert stopped.value.checkpoint is None
    assert (
        str(stopped.value)
        == f"sft stopped at step 1 of 4; no checkpoint was saved yet in {tmp_path}"
    )


def test_resume_of_a_folder_without_a_checkpoint_is_an_error(
    tmp_path: Path, data: list[Trajectory]
) -> None:
    with pytest.raises(CheckpointError, match="does not exist; there is nothing to resume"):
        SFTTrainer(_cfg(tmp_path / "none", max_steps=1), data).train(resume=True)
    SFTTrainer(_cfg(tmp_path / "done", max_steps=1), data).train()
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        SFTTrainer(_cfg(tmp_path / "done", max_steps=1), data).train(resume=True)


def test_an_output_dir_holding_another_run_is_refused_unless_overwrite(
    tmp_path: Path, data: list[Trajectory]
) -> None:
    SFTTrainer(_cfg(tmp_path, max_steps=4, checkpoint_every=1), data).train()
    again = _cfg(tmp_path, max_steps=2)
    with pytest.raises(OutputDirError) as refused:
        SFTTrainer(again, data).train()
    assert str(refused.value) == (
        f"output_dir {tmp_path} holds another run (metrics.jsonl, checkpoints/, final/): "
        "continue it from step 4 with --resume, replace it with --overwrite, or choose "
        "another output_dir"
    )
    assert _steps(tmp_path) == [1, 2, 3, 4]  # nothing was touched
    SFTTrainer(again, data).train(overwrite=True)
    assert _steps(tmp_path) == [1, 2] and latest_checkpoint(tmp_path) is None


def test_checkpoint_every_s_saves_by_time(tmp_path: Path, data: list[Trajectory]) -> None:
    cfg = _cfg(tmp_path, max_steps=3, checkpoint_every_s=1e-9)
    SFTTrainer(cfg, data).train()
    saved = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.is_dir())
    assert saved == ["step-0000001", "step-0000002", "step-0000003"]
    SFTTrainer(_cfg(tmp_path / "hour", max_steps=3, checkpoint_every_s=3600), data).train()
    saved = sorted(p.name for p in (tmp_path / "hour" / "checkpoints").iterdir() if p.is_dir())
    assert saved == ["step-0000003"]  # the end only: an hour has not passed
