"""Headless Chromium driven by Selenium for the viewer's browser tests: the system's Chromium
and chromedriver (Debian packages), a fresh profile, and nothing left running afterwards."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

from trajforge.envs.browser.chromium import HEADLESS_FLAGS

WAIT_S = 20.0
CHROMIUM_FLAGS = (*HEADLESS_FLAGS, "--window-size=1280,1600")


def _executable(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path is not None:
            return path
    raise RuntimeError(f"none of {', '.join(names)} is installed (make setup installs them)")


@contextmanager
def headless_chromium() -> Iterator[WebDriver]:
    """Headless Chromium with a fresh profile, quit (and checked gone) at the end."""
    options = webdriver.ChromeOptions()
    options.binary_location = _executable("chromium", "chromium-browser")
    with tempfile.TemporaryDirectory(prefix="trajforge-chromium-") as profile:
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        service = Service(executable_path=_executable("chromedriver"))
        driver = webdriver.Chrome(options=options, service=service)
        assert service.process is not None
        root = psutil.Process(service.process.pid)
        try:
            driver.set_page_load_timeout(WAIT_S)
            yield driver
        finally:
            spawned = [root, *root.children(recursive=True)]  # the browser's, renderers too
            driver.quit()
            _, alive = psutil.wait_procs(spawned, timeout=10)
            for proc in alive:  # quit normally ends them all; never leave one behind
                proc.kill()
            assert not alive, f"still running after quit: {[p.pid for p in alive]}"
