from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from trajforge.cli.main import main
from trajforge.errors import ConfigError
from trajforge.pipeline.attempts import disk_use, size_text
from trajforge.pipeline.config import load_experiment
from trajforge.pipeline.dispatch import StageRunner
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.store import TrajectoryStore
from trajforge.viewer.service import ViewerData

TINY_EXPERIMENT = {
    "name": "tiny",
    "env": "calculator",
    "model": "tiny",
    "eval": {"tasks": 3, "max_turns": 2, "max_new_tokens": 8},
    "stages": [
        {"kind": "eval", "name": "base"},
        {"kind": "demonstrations", "tasks": 6},
        {
            "kind": "sft",
            "train": {"batch_size": 3, "max_steps": 2, "tensorboard": False, "progress": False},
        },
        {"kind": "eval", "name": "after_sft"},
        {
            "kind": "rl",
            "train": {
                "steps": 1,
                "num_tasks": 2,
                "groups_per_step": 2,
                "samples_per_group": 2,
                "max_new_tokens": 8,
                "max_turns": 2,
                "tensorboard": False,
                "progress": False,
            },
        },
        {"kind": "eval", "name": "after_rl"},
    ],
}
TOY_RUN_BYTES = 150_000_000
"""The tiny model's run of TINY_EXPERIMENT (113 MB: two training stages, each its final
weights, 16 MB, and one checkpoint with the optimizer's state, 41 MB)."""


def write_experiment(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump({**data, "out_dir": str(tmp_path / "runs")}))
    return path


@pytest.fixture(scope="module")
def finished_run(module_tmp: Path) -> tuple[Path, ExperimentRunner]:
    tmp = module_tmp
    exp = load_experiment(write_experiment(tmp, TINY_EXPERIMENT))
    runner = ExperimentRunner(exp, console=Console(quiet=True))
    runner.run()
    return tmp, runner


def test_every_stage_runs_and_is_recorded(finished_run: tuple[Path, ExperimentRunner]) -> None:
    _, runner = finished_run
    results = json.loads((runner.run_dir / "results.json").read_text())
    assert [s["name"] for s in results["stages"]] == [
        "base", "demonstrations", "sft", "after_sft", "rl", "after_rl",
    ]  # fmt: skip
    assert all(s["status"] == "done" for s in results["stages"])
    by_name = {s["name"]: s for s in results["stages"]}
    assert by_name["demonstrations"]["solved"] == 6
    assert by_name["base"]["summary"]["episodes"] == 3
    # Each eval uses the weights of the last training stage before it.
    assert by_name["base"]["model"] == "tiny"
    assert by_name["after_sft"]["model"] == by_name["sft"]["model"]
    assert by_name["after_rl"]["model"] == by_name["rl"]["model"]
    assert Path(by_name["rl"]["model"], "config.json").is_file()
    assert len(by_name["sft"]["history"]) == 2
    assert (runner.run_dir / "report.html").is_file()
    assert (runner.run_dir / "store.db").is_file()


def test_a_finished_run_skips_done_stages_and_reruns_one_on_request(
    finished_run: tuple[Path, ExperimentRunner],
) -> None:
    _tmp, runner = finished_run
    before = json.loads((runner.run_dir / "results.json").read_text())
    again = ExperimentRunner(runner.exp, console=Console(quiet=True))
    again.run()
    assert json.loads((runner.run_dir / "results.json").read_text()) == before
    again.run(only="after_rl")
    after = {
        s["name"]: s for s in json.loads((runner.run_dir / "results.json").read_text())["stages"]
    }
    assert after["after_rl"]["attempt"] == 1
    assert after["after_rl"]["run_id"] == "tiny.after_rl.1"
    assert after["base"] == {s["name"]: s for s in before["stages"]}["base"]


def test_experiment_errors_name_the_key(tmp_path: Path) -> None:
    bad = {**TINY_EXPERIMENT, "stages": [{"kind": "eval", "name": "base", "colour": "red"}]}
    with pytest.raises(
        ConfigError, match=r"experiment\.yaml:\d+: stages\.base\.colour: unknown key"
    ):
        load_experiment(write_experiment(tmp_path, bad))
    with pytest.raises(ConfigError, match="not found"):
        load_experiment(tmp_path / "missing.yaml")
    exp = load_experiment(write_experiment(tmp_path, TINY_EXPERIMENT))
    with pytest.raises(ConfigError, match="'nope' is not a stage"):
        ExperimentRunner(exp, console=Console(quiet=True)).run(only="nope")


