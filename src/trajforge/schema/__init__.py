"""Layer 1: the trajectory contract as pydantic v2 models. Imports nothing heavy."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from trajforge.registry import lazy_names
from trajforge.schema.content import (
    IMAGE_MEDIA_TYPES,
    MAX_IMAGE_BYTES,
    WITHOUT_IMAGE_BYTES,
    Content,
    ContentPart,
    ImagePart,
    TextPart,
    content_images,
    content_text,
    image_label,
    labelled_text,
    sniff_media_type,
)
from trajforge.schema.messages import (
    FunctionSpec,
    Message,
    Role,
    Timing,
    ToolCall,
    ToolSpec,
    check_conversation,
    refuse_images,
    with_system_text,
)
from trajforge.schema.success import SUCCESS_STATUS, SUCCESS_THRESHOLD, is_success, success_sql
from trajforge.schema.trajectory import (
    LOSS_FROM_MESSAGE,
    Evaluator,
    EvaluatorKind,
    Exactness,
    ExactnessKind,
    ExpertFn,
    Fault,
    Outcome,
    OutcomeStatus,
    Score,
    Segment,
    Task,
    Trajectory,
    Usage,
    is_infra_failure,
    new_id,
)
from trajforge.schema.version import SCHEMA_VERSION

if TYPE_CHECKING:
    from trajforge.schema.answers import (
        answer_span,
        contains_answer,
        final_answer,
        normalize_answer,
        numbers_close,
        parse_number,
        parse_table,
        tables_equal,
    )
    from trajforge.schema.evidence import Evidence, Verifier, check_verifier, run_verifier


def json_schema() -> dict[str, Any]:
    """The published JSON Schema of a trajectory, tagged with its version."""
    schema = Trajectory.model_json_schema()
    schema["$id"] = f"https://trajforge.dev/schema/trajectory/{SCHEMA_VERSION}.json"
    schema["version"] = SCHEMA_VERSION
    return schema


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True)


__all__ = [
    "IMAGE_MEDIA_TYPES",
    "LOSS_FROM_MESSAGE",
    "MAX_IMAGE_BYTES",
    "SCHEMA_VERSION",
    "SUCCESS_STATUS",
    "SUCCESS_THRESHOLD",
    "WITHOUT_IMAGE_BYTES",
    "Content",
    "ContentPart",
    "Evaluator",
    "EvaluatorKind",
    "Evidence",
    "Exactness",
    "ExactnessKind",
    "ExpertFn",
    "Fault",
    "FunctionSpec",
    "ImagePart",
    "Message",
    "Outcome",
    "OutcomeStatus",
    "Role",
    "Score",
    "Segment",
    "Task",
    "TextPart",
    "Timing",
    "ToolCall",
    "ToolSpec",
    "Trajectory",
    "Usage",
    "Verifier",
    "answer_span",
    "check_conversation",
    "check_verifier",
    "contains_answer",
    "content_images",
    "content_text",
    "final_answer",
    "image_label",
    "is_infra_failure",
    "is_success",
    "json_schema",
    "json_schema_text",
    "labelled_text",
    "new_id",
    "normalize_answer",
    "numbers_close",
    "parse_number",
    "parse_table",
    "refuse_images",
    "run_verifier",
    "sniff_media_type",
    "success_sql",
    "tables_equal",
    "with_system_text",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "Evidence": "evidence",
        "Verifier": "evidence",
        "answer_span": "answers",
        "check_verifier": "evidence",
        "contains_answer": "answers",
        "final_answer": "answers",
        "normalize_answer": "answers",
        "numbers_close": "answers",
        "parse_number": "answers",
        "parse_table": "answers",
        "run_verifier": "evidence",
        "tables_equal": "answers",
    },
)
