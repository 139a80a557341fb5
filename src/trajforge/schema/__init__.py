"""Layer 1: the trajectory contract as pydantic v2 models. Imports nothing heavy."""

from __future__ import annotations

import json
from typing import Any

from trajforge.schema.success import SUCCESS_STATUS, SUCCESS_THRESHOLD, is_success, success_sql
from trajforge.schema.trajectory import (
    Evaluator,
    EvaluatorKind,
    Exactness,
    ExactnessKind,
    ExpertFn,
    Fault,
    FunctionSpec,
    Message,
    Outcome,
    OutcomeStatus,
    Role,
    Score,
    Task,
    Timing,
    ToolCall,
    ToolSpec,
    Trajectory,
    Usage,
    check_conversation,
    is_infra_failure,
    new_id,
    with_system_text,
)
from trajforge.schema.version import SCHEMA_VERSION


def json_schema() -> dict[str, Any]:
    """The published JSON Schema of a trajectory, tagged with its version."""
    schema = Trajectory.model_json_schema()
    schema["$id"] = f"https://trajforge.dev/schema/trajectory/{SCHEMA_VERSION}.json"
    schema["version"] = SCHEMA_VERSION
    return schema


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True)


__all__ = [
    "SCHEMA_VERSION",
    "SUCCESS_STATUS",
    "SUCCESS_THRESHOLD",
    "Evaluator",
    "EvaluatorKind",
    "Exactness",
    "ExactnessKind",
    "ExpertFn",
    "Fault",
    "FunctionSpec",
    "Message",
    "Outcome",
    "OutcomeStatus",
    "Role",
    "Score",
    "Task",
    "Timing",
    "ToolCall",
    "ToolSpec",
    "Trajectory",
    "Usage",
    "check_conversation",
    "is_infra_failure",
    "is_success",
    "json_schema",
    "json_schema_text",
    "new_id",
    "success_sql",
    "with_system_text",
]
