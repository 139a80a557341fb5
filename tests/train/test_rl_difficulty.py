"""Online difficulty filtering and the curriculum: groups that scored alike are dropped and the
batch refilled up to a cap, per-task pass rates persist across a resume, and a band prefers the
tasks of middling pass rate without starving the others."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from pathlib import Path

import pytest
from train_helpers import qa_trajectory, small_rl_config, token_id_reward, token_id_rubric

from trajforge.envs import get_env
from trajforge.errors import ConfigError
from trajforge.judge.scorer import FunctionScorer, Rubric
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.rollout import RolloutHook, RolloutSpec
from trajforge.schema import EvaluatorKind, OutcomeStatus, Task, Trajectory
from trajforge.train.config import DifficultySettings, RLConfig, parse_config
from trajforge.train.rl import RLTrainer
from trajforge.train.rl.difficulty import Difficulty, alike_groups


def _count_rollouts(trainer: RLTrainer) -> list[int]:
    """The groups of each rollout call the trainer's runner makes (appended as they run)."""
    runner = trainer.runner
    assert runner is not None
    played = runner.rollout
    calls: list[int] = []

    def counted(
        spec: RolloutSpec, step: int, hooks: Sequence[RolloutHook] = ()
    ) -> Awaitable[list[Trajectory]]:
        calls.append(len(spec.tasks))
        return played(spec, step, hooks)

    runner.rollout = counted  # type: ignore[method-assign]
    return calls


def _alike_on(task_ids: set[str]) -> Rubric:
    """A reward that is 0.5 for every sample of the tasks in ``task_ids`` (their groups score
    alike) and spreads with the tokens sampled elsewhere."""

    def reward(traj: Trajectory) -> float:
        return 0.5 if traj.task.id in task_ids else token_id_reward(traj)

    return Rubric([(FunctionScorer(reward, "alike_on", EvaluatorKind.RULE), 1.0)])


def test_groups_that_score_alike_are_dropped_and_the_batch_refilled(tmp_path: Path) -> None:
    cfg = small_rl_config(tmp_path, num_tasks=6, difficulty={"refill": True})
    first_two = {t.id for t in get_env("calculator").tasks(6, seed=cfg.seed, split="train")[:2]}
    trainer = RLTrainer(cfg, rubric=_alike_on(first_two))
    calls = _count_rollouts(trainer)
    [metrics] = trainer.train().history
    # The step's two tasks scored alike; one refill round rolled out two groups on new tasks.
    assert calls == [2, 2]
    assert metrics["dropped_groups"] == 2 and metrics["refill_rounds"] == 1
    assert metrics["refill_groups"] == 2 and metrics["refill_capped"] == 0
    # groups_per_step groups with a spread trained, and none without
    assert metrics["trained_trajectories"] == cfg.groups_per_step * cfg.samples_per_group
    assert metrics["zero_adv_frac"] == 0
    # every episode played counts in the step's figures, the dropped ones too
    assert metrics["tracked_tasks"] == 4


@pytest.mark.parametrize(
    ("caps", "calls", "extra"),
    [
        ({"max_refills": 2}, [2, 2, 2], 4),
        ({"max_refills": 4, "max_extra_groups": 3}, [2, 2, 1], 3),
    ],
)
def test_the_cap_stops_refilling_and_the_metrics_say_so(
    tmp_path: Path, caps: dict[str, int], calls: list[int], extra: int
) -> None:
    constant = Rubric([(FunctionScorer(lambda t: 0.25, "constant", EvaluatorKind.RULE), 1.0)])
    cfg = small_rl_config(tmp_path, num_tasks=8, difficulty={"refill": True, **caps})
    trainer = RLTrainer(cfg, rubric=constant)
    made = _count_rollouts(trainer)
    [metrics] = trainer.train().history
    assert made == calls
    assert metrics["refill_rounds"] == 2 and metrics["refill_groups"] == extra
    assert metrics["dropped_groups"] == 2 + extra and metrics["refill_capped"] == 1
    assert "trained_trajectories" not in metrics  # nothing was left to train on
    assert trainer.idle.steps == [1]


def test_off_by_default_nothing_is_dropped_tracked_or_logged(tmp_path: Path) -> None:
    constant = Rubric([(FunctionScorer(lambda t: 0.25, "constant", EvaluatorKind.RULE), 1.0)])
    trainer = RLTrainer(small_rl_config(tmp_path), rubric=constant)
    calls = _count_rollouts(trainer)
    [metrics] = trainer.train().history
    assert calls == [2] and metrics["trained_trajectories"] == 4
    assert not {"dropped_groups", "band_tasks", "tracked_tasks"} & metrics.keys()
    assert trainer.cursor()["difficulty"] == []


def _graded(tok: object, task_id: str, rewards: list[float], group: str) -> list[Trajectory]:
    out = []
    for r in rewards:
        t = qa_trajectory(tok, "q", "a", task_id=task_id, group_id=group)
        t.outcome.status = OutcomeStatus.OK
        t.outcome.reward = r
        out.append(t)
    return out


