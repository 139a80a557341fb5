"""trajforge curate repair, run through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import RunCli
from curate.test_repair import _episodes
from trajforge.store import TrajectoryStore


def test_repair_stores_one_revision_per_repairable_failure(run_cli: RunCli, tmp_path: Path) -> None:
    good, failed = _episodes()
    store = tmp_path / "store.db"
    with TrajectoryStore(store) as st:
        st.add_many(
            [
                good.model_copy(update={"run_id": "expert"}),
                failed.model_copy(update={"run_id": "policy"}),
            ]
        )
    code, out, err = run_cli(
        "curate", "repair", "--store", store, "--run", "pol", "--out-run", "repairs", "--json"
    )
    assert code == 0, err
    assert json.loads(out) == {"run": "repairs", "built": 1, "skipped": {}}
    with TrajectoryStore(store) as st:
        [made] = st.query(run="repairs")
    assert made.metadata["repair"]["failed"] == failed.id
    assert made.metadata["loss_from_message"] == 6

    code, _, err = run_cli(
        "curate", "repair", "--store", store, "--run", "policy", "--out-run", "repairs"
    )
    assert code == 1 and "--out-run: run 'repairs' already holds trajectories" in err
    code, out, _ = run_cli(
        "curate", "repair", "--store", store, "--run", "policy", "--out-run", "again",
        "--good-run", "policy", "--json",
    )  # fmt: skip
    assert json.loads(out)["skipped"] == {"no successful episode of its task": 1}
    code, _, err = run_cli("curate", "repair", "--store", store, "--run", "nope", "--out-run", "x")
    assert code == 1 and "--run: no run starting with 'nope'" in err
