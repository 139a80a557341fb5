"""load_policy / tokenizer_for: policy names as configs and the CLI write them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from trajforge.errors import ConfigError
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.policy.naming import (
    POLICIES,
    check_policy_name,
    is_scripted,
    load_policy,
    parse_openai_spec,
    tokenizer_for,
)
from trajforge.policy.scripted import ScriptedPolicy


def test_expert_needs_the_env_expert(smol_tokenizer: Any) -> None:
    with pytest.raises(ConfigError, match="expert="):
        load_policy("expert")
    policy = load_policy("expert", expert=lambda task, messages: "done")
    assert isinstance(policy, ScriptedPolicy) and policy.name == "expert"
    assert policy.tokenizer is smol_tokenizer


def test_a_scripted_teacher_by_reference(tmp_path: Path, smol_tokenizer: Any) -> None:
    teacher = tmp_path / "teacher.py"
    teacher.write_text("def reply(task, messages):\n    return 'The answer is 4.'\nNUMBER = 4\n")
    spec = f"script:{teacher}:reply"
    policy = load_policy(spec)
    assert isinstance(policy, ScriptedPolicy) and policy.name == spec
    assert policy.tokenizer is smol_tokenizer
    assert is_scripted(spec) and is_scripted("expert") and not is_scripted("tiny")
    with pytest.raises(ConfigError, match=r"script:file\.py:function"):
        load_policy("script:reply")
    with pytest.raises(ConfigError, match="has no attribute 'nothing'"):
        load_policy(f"script:{teacher}:nothing")
    with pytest.raises(ConfigError, match="is not a function"):
        load_policy(f"script:{teacher}:NUMBER")


def test_openai_spec() -> None:
    assert parse_openai_spec("openai:http://127.0.0.1:8000/v1#org/model#2") == (
        "http://127.0.0.1:8000/v1#org/model",
        "2",
    )
    assert parse_openai_spec("openai:https://api.example.com/v1#gpt-x") == (
        "https://api.example.com/v1",
        "gpt-x",
    )
    for bad in ("openai:http://127.0.0.1:8000/v1", "openai:#m", "openai:http://x#"):
        with pytest.raises(ConfigError, match="openai:<base_url>#<model>"):
            load_policy(bad)


def test_unknown_names_and_folders(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown policy 'nope'"):
        load_policy("nope")
    with pytest.raises(ConfigError, match=r"no config\.json"):
        load_policy(str(tmp_path))


def test_policies_are_a_registry_of_names_and_prefixes(tmp_path: Path) -> None:
    assert POLICIES.names() == [
        "embedded",
        "expert",
        "openai:",
        "pocket",
        "script:",
        "tiny",
        "tiny-vlm",
        "vllm:",
    ]
    with pytest.raises(
        ConfigError,
        match=r"^unknown policy 'tinny' \(did you mean 'tiny'\?\): expected embedded, expert, pocket, tiny, tiny-vlm, "
        r"a local model folder, script:file.py:function, openai:<base_url>#<model>, or "
        r"vllm:<model folder or name>$",
    ):
        load_policy("tinny")
    # A name with a colon that no prefix claims is still looked for as a folder.
    with pytest.raises(ConfigError, match="unknown policy 'hf:tiny'"):
        load_policy("hf:tiny")


def test_tiny_and_a_local_folder(tmp_path: Path, smol_tokenizer: Any) -> None:
    from trajforge.policy.hf import HFPolicy

    tiny = load_policy("tiny", seed=3)
    assert isinstance(tiny, HFPolicy) and tiny.name == "tiny"
    model, tokenizer = tiny_model_and_tokenizer(seed=3)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    local = load_policy(str(tmp_path))
    assert isinstance(local, HFPolicy) and local.name == str(tmp_path)
    assert local.renderer.end_of_turn_ids == tiny.renderer.end_of_turn_ids
    folder_tokenizer = tokenizer_for(str(tmp_path))
    assert folder_tokenizer is not None and folder_tokenizer is not smol_tokenizer
    assert folder_tokenizer.encode("a <tool_call> b") == smol_tokenizer.encode("a <tool_call> b")
    asyncio.run(tiny.close())
    asyncio.run(local.close())


def test_a_checkpoints_folder_or_its_latest_pointer_loads_the_checkpoint_it_names(
    tmp_path: Path,
) -> None:
    from trajforge.policy.hf import HFPolicy

    root = tmp_path / "run" / "checkpoints"
    model, tokenizer = tiny_model_and_tokenizer(seed=3)
    for step in (1, 2):  # model folders stand in for checkpoints: only the pointer is tested
        model.save_pretrained(root / f"step-000000{step}")
        tokenizer.save_pretrained(root / f"step-000000{step}")
    (root / "latest").write_text("step-0000002\n")
    for spec in (root / "latest", root):
        check_policy_name(str(spec))
        policy = load_policy(str(spec))
        assert isinstance(policy, HFPolicy) and policy.name == str(root / "step-0000002")
        assert tokenizer_for(str(spec)) is not None
        asyncio.run(policy.close())
    (root / "latest").write_text("step-0000009")  # names nothing: refused as asked for
    with pytest.raises(ConfigError, match=r"unknown policy '.*latest'"):
        check_policy_name(str(root / "latest"))


def test_tokenizer_for_names(smol_tokenizer: Any) -> None:
    assert tokenizer_for("openai:http://127.0.0.1:1/v1#m") is None
    for name in ("tiny", "embedded", "expert", None, "some-run-name"):
        assert tokenizer_for(name) is smol_tokenizer
