"""The experiment file: file:line:field errors, overrides by stage name, the up-front check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from trajforge.errors import ConfigError
from trajforge.pipeline.config import (
    check_experiment,
    load_experiment,
    rl_config,
    sft_config,
)
from trajforge.precision import Precision

EXAMPLES = Path(__file__).parents[2] / "examples"

# Line numbers matter to these tests: keep the layout.
EXPERIMENT = """\
name: t
env: calculator
model: tiny
stages:
  - {kind: eval, name: base}
  - kind: demonstrations
    tasks: 4
  - kind: sft
    train:
      batch_size: 2
  - kind: rl
    train:
      steps: 2
      optim: {lr: 1.0e-5}
"""


def write(tmp_path: Path, text: str = EXPERIMENT, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def check(path: Path, *overrides: str) -> None:
    exp = load_experiment(path, overrides)
    check_experiment(exp, path.parent / "runs" / exp.name)


def test_a_valid_experiment_passes_the_check(tmp_path: Path) -> None:
    check(write(tmp_path))
    assert not (tmp_path / "runs").exists()  # the check writes nothing


@pytest.mark.parametrize(
    ("path", "env"),
    [
        ("calculator/experiment.yaml", "calculator"),
        ("gridworld/experiment.yaml", "gridworld"),
        ("keydoor/experiment.yaml", "keydoor"),
        ("keydoor/cpu.yaml", "keydoor-compact"),
        ("retail/experiment.yaml", "retail"),
    ],
)
def test_shipped_examples_pass_the_check(path: str, env: str, tmp_path: Path) -> None:
    exp = load_experiment(EXAMPLES / path)
    assert exp.env == env
    check_experiment(exp, tmp_path / exp.name)


def test_unknown_train_key_names_file_line_stage_and_valid_keys(tmp_path: Path) -> None:
    path = write(tmp_path, EXPERIMENT.replace("steps: 2", "stepz: 2"))
    with pytest.raises(ConfigError) as caught:
        check(path)
    message = str(caught.value)
    assert message.startswith(
        f"{path}:13: stages.rl.train.stepz: unknown key (did you mean 'steps'?)"
    )
    assert "valid keys: output_dir, seed, model, optim" in message
    assert "samples_per_group" in message


def test_every_problem_of_every_stage_is_reported_at_once(tmp_path: Path) -> None:
    text = (
        EXPERIMENT.replace("env: calculator", "env: calculater")
        .replace("batch_size: 2", "batch_size: 0")
        .replace("optim: {lr: 1.0e-5}", "optim: {lr: 1.0e-5}\n      estimator: grpoo")
    )
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        check(path)
    message = str(caught.value)
    assert "exp.yaml:2: env: unknown env 'calculater'" in message
    assert "(did you mean 'calculator'?)" in message
    assert (
        "exp.yaml:10: stages.sft.train.batch_size: Input should be greater than or equal to 1 (got 0)"
        in message
    )
    assert "exp.yaml:15: stages.rl.train.estimator: Input should be 'grpo'" in message
    assert message.count(f"{path}:") == 3


def test_yaml_syntax_and_repeated_keys_name_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"exp\.yaml:3: not valid YAML: mapping values"):
        load_experiment(write(tmp_path, "name: t\nenv: calculator\n  model: tiny\n"))
    with pytest.raises(ConfigError, match=r"exp\.yaml:3: env: given twice \(also line 2\)"):
        load_experiment(write(tmp_path, "name: t\nenv: calculator\nenv: python\n"))
    with pytest.raises(ConfigError, match=r"exp\.yaml:1: the top level must be a mapping"):
        load_experiment(write(tmp_path, "- a\n- b\n"))


def test_experiment_keys_are_named_by_stage_and_line(tmp_path: Path) -> None:
    text = EXPERIMENT.replace(
        "  - {kind: eval, name: base}", "  - {kind: eval, name: base, colour: red}"
    )
    with pytest.raises(
        ConfigError,
        match=r"exp\.yaml:5: stages\.base\.colour: unknown key; valid keys: kind, name, force, memory, memory_k, memory_update, memory_embed$",
    ):
        load_experiment(write(tmp_path, text))
    with pytest.raises(
        ConfigError, match=r"exp\.yaml:4: stages: stage names must be unique, repeated: base"
    ):
        load_experiment(write(tmp_path, EXPERIMENT + "  - {kind: eval, name: base}\n"))


def test_overrides_address_stages_by_name_and_read_yaml_values(tmp_path: Path) -> None:
    exp = load_experiment(
        write(tmp_path),
        [
            "stages.rl.train.steps=3",
            "stages.rl.train.optim.lr=1e-4",
            "eval.tasks=5",
            "stages.0.name=first",
            "stages.demonstrations.policy=tiny",
            "precision=fp32",
        ],
    )
    assert exp.stages[3].train == {"steps": 3, "optim": {"lr": 1e-4}}
    assert exp.eval.tasks == 5 and exp.precision is Precision.FP32
    assert [s.name for s in exp.stages] == ["first", "demonstrations", "sft", "rl"]
    assert exp.stages[1].policy == "tiny"  # type: ignore[union-attr]


def test_a_bad_override_names_the_override(tmp_path: Path) -> None:
    path = write(tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"^override stages\.rl\.train\.stepz=3: unknown key \(did you mean 'steps'\?\)",
    ):
        check(path, "stages.rl.train.stepz=3")
    with pytest.raises(ConfigError, match=r"^override eval\.tasks=0: Input should be greater"):
        load_experiment(path, ["eval.tasks=0"])
    with pytest.raises(
        ConfigError,
        match=r"stages has no item 'rll' \(did you mean 'rl'\?\); items: base, demonstrations, sft, rl",
    ):
        load_experiment(path, ["stages.rll.train.steps=3"])
    with pytest.raises(ConfigError, match=r"override 'steps': write KEY=VALUE"):
        load_experiment(path, ["steps"])
    with pytest.raises(ConfigError, match=r"override name\.x=1: name is a value \('t'\)"):
        load_experiment(path, ["name.x=1"])


def test_model_and_teacher_names_are_checked_without_loading_them(tmp_path: Path) -> None:
    path = write(tmp_path)
    with pytest.raises(
        ConfigError, match=r"^override model=tinny: unknown model 'tinny' \(did you mean 'tiny'\?\)"
    ):
        check(path, "model=tinny")
    with pytest.raises(ConfigError, match=r"typo\.yaml:3: model: unknown model 'tinny'"):
        check(write(tmp_path, EXPERIMENT.replace("model: tiny", "model: tinny"), "typo.yaml"))
    with pytest.raises(
        ConfigError, match=r"^override model=expert: the scripted expert has no weights to train"
    ):
        check(path, "model=expert")
    with pytest.raises(
        ConfigError,
        match=r"^override stages\.demonstrations\.policy=openai:nohash: policy 'openai:nohash'",
    ):
        check(path, "stages.demonstrations.policy=openai:nohash")
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        ConfigError, match=r"^override model=.*empty: folder .*empty holds no transformers model"
    ):
        check(path, f"model={tmp_path / 'empty'}")
    # Without training stages the expert and endpoints are fine starting policies.
    evals_only = "name: t\nenv: calculator\nmodel: openai:http://127.0.0.1:1/v1#m\nstages: [{kind: eval, name: base}]\n"
    check(write(tmp_path, evals_only, "evals.yaml"))


def test_sft_reads_an_earlier_demonstrations_stage(tmp_path: Path) -> None:
    text = EXPERIMENT.replace("  - kind: sft\n", "  - kind: sft\n    demonstrations: rl\n")
    with pytest.raises(
        ConfigError,
        match=r"exp\.yaml:4: stages: sft stage 'sft' reads demonstrations 'rl', which is not an earlier",
    ):
        load_experiment(write(tmp_path, text))


def test_stage_configs_are_filled_as_the_runner_trains_them(tmp_path: Path) -> None:
    text = EXPERIMENT.replace("batch_size: 2", "batch_size: 2\n      data: {limit: 5}")
    exp = load_experiment(write(tmp_path, text), ["precision=fp32", "seed=7"])
    run_dir = tmp_path / "run"
    sft = sft_config(exp, 2, model="tiny", run_dir=run_dir, demonstrations_run="t.d")
    assert (sft.model.spec, sft.model.precision, sft.seed) == ("tiny", Precision.FP32, 7)
    # Every attempt trains in the stage's own folder (earlier ones are moved aside).
    assert sft.output_dir == run_dir / "sft"
    assert sft.data is not None
    assert (sft.data.store, sft.data.run) == (run_dir / "store.db", "t.d")
    assert (sft.data.min_reward, sft.data.limit) == (1.0, 5)
    rl = rl_config(exp, 3, model=str(run_dir / "sft" / "final"), run_dir=run_dir)
    assert (rl.env, rl.steps, rl.store, rl.output_dir) == (
        "calculator",
        2,
        run_dir / "store.db",
        run_dir / "rl",
    )
    assert rl.model.spec == str(run_dir / "sft" / "final")


def test_a_stage_may_not_set_what_the_experiment_decides(tmp_path: Path) -> None:
    text = EXPERIMENT.replace(
        "batch_size: 2", "batch_size: 2\n      model: {spec: tiny}\n      data: {store: x.db}"
    )
    with pytest.raises(ConfigError) as caught:
        check(write(tmp_path, text))
    message = str(caught.value)
    assert re.search(
        r"exp\.yaml:11: stages\.sft\.train\.model\.spec: set by the experiment", message
    )
    assert re.search(
        r"exp\.yaml:12: stages\.sft\.train\.data\.store: set by the experiment", message
    )


def test_an_experiment_built_in_code_is_checked_too(tmp_path: Path) -> None:
    from trajforge.pipeline.config import Experiment

    exp = Experiment.model_validate(
        {**yaml.safe_load(EXPERIMENT), "stages": [{"kind": "rl", "train": {"stepz": 1}}]}
    )
    with pytest.raises(ConfigError, match=r"^<experiment>: stages\.rl\.train\.stepz: unknown key"):
        check_experiment(exp, tmp_path)
