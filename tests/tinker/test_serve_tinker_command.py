"""``trajforge serve --tinker`` as a user starts it: a real process on a free local port that the
tinker SDK drives, stopped with Ctrl-C, its samples left in the store."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import tinker
from tinker import types
from trajforge.store import TrajectoryStore

TRAJFORGE = str(Path(sys.executable).parent / "trajforge")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_serve_tinker_offers_its_models_and_stores_what_it_samples(tmp_path: Path) -> None:
    store, port = tmp_path / "samples.db", _free_port()
    argv = [TRAJFORGE, "serve", "--tinker", "--port", str(port), "--tinker-dir", str(tmp_path)]
    process = subprocess.Popen([*argv, "--store", str(store)], stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # it loads every model it offers to save tokenizers
        while True:
            try:
                httpx.get(url, timeout=5)
                break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.2)
        client = tinker.ServiceClient(base_url=url, api_key="tml-local")
        rest = tinker.RestClient(base_url=url, api_key="tml-local")
        offered = {m.model_name for m in rest.get_server_capabilities().result().supported_models}
        assert {"tiny", "embedded", "smollm2-135m-instruct"} <= offered
        trainer = client.create_lora_training_client(base_model="tiny", rank=4, seed=0).result()
        sampler = trainer.save_weights_and_get_sampling_client().result()
        params = types.SamplingParams(max_tokens=4, temperature=1.0, seed=3)
        prompt = types.ModelInput.from_ints([10, 20, 30, 40])
        sequences = sampler.sample(prompt, 2, params).result().sequences
        assert len(sequences) == 2 and all(1 <= len(s.tokens) <= 4 for s in sequences)
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert f"serving the Tinker API at {url}" in err
    with TrajectoryStore(store) as stored:
        samples = stored.query()
    assert len(samples) == 2
    assert sorted(len(t.messages[-1].token_ids or []) for t in samples) == sorted(
        len(s.tokens) for s in sequences
    )
