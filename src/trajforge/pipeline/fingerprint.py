"""What a stage was made from, and whether that still holds.

Each stage's record in ``results.json`` keeps its resolved ``config`` (every setting that
decides its outcome, the run folder written ``<run>``), the ``inputs`` it used (the fingerprints
of the stages whose weights or trajectories it read) and its own ``fingerprint`` (a hash of all
three and the attempt, so a stage made again changes every stage downstream of it). The
config holds the content hash of the code the stage runs (``stage_code``): an edited env,
verifier, script policy or agent program remakes the stage as a changed setting does. A stage
whose config or inputs differ from its record is made again; one that matches is skipped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from trajforge import __version__
from trajforge.pipeline.config import (
    CollectStage,
    DemonstrationStage,
    EvalStage,
    Experiment,
    MemoryStage,
    RepairStage,
    RLStage,
    SFTStage,
    SynthesizeStage,
    TriageStage,
    data_runs,
    distilled_stages,
    memory_stage_of,
    rl_config,
    sft_config,
    triaged_stages,
)
from trajforge.pipeline.stage_code import code_hashes, file_sha256

NOT_OUTCOME_KEYS = frozenset(
    {
        "output_dir",
        "progress",
        "tensorboard",
        "log_every",
        "checkpoint_every",
        "checkpoint_every_s",
        "keep_checkpoints",
        "distributed",
        "ray",
    }
)
"""Training keys that change where or how visibly a stage runs, never what it makes."""

_SHOWN_CHANGES = 4

STALE = "stale"
"""The status of a finished stage made from what has changed since (``--stage`` upstream)."""


def stage_inputs(exp: Experiment, index: int) -> list[str]:
    """The earlier stages whose output stage ``index`` reads: the training stage whose weights
    it starts from, an SFT stage's demonstrations, an eval stage's memory stage and a
    demonstrations stage's synthesize stage."""
    stage = exp.stages[index]
    if isinstance(stage, TriageStage):
        return triaged_stages(exp, index)
    if isinstance(stage, MemoryStage):
        return distilled_stages(exp, index)
    if isinstance(stage, RepairStage):
        return [stage.failed] + ([stage.good] if stage.good else [])
    trained = [s.name for s in exp.stages[:index] if isinstance(s, SFTStage | RLStage)]
    if isinstance(stage, SynthesizeStage):
        return []
    if isinstance(stage, DemonstrationStage):
        return [stage.tasks_from] if stage.tasks_from else []
    uses = trained[-1:]
    memory = memory_stage_of(exp, index)
    return (
        uses
        + (stage.data_stages if isinstance(stage, SFTStage) else [])
        + ([memory.name] if memory is not None else [])
    )


@dataclass
class StageMaking:
    """What decides the stages' outcomes in one run folder."""

    exp: Experiment
    run_dir: Path
    precision: str

    def config(
        self, index: int, model: str, demonstrations_run: str | list[str] | None
    ) -> dict[str, Any]:
        """Every setting that decides what stage ``index`` makes from weights ``model`` (and,
        for SFT, the trajectories of ``demonstrations_run``), resolved as it will run."""
        exp, stage = self.exp, self.exp.stages[index]
        config: dict[str, Any] = {"env": exp.env, "precision": self.precision}
        if isinstance(stage, EvalStage):
            config.update(model=model, eval=exp.eval.model_dump(mode="json"))
            if stage.force is not None:  # absent when unset: older runs' records stay current
                config.update(force=stage.force)
            if stage.memory is not None:  # likewise
                config.update(memory=self._memory(index, stage))
        elif isinstance(stage, DemonstrationStage):
            # tasks_from and max_new_tokens absent when unset: older runs' records stay current.
            unset = {k for k in ("tasks_from", "max_new_tokens") if getattr(stage, k) is None}
            config.update(stage=stage.model_dump(mode="json", exclude=unset))
        elif isinstance(stage, CollectStage):
            # harness and confine absent when unset: older runs' records stay current.
            unset = {k for k in ("harness", "confine") if not getattr(stage, k)}
            config.update(model=model, stage=stage.model_dump(mode="json", exclude=unset))
        elif isinstance(stage, SynthesizeStage):
            # env absent when unset: older runs' records stay current.
            absent = {"env"} if stage.env is None else set()
            config.update(stage=stage.model_dump(mode="json", exclude=absent))
        elif isinstance(stage, TriageStage | MemoryStage):
            config.update(stage=stage.model_dump(mode="json"))
        elif isinstance(stage, RepairStage):
            # The note is encoded with the tokenizer of the experiment's model family.
            config.update(model=exp.model, stage=stage.model_dump(mode="json"))
        elif isinstance(stage, SFTStage):
            run = demonstrations_run or data_runs([f"{exp.name}.{d}" for d in stage.data_stages])
            sft = sft_config(exp, index, model=model, run_dir=self.run_dir, demonstrations_run=run)
            config.update(train=training_config(sft))
        else:
            rl = rl_config(exp, index, model=model, run_dir=self.run_dir)
            config.update(train=training_config(rl))
        made = resolved(config, self.run_dir)
        # Absent for a stage that runs no code of the user's: older records stay current.
        plays = isinstance(
            stage, EvalStage | DemonstrationStage | CollectStage | RLStage | SynthesizeStage
        )
        if code := code_hashes(made, env=exp.env if plays else None):
            made["code"] = code
        return made

    def _memory(self, index: int, stage: EvalStage) -> dict[str, Any]:
        """An eval's memory settings; a file's content hash, so that an edited file remakes
        the eval (a memory stage's own fingerprint is among the eval's inputs instead)."""
        memory: dict[str, Any] = {
            "memory": stage.memory,
            "k": stage.memory_k,
            "update": stage.memory_update,
        }
        if stage.memory_embed is not None:  # absent when unset: earlier records stay current
            memory["embed"] = stage.memory_embed
        if memory_stage_of(self.exp, index) is None and stage.memory is not None:
            path = Path(stage.memory)
            memory["sha256"] = file_sha256(path) if path.is_file() else None
        return memory


