"""``precision: auto`` resolves by what the machine has; the environment switch forces fp32."""

from __future__ import annotations

import pytest

from trajforge.errors import ConfigError
from trajforge.precision import (
    NO_NATIVE_BF16_ENV,
    Precision,
    Resolved,
    describe_machine,
    hardware_bf16,
    native_bf16,
    resolve_precision,
)


def test_the_suite_runs_as_on_a_machine_without_native_bf16() -> None:
    assert not native_bf16()
    assert resolve_precision(Precision.AUTO) is Resolved.FP32
    assert NO_NATIVE_BF16_ENV in describe_machine()


def test_explicit_bf16_without_native_bf16_names_the_field() -> None:
    with pytest.raises(
        ConfigError, match=rf"^model.precision: bf16 was asked for .*{NO_NATIVE_BF16_ENV}"
    ):
        resolve_precision("bf16", "model.precision")


@pytest.mark.parametrize("value", ["0", "", "false"])
def test_the_switch_off_values_leave_the_hardware_in_charge(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NO_NATIVE_BF16_ENV, value)
    assert native_bf16() is hardware_bf16()


@pytest.mark.usefixtures("native_bf16")
def test_auto_is_bf16_on_a_machine_with_native_bf16() -> None:
    assert resolve_precision(Precision.AUTO) is Resolved.BF16
    assert resolve_precision(Precision.BF16) is Resolved.BF16
    assert resolve_precision(Precision.FP32) is Resolved.FP32
    assert describe_machine().startswith("bf16")


def test_fp32_is_fp32_everywhere(machine_precision: str) -> None:
    assert resolve_precision("fp32") is Resolved.FP32
    assert resolve_precision("auto") is Resolved(machine_precision)
