"""A gateway over a scripted policy that calls tools like an agent's model would (the gateway
tests' ``serve_helpers.adder_reply``), recording nothing itself: an agent rollout's store hook
stores each run as it ends."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "serve"))

from serve_helpers import MODEL, adder_reply

from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.serve.gateway import Gateway


@pytest.fixture
def gateway() -> Gateway:
    policy = ScriptedPolicy(adder_reply, load_tokenizer(), name=MODEL)
    return Gateway(policy, None, run_id="")
