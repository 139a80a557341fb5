"""``trajforge config show`` and ``trajforge config docs``: generated from the models, current."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from typer.testing import CliRunner

from trajforge.cli.config_cmds import reference_markdown
from trajforge.cli.main import app
from trajforge.pipeline.config import STAGE_KINDS, Experiment, check_experiment, load_experiment
from trajforge.train.config import DPOConfig, RLConfig, SFTConfig

runner = CliRunner()
DOC = Path(__file__).parents[2] / "docs" / "configuration.md"


def _fields(cls: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    """Every key of ``cls`` (nested models included) with its field info."""
    out = []
    for name, info in cls.model_fields.items():
        out.append((prefix + name, info))
        for arg in (info.annotation, *getattr(info.annotation, "__args__", ())):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                out += _fields(arg, f"{prefix}{name}.")
    return out


def test_docs_file_is_the_generated_reference() -> None:
    assert DOC.read_text() == reference_markdown(), (
        "docs/configuration.md is out of date: run trajforge config docs --out docs/configuration.md"
    )


@pytest.mark.parametrize("cls", [SFTConfig, DPOConfig, RLConfig, Experiment, *STAGE_KINDS])
def test_every_key_is_described_and_in_the_reference(cls: type[BaseModel]) -> None:
    doc = reference_markdown()
    for key, info in _fields(cls):
        assert info.description, f"{cls.__name__}.{key} has no docstring"
        assert f"`{key}`" in doc or f"`stages[].{key}`" in doc, key


@pytest.mark.parametrize(
    ("kind", "cls"), [("sft", SFTConfig), ("dpo", DPOConfig), ("rl", RLConfig)]
)
def test_show_prints_the_defaults_as_yaml_that_loads(kind: str, cls: type[BaseModel]) -> None:
    result = runner.invoke(app, ["config", "show", kind])
    assert result.exit_code == 0, result.output
    assert cls.model_validate(yaml.safe_load(result.output)) == cls()
    # Each key comes with its description as a comment.
    description = " ".join(str(cls.model_fields["seed"].description).split())
    assert f"# {description}\nseed: 0\n" in result.output


def test_show_experiment_is_a_runnable_experiment(tmp_path: Path) -> None:
    result = runner.invoke(app, ["config", "show", "experiment"])
    assert result.exit_code == 0, result.output
    assert "# (required) Experiment name" in result.output
    path = tmp_path / "experiment.yaml"
    path.write_text(result.output)
    exp = load_experiment(path)
    assert [s.kind for s in exp.stages] == ["eval", "demonstrations", "sft", "eval", "rl", "eval"]
    check_experiment(exp, tmp_path / "runs")


def test_show_refuses_an_unknown_kind() -> None:
    result = runner.invoke(app, ["config", "show", "ppo"])
    assert result.exit_code != 0


def test_docs_writes_and_checks_the_file(tmp_path: Path) -> None:
    out = tmp_path / "configuration.md"
    assert runner.invoke(app, ["config", "docs", "--out", str(out), "--check"]).exit_code == 1
    assert runner.invoke(app, ["config", "docs", "--out", str(out)]).exit_code == 0
    assert out.read_text() == reference_markdown()
    assert runner.invoke(app, ["config", "docs", "--out", str(out), "--check"]).exit_code == 0
    printed = runner.invoke(app, ["config", "docs"])
    assert printed.output == reference_markdown()
