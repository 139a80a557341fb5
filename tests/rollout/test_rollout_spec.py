"""``RolloutSpec``: serialisable data that round-trips, references resolved by the entry point,
and the store bookkeeping (run metadata, resume) that hangs off its hooks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rollout_doubles import FakePolicy, TurnsEnv, make_tasks
from test_rollout_engine import content_of

from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError
from trajforge.rollout import (
    Limits,
    PolicyRef,
    RolloutSpec,
    Sampling,
    TaskSample,
    run_rollout,
)
from trajforge.schema import OutcomeStatus, Task
from trajforge.store.sqlite import TrajectoryStore

pytestmark = pytest.mark.timeout(120)


def test_a_spec_round_trips_through_json_with_either_kind_of_tasks() -> None:
    sampled = RolloutSpec(
        env="calculator",
        policy=PolicyRef(name="tiny", batch_size=4),
        tasks=TaskSample(count=3, split="test", seed=7),
        n=2,
        limits=Limits(max_turns=3, tool_timeout_s=1.5),
        sampling=Sampling(temperature=0.0, top_p=0.9, max_new_tokens=32, stop=("</s>",)),
        seed=11,
        concurrency=2,
        lockstep=True,
        run_id="r",
        store=Path("runs/x.db"),
    )
    listed = RolloutSpec(
        tasks=[
            Task(id="a", prompt="2+2?", answer=4, data={"digits": [2, 2]}),
            Task(id="b", prompt="?"),
        ]
    )
    for spec in (sampled, listed):
        again = RolloutSpec.model_validate_json(spec.model_dump_json())
        assert again == spec
        assert again.model_dump(mode="json") == spec.model_dump(mode="json")
    assert isinstance(RolloutSpec.model_validate_json(sampled.model_dump_json()).tasks, TaskSample)
    assert (sampled.episodes, listed.episodes) == (6, 2)
    params = sampled.sampling.params()
    assert (params.temperature, params.top_p, params.max_new_tokens, params.stop, params.seed) == (
        0.0,
        0.9,
        32,
        ["</s>"],
        None,
    )


def test_a_policy_ref_gives_local_models_the_resolved_dtype_and_batch_size() -> None:
    def options(name: str, precision: str) -> dict[str, object]:
        ref = PolicyRef.model_validate({"name": name, "batch_size": 4, "precision": precision})
        return ref.load_options(field="--precision")

    # The suite runs as on a machine without native bf16, so auto is fp32.
    assert options("tiny", "auto") == {"max_batch_size": 4, "dtype": torch.float32}
    assert options("expert", "bf16") == {}  # the scripted expert has no weights
    assert options("openai:http://127.0.0.1:1/v1#m", "bf16") == {}
    with pytest.raises(ConfigError, match=r"^--precision: bf16 was asked for"):
        options("tiny", "bf16")
    assert PolicyRef(name="tiny").load_options() == {"dtype": torch.float32}


def test_a_spec_of_references_runs_into_its_store_and_is_the_runs_metadata(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    spec = RolloutSpec(
        env="calculator",
        policy=PolicyRef(name="expert"),
        tasks=TaskSample(count=2, seed=1),
        n=2,
        run_id="calc",
        store=db,
    )
    trajs = run_rollout(spec)
    tasks = get_env("calculator").tasks(2, seed=1)
    assert [(t.task, t.sample_index) for t in trajs] == [
        (task, s) for task in tasks for s in range(2)
    ]
    assert all(t.outcome.status is OutcomeStatus.OK and t.outcome.reward == 1.0 for t in trajs)
    assert {(t.env, t.model, t.run_id) for t in trajs} == {("calculator", "expert", "calc")}
    with TrajectoryStore(db) as store:
        assert [t.id for t in store.query(run="calc")] == [t.id for t in trajs]
        meta = store.get_run("calc")
    assert meta is not None and meta["model"] == "expert"
    assert RolloutSpec.model_validate(meta["spec"]) == spec

    # The spec as a worker receives it (JSON) resumes the run: nothing runs again.
    again = run_rollout(RolloutSpec.model_validate_json(spec.model_dump_json()))
    assert [t.id for t in again] == [t.id for t in trajs]
    with TrajectoryStore(db) as store:
        assert store.count(run="calc") == 4


def test_an_unnamed_run_gets_a_fresh_id_and_its_metadata_names_it(tmp_path: Path) -> None:
    with TrajectoryStore(tmp_path / "s.db") as store:
        spec = RolloutSpec(tasks=make_tasks(2), seed=4)
        trajs = run_rollout(spec, env=lambda: TurnsEnv(1), policy=FakePolicy(), store=store)
        [run_id] = {t.run_id for t in trajs}
        assert run_id is not None and run_id.startswith("run-")
        meta = store.get_run(run_id)
        assert meta is not None and meta["model"] == "fake"
        assert RolloutSpec.model_validate(meta["spec"]) == spec.model_copy(
            update={"run_id": run_id}
        )
    # The same spec elsewhere is the same rollout, token for token.
    fresh = run_rollout(
        spec.model_copy(update={"run_id": run_id}), env=lambda: TurnsEnv(1), policy=FakePolicy()
    )
    assert [content_of(t) for t in fresh] == [content_of(t) for t in trajs]