def test_pass_rates_are_a_moving_average_per_task() -> None:
    tok = tiny_model_and_tokenizer()[1]
    rates = Difficulty(DifficultySettings(pass_rate_alpha=0.5), seed=0)
    rates.update(_graded(tok, "a", [1, 0, 0, 0], "g1") + _graded(tok, "b", [1, 1], "g2"))
    assert {k: v.rate for k, v in rates.rates.items()} == {"a": 0.25, "b": 1.0}
    rates.update(_graded(tok, "a", [1, 1, 1, 1], "g3"))
    assert rates.rates["a"].rate == 0.625 and rates.rates["a"].groups == 2
    assert rates.metrics() == {"tracked_tasks": 2, "pass_rate_mean": 0.8125}
    assert alike_groups(_graded(tok, "a", [1, 0], "x") + _graded(tok, "b", [1, 1], "y")) == {"y"}


def test_pass_rates_survive_a_checkpoint_resume(tmp_path: Path) -> None:
    class Stop(Exception):
        pass

    def stop(step: int, metrics: dict[str, float]) -> None:
        if step == 2:
            raise Stop

    def cfg() -> RLConfig:
        return small_rl_config(tmp_path, steps=3, checkpoint_every=1, difficulty={})

    first = RLTrainer(cfg(), rubric=token_id_rubric(), callbacks=[stop])
    with pytest.raises(Stop):
        first.train()
    saved = {k: v.model_copy() for k, v in first.difficulty.rates.items()}
    assert len(saved) == 2 and all(r.groups == 2 for r in saved.values())
    second = RLTrainer(cfg(), rubric=token_id_rubric())
    result = second.train(resume=True)
    assert result.resumed_from == 2
    # Both tasks played once more on top of the two groups each saw before the stop.
    assert {k: v.groups for k, v in second.difficulty.rates.items()} == {k: 3 for k in saved}


def _tasks(n: int) -> list[Task]:
    return [Task(id=f"t{i}", prompt="p") for i in range(n)]


def test_the_curriculum_prefers_tasks_in_the_band_and_starves_none() -> None:
    tasks = _tasks(10)
    curriculum = Difficulty(DifficultySettings(band=(0.1, 0.9), explore=0.1), seed=3)
    tok = tiny_model_and_tokenizer()[1]
    # t0..t4 half solved (in the band); t5..t7 always, t8 never solved (out); t9 unseen (in).
    for i in range(9):
        solved = [1.0, 0.0] if i < 5 else [1.0, 1.0] if i < 8 else [0.0, 0.0]
        curriculum.update(_graded(tok, f"t{i}", solved, f"g{i}"))
    cursor, counts = 0, dict.fromkeys(range(10), 0)
    for _ in range(100):
        picked, cursor = curriculum.take(tasks, cursor, 3, set())
        for i in picked:
            counts[i] += 1
    in_band = [counts[i] for i in (0, 1, 2, 3, 4, 9)]
    out_of_band = [counts[i] for i in (5, 6, 7, 8)]
    assert min(in_band) > 3 * max(out_of_band)
    assert min(out_of_band) > 0  # explored now and then
    share = curriculum.picked_metrics()["band_tasks"]
    assert share == sum(in_band) / 300 and share > 0.85
    assert curriculum.picked_metrics() == {}  # counted afresh after each read
    # The draws depend on the seed and the cursor only: the same walk picks the same tasks.
    again = Difficulty(curriculum.settings, seed=3)
    again.load_state(curriculum.state())
    assert again.take(tasks, 17, 5, set()) == curriculum.take(tasks, 17, 5, set())


def test_a_band_no_task_is_in_still_fills_the_step() -> None:
    tasks = _tasks(3)
    curriculum = Difficulty(DifficultySettings(band=(0.4, 0.6), explore=0.01), seed=0)
    tok = tiny_model_and_tokenizer()[1]
    for task in tasks:
        curriculum.update(_graded(tok, task.id, [0.0, 0.0], task.id))
    picked, _ = curriculum.take(tasks, 0, 2, set())
    assert len(picked) == 2 and curriculum.picked_metrics() == {"band_tasks": 0.0}


def test_a_run_with_a_band_reports_what_the_sampler_chose(tmp_path: Path) -> None:
    # The tiny model solves nothing, so a task once played falls below the band: step 2 takes
    # the two unseen tasks, step 3 has only played ones left.
    cfg = small_rl_config(tmp_path, num_tasks=4, steps=3, difficulty={"band": [0.1, 0.9]})
    history = RLTrainer(cfg, rubric=token_id_rubric()).train().history
    assert [h["band_tasks"] for h in history] == [1.0, 1.0, 0.0]
    assert [h["tracked_tasks"] for h in history] == [2, 4, 4]


@pytest.mark.parametrize(
    ("difficulty", "extra", "message"),
    [
        ({"band": [0.2, 1.5]}, {}, r"difficulty\.band: \[0\.2, 1\.5\]: .* within \[0, 1\]"),
        ({"band": [0.9, 0.1]}, {}, r"difficulty\.band: \[0\.9, 0\.1\]: low is above high"),
        ({"explore": 0}, {}, r"difficulty\.explore: Input should be greater than 0"),
        ({"refill": True}, {"samples_per_group": 1}, r"difficulty\.refill: a group of one"),
        (
            {"band": [0, 1]},
            {"async_staleness": 1},
            r"difficulty: refill and band .* \(set it to 0\)",
        ),
    ],
)
def test_config_errors_are_one_line_naming_the_key(
    difficulty: dict[str, object], extra: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse_config({"difficulty": difficulty, **extra}, RLConfig, source="x.yaml")
    assert "\n" not in str(caught.value)
