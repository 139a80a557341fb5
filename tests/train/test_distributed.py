"""Training over two real CPU processes (gloo) matches one process with the same global batch.

The two-process runs are launched once per module by ``launch_local`` (what ``--num-processes``
uses) running ``dist_cases.py``; each test compares one case with the same case trained here in
one process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from dist_cases import make_trainer

from trajforge.train.launch import launch_local

HERE = Path(__file__).parent
KINDS = ("sft", "dpo", "rl")
STRATEGIES = ("ddp", "fsdp")


def case_name(kind: str, strategy: str, lora: bool) -> str:
    return f"{kind}-{strategy}-{'lora' if lora else 'full'}"


def launch(spec: dict[str, Any], path: Path, *, timeout_s: float = 240.0) -> None:
    """Run ``dist_cases.py`` over two processes on ``spec`` (written to ``path``)."""
    path.write_text(json.dumps(spec))
    command = [sys.executable, str(HERE / "dist_cases.py"), str(path)]
    launch_local(command, 2, grace_s=30.0, timeout_s=timeout_s)


def assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], atol: float) -> None:
    assert got.keys() == want.keys()
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, rtol=0.0, atol=atol, msg=name)


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("two-processes")
    cases = [
        {"name": case_name(k, s, lora), "kind": k, "strategy": s, "lora": lora}
        for k in KINDS
        for s in STRATEGIES
        for lora in (False, True)
    ]
    launch({"out": str(out), "cases": cases}, out / "spec.json")
    return out


@pytest.fixture(scope="module")
def one_process_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return {"root": tmp_path_factory.mktemp("one-process")}


def one_process(
    runs: dict[str, Any], kind: str, lora: bool
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The weights before and after the case's step in this process (trained once per case)."""
    key = f"{kind}-{lora}"
    if key not in runs:
        trainer = make_trainer({"kind": kind, "lora": lora}, runs["root"] / key)
        before = {n: t.clone() for n, t in trainer.parts.full_state(on_all=False).items()}
        trainer.train()
        runs[key] = before, trainer.parts.full_state(on_all=False)
    return runs[key]  # type: ignore[no-any-return]


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_step_over_two_processes_equals_one_process(
    two_process_runs: Path, one_process_runs: dict[str, Any], kind: str, strategy: str, lora: bool
) -> None:
    got = torch.load(two_process_runs / f"{case_name(kind, strategy, lora)}.pt")
    before, want = one_process(one_process_runs, kind, lora)
    # The step moved the weights (so equality is not the trivial one of untouched weights).
    assert any(not torch.equal(want[n], before[n]) for n in want)
    assert_same(got, want, atol=1e-5)
