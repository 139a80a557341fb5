"""bench/credit_assignment.py: the tree arm's RL config (GiGPO with branches, at the other arms'
sampled-token budget), and no process left behind: a bench killed while its arms run takes its
pool workers with it (they would otherwise play their arms out as orphans)."""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import psutil
import pytest

from trajforge.pipeline.config import load_experiment, rl_config

BENCH = Path(__file__).resolve().parents[2] / "bench" / "credit_assignment.py"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH.parent))  # as when the script runs
    return importlib.import_module("credit_assignment")


@pytest.mark.parametrize("samples", range(2, 17))
def test_the_tree_arm_samples_as_many_tokens_per_group(bench: ModuleType, samples: int) -> None:
    kept, branches = bench.tree_budget(samples)
    # A branch samples half an episode on average (its boundary drawn uniformly inside it).
    assert kept + branches / 2 == samples
    assert kept >= 1 and branches >= 2


def test_the_tree_arm_needs_two_samples_a_group(bench: ModuleType) -> None:
    with pytest.raises(SystemExit, match="samples_per_group 1: the gigpo_tree arm needs 2"):
        bench.tree_budget(1)


def test_the_tree_arm_is_gigpo_with_branches_on_the_cpu_preset(
    bench: ModuleType, tmp_path: Path
) -> None:
    exp = load_experiment(bench.PRESETS["cpu"], [])
    plan = bench._plan(exp)
    others = rl_config(exp, exp.stages.index(plan.rl), model=exp.model, run_dir=tmp_path)
    assert others.samples_per_group == 8
    gigpo = bench.arm_train(plan.rl.train, "gigpo", others.samples_per_group)
    tree = bench.arm_train(plan.rl.train, "gigpo_tree", others.samples_per_group)
    # GiGPO's settings but for the group: 6 samples and 4 branches, 6 + 4/2 = 8 episodes' tokens.
    assert tree == {**gigpo, "samples_per_group": 6, "tree": {"branches": 4}}
    run = bench._arm(plan.prefix, plan.rl, tree, "gigpo_tree", 0, "pocket")
    cfg = rl_config(run, 0, model="pocket", run_dir=tmp_path)
    assert cfg.estimator == "gigpo" and cfg.estimator_kwargs == {"gamma": 0.95, "omega": 1.0}
    assert cfg.tree is not None and cfg.tree.branches == 4 and cfg.samples_per_group == 6
    same = ("steps", "groups_per_step", "max_turns", "max_new_tokens", "temperature", "seed")
    assert [getattr(cfg, k) for k in same] == [getattr(others, k) for k in same]


def _pool_workers(bench: psutil.Process) -> list[psutil.Process]:
    workers = []
    for child in bench.children(recursive=True):
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                workers.append(child)
        except psutil.NoSuchProcess:
            continue
    return workers


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_bench_takes_its_arm_workers_with_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1] / "src")}
    args = ["--model", "tiny", "--seeds", "0", "1", "--jobs", "2", "--out", str(tmp_path)]
    proc = subprocess.Popen(
        [sys.executable, str(BENCH), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    bench = psutil.Process(proc.pid)
    workers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 240
        # The pool starts once the SFT prefix is done; an arm's run folder means work is under way.
        while time.monotonic() < deadline and proc.poll() is None:
            workers = _pool_workers(bench)
            if len(workers) == 2 and any(tmp_path.glob("*-grpo-s*")):
                break
            time.sleep(0.2)
        assert len(workers) == 2, "the bench never ran two arm workers"
        proc.kill()
        proc.wait(timeout=10)
        gone, alive = psutil.wait_procs(workers, timeout=15)
        assert not alive, f"workers left running after the bench died: {[p.pid for p in alive]}"
        assert len(gone) == 2
    finally:
        for p in [bench, *workers]:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