def test_a_bad_stage_config_stops_the_run_before_any_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(
        StageRunner, "_eval", lambda self, model, run_id, index, stage: ran.append(run_id)
    )
    exp = load_experiment(
        write_experiment(tmp_path, TINY_EXPERIMENT), ["stages.rl.train.max_new_tokenz=8"]
    )
    runner = ExperimentRunner(exp, console=Console(quiet=True))
    with pytest.raises(
        ConfigError,
        match=r"^override stages\.rl\.train\.max_new_tokenz=8: unknown key \(did you mean 'max_new_tokens'\?\)",
    ):
        runner.run()
    assert ran == []
    assert not runner.run_dir.exists()


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (RuntimeError("boom"), "RuntimeError: boom"),
        (ConfigError("policy 'x': no"), "policy 'x': no"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
    ],
)
def test_a_failing_stage_is_recorded_failed_with_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException, expected: str
) -> None:
    def fail(self: StageRunner, *args: object) -> None:
        raise error

    monkeypatch.setattr(StageRunner, "_eval", fail)
    exp = load_experiment(write_experiment(tmp_path, TINY_EXPERIMENT))
    runner = ExperimentRunner(exp, console=Console(quiet=True))
    with pytest.raises(type(error)):
        runner.run()
    stages = json.loads((runner.run_dir / "results.json").read_text())["stages"]
    assert [(s["name"], s["status"]) for s in stages] == [("base", "failed")]
    assert stages[0]["error"] == expected
    assert stages[0]["duration_s"] >= 0


def test_experiment_precision_reaches_policies_and_training_stages(tmp_path: Path) -> None:
    import torch

    exp = load_experiment(write_experiment(tmp_path, {**TINY_EXPERIMENT, "precision": "fp32"}))
    runner = ExperimentRunner(exp, console=Console(quiet=True))
    assert runner.maker.policy_ref("tiny").load_options() == {
        "max_batch_size": 25,
        "dtype": torch.float32,
    }
    assert runner.maker.policy_ref("expert").load_options() == {}
    assert runner.maker.policy_ref("openai:http://127.0.0.1:1/v1#m").load_options() == {}


def test_experiment_bf16_without_native_bf16_is_one_clear_error(tmp_path: Path) -> None:
    # The suite runs as on a machine without native bf16 (tests/conftest.py).
    exp = load_experiment(write_experiment(tmp_path, {**TINY_EXPERIMENT, "precision": "bf16"}))
    with pytest.raises(ConfigError, match=r"^precision: bf16 was asked for"):
        ExperimentRunner(exp, console=Console(quiet=True))


def test_auto_precision_resolves_by_the_machine(tmp_path: Path, machine_precision: str) -> None:
    import torch

    exp = load_experiment(write_experiment(tmp_path, TINY_EXPERIMENT))
    runner = ExperimentRunner(exp, console=Console(quiet=True))
    dtype = torch.bfloat16 if machine_precision == "bf16" else torch.float32
    assert runner.maker.policy_ref("tiny").load_options()["dtype"] is dtype


@pytest.mark.slow
def test_the_whole_experiment_runs_at_the_machines_precision(
    tmp_path: Path, machine_precision: str
) -> None:
    data: Any = copy.deepcopy(TINY_EXPERIMENT)
    data["stages"][4]["train"]["validation"] = {"tasks": 2}
    exp = load_experiment(write_experiment(tmp_path, data))
    runner = ExperimentRunner(exp, console=Console(quiet=True))
    runner.run()
    results = json.loads((runner.run_dir / "results.json").read_text())
    assert results["precision"]["resolved"] == machine_precision
    by_name = {s["name"]: s for s in results["stages"]}
    assert all(s["status"] == "done" for s in results["stages"])
    assert by_name["sft"]["precision"] == by_name["rl"]["precision"] == machine_precision
    assert [p["step"] for p in by_name["rl"]["validation"]] == [0, 1]
    assert by_name["rl"]["kept_step"] in (0, 1)
    assert "validation success" in by_name["rl"]["text"]
    with TrajectoryStore(runner.store_path) as store:
        for name in ("base", "after_sft", "after_rl"):
            trajs = store.query(run=by_name[name]["run_id"])
            assert len(trajs) == 3
            assert {t.metadata["precision"] for t in trajs} == {machine_precision}
        assert len(store.query(run="tiny.rl.val-step0")) == 2


