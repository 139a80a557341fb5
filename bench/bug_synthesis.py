"""What the bug-injection rules yield on a real package: how many of the changes tried its own
tests catch (kept as ``repo`` tasks), and why the others were dropped.

The package is a pinned pure-Python sdist with its tests (``inflection==0.5.1``), fetched once
with ``pip download --no-binary :all:`` into the user cache and unpacked there; then
``synthesize_bugs`` tries ``--count`` changes (round-robin over its functions) and runs the
package's tests after each.

    .venv/bin/python bench/bug_synthesis.py --quick      # 20 changes: a minute or two
    .venv/bin/python bench/bug_synthesis.py --count 200  # every change of the package

Prints kept and dropped by reason, kept by rule, then ONE JSON line; ``ratio`` is the share of
the changes tried that the package's tests catch (kept).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console

from trajforge.synthesis.bugs import synthesize_bugs

PACKAGE, VERSION = "inflection", "0.5.1"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "trajforge" / "sdists"


def fetch(package: str, version: str) -> Path:
    """The unpacked sdist of ``package==version`` (downloaded once)."""
    unpacked = CACHE / f"{package}-{version}"
    if unpacked.is_dir():
        return unpacked
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:",
                    "--no-deps", f"{package}=={version}", "-d", str(CACHE)], check=True)  # fmt: skip
    with tarfile.open(CACHE / f"{package}-{version}.tar.gz") as sdist:
        sdist.extractall(CACHE, filter="data")
    return unpacked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="changes tried")
    parser.add_argument("--quick", action="store_true", help="20 changes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    count = 20 if args.quick else args.count
    console = Console()
    package = fetch(PACKAGE, VERSION)
    started = time.monotonic()
    report = synthesize_bugs(package, count, seed=args.seed)
    seconds = time.monotonic() - started
    console.print(f"{PACKAGE}=={VERSION}: {report.text}")
    by_rule = Counter(t.data["rule"] for t in report.tasks)
    for rule, n in by_rule.most_common():
        console.print(f"  kept by {rule}: {n}")
    print(json.dumps({
        "package": f"{PACKAGE}=={VERSION}", "tried": report.explored, "kept": len(report.tasks),
        "ratio": round(len(report.tasks) / max(report.explored, 1), 3),
        "dropped": dict(report.dropped), "kept_by_rule": dict(by_rule),
        "functions": len({(t.data["file"], t.data["function"]) for t in report.tasks}),
        "seconds": round(seconds, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