def next_attempt(
    rec: Mapping[str, Any] | None, changed: str | None, only: str | None
) -> tuple[int, str | None]:
    """The attempt a stage runs as, and why it runs (``None``: it is skipped; ``""``: its
    first run). A finished stage runs again as a new attempt when what it is made from changed
    or ``--stage`` asks; an unfinished one with nothing changed resumes its own attempt."""
    if rec is None:
        return 0, ""
    attempt, status = int(rec.get("attempt", 0)), rec.get("status")
    if status in ("failed", "running") and changed is None:
        return attempt, "resuming its unfinished run"
    if only is not None:
        return attempt + 1, "made again, as --stage asks"
    if status == "done" and changed is None:
        return attempt, None
    return attempt + 1, f"made again: {rec.get('stale') if status == STALE else changed}"


def training_config(cfg: BaseModel) -> dict[str, Any]:
    """A training stage's config without the keys that do not decide its outcome."""
    dumped: dict[str, Any] = cfg.model_dump(mode="json")
    return {k: v for k, v in dumped.items() if k not in NOT_OUTCOME_KEYS}


def resolved(config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """``config`` with the trajforge version, and the run folder written ``<run>`` (a run
    folder moved or named another way holds the same stages)."""
    root = str(run_dir)

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, str) and (value == root or value.startswith(root + "/")):
            return "<run>" + value[len(root) :]
        return value

    cleaned: dict[str, Any] = clean(json.loads(json.dumps(config, default=str)))
    return {"trajforge": __version__, **cleaned}


def fingerprint(config: Mapping[str, Any], inputs: Mapping[str, str], attempt: int) -> str:
    """The hash of what a stage is made from, and of its attempt."""
    text = json.dumps({"config": config, "inputs": inputs, "attempt": attempt}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def what_changed(
    record: Mapping[str, Any], config: Mapping[str, Any], inputs: Mapping[str, str]
) -> str | None:
    """Why ``record`` no longer describes a stage with ``config`` and ``inputs`` (``None``:
    it still does): the inputs that changed, else the settings, old -> new."""
    if "config" not in record:
        return "its results.json entry records no config (an earlier trajforge made it)"
    before: Mapping[str, str] = record.get("inputs") or {}
    moved = [name for name, fp in inputs.items() if before.get(name) != fp]
    if moved:
        return f"{_names(moved)}, which it uses, changed"
    old_code: Mapping[str, str] = record["config"].get("code") or {}
    new_code: Mapping[str, str] = config.get("code") or {}
    edited = sorted(
        f for f in old_code.keys() | new_code.keys() if old_code.get(f) != new_code.get(f)
    )
    if edited and not old_code:
        return (
            f"its record has no hash of its code ({_names(edited)}; an earlier trajforge made it)"
        )
    if edited:
        return f"its code changed: {_names(edited)}"
    diffs = _changes(record["config"], config)
    if not diffs:
        return None
    more = f" and {len(diffs) - _SHOWN_CHANGES} more" if len(diffs) > _SHOWN_CHANGES else ""
    return f"its settings changed: {'; '.join(diffs[:_SHOWN_CHANGES])}{more}"


def _names(names: list[str]) -> str:
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]


def _changes(old: Any, new: Any, at: str = "") -> list[str]:
    """``key: old -> new`` for every dotted key whose value differs."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(old.keys() | new.keys()):
            out += _changes(old.get(key), new.get(key), f"{at}.{key}" if at else str(key))
        return out
    if old == new:
        return []
    return [f"{at or 'config'}: {json.dumps(old)} -> {json.dumps(new)}"]
