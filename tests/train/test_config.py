"""Training configs: YAML loading, file:line:key errors, overrides, the checks before a run."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.algos.advantages import Estimator
from trajforge.cli.main import app
from trajforge.errors import ConfigError
from trajforge.precision import Precision
from trajforge.train.config import (
    DistillConfig,
    DPOConfig,
    RLConfig,
    Schedule,
    SFTConfig,
    env_problem,
    load_config,
    load_train_config,
    model_name_problem,
    parse_config,
)
from trajforge.train.model import lr_lambda, make_accelerator

EXAMPLES = Path(__file__).parents[2] / "examples" / "calculator"


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_load_valid_sft_config(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "data: {jsonl: d.jsonl}\nmodel: {spec: tiny, lora: {r: 8}}\n"
        "optim: {lr: 0.001, schedule: cosine, warmup_steps: 3}\n",
    )
    cfg = load_config(path, SFTConfig)
    assert cfg.model.lora is not None and cfg.model.lora.r == 8
    assert cfg.optim.schedule is Schedule.COSINE and cfg.data is not None


def test_unknown_nested_key_names_file_line_valid_keys_and_the_nearest(tmp_path: Path) -> None:
    path = write(tmp_path, "steps: 2\noptim:\n  lr: 0.1\n  warmup_step: 5\n", "rl.yaml")
    with pytest.raises(ConfigError) as caught:
        load_config(path, RLConfig)
    assert str(caught.value) == (
        f"{path}:4: optim.warmup_step: unknown key (did you mean 'warmup_steps'?); valid keys: "
        "lr, weight_decay, betas, eps, schedule, warmup_steps, max_grad_norm"
    )


def test_bad_values_are_named_with_their_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "seed: 1\nsteps: -1\ntemperature: hot\n", "x.yaml")
    with pytest.raises(ConfigError) as caught:
        load_config(path, RLConfig)
    assert str(caught.value) == (
        f"{path}:2: steps: Input should be greater than or equal to 1 (got -1); "
        f"{path}:3: temperature: Input should be a valid number, unable to parse string as a "
        "number (got 'hot')"
    )
    path.write_text("data: {jsonl: a.jsonl, store: b.db}\n")
    with pytest.raises(ConfigError, match=r"x\.yaml:1: data: give exactly one of data\.jsonl"):
        load_config(path, SFTConfig)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml", SFTConfig)


def test_yaml_syntax_errors_name_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "steps: 3\noptim: {lr: 0.1\nseed: 2\n")
    with pytest.raises(ConfigError, match=r"cfg\.yaml:3: not valid YAML: expected ',' or '}'"):
        load_config(path, RLConfig)


def test_numbers_in_e_notation_are_numbers(tmp_path: Path) -> None:
    # YAML 1.1 reads 1e-6 as a string, which would reach the estimator as text.
    path = write(tmp_path, "optim: {lr: 1e-4}\nestimator_kwargs: {eps: 1e-6}\n")
    cfg = load_config(path, RLConfig)
    assert cfg.optim.lr == 1e-4
    assert cfg.estimator_kwargs == {"eps": 1e-6}


def test_overrides_set_dotted_keys_with_yaml_values(tmp_path: Path) -> None:
    path = write(tmp_path, "steps: 10\nmodel: {spec: tiny}\nstore: runs/x.db\n")
    cfg = load_config(
        path,
        RLConfig,
        [
            "steps=3",
            "optim.lr=1e-4",
            "model.lora.r=8",
            "model.lora.layers=[1, 2]",
            "estimator=gigpo",
            "estimator_kwargs.omega=0.5",
            "store=",
        ],
    )
    assert cfg.steps == 3 and cfg.optim.lr == 1e-4
    assert cfg.model.lora is not None and (cfg.model.lora.r, cfg.model.lora.layers) == (8, [1, 2])
    assert cfg.estimator is Estimator.GIGPO and cfg.estimator_kwargs == {"omega": 0.5}
    assert cfg.store is None


def test_a_bad_override_is_refused_naming_the_override(tmp_path: Path) -> None:
    path = write(tmp_path, "steps: 10\n")
    with pytest.raises(
        ConfigError,
        match=r"^override optim\.lrr=1: unknown key \(did you mean 'lr'\?\); valid keys: lr,",
    ):
        load_config(path, RLConfig, ["optim.lrr=1"])
    with pytest.raises(ConfigError, match=r"^override steps=many: Input should be a valid integer"):
        load_config(path, RLConfig, ["steps=many"])
    with pytest.raises(ConfigError, match=r"^override steps\.x=1: steps is a value \(10\)"):
        load_config(path, RLConfig, ["steps.x=1"])
    with pytest.raises(ConfigError, match=r"^override 'steps': write KEY=VALUE"):
        load_config(path, RLConfig, ["steps"])
    with pytest.raises(ConfigError, match=r"^override steps=\[1: the value is not valid YAML"):
        load_config(path, RLConfig, ["steps=[1"])


def test_algorithm_names_and_their_options_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"estimator: Input should be 'grpo', 'dr_grpo'"):
        parse_config({"estimator": "grpoo"}, RLConfig)
    with pytest.raises(ConfigError, match=r"kl_kind: Input should be 'k1', 'k2' or 'k3'"):
        parse_config({"kl_kind": "k4"}, RLConfig)
    # omega is an option of gigpo, not of grpo.
    assert parse_config({"estimator": "gigpo", "estimator_kwargs": {"omega": 1}}, RLConfig)
    with pytest.raises(
        ConfigError,
        match=r"estimator_kwargs: 'omega' is not an option of this estimator; its options: scale_by_std, eps",
    ):
        parse_config({"estimator_kwargs": {"omega": 1}}, RLConfig)
    with pytest.raises(
        ConfigError,
        match=r"loss_kwargs: 'eps_hi' is not an option of this loss \(did you mean 'eps_high'\?\)",
    ):
        parse_config({"loss_kwargs": {"eps_hi": 0.3}}, RLConfig)


def test_model_names_follow_the_policy_naming_rules(tmp_path: Path) -> None:
    assert model_name_problem("tiny", trainable=True) is None
    assert model_name_problem("expert", trainable=False) is None
    assert model_name_problem("openai:http://h:1/v1#m", trainable=False) is None
    assert "no weights to train" in str(model_name_problem("expert", trainable=True))
    assert "cannot be trained" in str(model_name_problem("openai:http://h:1/v1#m", trainable=True))
    assert "openai:<base_url>#<model>" in str(model_name_problem("openai:h", trainable=False))
    assert "(did you mean 'embedded'?)" in str(model_name_problem("embeded", trainable=True))
    assert "no config.json" in str(model_name_problem(str(tmp_path), trainable=True))
    (tmp_path / "config.json").write_text("{}")
    assert model_name_problem(str(tmp_path), trainable=True) is None


def test_a_training_run_is_checked_before_it_starts(tmp_path: Path) -> None:
    path = write(tmp_path, "model: {spec: tinny}\ndata: {jsonl: missing.jsonl}\n")
    with pytest.raises(ConfigError) as caught:
        load_train_config(path, SFTConfig)
    assert str(caught.value).startswith(
        f"{path}:1: model.spec: unknown model 'tinny' (did you mean 'tiny'?)"
    )
    assert f"{path}:2: data.jsonl: missing.jsonl does not exist" in str(caught.value)
    with pytest.raises(ConfigError, match=r"cfg\.yaml: data: required: data\.jsonl or data\.store"):
        load_train_config(write(tmp_path, "model: {spec: tiny}\n"), DPOConfig)
    with pytest.raises(
        ConfigError, match=r"cfg\.yaml:1: env: unknown env 'gridword'.*did you mean 'gridworld'"
    ):
        load_train_config(write(tmp_path, "env: gridword\n"), RLConfig)


def test_schedule_warmup_then_decay() -> None:
    f = lr_lambda(Schedule.LINEAR, 2, 10)
    assert [f(s) for s in (0, 1, 2)] == [0.5, 1.0, 1.0]
    assert f(6) == pytest.approx(0.5) and f(10) == 0.0
    assert lr_lambda(Schedule.COSINE, 0, 4)(2) == pytest.approx(0.5)


def test_cli_reports_config_errors_as_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "data: {jsonl: d.jsonl}\nbatch_sise: 3\n", "bad.yaml")
    result = CliRunner().invoke(app, ["train", "sft", "--config", str(path)])
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError)
    assert f"{path}:2: batch_sise: unknown key (did you mean 'batch_size'?)" in str(
        result.exception
    )


def test_cli_overrides_are_applied_and_checked(tmp_path: Path) -> None:
    path = write(tmp_path, "model: {spec: tiny}\ndata: {jsonl: d.jsonl}\n")
    result = CliRunner().invoke(app, ["train", "sft", "--config", str(path), "batch_sise=3"])
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception).startswith("override batch_sise=3: unknown key")
    # A valid override reaches the check that runs before any model loads.
    result = CliRunner().invoke(
        app, ["train", "sft", "--config", str(path), f"data.jsonl={tmp_path / 'none.jsonl'}"]
    )
    assert isinstance(result.exception, ConfigError)
    assert "none.jsonl does not exist" in str(result.exception)


@pytest.mark.parametrize(
    ("name", "cls"),
    [("sft", SFTConfig), ("dpo", DPOConfig), ("rl", RLConfig), ("distill", DistillConfig)],
)
def test_example_configs_load_and_chain(name: str, cls: type[SFTConfig]) -> None:
    cfg = load_config(EXAMPLES / f"{name}.yaml", cls)
    assert cfg.model.precision is Precision.AUTO
    sft = load_config(EXAMPLES / "sft.yaml", SFTConfig)
    # SFT starts from the embedded model; DPO and RL from the weights the SFT example writes.
    expected = "embedded" if name == "sft" else str(sft.output_dir / "final")
    assert cfg.model.spec == expected
    if isinstance(cfg, RLConfig):
        assert env_problem(cfg.env) is None
    if isinstance(cfg, DistillConfig):  # the teacher is the weights the RL example writes
        rl = load_config(EXAMPLES / "rl.yaml", RLConfig)
        assert cfg.distill.teacher == str(rl.output_dir / "final")


def test_accelerate_configured_for_its_own_fsdp_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(
        ConfigError, match=r"accelerate is configured for FSDP.*distributed.strategy"
    ):
        make_accelerator("no")
