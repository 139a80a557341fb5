"""The experiment file: one YAML naming the env, the model and the stages of a run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trajforge.errors import ConfigError
from trajforge.precision import Precision


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EvalSettings(_Strict):
    """The held-out evaluation every ``eval`` stage repeats on the same tasks."""

    tasks: int = Field(default=50, ge=1)
    n: int = Field(default=1, ge=1)
    split: str = "test"
    seed: int = 0
    temperature: float = Field(default=0.0, ge=0)
    max_turns: int = Field(default=4, ge=1)
    max_new_tokens: int = Field(default=96, ge=1)
    max_batch_size: int = Field(default=25, ge=1)


class EvalStage(_Strict):
    kind: Literal["eval"] = "eval"
    name: str


class DemonstrationStage(_Strict):
    """Trajectories from a teacher: the env's scripted expert, or any policy spec."""

    kind: Literal["demonstrations"] = "demonstrations"
    name: str = "demonstrations"
    policy: str = "expert"
    tasks: int = Field(default=200, ge=1)
    split: str = "train"
    seed: int = 0
    max_turns: int = Field(default=6, ge=1)


class SFTStage(_Strict):
    """Fine-tune on the successful demonstrations; ``train`` holds ``SFTConfig`` keys."""

    kind: Literal["sft"] = "sft"
    name: str = "sft"
    demonstrations: str = "demonstrations"
    train: dict[str, Any] = Field(default_factory=dict)


class RLStage(_Strict):
    """On-policy RL on the env; ``train`` holds ``RLConfig`` keys."""

    kind: Literal["rl"] = "rl"
    name: str = "rl"
    train: dict[str, Any] = Field(default_factory=dict)


Stage = Annotated[EvalStage | DemonstrationStage | SFTStage | RLStage, Field(discriminator="kind")]


class Experiment(_Strict):
    """``precision`` applies to every stage: the eval and demonstration policies' weights, and
    the training stages' ``model.precision`` (unless a stage sets its own). ``auto`` is bf16
    where the hardware has it natively (a GPU, or a CPU with AMX or AVX512-BF16; roughly half
    the stage times there) and fp32 elsewhere; an explicit ``bf16`` needs native bf16."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    env: str
    model: str = "embedded"
    seed: int = 0
    precision: Precision = Precision.AUTO
    out_dir: Path = Path("runs")
    eval: EvalSettings = Field(default_factory=EvalSettings)
    stages: list[Stage] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_stage_names(self) -> Experiment:
        names = [s.name for s in self.stages]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"stages: names must be unique, repeated: {dupes}")
        for s in self.stages:
            if isinstance(s, SFTStage) and s.demonstrations not in names:
                raise ValueError(
                    f"stages: sft stage {s.name!r} reads demonstrations {s.demonstrations!r}, which is not a stage"
                )
        return self


def load_experiment(path: Path) -> Experiment:
    """Read an experiment YAML; errors name the file and the key."""
    from trajforge.train.config import load_config

    if not path.is_file():
        raise ConfigError(f"{path}: experiment file not found")
    return load_config(path, Experiment)
