"""Training over two real CPU processes (gloo) matches one process with the same global batch.

The two-process runs are launched once per module by ``launch_local`` (what ``--num-processes``
uses) running ``dist_cases.py``; each test compares one case with the same case trained here in
one process.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from dist_cases import ADAM_EPS, FAULTS, LR, common, make_trainer, sft_data
from safetensors.torch import load_file

from trajforge.formats.jsonl import write_trajectories
from trajforge.store import TrajectoryStore
from trajforge.train.checkpoint import checkpoint_root
from trajforge.train.launch import DistributedError, free_port, launch_local

HERE = Path(__file__).parent
KINDS = ("sft", "dpo", "rl")
STRATEGIES = ("ddp", "fsdp")


RESUMED: dict[str, dict[str, Any]] = {
    "resume-sft-fsdp-full": {"kind": "sft", "strategy": "fsdp", "lora": False},
    "resume-rl-fsdp-lora": {"kind": "rl", "strategy": "fsdp", "lora": True},
}


RL_MODES: dict[str, dict[str, Any]] = {
    # Validation episodes run on the main process and sent to the others.
    "rl-validation-fsdp-full": {
        "kind": "rl",
        "strategy": "fsdp",
        "steps": 2,
        "rl": {"num_tasks": 4, "validation": {"tasks": 2, "every": 1, "keep_best": False}},
    },
    # The next step's rollouts sampled on the main process while this step trains.
    "rl-async-ddp-lora": {
        "kind": "rl",
        "strategy": "ddp",
        "lora": True,
        "steps": 2,
        "rl": {"async_staleness": 1},
    },
}


# The controls: a rank's gradient scaled wrongly must fail the comparison the tests make.
FAULTED: dict[str, dict[str, Any]] = {
    "rank1-gradient-doubled": {"kind": "sft", "strategy": "ddp", "lora": False},
    "rank1-gradient-dropped": {"kind": "rl", "strategy": "fsdp", "lora": False},
}
assert FAULTED.keys() == FAULTS.keys()


def case_name(kind: str, strategy: str, lora: bool) -> str:
    return f"{kind}-{strategy}-{'lora' if lora else 'full'}"


def launch(spec: dict[str, Any], path: Path, *, timeout_s: float = 240.0) -> None:
    """Run ``dist_cases.py`` over two processes on ``spec`` (written to ``path``)."""
    path.write_text(json.dumps(spec))
    command = [sys.executable, str(HERE / "dist_cases.py"), str(path)]
    launch_local(command, 2, grace_s=30.0, timeout_s=timeout_s)


# fp32's unit roundoff.
U32 = 2.0**-24


def step_tolerance(steps: int) -> float:
    """How far fp32 arithmetic done in another order (over ranks, micro-batches) may move the
    weights in ``steps`` steps, whatever the CPU's kernels.

    Per step: a gradient clipped to norm <= 1, summed in another order, differs by a few units
    of roundoff (8 allowed); AdamW turns that into at most ``LR / ADAM_EPS`` times as much in
    the update; and each weight (|w| <~ 1) rounds to within an ulp either way (4 allowed).
    """
    return steps * (LR / ADAM_EPS * 8 * U32 + 4 * U32)


def worst_difference(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> float:
    assert got.keys() == want.keys()
    return max(float((got[n].double() - want[n].double()).abs().max()) for n in want)


def assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], steps: int) -> None:
    """``got`` equals ``want`` but for ``steps`` steps computed in another order."""
    assert got.keys() == want.keys()
    atol = step_tolerance(steps)
    for name, value in want.items():
        torch.testing.assert_close(
            got[name], value, rtol=0.0, atol=atol, msg=lambda m, name=name: f"{name}: {m}"
        )


@pytest.fixture(scope="module")
def two_process_runs(module_tmp: Path) -> Path:
    out = module_tmp / "two-processes"
    out.mkdir()
    cases = [
        {"name": case_name(k, s, lora), "kind": k, "strategy": s, "lora": lora}
        for k in KINDS
        for s in STRATEGIES
        for lora in (False, True)
    ]
    for case in cases:  # RL rollouts are stored (by the main process alone)
        if case["name"] == "rl-fsdp-full":
            case["store"] = str(out / "rl-store.db")
    cases += [{**RL_MODES[name], "name": name} for name in RL_MODES]
    # Two steps with a checkpoint after each: resumed from step 1 in one process below.
    cases += [
        {**RESUMED[name], "name": name, "steps": 2, "checkpoint_every": 1} for name in RESUMED
    ]
    cases += [{**FAULTED[fault], "name": fault, "fault": fault} for fault in FAULTED]
    launch({"out": str(out), "cases": cases}, out / "spec.json")
    return out


@pytest.fixture(scope="module")
def one_process_runs(module_tmp: Path) -> dict[str, Any]:
    root = module_tmp / "one-process"
    root.mkdir()
    return {"root": root}


def one_process(
    runs: dict[str, Any], kind: str, lora: bool
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, Any]]:
    """The weights before and after the case's step in this process, and the step's metrics
    (trained once per case)."""
    key = f"{kind}-{lora}"
    if key not in runs:
        trainer = make_trainer({"kind": kind, "lora": lora}, runs["root"] / key)
        before = {n: t.clone() for n, t in trainer.parts.full_state(on_all=False).items()}
        result = trainer.train()
        runs[key] = before, trainer.parts.full_state(on_all=False), result.history[-1]
    return runs[key]  # type: ignore[no-any-return]


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_step_over_two_processes_equals_one_process(
    two_process_runs: Path, one_process_runs: dict[str, Any], kind: str, strategy: str, lora: bool
) -> None:
    got = torch.load(two_process_runs / f"{case_name(kind, strategy, lora)}.pt")
    before, want, metrics = one_process(one_process_runs, kind, lora)
    # The step moved the weights (so equality is not the trivial one of untouched weights).
    assert any(not torch.equal(want[n], before[n]) for n in want)
    assert_same(got, want, steps=1)
    # The logged metrics are those of the whole step too.
    name = case_name(kind, strategy, lora)
    (logged,) = [json.loads(line) for line in (two_process_runs / name / "metrics.jsonl").open()]
    # RL's on-policy loss is a mean of advantage terms that cancel to ~1e-7: there a relative
    # bound means nothing, and the summation order's roundoff, a few units of fp32 on terms of
    # size ~1, is the bound.
    for key in ("loss", "loss_tokens", "grad_norm"):
        assert logged[key] == pytest.approx(metrics[key], rel=1e-5, abs=8 * U32), key


@pytest.mark.parametrize("name", list(RL_MODES))
def test_rl_modes_over_two_processes_equal_one_process(
    two_process_runs: Path, tmp_path: Path, name: str
) -> None:
    trainer = make_trainer({**RL_MODES[name], "strategy": "ddp"}, tmp_path)
    before = {n: t.clone() for n, t in trainer.parts.full_state(on_all=False).items()}
    trainer.train()
    want = trainer.parts.full_state(on_all=False)
    assert any(not torch.equal(want[n], before[n]) for n in want)
    assert_same(torch.load(two_process_runs / f"{name}.pt"), want, steps=2)


@pytest.mark.parametrize("fault", list(FAULTED))
def test_a_rank_with_a_wrong_gradient_fails_the_comparison(
    two_process_runs: Path, one_process_runs: dict[str, Any], fault: str
) -> None:
    case = FAULTED[fault]
    _, want, _ = one_process(one_process_runs, case["kind"], case["lora"])
    got = torch.load(two_process_runs / f"{fault}.pt")
    # Far outside the tolerance, so the equivalence tests above would catch it.
    assert worst_difference(got, want) > 10 * step_tolerance(1)
    with pytest.raises(AssertionError):
        assert_same(got, want, steps=1)


def test_only_the_main_process_writes_the_store_metrics_and_checkpoints(
    two_process_runs: Path,
) -> None:
    with TrajectoryStore(two_process_runs / "rl-store.db") as store:
        assert store.count() == 4  # 2 groups x 2 samples, rolled out once
        assert len(store.list_runs()) == 1
    for name in [case_name(k, s, lo) for k in KINDS for s in STRATEGIES for lo in (False, True)]:
        steps = [
            json.loads(line)["step"] for line in (two_process_runs / name / "metrics.jsonl").open()
        ]
        assert steps == [1], name
    for name in RESUMED:
        root = checkpoint_root(two_process_runs / name)
        assert sorted(p.name for p in root.iterdir()) == ["latest", "step-0000001", "step-0000002"]


def rewind(source: Path, dest: Path, step: int) -> Path:
    """A copy of the run in ``source`` as if it had stopped after checkpoint ``step``."""
    shutil.copytree(source, dest)
    root = checkpoint_root(dest)
    for ckpt in root.glob("step-*"):
        if int(ckpt.name.removeprefix("step-")) > step:
            shutil.rmtree(ckpt)
    (root / "latest").write_text(f"step-{step:07d}")
    return dest


def trained(case: dict[str, Any], out: Path, *, resume: bool = False) -> dict[str, torch.Tensor]:
    trainer = make_trainer(case, out)
    trainer.train(resume=resume)
    return trainer.parts.full_state(on_all=False)


@pytest.mark.parametrize("name", list(RESUMED))
def test_a_checkpoint_of_two_processes_resumes_in_one(
    two_process_runs: Path, tmp_path: Path, name: str
) -> None:
    case = {**RESUMED[name], "steps": 2, "checkpoint_every": 1, "strategy": "ddp"}
    resumed_dir = rewind(two_process_runs / name, tmp_path / "resumed", 1)
    resumed = trained(case, resumed_dir, resume=True)
    # The same run had it not stopped: step 2 made over two processes, as step 1 was.
    assert_same(resumed, torch.load(two_process_runs / f"{name}.pt"), steps=1)
    # And a run made in one process throughout (step 1 summed in another order).
    assert_same(resumed, trained(case, tmp_path / "one-process"), steps=1)


def test_a_killed_process_ends_the_run_with_an_error_and_the_run_resumes(
    two_process_runs: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    name = "resume-sft-fsdp-full"
    case = {**RESUMED[name], "name": "killed", "steps": 2, "checkpoint_every": 1, "timeout_s": 30}
    started = time.monotonic()
    # Rank 1 is SIGKILLed after step 1 (its checkpoint written); rank 0 must end by itself.
    with pytest.raises(
        DistributedError, match="rank 0 exited with status 1; rank 1 killed by SIGKILL"
    ):
        launch(
            {"out": str(tmp_path), "cases": [{**case, "kill_rank_at_step": 1}]}, tmp_path / "a.json"
        )
    assert time.monotonic() - started < 120
    assert "DistributedError: rank 0 of 2 failed at step 2" in capfd.readouterr().err
    assert (checkpoint_root(tmp_path / "killed") / "latest").read_text() == "step-0000001"
    # Beside it, the other way round: a run checkpointed in one process goes on over two.
    one = {**case, "name": "from-one"}
    uninterrupted = trained(one, tmp_path / "one-process")
    rewind(tmp_path / "one-process", tmp_path / "from-one", 1)
    resumes = [{**case, "resume": True}, {**one, "resume": True}]
    launch({"out": str(tmp_path), "cases": resumes}, tmp_path / "b.json")
    # The resumed run ends where the run that was never killed ended.
    resumed = torch.load(tmp_path / "killed.pt")
    assert_same(resumed, torch.load(two_process_runs / f"{name}.pt"), steps=0)
    # Step 2 made over two processes instead of one: summed in another order.
    assert_same(torch.load(tmp_path / "from-one.pt"), uninterrupted, steps=1)


def cli_config(tmp_path: Path, name: str) -> Path:
    """A ``trajforge train sft`` config of the ``sft-fsdp-full`` case (data as JSONL)."""
    data = tmp_path / "data.jsonl"
    if not data.exists():
        write_trajectories(data, sft_data())
    cfg = {
        **common({"strategy": "fsdp"}, tmp_path / name),
        "output_dir": str(tmp_path / name),
        "data": {"jsonl": str(data)},
        "batch_size": 6,
        "epochs": 1,
        "checkpoint_every": 1,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_cli(command: list[str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def assert_final_is(out: Path, want: dict[str, torch.Tensor]) -> None:
    """``out/final`` holds ``want``'s weights, and only the main process wrote metrics."""
    final = load_file(out / "final" / "model.safetensors")
    assert final and final.keys() <= want.keys()
    assert_same(final, {n: want[n] for n in final}, steps=0)
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").open()] == [1]


