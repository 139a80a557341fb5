"""Training configs: YAML loading, unknown keys and bad values named with the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.errors import ConfigError
from trajforge.train.config import RLConfig, Schedule, SFTConfig, load_config
from trajforge.train.model import lr_lambda


def test_load_valid_sft_config(tmp_path: Path) -> None:
    path = tmp_path / "sft.yaml"
    path.write_text(
        "data: {jsonl: d.jsonl}\nmodel: {spec: tiny, lora: {r: 8}}\n"
        "optim: {lr: 0.001, schedule: cosine, warmup_steps: 3}\n"
    )
    cfg = load_config(path, SFTConfig)
    assert cfg.model.lora is not None and cfg.model.lora.r == 8
    assert cfg.optim.schedule is Schedule.COSINE and cfg.data is not None


def test_unknown_nested_key_is_named_with_file(tmp_path: Path) -> None:
    path = tmp_path / "rl.yaml"
    path.write_text("optim: {lr: 0.1, lr_warmup: 5}\n")
    with pytest.raises(ConfigError, match=r"rl\.yaml: optim\.lr_warmup: unknown key"):
        load_config(path, RLConfig)


def test_bad_value_and_bad_source_are_named(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("steps: -1\n")
    with pytest.raises(ConfigError, match="steps: Input should be greater than or equal to 1"):
        load_config(path, RLConfig)
    path.write_text("data: {jsonl: a.jsonl, store: b.db}\n")
    with pytest.raises(ConfigError, match="data: Value error, give exactly one"):
        load_config(path, SFTConfig)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml", SFTConfig)


def test_schedule_warmup_then_decay() -> None:
    f = lr_lambda(Schedule.LINEAR, 2, 10)
    assert [f(s) for s in (0, 1, 2)] == [0.5, 1.0, 1.0]
    assert f(6) == pytest.approx(0.5) and f(10) == 0.0
    assert lr_lambda(Schedule.COSINE, 0, 4)(2) == pytest.approx(0.5)


def test_cli_reports_config_errors_as_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("data: {jsonl: d.jsonl}\nbatch_sise: 3\n")
    result = CliRunner().invoke(app, ["train", "sft", "--config", str(path)])
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError)
    assert "batch_sise: unknown key" in str(result.exception)
