"""Text-only imports made trainable by an explicit rendering (``import --render-with``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.renderer import ChatRenderer
from trajforge.policy.text_render import render_text_only
from trajforge.schema import Role
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore
from trajforge.train.batch import TextOnlyTrajectoryError, encode_trajectory

CHAT = {
    "messages": [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": "What is 6 * 7?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "calculator", "arguments": "{\"expression\": \"6*7\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "content": "The answer is 42."},
    ]
}  # fmt: skip


def test_render_with_gives_ids_marks_them_rendered_and_check_passes(tmp_path: Path) -> None:
    source = tmp_path / "chats.jsonl"
    source.write_text(json.dumps(CHAT) + "\n")
    store, runner = tmp_path / "s.db", CliRunner()
    plain = runner.invoke(
        app, ["import", str(source), "-f", "openai", "--run", "text", "--store", str(store)]
    )
    assert plain.exit_code == 0, plain.output
    args = ["import", str(source), "-f", "openai", "--run", "rendered", "--render-with", "embedded"]
    # The record's id comes from its bytes: the rendered copy goes to a store of its own.
    rendered_store = tmp_path / "rendered.db"
    rendered = runner.invoke(app, [*args, "--store", str(rendered_store)])
    assert rendered.exit_code == 0, rendered.output
    with TrajectoryStore(store) as db:
        (text,) = db.query(run="text")
    with TrajectoryStore(rendered_store) as db:
        (traj,) = db.query(run="rendered")
    with pytest.raises(TextOnlyTrajectoryError):
        encode_trajectory(text)
    assert traj.is_tokenized and traj.metadata["rendered_with"] == "embedded"
    assert all(m.logprobs is None for m in traj.messages if m.role is Role.ASSISTANT)
    sequence = encode_trajectory(traj)  # trainable now
    assert sum(sequence.loss_mask) == sum(len(m.token_ids or []) for m in traj.messages
                                          if m.role is Role.ASSISTANT)  # fmt: skip
    check = runner.invoke(app, ["check", "--store", str(rendered_store), "--json"])
    assert check.exit_code == 0 and json.loads(check.stdout)["checked"] == 1


def test_a_trajectory_with_ids_is_never_rendered_again() -> None:
    sampled = synthetic_trajectory(0)
    assert render_text_only(sampled, ChatRenderer(load_tokenizer()), "embedded") is sampled


def test_render_with_an_unknown_model_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "chats.jsonl"
    source.write_text(json.dumps(CHAT) + "\n")
    args = ["import", str(source), "-f", "openai", "--render-with", "openai:http://x#y"]
    result = CliRunner().invoke(app, [*args, "--store", str(tmp_path / "s.db")])
    assert result.exit_code != 0 and "--render-with" in str(result.exception)
