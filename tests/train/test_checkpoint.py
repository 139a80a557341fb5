"""Checkpoints resume exactly: a run killed with SIGKILL and resumed ends where an
uninterrupted run ends (same seeds), to 1e-6."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from train_helpers import qa_trajectory
from transformers import AutoTokenizer

from trajforge.errors import ConfigError
from trajforge.formats.jsonl import write_trajectories
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.policy.naming import load_policy
from trajforge.policy.renderer import ChatRenderer
from trajforge.rollout import Limits, PolicyRef, RolloutSpec, Sampling, TaskSample, run_rollout
from trajforge.train.checkpoint import latest_checkpoint, prune_checkpoints
from trajforge.train.config import LoraSettings, ModelSettings, OptimSettings, SFTConfig
from trajforge.train.sft import SFTTrainer

KILL_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from trajforge.train.config import SFTConfig, load_config
    from trajforge.train.data import load_source
    from trajforge.train.sft import SFTTrainer

    cfg = load_config(Path(sys.argv[1]), SFTConfig)
    kill_after = int(sys.argv[2])

    def kill(step, metrics):
        if step == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    SFTTrainer(cfg, load_source(cfg.data), callbacks=[kill]).train()
    """
)


def _data(n: int = 6) -> list:  # type: ignore[type-arg]
    tok = tiny_model_and_tokenizer()[1]
    return [
        qa_trajectory(
            tok, f"What is {a} times 3?", f"The answer is {3 * a}.", tool_result=str(3 * a)
        )
        for a in range(n)
    ]


def _trainer_cfg(out: Path, **kw) -> SFTConfig:  # type: ignore[no-untyped-def]
    base = dict(
        output_dir=out,
        optim=OptimSettings(lr=5e-3, warmup_steps=2, schedule="cosine"),
        batch_size=2,
        epochs=3,
        max_steps=5,
        micro_batch_tokens=200,
        checkpoint_every=1,
        tensorboard=False,
        progress=False,
    )
    base.update(kw)
    return SFTConfig(**base)


def _params(trainer: SFTTrainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.parts.model.named_parameters()}


def test_resume_in_process_with_lora_dropout_is_exact(tmp_path: Path) -> None:
    data = _data()
    model = ModelSettings(lora=LoraSettings(r=4, alpha=8, dropout=0.2))
    full = SFTTrainer(_trainer_cfg(tmp_path / "a", model=model), data)
    full.train()

    class Stop(Exception):
        pass

    def stop(step: int, metrics: dict[str, float]) -> None:
        if step == 2:
            raise Stop

    first = SFTTrainer(_trainer_cfg(tmp_path / "b", model=model), data, callbacks=[stop])
    with pytest.raises(Stop):
        first.train()
    assert latest_checkpoint(tmp_path / "b") is not None
    second = SFTTrainer(_trainer_cfg(tmp_path / "b", model=model), data)
    result = second.train(resume=True)
    assert result.resumed_from == 2
    a, b = _params(full), _params(second)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-6, rtol=0), name
    steps = [
        h["step"]
        for h in map(eval_json, (tmp_path / "b" / "metrics.jsonl").read_text().splitlines())
    ]
    assert steps == [1, 2, 3, 4, 5]


def eval_json(line: str) -> dict:  # type: ignore[type-arg]
    import json

    return json.loads(line)


