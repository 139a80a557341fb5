"""Report figures, rendered with matplotlib to PNG and embedded as data URIs (no server needed)."""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt

_COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860"]


def _to_data_uri(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def success_per_stage(stages: Sequence[str], success: Sequence[float]) -> str:
    fig, ax = plt.subplots(figsize=(6, 3.2))
    bars = ax.bar(stages, [100 * s for s in success], color=_COLORS[: len(stages)])
    for bar, s in zip(bars, success, strict=True):
        ax.annotate(f"{100 * s:.0f}%", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=9)  # fmt: skip
    ax.set_ylim(0, 105)
    ax.set_ylabel("held-out success (%)")
    ax.set_title("Success per stage")
    ax.grid(axis="y", alpha=0.3)
    return _to_data_uri(fig)


def curve(
    steps: Sequence[float], series: Mapping[str, Sequence[float]], title: str, ylabel: str
) -> str:
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for (label, values), color in zip(series.items(), _COLORS, strict=False):
        ax.plot(steps[: len(values)], values, marker="o", markersize=3, label=label, color=color)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    return _to_data_uri(fig)


def distributions(data: Mapping[str, Sequence[float]], title: str, xlabel: str) -> str:
    """Overlaid histograms on shared bin edges (unit bins for small integer ranges)."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    nonempty = [list(v) for v in data.values() if v]
    if nonempty:
        lo = min(min(v) for v in nonempty)
        hi = max(max(v) for v in nonempty)
        if hi - lo <= 20:
            edges = np.arange(np.floor(lo) - 0.5, np.ceil(hi) + 1.5, 1.0)
        else:
            edges = np.linspace(lo, hi, 21)
        for (label, v), color in zip(data.items(), _COLORS, strict=False):
            if v:
                ax.hist(list(v), bins=edges.tolist(), alpha=0.55, label=label, color=color)
        ax.legend()
    ax.set_xlabel(xlabel)
    ax.set_ylabel("episodes")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return _to_data_uri(fig)
