"""A run folder for the viewer's tests: a store of synthetic runs (groups of four samples, one
truncated trajectory with an unparsable call, one tokenized with SmolLM2's tokenizer) and an RL
stage's metrics."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.schema import Message, Outcome, OutcomeStatus, Role, Task, ToolCall, Trajectory
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore
from trajforge.viewer.service import ViewerData

from .chromium import headless_chromium
from .layout import COUNT, OTHER_RUN, RUN, SAMPLES


def _tokenized() -> Trajectory:
    """A short conversation whose ids are SmolLM2's own, so the token view can decode them."""
    tok = load_tokenizer()
    user = tok.encode("<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n")
    answer = tok.encode("The answer is 4.<|im_end|>")
    return Trajectory(
        id="tok-decoded",
        task=Task(id="sum", prompt="What is 2 + 2?", env="calculator"),
        env="calculator",
        run_id=OTHER_RUN,
        model="tiny",
        messages=[
            Message(role=Role.USER, content="What is 2 + 2?", token_ids=user),
            Message(
                role=Role.ASSISTANT,
                content="The answer is 4.",
                token_ids=answer,
                logprobs=[-0.01] * (len(answer) - 1) + [-2.5],
                reward=1.0,
                state_key="after-question",
            ),
        ],
        outcome=Outcome(reward=1.0),
        created_at=1_767_300_000.0,
    )


def _truncated() -> Trajectory:
    call = ToolCall(id="call_bad", raw="<tool_call>{oops", parse_error="invalid JSON at 1:2")
    return Trajectory(
        id="cut-short",
        task=Task(id="long", prompt="Count to a million.", env="calculator"),
        env="calculator",
        run_id=OTHER_RUN,
        model="synthetic",
        messages=[
            Message(role=Role.USER, content="Count to a million."),
            Message(role=Role.ASSISTANT, content="1, 2, 3", tool_calls=[call]),
        ],
        outcome=Outcome(status=OutcomeStatus.TRUNCATED, reason="turn limit"),
        created_at=1_767_300_001.0,
    )


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("runs") / "exp"
    with TrajectoryStore(folder / "store.db") as st:
        st.add_many(
            synthetic_trajectory(i, run_id=RUN, samples_per_task=SAMPLES) for i in range(COUNT)
        )
        st.add_many([_tokenized(), _truncated()])
        st.set_run(RUN, {"kind": "rl"})
    (folder / "rl").mkdir()
    lines = [{"step": s, "loss": 1.0 / s, "reward_mean": s / 10} for s in range(1, 11)]
    (folder / "rl" / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


@pytest.fixture
def data(run_dir: Path) -> ViewerData:
    viewer = ViewerData(run_dir / "store.db", run_dir)
    yield viewer  # type: ignore[misc]
    viewer.close()


@pytest.fixture(scope="session")
def browser() -> Iterator[WebDriver]:
    """One headless Chromium for the session's browser tests (each loads its own pages)."""
    with headless_chromium() as driver:
        yield driver
