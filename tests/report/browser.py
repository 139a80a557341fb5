"""Headless Chromium for tests: load a local page, report its images, take a screenshot."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]

_PROBE = """<script>
window.addEventListener("load", () => {
  const imgs = [...document.images];
  const broken = imgs.filter((i) => !i.complete || i.naturalWidth === 0).length;
  document.body.setAttribute("data-images", String(imgs.length));
  document.body.setAttribute("data-broken", String(broken));
  document.body.setAttribute("data-rows", String(document.querySelectorAll("#results tbody tr").length));
});
</script>"""


@dataclass
class PageCheck:
    images: int
    broken: int
    table_rows: int
    screenshot: Path


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def check_page(html_file: Path, screenshot: Path, *, timeout_s: float = 60.0) -> PageCheck:
    """Load ``html_file`` (a copy with a load probe) in headless Chromium and screenshot it."""
    exe = chromium()
    if exe is None:
        raise RuntimeError("chromium is not installed (make setup installs the Debian package)")
    with tempfile.TemporaryDirectory() as profile:
        probed = Path(profile) / "page.html"
        probed.write_text(html_file.read_text().replace("</body>", _PROBE + "</body>"))
        common = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=5000"]
        dom = subprocess.run(
            [*common, "--dump-dom", probed.as_uri()],
            capture_output=True, text=True, timeout=timeout_s, check=True,
        ).stdout  # fmt: skip
        subprocess.run(
            [*common, f"--screenshot={screenshot}", "--window-size=1280,2400", probed.as_uri()],
            capture_output=True, timeout=timeout_s, check=True,
        )  # fmt: skip
    body = re.search(r"<body([^>]*)>", dom)
    attrs = dict(re.findall(r'data-(\w+)="(\d+)"', body.group(1) if body else ""))
    return PageCheck(
        images=int(attrs.get("images", -1)),
        broken=int(attrs.get("broken", -1)),
        table_rows=int(attrs.get("rows", -1)),
        screenshot=screenshot,
    )
