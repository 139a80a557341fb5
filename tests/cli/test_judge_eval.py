"""``trajforge judge-eval`` and ``trajforge judge`` on scripted-expert successes and corrupted
failures, checked against precision/recall/kappa worked out by hand; the LLM judge options with a
scripted judge policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from episodes import play
from trajforge.cli.failures import ExitCode
from trajforge.cli.judging import Judging
from trajforge.cli.main import app
from trajforge.envs.builtin import calculator
from trajforge.errors import ConfigError, DataError
from trajforge.formats.tool_calls import format_tool_call
from trajforge.judge.scorer import scorer_names
from trajforge.policy import naming
from trajforge.policy.base import Policy
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import EvaluatorKind, Message, Outcome, Task, Trajectory
from trajforge.store import TrajectoryStore


def _episode(task: Task, replies: list[str]) -> Trajectory:
    queue = list(replies)
    episode = play(calculator.make_env, task, lambda t, m: queue.pop(0) if queue else None)
    return Trajectory(
        task=task,
        env="calculator",
        run_id="judged",
        messages=episode.messages,
        outcome=Outcome(reward=episode.outcome.reward or 0.0),
    )


def _answer(task: Task, delta: float = 0) -> str:
    return f"The answer is {calculator.format_number(task.answer + delta)}."


def build_labelled_store(path: Path) -> Path:
    """4 expert successes (label 1); 2 wrong answers, 2 skipped tools, 2 loops (label 0)."""
    tasks = calculator.generate_tasks(10, seed=7, split="test")
    labels = []
    with TrajectoryStore(path) as db:
        for i, task in enumerate(tasks):
            calls = [format_tool_call("calculator", {"expression": s}) for s in task.data["steps"]]
            if i < 4:
                kind, replies = "expert", [*calls, _answer(task)]
            elif i < 6:
                kind, replies = "wrong_answer", [*calls, _answer(task, delta=1)]
            elif i < 8:
                kind, replies = "skipped_tool", [_answer(task)]
            else:
                kind, replies = "loop", [calls[0], calls[0], *calls, _answer(task)]
            traj = _episode(task, replies)
            traj.metadata["corruption"] = kind
            db.add(traj)
            labels.append(
                {"trajectory_id": traj.id, "label": kind == "expert", "env": "calculator"}
            )
    label_file = path.with_suffix(".labels.jsonl")
    label_file.write_text("\n".join(json.dumps(row) for row in labels) + "\n")
    return label_file


@pytest.fixture
def labelled(tmp_path: Path) -> tuple[Path, Path]:
    store = tmp_path / "judged.db"
    return store, build_labelled_store(store)


def _judge_eval(store: Path, labels: Path, scorer: str) -> dict[str, object]:
    result = CliRunner().invoke(
        app,
        [
            "judge-eval",
            "--labels",
            str(labels),
            "--scorer",
            scorer,
            "--store",
            str(store),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_rule_check_is_fooled_by_skipped_tools_and_loops(labelled: tuple[Path, Path]) -> None:
    report = _judge_eval(*labelled, "numeric_match")
    overall = report["overall"]
    assert isinstance(overall, dict)
    # tp = 4 experts; fp = 2 skipped + 2 loops (right number); tn = 2 wrong answers; fn = 0
    assert (overall["true_positive"], overall["false_positive"]) == (4, 4)
    assert (overall["true_negative"], overall["false_negative"]) == (2, 0)
    assert overall["precision"] == pytest.approx(4 / 8)
    assert overall["recall"] == pytest.approx(1.0)
    assert overall["accuracy"] == pytest.approx(6 / 10)
    # p_e = 0.8 * 0.4 + 0.2 * 0.6 = 0.44
    assert overall["kappa"] == pytest.approx((0.6 - 0.44) / (1 - 0.44))


def test_process_metrics_catch_skips_and_loops_but_not_wrong_answers(
    labelled: tuple[Path, Path],
) -> None:
    report = _judge_eval(*labelled, "process")
    overall = report["overall"]
    assert isinstance(overall, dict)
    # tp = 4; fp = 2 wrong answers (clean process); tn = 2 skipped + 2 loops
    assert overall["precision"] == pytest.approx(4 / 6)
    assert overall["recall"] == pytest.approx(1.0)
    assert overall["accuracy"] == pytest.approx(8 / 10)
    per_env = report["per_env"]
    assert isinstance(per_env, dict)
    assert per_env["calculator"]["n"] == 10


def test_judge_rescores_a_run_and_stores_the_scores(labelled: tuple[Path, Path]) -> None:
    store, _ = labelled
    result = CliRunner().invoke(
        app, ["judge", "judged", "--scorer", "numeric_match", "--store", str(store), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["scores"]["numeric_match"] == pytest.approx(8 / 10)
    with TrajectoryStore(store) as db:
        scored = db.query(run="judged", score="numeric_match", min_score=1.0)
    assert len(scored) == 8
    assert {t.metadata["corruption"] for t in scored} == {"expert", "skipped_tool", "loop"}


RUBRIC = """
name: tool-use
version: "2"
instructions: Judge whether the agent used its calculator.
dimensions:
  - name: success
    description: Did the agent call the calculator? 1 = yes, 0 = no.
    values: [0, 1]
  - name: effort
    description: How much work was it? 1 = little, 2 = a lot.
    values: [1, 2]
