"""A gateway over a scripted policy that calls tools like an agent's model would
(``serve_helpers.adder_reply``), served on 127.0.0.1 for the length of a test."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI
from serve_helpers import MODEL, adder_reply

from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.naming import load_policy
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.policy.token_policy import TokenPolicy
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving
from trajforge.store import TrajectoryStore


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "gateway.db"


@pytest.fixture
def gateway(store_path: Path) -> Iterator[Gateway]:
    store = TrajectoryStore(store_path)
    policy = ScriptedPolicy(adder_reply, load_tokenizer(), name=MODEL)
    yield Gateway(policy, store, run_id="gw")
    store.close()


@pytest.fixture
def base_url(gateway: Gateway) -> Iterator[str]:
    with serving(gateway) as url:
        yield url


@pytest.fixture
def tiny_url(store_path: Path) -> Iterator[str]:
    """A gateway over the tiny model (it samples), recording to ``store_path`` as run ``gw``."""
    policy = load_policy("tiny")
    assert isinstance(policy, TokenPolicy)
    store = TrajectoryStore(store_path)
    with serving(Gateway(policy, store, run_id="gw")) as url:
        yield url
    asyncio.run(policy.close())
    store.close()


@pytest.fixture
def tiny(tiny_url: str) -> OpenAI:
    """An OpenAI client of the tiny model's gateway."""
    return OpenAI(base_url=f"{tiny_url}/v1", api_key="unused", max_retries=0)
