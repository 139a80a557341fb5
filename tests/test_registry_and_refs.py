"""``Registry``: names to objects with helpful errors; ``load_ref``: user code by reference."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trajforge.errors import ConfigError
from trajforge.registry import Registry, is_ref, load_ref


def test_register_get_names_and_membership() -> None:
    colours: Registry[int] = Registry("colour")

    @colours.register("red")
    def red() -> int:
        return 1

    colours.add("green", lambda: 2)
    assert colours.get("red") is red and colours.get("green")() == 2
    assert colours.names() == ["green", "red"] == list(colours)
    assert "red" in colours and "blue" not in colours and len(colours) == 2


def test_unknown_name_lists_the_valid_ones_and_the_closest() -> None:
    losses: Registry[int] = Registry("loss", plural="losses")
    losses.add("ppo_clip", 1)
    losses.add("gspo", 2)
    with pytest.raises(
        ConfigError,
        match=r"^unknown loss 'ppo_clp' \(did you mean 'ppo_clip'\?\); known losses: gspo, ppo_clip$",
    ):
        losses.get("ppo_clp")
    with pytest.raises(ConfigError, match=r"^unknown loss 'zzz'; known losses"):
        losses.get("zzz")


def test_load_ref_from_a_file_and_a_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "helpers_for_ref.py"
    path.write_text("VALUE = 7\ncalls = []\n")
    assert load_ref(f"{path}:VALUE", "thing") == 7
    # One module per file: a second reference shares its state.
    load_ref(f"{path}:calls", "thing").append(1)
    assert load_ref(f"{path}:calls", "other") == [1]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "helpers_for_ref", raising=False)
    assert load_ref("helpers_for_ref:VALUE", "thing") == 7


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no_colon", "write user code as module:attr or file.py:attr"),
        ("/nonexistent/x.py:f", "file /nonexistent/x.py does not exist"),
        ("no_such_module_q:f", "cannot import module 'no_such_module_q'"),
        ("trajforge.registry:nothing_here", "trajforge.registry has no attribute 'nothing_here'"),
    ],
)
def test_bad_refs_are_config_errors_naming_the_ref(ref: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_ref(ref, "scorer")
    assert str(err.value).startswith(f"scorer {ref!r}: ") and message in str(err.value)


def test_is_ref() -> None:
    assert is_ref("pkg.mod:f") and is_ref("dir/file.py:f")
    assert not is_ref("numeric_match") and not is_ref(":f") and not is_ref("mod:")
