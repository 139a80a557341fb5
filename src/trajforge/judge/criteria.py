"""What an LLM judge grades: ``JudgeCriteria``, a versioned YAML/JSON file (what the
LLM-as-judge literature calls a rubric; the built-in ones are in ``builtin_criteria/``) of
instructions and dimensions, each ``Criterion`` graded on a scale of values. The CLI names them
``--criteria`` and a best-of selector ``judge:CRITERIA``; in trajforge "rubric" means only
``trajforge.judge.scorer.Rubric``, weighted scorers summed.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from trajforge.configfile import validated
from trajforge.errors import ConfigError

CRITERIA_DIR = Path(__file__).with_name("builtin_criteria")


class Criterion(BaseModel):
    """One dimension the judge grades, on one of ``values``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z_][a-z0-9_]*$")
    description: str
    values: list[int] = Field(min_length=2)


class JudgeCriteria(BaseModel):
    """Instructions and the criteria an LLM judge grades; ``success_dimension`` is success."""

    model_config = ConfigDict(extra="forbid")

    name: str
    version: str
    instructions: str
    dimensions: list[Criterion] = Field(min_length=1)
    success_dimension: str = "success"

    @model_validator(mode="after")
    def _success_is_a_dimension(self) -> JudgeCriteria:
        names = [d.name for d in self.dimensions]
        if len(set(names)) != len(names):
            raise ValueError("dimensions: names must be unique")
        if self.success_dimension not in names:
            raise ValueError(f"success_dimension: {self.success_dimension!r} is not one of {names}")
        return self

    def dimension(self, name: str) -> Criterion:
        return next(d for d in self.dimensions if d.name == name)


def load_criteria(name_or_path: str | Path = "agentrewardbench") -> JudgeCriteria:
    """Load built-in criteria by name, or a criteria file (.yaml, .yml, .json)."""
    path = Path(name_or_path)
    if not path.suffix:
        path = CRITERIA_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(p.stem for p in sorted(CRITERIA_DIR.glob("*.yaml")))
        raise ConfigError(f"criteria {name_or_path!r} not found (built-in criteria: {known})")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid {path.suffix[1:].upper()}: {exc}") from None
    return validated(JudgeCriteria, data, str(path), "(top level)")
