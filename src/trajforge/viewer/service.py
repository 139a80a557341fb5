"""What the viewer's pages and API show, read from one store (and optionally its run folder).

Each method returns plain dicts (the JSON API returns them as they are; templates render them).
Every thread gets its own read connection to the store, so requests served on a thread pool
never share a SQLite connection.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

from trajforge.algos import Estimator
from trajforge.errors import StoreError, TrajforgeError
from trajforge.judge import (
    BEST_OF_KEY,
    FailureSplit,
    RewardSummary,
    RewardTotals,
    split_failures,
    summarize_reward_totals,
)
from trajforge.rollout import is_generated_run_id
from trajforge.schema import SUCCESS_THRESHOLD, ImagePart, Trajectory
from trajforge.store import TrajectoryFilter, TrajectoryStore
from trajforge.triage import Signal, signal_score_name, stored_failure_table
from trajforge.viewer.conversation import conversation, outline
from trajforge.viewer.curves import Curve, run_folder_curves, stage_of
from trajforge.viewer.diff import diff_trajectories
from trajforge.viewer.filters import TableQuery
from trajforge.viewer.stages import is_current_attempt, kind_of, stage_kinds
from trajforge.viewer.tokens import decoder_for, token_view

_SHA256 = re.compile(r"[0-9a-f]{64}")


class NotFound(TrajforgeError):
    """An id, prefix or group names nothing in the store (a 404)."""


class BadRequest(TrajforgeError):
    """A request the viewer cannot answer as asked (a 400); the message names the problem."""


def _summary_dict(summary: RewardSummary) -> dict[str, Any]:
    return {
        "episodes": summary.episodes,
        **summary.as_dict(),
        "success_text": summary.success_text(),
        "reward_text": summary.reward_text(ci=True),
        "scored_text": summary.scored_text(),
    }


def _rewards_by_run(rows: list[dict[str, Any]]) -> dict[str, RewardSummary]:
    grouped: dict[str, list[RewardTotals]] = {}
    for r in rows:
        grouped.setdefault(r["run_id"] or "", []).append(
            (
                r["status"],
                r["episodes"],
                r["scored"],
                r["reward_sum"],
                r["reward_sq"],
                r["successes"],
                r["reward_min"],
                r["reward_max"],
            )
        )
    return {run: summarize_reward_totals(totals) for run, totals in grouped.items()}


def _failures(summary: RewardSummary, infra_rows: list[dict[str, Any]]) -> FailureSplit:
    """The failures of episodes summed up in ``summary``, of which those in ``infra_rows``
    (``TrajectoryStore.infra_failures``) were lost to the infrastructure."""
    infra = split_failures((r["status"], r["reward"], True) for r in infra_rows).infra
    return FailureSplit(summary.episodes - summary.successes - infra, infra)


def run_labels(
    run_id: str, metadata: dict[str, Any], stage_kind: str | None = None
) -> dict[str, str | None]:
    """What a run is, from the metadata the command that made it stored: ``name`` (the run
    id when someone named the run, ``None`` for a generated one), ``kind`` (eval, rollout,
    collect, gateway..., else the kind of the experiment stage that made it, ``stage_kind``),
    ``env`` and ``model`` (``None`` where it does not say)."""
    spec = metadata.get("spec") or {}
    policy = spec.get("policy") or {}
    return {
        "name": None if is_generated_run_id(run_id) else run_id,
        "kind": metadata.get("command") or metadata.get("kind") or stage_kind,
        "env": spec.get("env") or metadata.get("env"),
        "model": policy.get("name") or metadata.get("model"),
    }


class ViewerData:
    """The viewer's reads over the store at ``store_path``.

    Args:
        store_path: An existing trajforge store.
        run_dir: The run folder the store belongs to (its training curves are shown), if any.
    """

    def __init__(self, store_path: Path, run_dir: Path | None = None) -> None:
        self.store_path = store_path
        self.run_dir = run_dir
        self._local = threading.local()
        self._opened: list[TrajectoryStore] = []
        self._lock = threading.Lock()
        self.store()  # a missing or foreign store fails now, not on the first page

    def store(self) -> TrajectoryStore:
        """This thread's connection to the store."""
        store: TrajectoryStore | None = getattr(self._local, "store", None)
        if store is None:
            store = TrajectoryStore(self.store_path, create=False)
            self._local.store = store
            with self._lock:
                self._opened.append(store)
        return store

    def close(self) -> None:
        with self._lock:
            for store in self._opened:
                store.close()
            self._opened.clear()

    # ------------------------------------------------------------------ runs

    def runs(self) -> list[dict[str, Any]]:
        """Every run: id, name, kind, env, model, creation time, metadata, counts and reward
        figures."""
        st = self.store()
        by_run = _rewards_by_run(st.reward_totals(SUCCESS_THRESHOLD))
        kinds = stage_kinds(self.run_dir)
        out = []
        for run in st.list_runs():
            summary = by_run.get(run["run_id"]) or summarize_reward_totals([])
            labels = run_labels(run["run_id"], run["metadata"], kind_of(run["run_id"], kinds))
            out.append({**run, **labels, **_summary_dict(summary)})
        return out

    def resolve_run(self, prefix: str) -> str:
        try:
            return self.store().resolve_run_id(prefix)
        except StoreError as exc:
            raise NotFound(str(exc)) from None

    def run(self, run_id: str) -> dict[str, Any]:
        """One run: its metadata, reward figures, breakdowns by env and status, curves."""
        st = self.store()
        stats = st.stats(run=run_id)
        summary = _rewards_by_run(st.reward_totals(SUCCESS_THRESHOLD, run=run_id)).get(run_id)
        summary = summary or summarize_reward_totals([])
        failures = _failures(summary, st.infra_failures(run=run_id))
        return {
            "run_id": run_id,
            "metadata": st.get_run(run_id) or {},
            **_summary_dict(summary),
            **failures.as_dict(),
            "failures_text": failures.text(),
            "turns_mean": stats["turns_mean"],
            "tokens_mean": stats["tokens_mean"],
            "by_env": {k: v["count"] for k, v in stats["by_env"].items()},
            "by_status": stats["status"],
            "curves": [c.as_dict() for c in self.curves(run_id)],
        }

    def failures(self, run_id: str | None = None) -> dict[str, Any]:
        """The failure table of the stored triage verdicts (``trajforge triage``), per run:
        trajectories, failed, and each signal's trajectories with the score that lists them."""
        where = TrajectoryFilter(run=run_id)
        rows = stored_failure_table(self.store(), where)
        signals = [s for s in Signal if any(s in r.signals for r in rows)]
        return {
            "run": run_id,
            "signals": [{"name": s.value, "score": signal_score_name(s)} for s in signals],
            "rows": [r.model_dump(mode="json") for r in rows],
        }

    def curves(self, run_id: str | None = None) -> list[Curve]:
        """The run folder's training curves: all of them, or those of one run's stage."""
        stage = None if run_id is None else stage_of(run_id, self.run_dir)
        if run_id is not None and (
            stage is None or not is_current_attempt(run_id, stage, self.run_dir)
        ):
            return []  # no stage folder, or one that holds another attempt
        return run_folder_curves(self.run_dir, stage)

    # ------------------------------------------------------------------ table

    def table(self, query: TableQuery) -> dict[str, Any]:
        """One page of the trajectory table: the total that match, the rows, short ids."""
        st = self.store()
        where = query.filter()
        try:
            total = st.count(where)
            rows = st.page(
                where,
                order_by=query.sort,
                descending=query.desc,
                limit=query.limit,
                offset=query.offset,
            )
        except StoreError as exc:
            raise BadRequest(str(exc)) from None
        for row, short in zip(rows, st.short_ids([r["id"] for r in rows]), strict=True):
            row["short_id"] = short
        return {
            "total": total,
            "offset": query.offset,
            "limit": query.limit,
            "sort": query.sort,
            "desc": query.desc,
            "rows": rows,
        }

    # ------------------------------------------------------------------ trajectories

    def get(self, prefix: str) -> Trajectory:
        st = self.store()
        try:
            return st.get(st.resolve_trajectory_id(prefix))
        except StoreError as exc:
            raise NotFound(str(exc)) from None

    def trajectory(self, prefix: str) -> dict[str, Any]:
        """A trajectory's outline, conversation and token view."""
        traj = self.get(prefix)
        decoder = decoder_for(traj)
        return {
            **outline(traj),
            "messages": conversation(traj),
            "token_view": token_view(traj, decoder),
            "tokenizer": decoder.name if decoder.tokenizer is not None else None,
            "tokenizer_missing": decoder.missing,
        }

    def image(self, sha256: str) -> ImagePart:
        """A stored image by its content hash (what a message's image part refers to)."""
        part = self.store().image(sha256) if _SHA256.fullmatch(sha256) else None
        if part is None:
            raise NotFound(f"no image {sha256[:64]!r} in {self.store_path}")
        return part

    def group(self, group_id: str, estimator: str) -> dict[str, Any]:
        """The samples of one group side by side, with the advantages ``estimator`` gives them."""
        if estimator not in {e.value for e in Estimator}:
            names = ", ".join(e.value for e in Estimator)
            raise BadRequest(f"estimator: {estimator!r} is not one of {names}")
        trajs = self.store().query(group=group_id, order_by="sample_index")
        if not trajs:
            raise NotFound(f"no trajectories in group {group_id!r} in {self.store_path}")
        # lazy: the estimators are torch functions; only a group page pays for loading torch
        from trajforge.viewer.advantages import group_advantages

        try:
            adv = group_advantages(trajs, estimator)
        except TrajforgeError as exc:
            raise BadRequest(f"estimator {estimator}: {exc}") from None
        members = [
            {
                **outline(t),
                "messages": conversation(t),
                "advantage": a,
                "best_of": t.metadata.get(BEST_OF_KEY),
            }
            for t, a in zip(trajs, adv["trajectories"], strict=True)
        ]
        # A best-of-N group names its selector once; each member says whether it was chosen.
        marks = [m["best_of"] for m in members if m["best_of"]]
        return {
            "group_id": group_id,
            "estimator": estimator,
            "estimators": [e.value for e in Estimator],
            "metrics": adv["metrics"],
            "members": members,
            "selector": marks[0]["selector"] if marks else None,
        }

    def diff(self, a: str, b: str) -> dict[str, Any]:
        return diff_trajectories(self.get(a), self.get(b))

    def last_rowid(self, where: TrajectoryFilter) -> int:
        """The cursor of the newest matching row (0 when none): where a live view starts."""
        return self.store().last_rowid(where)

    def new_rows(
        self, where: TrajectoryFilter, after: int, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Summary rows matching ``where`` stored after cursor ``after``, oldest first."""
        st = self.store()
        rows = st.summaries_after(after, where, limit=limit)
        for row, short in zip(rows, st.short_ids([r["id"] for r in rows]), strict=True):
            row["short_id"] = short
        return rows