"""


def tool_use_verdict(task: Task | None, messages: list[Message]) -> str:
    """A judge that passes every trajectory with a calculator call, whatever its answer."""
    used = "-> call calculator(" in messages[-1].content
    return json.dumps({"success": int(used), "effort": 1, "explanation": f"calculator: {used}"})


@pytest.fixture
def scripted_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--judge-model scripted-judge`` loads the tool-use judge, registered as a policy."""

    def load_judge(spec: str, expert: object, kw: dict[str, object]) -> Policy:
        return ScriptedPolicy(tool_use_verdict, load_tokenizer(), name=spec)

    monkeypatch.setitem(naming.POLICIES._items, "scripted-judge", load_judge)


@pytest.mark.parametrize("command", ["judge", "judge-eval", "eval"])
def test_help_lists_the_scorers(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert ", ".join(scorer_names()) in result.stdout
    assert "--judge-model" in result.stdout and "--criteria" in result.stdout
    assert "--rubric" not in result.stdout  # the old spelling is refused, not offered


@pytest.mark.usefixtures("scripted_judge")
def test_judge_runs_an_llm_judge_with_a_criteria_file(
    labelled: tuple[Path, Path], tmp_path: Path
) -> None:
    store, _ = labelled
    rubric = tmp_path / "tool_use.yaml"
    rubric.write_text(RUBRIC)
    args = ["judge", "jud", "--judge-model", "scripted-judge", "--criteria", str(rubric)]
    result = CliRunner().invoke(app, [*args, "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["run_id"] == "judged"  # resolved from the prefix
    assert summary["scores"] == {"llm_judge": pytest.approx(8 / 10)}  # all but the 2 skips
    assert summary["scored"] == {"llm_judge": 10}
    with TrajectoryStore(store) as db:
        scores = [t.score("llm_judge") for t in db.query(run="judged")]
    assert all(s is not None and s.dimensions.keys() == {"success", "effort"} for s in scores)
    evaluator = scores[0].evaluator  # type: ignore[union-attr]
    assert evaluator.kind is EvaluatorKind.LLM and evaluator.model == "scripted-judge"
    assert evaluator.prompt_version is not None and evaluator.prompt_version.endswith("tool-use@2")


@pytest.mark.usefixtures("scripted_judge")
def test_judge_eval_measures_an_llm_judge(labelled: tuple[Path, Path], tmp_path: Path) -> None:
    store, labels = labelled
    rubric = tmp_path / "tool_use.yaml"
    rubric.write_text(RUBRIC)
    args = ["judge-eval", "--labels", str(labels), "--judge-model", "scripted-judge"]
    result = CliRunner().invoke(
        app, [*args, "--criteria", str(rubric), "--store", str(store), "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["scorer"] == "llm_judge"
    overall = report["overall"]
    # tp = 4 experts; fp = 2 wrong answers + 2 loops (they call the tool); tn = 2 skips
    assert (overall["true_positive"], overall["false_positive"]) == (4, 4)
    assert (overall["true_negative"], overall["false_negative"]) == (2, 0)


@pytest.mark.usefixtures("scripted_judge")
def test_eval_scores_with_the_llm_judge_too(tmp_path: Path) -> None:
    store = tmp_path / "e.db"
    rubric = tmp_path / "tool_use.yaml"
    rubric.write_text(RUBRIC)
    args = ["eval", "--model", "expert", "--tasks", "2", "--judge-model", "scripted-judge"]
    args += ["--criteria", str(rubric), "--run", "ev", "--store", str(store), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["scores"] == {"env_verifier": 1.0, "llm_judge": 1.0, "process": 1.0}
    with TrajectoryStore(store) as db:
        meta = db.get_run("ev")
    assert meta is not None
    assert meta["judging"] == {
        "scorers": ["env_verifier", "process"],
        "judge_model": "scripted-judge",
        "criteria": str(rubric),
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["judge", "judged", "--criteria", "x.yaml"], "--criteria: give --judge-model too"),
        (["judge", "judged"], "judge: name at least one --scorer, or a --judge-model"),
        (["judge", "judged", "--judge-model", "nope"], "--judge-model: unknown policy 'nope'"),
        (
            ["judge", "judged", "--judge-model", "tiny", "--criteria", "missing.yaml"],
            "--criteria: criteria 'missing.yaml' not found",
        ),
        (
            ["judge-eval", "--labels", "l.jsonl", "-s", "process", "--judge-model", "tiny"],
            "--scorer and --judge-model: give one",
        ),
    ],
)
def test_judge_option_errors_name_the_option(
    labelled: tuple[Path, Path], args: list[str], message: str
) -> None:
    store, _ = labelled
    with pytest.raises(ConfigError) as err:
        CliRunner().invoke(app, [*args, "--store", str(store)], catch_exceptions=False)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    "args",
    [
        ["judge", "judged", "--judge-model", "tiny", "--rubric", "mine.yaml"],
        ["judge-eval", "--labels", "l.jsonl", "--judge-model", "tiny", "--rubric", "mine.yaml"],
        ["eval", "--model", "expert", "--judge-model", "tiny", "--rubric", "mine.yaml"],
    ],
)
def test_the_old_rubric_option_is_refused_with_the_new_spelling(
    labelled: tuple[Path, Path], args: list[str]
) -> None:
    store, _ = labelled
    with pytest.raises(ConfigError) as err:
        CliRunner().invoke(app, [*args, "--store", str(store)], catch_exceptions=False)
    said = str(err.value)
    assert said == (
        "--rubric: renamed --criteria (what the LLM judge grades); give --criteria mine.yaml"
    )
    assert "\n" not in said


def test_a_run_stored_before_the_rename_keeps_its_criteria() -> None:
    old = {"scorers": ["process"], "judge_model": "tiny", "rubric": "agentrewardbench"}
    assert Judging.model_validate(old).criteria == "agentrewardbench"


@pytest.mark.slow
def test_an_unparsable_judge_leaves_every_episode_unscored(
    labelled: tuple[Path, Path], tmp_path: Path
) -> None:
    """The tiny random model never writes a verdict: each score fails and is shown unscored."""
    store, _ = labelled
    small = tmp_path / "two.db"
    with TrajectoryStore(store) as db, TrajectoryStore(small) as two:
        two.add_many(db.query(run="judged", limit=2))
    args = ["judge", "judged", "--judge-model", "tiny", "--store", str(small)]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"}, catch_exceptions=False)
    # Scores that failed are work that failed: exit 3, the reason printed.
    assert result.exit_code == ExitCode.PARTLY_FAILED, result.output
    assert "score llm_judge" in result.stdout and "- (scored 0/2)" in result.stdout
    assert "2 of 2 scorings failed:" in result.stderr
    assert "2 x scorer llm_judge: unparsable verdict after 3 tries" in result.stderr
    with TrajectoryStore(small) as db:
        failed = [t.score("llm_judge") for t in db.query(run="judged")]
    assert all(s is not None and s.error and "unparsable verdict" in s.error for s in failed)


def test_judge_eval_takes_the_short_ids_ls_prints(labelled: tuple[Path, Path]) -> None:
    store, labels = labelled
    rows = [json.loads(line) for line in labels.read_text().splitlines()]
    with TrajectoryStore(store) as db:
        shorts = db.short_ids([r["trajectory_id"] for r in rows], minimum=8)
    short_labels = labels.with_name("short.labels.jsonl")
    short_labels.write_text(
        "".join(
            json.dumps({**r, "trajectory_id": s}) + "\n" for r, s in zip(rows, shorts, strict=True)
        )
    )
    assert any(len(s) < len(r["trajectory_id"]) for r, s in zip(rows, shorts, strict=True))
    by_short = _judge_eval(store, short_labels, "numeric_match")
    assert by_short["overall"] == _judge_eval(store, labels, "numeric_match")["overall"]
    assert by_short["missing"] == []


def test_judge_eval_with_no_labelled_trajectory_stored_says_so(
    labelled: tuple[Path, Path], tmp_path: Path
) -> None:
    store, _ = labelled
    stray = tmp_path / "stray.labels.jsonl"
    stray.write_text('{"trajectory_id": "zzz-not-stored", "label": true}\n')
    args = ["judge-eval", "--labels", str(stray), "--scorer", "numeric_match"]
    result = CliRunner().invoke(app, [*args, "--store", str(store)])
    assert result.exit_code != 0 and isinstance(result.exception, DataError)
    assert "nothing was compared: none of the 1 trajectories" in str(result.exception)
    assert "0.000" not in result.output  # no table of zeros
