"""One browser pool for the whole test session (starting Chromium takes a second a browser);
when the session ends, no Chromium it started may be left."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pytest

from trajforge.envs.browser import BrowserPool
from trajforge.envs.browser.chromium import running_browsers


@pytest.fixture(scope="session")
def pool() -> Iterator[BrowserPool]:
    browsers = BrowserPool(2, call_timeout_s=20.0)
    yield browsers
    browsers.close()
    assert psutil.wait_procs(running_browsers(), timeout=5)[1] == []
    assert running_browsers() == []
