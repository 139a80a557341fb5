"""What a sandboxed run is given and gives back: its limits (``SandboxConfig``), the host
folders it sees (``Mount``), how it ended (``SandboxResult``, ``KillReason``) and the errors of a
sandbox that refused or could not start.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from trajforge.errors import InfraError, TrajforgeError


class SandboxError(TrajforgeError):
    """The sandbox refused to run the code (e.g. it is too long)."""


class SandboxUnavailableError(SandboxError, InfraError):
    """The sandbox did not start: bubblewrap is missing, cannot create its namespaces on this
    machine, or its process could not be started (the machine's failure, not the code's)."""


class KillReason(StrEnum):
    TIMEOUT = "timeout"
    OUTPUT_LIMIT = "output_limit"
    CPU_LIMIT = "cpu_limit"
    FILE_SIZE_LIMIT = "file_size_limit"
    SIGNAL = "signal"


class SandboxConfig(BaseModel):
    """Limits of one sandboxed run."""

    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(default=10.0, gt=0, description="wall-clock limit of the whole run")
    memory_mb: int = Field(default=512, ge=64, description="address-space limit (RLIMIT_AS)")
    cpu_s: int = Field(default=10, ge=1, description="CPU-time limit (RLIMIT_CPU)")
    max_processes: int = Field(default=32, ge=1, description="processes and threads (RLIMIT_NPROC)")
    max_output_bytes: int = Field(default=65536, ge=1, description="stdout + stderr cap")
    max_file_mb: int = Field(default=16, ge=1, description="largest file it may write")
    tmp_size_mb: int = Field(default=64, ge=1, description="size of the private /tmp")
    allow_unsandboxed: bool = Field(
        default=False,
        description="UNSAFE: run with rlimits only when bubblewrap is unavailable (trusted code)",
    )


class SandboxResult(BaseModel):
    """What a run produced. ``exit_code`` is negative (-signal) when a signal ended it."""

    model_config = ConfigDict(extra="forbid")

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    killed_reason: KillReason | None = None
    duration_s: float = 0.0
    sandboxed: bool = True

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.killed_reason is None

    def summary(self) -> str:
        """One line saying how the run ended, e.g. for a tool message."""
        match self.killed_reason:
            case KillReason.TIMEOUT:
                return f"killed: wall-clock time limit exceeded ({self.duration_s:.1f} s)"
            case KillReason.OUTPUT_LIMIT:
                return "killed: output limit exceeded (output truncated)"
            case KillReason.CPU_LIMIT:
                return "killed: CPU time limit exceeded"
            case KillReason.FILE_SIZE_LIMIT:
                return "killed: file size limit exceeded"
            case KillReason.SIGNAL:
                return f"killed by signal {_signal_name(-(self.exit_code or 0))}"
        return f"exit code {self.exit_code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


@dataclass(frozen=True)
class Mount:
    """A host folder seen inside the sandbox at ``target``, read-only unless ``writable``."""

    source: Path
    target: str
    writable: bool = False
