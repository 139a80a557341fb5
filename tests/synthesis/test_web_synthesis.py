"""Web task synthesis on MiniWoB++ form pages: the explorer's reached page state becomes a task
whose checker (the state) accepts the exploration that reached it and rejects a wrong answer,
played as an ordinary browser episode of the written task file; each task names its source."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from trajforge.envs import Candidate, TaskSet, synthesizer_for
from trajforge.envs.browser import shared_pool
from trajforge.envs.browser.axtree import elements
from trajforge.envs.browser.chromium import running_browsers
from trajforge.envs.browser.experts import DONE
from trajforge.envs.browser.pagestate import PAGE_STATE, PageCheck, PageField, PageState
from trajforge.envs.synthesizers.web import instruction
from trajforge.errors import ConfigError
from trajforge.policy import load_policy
from trajforge.rollout import RolloutSpec, run_rollout
from trajforge.schema import Message, Role, Task, Trajectory, is_success
from trajforge.store import TrajectoryStore
from trajforge.synthesis import SynthesisReport, SynthesisSettings, synthesize

NAMES = ("enter-text", "login-user", "click-checkboxes", "choose-list")
ENV = "miniwob:" + ",".join(NAMES)
RUN = "explore-web"


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SynthesisReport, Path]]:
    """One synthesis for the module, on the process's browser pool, closed at the end with
    no Chromium left."""
    root = tmp_path_factory.mktemp("websyn")
    try:
        settings = SynthesisSettings(episodes=len(NAMES), min_steps=1)
        report = synthesize(
            ENV, settings, run_id=RUN, store=root / "s.db", out=root / "tasks.jsonl"
        )
        yield report, root
    finally:
        shared_pool().close()
        assert psutil.wait_procs(running_browsers(), timeout=5)[1] == []


def _play(env: str, task: Task, replies: tuple[str, ...]) -> Trajectory:
    """``replies`` played in order (the last one again and again) on ``task``."""

    def reply(task: Task, messages: list[Message]) -> str:
        turn = sum(1 for m in messages if m.role is Role.ASSISTANT)
        return replies[min(turn, len(replies) - 1)]

    policy = load_policy("expert", expert=reply, name="replay")
    (done,) = run_rollout(RolloutSpec(env=env, tasks=[task]), policy=policy)
    return done


def _source(root: Path, task: Task) -> Trajectory:
    with TrajectoryStore(root / "s.db") as store:
        return store.get(task.data["synthesis"]["source"])


@pytest.mark.slow
def test_web_synthesis_writes_checked_tasks_naming_their_exploration(
    synthesized: tuple[SynthesisReport, Path],
) -> None:
    report, root = synthesized
    tasks = list(TaskSet.from_jsonl(root / "tasks.jsonl"))
    assert [t.id for t in tasks] == [t.id for t in report.tasks]
    assert report.explored == len(NAMES) == len(tasks) + sum(report.dropped.values())
    assert sorted(t.data["task"] for t in tasks) == sorted(NAMES)
    for task in tasks:
        source = _source(root, task)
        assert source.run_id == RUN and source.task.id == task.data["synthesis"]["start_task"]
        assert task.env == ENV and task.split == "train"
        assert task.data["seed"] == source.task.data["seed"]
        state = PageState.model_validate(source.metadata[PAGE_STATE])
        assert PageCheck.model_validate(task.data["check"]) == PageCheck.of(state)
        assert task.prompt == instruction(state)


@pytest.mark.slow
def test_a_web_tasks_checker_accepts_its_exploration_and_rejects_a_wrong_answer(
    synthesized: tuple[SynthesisReport, Path],
) -> None:
    report, root = synthesized
    task = next(t for t in report.tasks if t.data["task"] == "login-user")
    candidate = synthesizer_for(ENV).relabel(_source(root, task), min_steps=1)
    assert isinstance(candidate, Candidate) and candidate.task.id == task.id
    task_file = str(root / "tasks.jsonl")  # the task played as an ordinary episode of the file
    solved = _play(task_file, task, candidate.solution)
    assert is_success(solved.outcome.status, solved.outcome.reward)
    assert solved.outcome.reward == 1.0
    assert solved.messages[1].text.startswith(f"Task: {task.prompt}\n")
    wrong = _play(task_file, task, candidate.wrong)
    assert wrong.outcome.reward == 0.0
    # done before the button: the fields are right, the press is missing
    unpressed = _play(task_file, task, (*candidate.solution[:-1], DONE))
    assert unpressed.outcome.reward == 0.0


@pytest.mark.slow
def test_the_expert_solves_every_synthesized_task_from_its_check(
    synthesized: tuple[SynthesisReport, Path],
) -> None:
    report, root = synthesized
    spec = RolloutSpec(env=str(root / "tasks.jsonl"), policy={"name": "expert"}, tasks=report.tasks)
    played = run_rollout(spec)
    assert [t.outcome.reward for t in played] == [1.0] * len(report.tasks)


def test_the_page_tree_gives_fields_buttons_and_a_lists_options() -> None:
    tree = (
        "RootWebArea 'Choose List Task', focused\n"
        "\t[14] combobox '' value='Iceland', hasPopup='menu', expanded=False\n"
        "\t\tMenuListPopup ''\n"
        "\t\t\t[15] option 'Iceland', selected=True\n"
        "\t\t\t[16] option 'Czech Republic', selected=False\n"
        "\t[23] button 'Submit'"
    )
    found = [(e.bid, e.role, e.name, e.value, e.options) for e in elements(tree)]
    assert found == [
        ("14", "combobox", "", "Iceland", ["Iceland", "Czech Republic"]),
        ("23", "button", "Submit", None, []),
    ]


def _state(*fields: PageField, pressed: tuple[str, ...] = ("Submit",)) -> PageState:
    return PageState(fields=list(fields), pressed=list(pressed))


def test_the_instruction_states_each_change_in_page_order_then_the_presses() -> None:
    login = _state(
        PageField(kind="text", label="Username", value="maple", initial=""),
        PageField(kind="password", label="Password", value="kiwi", initial=""),
        pressed=("Login",),
    )
    assert instruction(login) == (
        'Enter "maple" into the "Username" field, enter "kiwi" into the "Password" field, '
        'then press "Login".'
    )
    boxes = _state(
        PageField(kind="checkbox", label="ab", value=True, initial=False),
        PageField(kind="checkbox", label="cd", value=False, initial=False),
        PageField(kind="text", value="", initial=""),
        PageField(kind="text", value="river", initial=""),
    )
    assert instruction(boxes) == (
        'Tick "ab", enter "river" into the second text field, then press "Submit". '
        "Leave the other fields as they are."
    )
    listed = _state(PageField(kind="select", value="Iceland", initial="Macedonia"), pressed=())
    assert instruction(listed) == 'Choose "Iceland" from the list.'


def test_the_check_names_the_first_difference() -> None:
    reached = _state(PageField(kind="text", label="Username", value="maple", initial=""))
    check = PageCheck.of(reached)
    assert check.mismatch(reached) is None
    typo = _state(PageField(kind="text", label="Username", value="mapel", initial=""))
    assert check.mismatch(typo) == "field 1 (text 'Username') is 'mapel', not 'maple'"
    assert check.mismatch(reached.model_copy(update={"pressed": []})) == (
        "pressed [], not ['Submit']"
    )


def test_a_miniwob_page_that_is_no_form_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"form pages \(.*\), not click-shape$"):
        synthesizer_for("miniwob:enter-text,click-shape")
    with pytest.raises(ConfigError, match="no task 'entr-text' in the miniwob package"):
        synthesizer_for("miniwob:entr-text")