@pytest.mark.slow
def test_run_over_two_processes_trains_over_both_and_writes_once(tmp_path: Path) -> None:
    data = copy.deepcopy(TINY_EXPERIMENT)
    data["stages"][2]["train"]["distributed"] = {"strategy": "fsdp"}  # type: ignore[index]
    path = write_experiment(tmp_path, data)
    trajforge = str(Path(sys.executable).parent / "trajforge")
    done = subprocess.run(
        [trajforge, "run", str(path), "--num-processes", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)  # one summary, from the main process
    assert [s["status"] for s in results["stages"]] == ["done"] * 6
    sft = next(s for s in results["stages"] if s["name"] == "sft")
    assert len(sft["history"]) == 2
    run_dir = tmp_path / "runs" / "tiny"
    assert [json.loads(line)["step"] for line in (run_dir / "sft" / "metrics.jsonl").open()] == [
        1,
        2,
    ]
    # Rollouts ran once, on the main process: 3 evals x 3 tasks, 6 demonstrations, 2 x 2 RL.
    with TrajectoryStore(run_dir / "store.db") as store:
        assert store.count() == 3 * 3 + 6 + 4
    assert (run_dir / "report.html").is_file()


def test_an_interrupted_training_stage_says_where_and_resumes_from_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from trajforge.train.interrupted import TrainingInterrupted
    from trajforge.train.sft import SFTTrainer

    stages = [TINY_EXPERIMENT["stages"][1], TINY_EXPERIMENT["stages"][2]]  # type: ignore[index]
    experiment = write_experiment(tmp_path, {**TINY_EXPERIMENT, "stages": stages})
    exp = load_experiment(experiment, ["stages.sft.train.checkpoint_every_s=1e-9"])
    step = SFTTrainer.run_step

    def ctrl_c_at_two(self: SFTTrainer, at: int) -> dict[str, float]:
        if at == 2:
            raise KeyboardInterrupt
        return step(self, at)

    monkeypatch.setattr(SFTTrainer, "run_step", ctrl_c_at_two)
    with pytest.raises(TrainingInterrupted) as stopped:
        ExperimentRunner(exp, console=Console(quiet=True)).run()
    assert (stopped.value.step, stopped.value.checkpoint_step) == (1, 1)
    sft = json.loads((tmp_path / "runs" / "tiny" / "results.json").read_text())["stages"][1]
    assert sft["status"] == "failed" and sft["error"].startswith("sft stopped at step 1 of 2")
    monkeypatch.setattr(SFTTrainer, "run_step", step)
    capsys.readouterr()
    results = ExperimentRunner(exp, console=Console(quiet=True)).run()
    assert results["stages"][1]["status"] == "done" and results["stages"][1]["attempt"] == 0
    assert "sft: resuming from step 1 (" in capsys.readouterr().err


def test_rl_runs_are_named_after_the_stage_and_the_viewer_says_what_each_run_is(
    finished_run: tuple[Path, ExperimentRunner],
) -> None:
    _, runner = finished_run
    sft_final = str(runner.run_dir / "sft" / "final")
    with TrajectoryStore(runner.store_path) as store:
        runs = {r["run_id"]: r["metadata"] for r in store.list_runs()}
        assert len(store.query(run="tiny.rl.step1")) == 4  # 2 groups x 2 samples
    assert not [r for r in runs if r.startswith("rl-")]
    assert (runs["tiny.rl.step1"]["kind"], runs["tiny.rl.step1"]["model"]) == ("rl", sft_final)
    data = ViewerData(runner.store_path, runner.run_dir)
    shown = {r["run_id"]: (r["kind"], r["model"]) for r in data.runs()}
    data.close()
    assert shown["tiny.rl.step1"] == ("rl", sft_final)
    assert shown["tiny.base"] == ("eval", "tiny")
    assert shown["tiny.demonstrations"] == ("demonstrations", "expert")
    assert shown["tiny.after_rl"] == ("eval", str(runner.run_dir / "rl" / "final"))


def test_a_toy_runs_folder_stays_small(finished_run: tuple[Path, ExperimentRunner]) -> None:
    _, runner = finished_run
    assert disk_use(runner.run_dir) < TOY_RUN_BYTES, size_text(disk_use(runner.run_dir))
    for stage in ("sft", "rl"):
        assert len(list((runner.run_dir / stage / "checkpoints").glob("step-*"))) <= 2


def test_trajforge_run_ends_by_naming_the_final_model_and_the_disk_it_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stages = [TINY_EXPERIMENT["stages"][1], TINY_EXPERIMENT["stages"][2]]  # type: ignore[index]
    experiment = write_experiment(tmp_path, {**TINY_EXPERIMENT, "stages": stages})
    monkeypatch.setenv("COLUMNS", "400")
    run_dir = tmp_path / "runs" / "tiny"
    for overrides in ([], ["stages.sft.train.max_steps=1"]):
        monkeypatch.setattr(sys, "argv", ["trajforge", "run", str(experiment), *overrides])
        try:
            main()
        except SystemExit as exc:
            assert not exc.code, capsys.readouterr().err[-2000:]
    said = capsys.readouterr().out.splitlines()
    # Above the report and the command that browses it.
    assert said[-4] == f"final model: {run_dir / 'sft' / 'final'}"
    assert said[-3].startswith(f"run folder: {run_dir} (")
    assert said[-3].endswith(" of it earlier attempts in .attempts/)")
    assert f"{size_text(disk_use(run_dir))}, " in said[-3]
    assert said[-1].startswith("browse: ")