@pytest.mark.slow
def test_sigkill_then_resume_equals_uninterrupted(tmp_path: Path) -> None:
    data_path = tmp_path / "data.jsonl"
    write_trajectories(data_path, _data())
    env = {**os.environ, "PYTHONHASHSEED": "0"}

    def config(name: str) -> Path:
        cfg = {
            "output_dir": str(tmp_path / name),
            "data": {"jsonl": str(data_path)},
            "optim": {"lr": 5e-3, "warmup_steps": 2, "schedule": "cosine"},
            "batch_size": 2,
            "epochs": 3,
            "max_steps": 5,
            "micro_batch_tokens": 200,
            "checkpoint_every": 1,
            "tensorboard": False,
            "progress": False,
        }
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    cli = [str(Path(sys.executable).parent / "trajforge")]
    run = subprocess.run(
        [*cli, "train", "sft", "--config", str(config("full"))],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr

    killed = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(config("killed")), "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (tmp_path / "killed" / "final").exists()
    resumed = subprocess.run(
        [*cli, "train", "sft", "--config", str(config("killed")), "--resume", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert '"resumed_from": 3' in resumed.stdout

    a = load_file(tmp_path / "full" / "final" / "model.safetensors")
    b = load_file(tmp_path / "killed" / "final" / "model.safetensors")
    assert a.keys() == b.keys() and a
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-6, rtol=0), name
    untrained = tiny_model_and_tokenizer()[0].state_dict()
    assert any(not torch.equal(a[n], untrained[n]) for n in a)


def test_an_intermediate_checkpoint_loads_as_a_model_and_evaluates(tmp_path: Path) -> None:
    at_two: dict[str, torch.Tensor] = {}

    def keep(step: int, metrics: dict[str, float]) -> None:
        if step == 2:
            weights = trainer.parts.unwrapped_model().state_dict()
            at_two.update({name: value.clone() for name, value in weights.items()})

    cfg = _trainer_cfg(tmp_path, max_steps=3, optim=OptimSettings(lr=1e-2))
    trainer = SFTTrainer(cfg, _data(), callbacks=[keep])
    trainer.train()
    step2 = tmp_path / "checkpoints" / "step-0000002"
    policy = load_policy(str(step2))
    loaded = policy.model.state_dict()  # type: ignore[attr-defined]
    assert loaded.keys() == at_two.keys()
    for name, value in at_two.items():
        assert torch.equal(loaded[name], value), name
    final = load_file(tmp_path / "final" / "model.safetensors")
    assert any(not torch.equal(final[n], loaded[n]) for n in final)  # step 3 moved on
    spec = RolloutSpec(
        env="calculator",
        policy=PolicyRef(name=str(step2)),
        tasks=TaskSample(count=1),
        limits=Limits(max_turns=1, max_new_tokens=4),
        sampling=Sampling(max_new_tokens=4),
    )
    (trajectory,) = run_rollout(spec)
    assert trajectory.model == str(step2) and trajectory.messages[-1].token_ids
    latest = load_policy(str(tmp_path / "checkpoints" / "latest"))
    assert latest.name == str(tmp_path / "checkpoints" / "step-0000003")


def test_checkpoints_and_the_final_folder_carry_the_deploy_template(tmp_path: Path) -> None:
    """What transformers, vLLM or llama.cpp read from the folder renders as training did."""
    SFTTrainer(_trainer_cfg(tmp_path, max_steps=1), _data()).train()
    expected = ChatRenderer(tiny_model_and_tokenizer()[1]).deploy_template()
    for folder in (tmp_path / "checkpoints" / "step-0000001", tmp_path / "final"):
        assert AutoTokenizer.from_pretrained(str(folder)).chat_template == expected, folder


def test_a_lora_checkpoint_loads_merged_and_trains_on(tmp_path: Path) -> None:
    model = ModelSettings(lora=LoraSettings(r=4, alpha=8))
    SFTTrainer(_trainer_cfg(tmp_path, model=model, max_steps=2), _data()).train()
    last = load_policy(str(tmp_path / "checkpoints" / "step-0000002"))
    final = load_policy(str(tmp_path / "final"))
    a, b = last.model.state_dict(), final.model.state_dict()  # type: ignore[attr-defined]
    assert a.keys() == b.keys() and not any("lora" in k for k in a)
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-6, rtol=0), name
    first = str(tmp_path / "checkpoints" / "step-0000001")
    on = SFTTrainer(
        _trainer_cfg(tmp_path / "on", model=ModelSettings(spec=first), max_steps=1), _data()
    ).train()
    assert on.steps == 1


def test_a_folder_that_is_neither_model_nor_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is no training checkpoint"):
        load_policy(str(tmp_path))


def test_only_the_latest_checkpoints_are_kept_and_the_run_resumes_from_them(
    tmp_path: Path,
) -> None:
    data = _data()
    SFTTrainer(_trainer_cfg(tmp_path / "two", keep_checkpoints=2), data).train()
    root = tmp_path / "two" / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-0000004", "step-0000005"]
    resumed = SFTTrainer(_trainer_cfg(tmp_path / "two", max_steps=6, keep_checkpoints=2), data)
    assert resumed.train(resume=True).resumed_from == 5
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-0000005", "step-0000006"]
    SFTTrainer(_trainer_cfg(tmp_path / "all", keep_checkpoints=None), data).train()
    kept = sorted(p.name for p in (tmp_path / "all" / "checkpoints").glob("step-*"))
    assert kept == [f"step-{i:07d}" for i in range(1, 6)]


def test_pruning_never_deletes_the_checkpoint_latest_names(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3, 7):
        (root / f"step-{step:07d}").mkdir(parents=True)
    (root / "latest").write_text("step-0000002")  # resumed from 2 after a crash past 7
    deleted = prune_checkpoints(root, keep=1)
    assert sorted(p.name for p in deleted) == ["step-0000001", "step-0000003"]
    assert sorted(p.name for p in root.glob("step-*")) == ["step-0000002", "step-0000007"]
