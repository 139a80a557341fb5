"""``trajforge check`` verifies each trajectory's exactness label against its provenance."""

from __future__ import annotations

from trajforge.policy.check import MismatchKind, check_label, check_trajectories
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.renderer import ChatRenderer
from trajforge.policy.text_render import render_text_only
from trajforge.schema import Exactness, ExactnessKind, Message, Role, Task, Trajectory


def _imported() -> Trajectory:
    text = Trajectory(
        task=Task(id="t", prompt="hi"),
        messages=[
            Message(role=Role.USER, content="hi"),
            Message(role=Role.ASSISTANT, content="hello"),
        ],
    )
    return render_text_only(text, ChatRenderer(load_tokenizer()), "embedded")


def test_ids_rendered_from_text_are_labelled_re_rendered_and_pass() -> None:
    traj = _imported()
    assert traj.exactness.kind is ExactnessKind.RE_RENDERED
    assert traj.exactness.reason is not None and "embedded" in traj.exactness.reason
    report = check_trajectories([traj], lambda _t: load_tokenizer())
    assert report.ok and report.checked == 1


def test_a_label_claiming_exact_for_rendered_ids_is_a_mismatch() -> None:
    traj = _imported().model_copy(update={"exactness": Exactness()})
    (found,) = check_label(traj)
    assert found.kind is MismatchKind.EXACTNESS
    assert "rendered from text by embedded" in found.detail
    # Checked even where no tokenizer is at hand.
    report = check_trajectories([traj], lambda _t: None)
    assert report.skipped == 1 and [m.kind for m in report.mismatches] == [MismatchKind.EXACTNESS]


def test_a_split_must_name_another_trajectory() -> None:
    traj = _imported()
    own = Exactness(kind=ExactnessKind.SPLIT, reason="edited", split_from=traj.id)
    assert check_label(traj.model_copy(update={"exactness": own}))[0].kind is MismatchKind.EXACTNESS
    other = Exactness(kind=ExactnessKind.SPLIT, reason="edited", split_from="elsewhere")
    assert check_label(traj.model_copy(update={"exactness": other})) == []
