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


def _draw_series(ax: Any, steps: Sequence[float], values: Sequence[float], **style: Any) -> None:
    """One series on ``ax``: a line through two or more steps; a single step is a point with its
    value and step written beside it (a line would claim a trend that one step cannot show)."""
    xs = list(steps[: len(values)])
    if len(values) == 1:
        ax.plot(xs, list(values), marker="o", markersize=6, linestyle="none", **style)
        ax.annotate(f"{values[0]:.4g} (step {xs[0]:g}, the only step)", (xs[0], values[0]),
                    textcoords="offset points", xytext=(6, 6), fontsize=8)  # fmt: skip
        ax.set_xticks(xs)
        return
    ax.plot(xs, list(values), marker="o", markersize=3, **style)
    if len(values) <= 10:
        ax.set_xticks(xs)  # few steps: no fractional steps on the axis


def curve(
    steps: Sequence[float], series: Mapping[str, Sequence[float]], title: str, ylabel: str
) -> str:
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for (label, values), color in zip(series.items(), _COLORS, strict=False):
        _draw_series(ax, steps, values, label=label, color=color)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    return _to_data_uri(fig)


def panels(
    steps: Sequence[float], panels: Mapping[str, Mapping[str, Sequence[float]]], title: str
) -> str:
    """Small plots side by side, one per entry of ``panels`` (its title: the series it draws
    against the step)."""
    cols = min(len(panels), 2)
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6, 2.4 * rows), squeeze=False)
    for ax, (name, series) in zip(axes.flat, panels.items(), strict=False):
        for (label, values), color in zip(series.items(), _COLORS, strict=False):
            _draw_series(ax, steps, values, label=label, color=color)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if len(series) > 1:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    fig.supxlabel("step", fontsize=8)
    fig.tight_layout()
    return _to_data_uri(fig)


def distributions(data: Mapping[str, Sequence[float]], title: str, xlabel: str) -> str:
    """Histograms of several stages on shared bin edges that hide none of them: over a small
    integer range each unit bin holds the stages' bars side by side; otherwise each stage is an
    outline (no fill to cover another's)."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    shown = {label: list(v) for label, v in data.items() if v}
    if shown:
        lo = min(min(v) for v in shown.values())
        hi = max(max(v) for v in shown.values())
        styles = ("-", "--", ":", "-.")
        if hi - lo <= 20:
            centres = np.arange(np.floor(lo), np.ceil(hi) + 1.0)
            width = 0.8 / len(shown)
            for k, ((label, v), color) in enumerate(zip(shown.items(), _COLORS, strict=False)):
                counts = [sum(1 for x in v if round(x) == c) for c in centres]
                offset = (k - (len(shown) - 1) / 2) * width
                ax.bar(centres + offset, counts, width=width, label=label, color=color)
            ax.set_xticks(centres)
        else:
            edges = np.linspace(lo, hi, 21)
            for k, ((label, v), color) in enumerate(zip(shown.items(), _COLORS, strict=False)):
                ax.hist(v, bins=edges.tolist(), histtype="step", linewidth=1.8, label=label,
                        color=color, linestyle=styles[k % len(styles)])  # fmt: skip
        ax.legend()
    ax.set_xlabel(xlabel)
    ax.set_ylabel("episodes")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return _to_data_uri(fig)
