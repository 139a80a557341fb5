"""One browser pool for the browser tests (starting Chromium takes a second a browser), closed
when they end: later tests check that nothing they start outlives them, and a pool kept to the
session's end would be counted against them. No Chromium it started may be left."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pytest

from trajforge.envs.browser import BrowserPool
from trajforge.envs.browser.chromium import running_browsers


@pytest.fixture(scope="package")
def pool() -> Iterator[BrowserPool]:
    browsers = BrowserPool(2, call_timeout_s=20.0)
    yield browsers
    browsers.close()
    assert psutil.wait_procs(running_browsers(), timeout=5)[1] == []
    assert running_browsers() == []