def test_train_cli_num_processes_trains_over_two_processes(
    two_process_runs: Path, tmp_path: Path
) -> None:
    trajforge = str(Path(sys.executable).parent / "trajforge")
    config = cli_config(tmp_path, "cli")
    done = run_cli([trajforge, "train", "sft", "-c", str(config), "--num-processes", "2", "--json"])
    assert json.loads(done.stdout)["steps"] == 1  # one summary, from the main process
    assert_final_is(tmp_path / "cli", torch.load(two_process_runs / "sft-fsdp-full.pt"))


@pytest.mark.slow
def test_train_cli_under_accelerate_launch(two_process_runs: Path, tmp_path: Path) -> None:
    accelerate = str(Path(sys.executable).parent / "accelerate")
    config = cli_config(tmp_path, "acc")
    # --multi_gpu picks accelerate's torchrun launcher; without a GPU the processes join
    # over gloo on the CPU (accelerate's --cpu would need mpirun).
    launcher = [accelerate, "launch", "--multi_gpu", "--num_processes", "2"]
    launcher += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    launcher += ["--main_process_port", str(free_port())]
    run_cli([*launcher, "-m", "trajforge", "train", "sft", "-c", str(config)])
    assert_final_is(tmp_path / "acc", torch.load(two_process_runs / "sft-fsdp-full.pt"))
