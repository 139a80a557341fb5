"""Numeric precision: what a config asks for (``auto``, ``fp32``, ``bf16``) and what this
machine resolves it to.

``auto`` is bf16 where the hardware computes bf16 natively (a CUDA GPU with bf16, or a CPU with
AVX512-BF16 or AMX) and fp32 everywhere else, so one config runs fast on every machine. An
explicit ``bf16`` on hardware without it is an error: emulated bf16 is slower than fp32.

Setting ``TRAJFORGE_NO_NATIVE_BF16=1`` makes trajforge treat the machine as having no native
bf16, so tests and CI exercise the fp32 path on any host.
"""

from __future__ import annotations

import os
from enum import StrEnum
from functools import cache
from typing import TYPE_CHECKING

from trajforge.errors import ConfigError

if TYPE_CHECKING:
    import torch

NO_NATIVE_BF16_ENV = "TRAJFORGE_NO_NATIVE_BF16"


class Precision(StrEnum):
    """The precision a config asks for."""

    AUTO = "auto"
    FP32 = "fp32"
    BF16 = "bf16"


class Resolved(StrEnum):
    """The precision a run actually uses."""

    FP32 = "fp32"
    BF16 = "bf16"


def bf16_disabled_by_env() -> bool:
    return os.environ.get(NO_NATIVE_BF16_ENV, "").strip().lower() not in ("", "0", "false", "no")


@cache
def hardware_bf16() -> bool:
    """What the hardware itself has, whatever the environment variable says."""
    import torch  # lazy: configs and the CLI read this layer-0 module without torch

    if torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def native_bf16() -> bool:
    """Whether this machine computes bf16 matmuls natively (a CUDA GPU with bf16, or a CPU with
    AVX512-BF16 or AMX), unless ``TRAJFORGE_NO_NATIVE_BF16`` says to treat it as absent."""
    return not bf16_disabled_by_env() and hardware_bf16()


def resolve_precision(precision: Precision | str, field: str = "precision") -> Resolved:
    """``auto`` -> bf16 with native bf16, else fp32; ``bf16`` without it is a ``ConfigError``
    naming ``field``."""
    wanted = Precision(precision)
    if wanted is Precision.FP32:
        return Resolved.FP32
    if native_bf16():
        return Resolved.BF16
    if wanted is Precision.BF16:
        why = (
            f" ({NO_NATIVE_BF16_ENV} is set)"
            if bf16_disabled_by_env()
            else " (no AMX, AVX512-BF16 or bf16 GPU)"
        )
        raise ConfigError(
            f"{field}: bf16 was asked for but this machine has no native bf16{why}; "
            "use auto or fp32"
        )
    return Resolved.FP32


def torch_dtype(resolved: Resolved) -> torch.dtype:
    """The weight dtype of a policy that runs at ``resolved``."""
    import torch  # lazy: configs and the CLI read this layer-0 module without torch

    return torch.bfloat16 if resolved is Resolved.BF16 else torch.float32


def precision_of(dtype: torch.dtype) -> str:
    """The name a precision has in configs and trajectory metadata: ``fp32`` and ``bf16`` for
    the dtypes ``torch_dtype`` gives, the dtype's own name (``float16``) otherwise."""
    name = str(dtype).removeprefix("torch.")
    return {"float32": Resolved.FP32.value, "bfloat16": Resolved.BF16.value}.get(name, name)


def describe_machine() -> str:
    """One line for run headers: the resolved auto precision and why."""
    if bf16_disabled_by_env():
        return f"fp32 (native bf16 turned off by {NO_NATIVE_BF16_ENV})"
    return "bf16 (native bf16 present)" if hardware_bf16() else "fp32 (no native bf16)"
