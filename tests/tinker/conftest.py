"""A Tinker server over the tiny model on 127.0.0.1 for each test module, and the SDK's client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import tinker
from trajforge.serve.server import serving_app
from trajforge.store import TrajectoryStore
from trajforge.tinker.app import tinker_app
from trajforge.tinker.service import TinkerService


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TinkerService]]:
    root: Path = tmp_path_factory.mktemp("tinker")
    with TrajectoryStore(root / "store.db") as store:
        service = TinkerService(root, {"tiny": "tiny"}, store)
        with serving_app(tinker_app(service)) as url:
            yield url, service


@pytest.fixture(scope="module")
def client(served: tuple[str, TinkerService]) -> Iterator[tinker.ServiceClient]:
    url, _ = served
    service_client = tinker.ServiceClient(base_url=url, api_key="tml-local")
    yield service_client
