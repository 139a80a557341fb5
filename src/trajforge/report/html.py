"""The run report: ``report.html`` in a run folder, a single file that opens with no server."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader

from trajforge import __version__
from trajforge.errors import DataError
from trajforge.judge import FailureSplit, format_scored
from trajforge.report.games import GamesSummary
from trajforge.report.intervals import reward_text, success_text
from trajforge.report.links import view_command
from trajforge.report.screens import rescued_episode
from trajforge.schema import Message, Role, Trajectory, image_label, is_success, labelled_text
from trajforge.store import TrajectoryStore

RESULTS_FILE = "results.json"
REPORT_FILE = "report.html"


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _render_message(m: Message) -> dict[str, Any]:
    calls = []
    for c in m.tool_calls:
        if c.parse_error:
            calls.append(f"unparsable call: {c.parse_error}")
        else:
            calls.append(f"{c.name}({json.dumps(c.arguments, ensure_ascii=False)})")
    # The report is one file: its images are inline data URLs (a label where bytes are absent).
    loaded = all(p.data is not None for p in m.images)
    text = m.text if loaded else labelled_text(m.content)
    content = text if len(text) < 1500 else text[:1500] + " …"
    images = [{"src": p.data_url(), "label": image_label(p)} for p in m.images] if loaded else []
    return {"role": m.role.value, "name": m.name, "content": content, "calls": calls,
            "images": images}  # fmt: skip


def _solved(t: Trajectory) -> bool:
    return is_success(t.outcome.status, t.outcome.reward)


def _side(stage: str, t: Trajectory) -> dict[str, Any]:
    reward = t.outcome.reward
    return {
        "stage": stage,
        "reward_text": "unscored" if reward is None else f"{reward:.2f}",
        "solved": _solved(t),
        "status": t.outcome.status.value,
        "messages": [_render_message(m) for m in t.messages if m.role is not Role.SYSTEM],
    }


def _figures_of(summary: dict[str, Any], trajectories: list[Trajectory]) -> dict[str, Any]:
    """An eval stage's summary with its success, mean reward (95% intervals) and episode count
    as text; a summary written before ``scored`` was recorded shows its episodes alone."""
    episodes = summary["episodes"]
    scored = summary.get("scored")
    rewards = [t.outcome.reward for t in trajectories if t.outcome.reward is not None]
    return {
        **summary,
        "success_text": success_text(summary),
        "reward_text": reward_text(summary, rewards),
        "episodes_text": (
            str(episodes) if scored is None else f"scored {format_scored(scored, episodes)}"
        ),
        # A summary from before the split (schema 1.1) has none to show.
        "failures_text": (
            FailureSplit(summary["policy_failures"], summary["infra_failures"]).text()
            if "infra_failures" in summary
            else "–"
        ),
    }


def _stage_text(stage: dict[str, Any]) -> str:
    """A non-eval stage's line; an RL stage's says how many episodes its steps left out as
    lost to the infrastructure (the ``infra_failures`` each step logs)."""
    text = stage.get("text", _fmt_duration(stage.get("duration_s")))
    lost = sum(int(h.get("infra_failures", 0)) for h in stage.get("history") or [])
    if stage.get("kind") == "rl" and lost:
        text += f", {lost} episodes lost to the infrastructure"
    return str(text)


def _samples(stages: list[tuple[str, list[Trajectory]]], count: int) -> list[dict[str, Any]]:
    """The same tasks at every eval stage that has trajectories, side by side: wins (solved by
    the last stage) and, beside them, failures (not solved by it), about half each when both
    exist. Wins first those the last stage solved and the stage before it did not (what the
    last training added), then those solved at the end and not at the start, then by reward
    gained (unscored ranks as 0); failures first those an earlier stage solved (what training
    broke), then by lowest final reward."""
    shown = [(name, trajs) for name, trajs in stages if trajs]
    if len(shown) < 2:
        return []
    by_task = [{t.task.id: t for t in trajs} for _, trajs in shown]
    rows = [
        [stage[t.task.id] for stage in by_task]
        for t in shown[0][1]
        if all(t.task.id in stage for stage in by_task)
    ]
    wins = sorted(
        (row for row in rows if _solved(row[-1])),
        key=lambda row: (
            _solved(row[-2]) - _solved(row[-1]),
            _solved(row[0]) - _solved(row[-1]),
            (row[0].outcome.reward or 0.0) - (row[-1].outcome.reward or 0.0),
        ),
    )
    failures = sorted(
        (row for row in rows if not _solved(row[-1])),
        key=lambda row: (not any(_solved(t) for t in row[:-1]), row[-1].outcome.reward or 0.0),
    )
    n_failures = min(len(failures), max(count // 2, count - len(wins)))
    picked = wins[: count - n_failures] + failures[:n_failures]
    return [
        {
            "task_id": row[0].task.id,
            "prompt": row[0].task.prompt,
            "solved": _solved(row[-1]),
            "sides": [_side(name, t) for (name, _), t in zip(shown, row, strict=True)],
        }
        for row in picked
    ]


def _load_eval_trajectories(
    store_path: Path, evals: list[dict[str, Any]]
) -> dict[str, list[Trajectory]]:
    if not store_path.is_file() or not evals:
        return {}
    with TrajectoryStore(store_path) as db:
        return {
            s["name"]: db.query(run=s["run_id"], order_by="task_id") if s.get("run_id") else []
            for s in evals
        }


def _figures(
    stages: list[dict[str, Any]],
    evals: list[dict[str, Any]],
    trajectories: dict[str, list[Trajectory]],
) -> list[dict[str, str]]:
    from trajforge.report import plots  # lazy: matplotlib costs 0.4 s; only a report draws

    figures: list[dict[str, str]] = []
    if evals:
        names = [_label(s) for s in evals]
        src = plots.success_per_stage(names, [s["summary"]["success"] for s in evals])
        figures.append({"src": src, "alt": "success per stage"})
    for s in stages:
        history = s.get("history") or []
        if not history or s.get("kind") not in ("rl", "sft", "dpo"):
            continue
        steps = [h.get("step", i + 1) for i, h in enumerate(history)]
        if s["kind"] == "rl":
            rewards = {"reward": [h.get("reward_mean", 0.0) for h in history]}
            src = plots.curve(steps, rewards, f"{s['name']}: mean reward per step", "reward")
            figures.append({"src": src, "alt": f"{s['name']} reward per step"})
            diagnostics = _rl_diagnostics(history)
            if diagnostics:
                title = f"{s['name']}: RL diagnostics per step (docs/metrics.md)"
                src = plots.panels(steps, diagnostics, title)
                figures.append({"src": src, "alt": f"{s['name']} RL diagnostics per step"})
        losses = {"loss": [h.get("loss", 0.0) for h in history]}
        src = plots.curve(steps, losses, f"{s['name']}: loss per step", "loss")
        figures.append({"src": src, "alt": f"{s['name']} loss per step"})
    if any(trajectories.values()):
        turns = {k: [float(t.num_turns) for t in v] for k, v in trajectories.items()}
        src = plots.distributions(turns, "Turns per episode", "assistant turns")
        figures.append({"src": src, "alt": "turns distribution"})
        tokens = {k: [float(t.num_tokens) for t in v] for k, v in trajectories.items()}
        src = plots.distributions(tokens, "Tokens per episode", "tokens")
        figures.append({"src": src, "alt": "tokens distribution"})
    return figures


_DIAGNOSTICS = {
    "advantage spread": ("adv_std",),
    "KL": ("kl_ref", "approx_kl"),
    "clip fraction": ("clip_frac",),
    "rollout logprob gap": ("rollout_logprob_gap",),
}


def _rl_diagnostics(history: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """The RL health metrics of each step, a panel each, for the keys the steps logged (a step
    that did not log one leaves a gap)."""
    out: dict[str, dict[str, list[float]]] = {}
    for panel, keys in _DIAGNOSTICS.items():
        series = {
            key: [float(h[key]) if h.get(key) is not None else math.nan for h in history]
            for key in keys
            if any(h.get(key) is not None for h in history)
        }
        if series:
            out[panel] = series
    return out


def _label(stage: dict[str, Any]) -> str:
    """A stage's name as the report shows it: a stale one (made from what has changed since,
    ``trajforge run --stage`` upstream) never passes for current."""
    return f"{stage['name']} (stale)" if stage.get("status") == "stale" else str(stage["name"])


def build_report(run_dir: Path, *, samples: int = 3) -> Path:
    """Write ``report.html`` for the run in ``run_dir`` from its ``results.json`` and store."""
    results_path = run_dir / RESULTS_FILE
    if not results_path.is_file():
        raise DataError(f"{results_path}: no results.json (is {run_dir} a trajforge run folder?)")
    try:
        results = json.loads(results_path.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{results_path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    stages: list[dict[str, Any]] = results.get("stages", [])
    evals = [s for s in stages if s.get("kind") == "eval" and "summary" in s]
    pass_ks = sorted({int(k) for s in evals for k in s["summary"].get("pass_at", {})})
    # pass^1 is the success column already; a summary from before pass^k has none.
    hat_ks = sorted({int(k) for s in evals for k in s["summary"].get("pass_hat", {})} - {1})
    # A standalone training run that kept no trajectories has no store (null).
    store = results.get("store", "store.db")
    trajectories = _load_eval_trajectories(run_dir / store, evals) if store else {}
    rows = [
        {
            "name": _label(s),
            "time": _fmt_duration(s.get("duration_s")),
            **_figures_of(s["summary"], trajectories.get(s["name"], [])),
        }
        for s in evals
    ]
    other = [
        {
            "name": _label(s),
            "kind": s["kind"],
            "text": _stage_text(s),
        }
        for s in stages
        if s.get("kind") != "eval"
    ]
    games = GamesSummary.model_validate(results["games"]) if "games" in results else None
    figures = _figures(stages, evals, trajectories)
    by_stage = [(s["name"], trajectories.get(s["name"], [])) for s in evals]
    sample_pairs = _samples(by_stage, samples)
    # autoescape on: select_autoescape() would leave a ".html.j2" template unescaped.
    env = Environment(loader=PackageLoader("trajforge.report", "templates"), autoescape=True)
    html = env.get_template("report.html.j2").render(
        title=results.get("name", run_dir.name),
        env=results.get("env", "?"),
        model=results.get("model", "?"),
        created=time.strftime(
            "%Y-%m-%d %H:%M", time.localtime(results.get("created_at", time.time()))
        ),
        total_time=_fmt_duration(sum(s.get("duration_s") or 0.0 for s in stages)),
        rows=rows,
        pass_ks=pass_ks,
        hat_ks=hat_ks,
        other_stages=other,
        plots=figures,
        samples=sample_pairs,
        rescued=rescued_episode(by_stage),
        games=games,
        version=__version__,
        view_command=view_command(run_dir.resolve()) if store else None,
    )
    out = run_dir / REPORT_FILE
    tmp = out.with_suffix(".html.tmp")
    tmp.write_text(html)
    tmp.replace(out)
    return out
