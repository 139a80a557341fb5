"""trajforge check, run through the real entry point on a store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cli_runner import RunCli
from image_samples import png_bytes
from trajforge.policy.base import SamplingParams
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import ImagePart, Message, Role, Task, TextPart, Trajectory
from trajforge.store import TrajectoryStore

Cli = RunCli


@pytest.fixture
def cli(run_cli: RunCli) -> RunCli:
    """This module's name for the ``run_cli`` fixture (tests/cli/conftest.py)."""
    return run_cli


def scripted_trajectory(task_id: str, run_id: str) -> Trajectory:
    policy = ScriptedPolicy(["Hello.", "Bye."], load_tokenizer(), name="expert")

    async def episode() -> list[Message]:
        session = policy.start_session([Message(role=Role.USER, content="Hi")], [])
        await policy.respond(session, SamplingParams(), turn=0)
        session.add_observations([Message(role=Role.USER, content="Go")])
        await policy.respond(session, SamplingParams(), turn=1)
        return session.messages

    return Trajectory(
        task=Task(id=task_id, prompt="Hi"),
        messages=asyncio.run(episode()),
        run_id=run_id,
        model="expert",
    )


def test_check_reports_per_message_and_exits_1(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "t.db"
    good = scripted_trajectory("a", "clean")
    bad = scripted_trajectory("b", "dirty")
    ids = list(bad.messages[2].token_ids or [])
    ids[1] += 1
    bad.messages[2] = bad.messages[2].model_copy(update={"token_ids": ids})
    with TrajectoryStore(db) as store:
        store.add_many([good, bad])

    code, out, _ = cli("check", "--store", db, "--run", "clean")
    assert code == 0 and "checked 1 trajectories" in out and "all token-exact" in out

    code, out, _ = cli("check", "--store", db, "--json")
    assert code == 1
    report = json.loads(out)
    assert report["checked"] == 2
    (mismatch,) = report["mismatches"]
    assert mismatch["trajectory_id"] == bad.id
    assert (mismatch["message_index"], mismatch["kind"], mismatch["position"]) == (2, "tokens", 1)

    code, out, _ = cli("check", "--store", db)
    assert code == 1 and "1 mismatch(es) in 1 trajectory(ies)" in out and "tokens" in out


def test_check_without_a_store_is_one_clear_line(tmp_path: Path, cli: Cli) -> None:
    code, _, err = cli("check", "--store", tmp_path / "missing.db")
    assert code == 1 and "no store at" in err and "Traceback" not in err


def test_check_rejects_an_unknown_protocol(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "t.db"
    with TrajectoryStore(db) as store:
        store.add(scripted_trajectory("a", "r"))
    code, _, err = cli("check", "--store", db, "--protocol", "xml")
    assert code == 1 and "--protocol: 'xml' is not one of auto, native, text" in err


def test_check_says_in_one_line_why_trajectories_with_images_were_skipped(
    tmp_path: Path, cli: Cli
) -> None:
    db = tmp_path / "t.db"
    good = scripted_trajectory("a", "r")
    seen = scripted_trajectory("b", "r")
    parts = [TextPart(text="Hi"), ImagePart.from_bytes(png_bytes(1))]
    seen.messages[0] = seen.messages[0].model_copy(update={"content": parts})
    with TrajectoryStore(db) as store:
        store.add_many([good, seen])
    code, out, _ = cli("check", "--store", db)
    assert code == 0 and "checked 1 trajectories, 1 skipped" in out and "all token-exact" in out
    assert "1 trajectories with images skipped: their renderer is text only" in out
    with TrajectoryStore(db) as store:
        store.delete([good.id])
    code, _, err = cli("check", "--store", db)
    assert code == 1 and "none of the 1 trajectories could be checked: 1 hold images" in err
