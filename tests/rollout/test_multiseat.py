"""Multi-seat episodes: a policy per seat, one linked, token-exact trajectory per seat."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajforge.envs.registry import get_env
from trajforge.policy.base import Policy
from trajforge.policy.check import check_trajectories
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.naming import load_policy
from trajforge.rollout import PolicyRef, RolloutSpec, Sampling, TaskSample, run_rollout
from trajforge.rollout.hooks import RolloutHook, RolloutRun
from trajforge.rollout.multiseat import MultiSeatRunner, play_against, scripted_seat, seat_run_id
from trajforge.rollout.spec import RolloutError
from trajforge.schema import OutcomeStatus, Role, Trajectory
from trajforge.store.sqlite import TrajectoryStore

GAMES = ("tictactoe", "kuhn-poker", "negotiation", "nim")


class Linked(RolloutHook):
    def __init__(self) -> None:
        self.seen: list[Trajectory] = []

    def on_linked_trajectory(self, run: RolloutRun, trajectory: Trajectory) -> None:
        self.seen.append(trajectory)


def spec(env: str, count: int, **kw: object) -> RolloutSpec:
    sampling = Sampling(temperature=1.0, max_new_tokens=8)
    return RolloutSpec(env=env, tasks=TaskSample(count=count), sampling=sampling, **kw)  # type: ignore[arg-type]


def assert_linked(episodes: list[Trajectory], others: list[Trajectory], seats: int) -> None:
    by_episode: dict[str, list[Trajectory]] = {}
    for t in [*episodes, *others]:
        by_episode.setdefault(t.metadata["episode"], []).append(t)
    assert len(by_episode) == len(episodes)
    for group in by_episode.values():
        assert len(group) == seats and len({t.metadata["seat"] for t in group}) == seats
        ids = {t.id for t in group}
        for t in group:
            assert set(t.metadata["linked"]) == ids - {t.id}
            assert t.group_id is not None and t.group_id.endswith(":" + t.metadata["seat"])
            assert {t.task.id for t in group} == {group[0].task.id}


@pytest.mark.parametrize("name", GAMES)
def test_scripted_seats_play_every_game_to_its_end(name: str) -> None:
    entry = get_env(name)
    game = entry.game
    assert game is not None
    seats = game().seats
    policies = {
        seats[0]: scripted_seat(entry, "heuristic"),
        seats[1]: scripted_seat(entry, "random"),
    }
    hook = Linked()
    trajs = run_rollout(spec(name, 12), runner=MultiSeatRunner(game, policies), hooks=[hook])
    assert_linked(trajs, hook.seen, 2)
    for t in [*trajs, *hook.seen]:
        assert t.outcome.status is OutcomeStatus.OK and t.outcome.reward is not None
        assert t.outcome.reward == t.metadata["rewards"][t.metadata["seat"]]
        assert t.model == policies[t.metadata["seat"]].name
        assert t.messages[0].role is Role.SYSTEM and t.messages[-1].role is Role.ASSISTANT
        assert all(m.state_key for m in t.messages if m.role is Role.ASSISTANT)
    if game().zero_sum:
        for t in trajs:
            assert sum(t.metadata["rewards"].values()) == 0.0
    # The primary seat is the task's, so a task set covers every seat.
    assert {t.metadata["seat"] for t in trajs} == set(seats)
    assert all(t.metadata["seat"] == t.task.data["seat"] for t in trajs)


def test_hidden_cards_stay_out_of_the_other_seats_view() -> None:
    entry = get_env("kuhn-poker")
    assert entry.game is not None
    policies = {s: scripted_seat(entry, "random") for s in ("p1", "p2")}
    hook = Linked()
    trajs = run_rollout(
        spec("kuhn-poker", 20), runner=MultiSeatRunner(entry.game, policies), hooks=[hook]
    )
    for t in [*trajs, *hook.seen]:
        seat = t.metadata["seat"]
        other = next(s for s in t.task.data["cards"] if s != seat)
        views = [m.content for m in t.messages if m.role is Role.USER]
        assert views and all(v.startswith(f"card {t.task.data['cards'][seat]} ") for v in views)
        hidden = t.task.data["cards"][other]
        assert all(f"card {hidden} " not in v for v in views)


@pytest.fixture(scope="module")
def tiny() -> Policy:
    return load_policy("tiny", max_batch_size=8)


def test_self_play_with_one_model_in_both_seats_is_token_exact(
    tmp_path: Path, tiny: Policy
) -> None:
    entry = get_env("tictactoe")
    assert entry.game is not None
    runner = MultiSeatRunner(entry.game, {"x": tiny, "o": tiny})
    store = tmp_path / "store.db"
    trajs = run_rollout(spec("tictactoe", 3, n=2, run_id="sp", store=store), runner=runner)
    with TrajectoryStore(store) as st:
        stored = list(st.query(run="sp"))
        for seat in ("x", "o"):
            stored += list(st.query(run=seat_run_id("sp", seat)))
    assert len(trajs) == 6 and len(stored) == 12
    assert_linked(trajs, [t for t in stored if t.run_id != "sp"], 2)
    tokenizer = load_tokenizer()
    report = check_trajectories(stored, lambda t: tokenizer)
    assert report.ok and report.checked == 12, report
    # A random tiny model's first reply is no move: it forfeits, and the other seat wins.
    for t in trajs:
        rewards = t.metadata["rewards"]
        assert sorted(rewards.values()) == [-1.0, 1.0]
        loser = next(s for s, r in rewards.items() if r < 0)
        assert t.metadata["invalid"] is (t.metadata["seat"] == loser)


def test_a_multiseat_run_takes_its_policies_live() -> None:
    entry = get_env("negotiation")
    assert entry.game is not None
    runner = MultiSeatRunner(entry.game, {s: scripted_seat(entry, "random") for s in ("a", "b")})
    named = spec("negotiation", 1).model_copy(update={"policy": PolicyRef(name="expert")})
    with pytest.raises(RolloutError, match="takes its seats' policies live"):
        run_rollout(named, runner=runner)
    with pytest.raises(RolloutError, match="no multi-seat game"):
        scripted_seat(get_env("calculator"), "random")


def test_play_against_puts_the_policy_in_each_tasks_seat() -> None:
    entry = get_env("tictactoe")
    tasks = entry.tasks(30, seed=0, split="test")
    player = scripted_seat(entry, "heuristic")
    trajs = play_against(entry, player, "random", tasks, sampling=Sampling(max_new_tokens=4))
    assert sorted(t.task.id for t in trajs) == sorted(t.id for t in tasks)
    assert all(t.model == player.name for t in trajs)
    assert all(t.metadata["seat"] == t.task.data["seat"] for t in trajs)
    results = [t.metadata["result"] for t in trajs]
    assert results.count("win") > results.count("loss")
    assert {t.run_id.rsplit("-", 1)[-1] for t in trajs if t.run_id} == {"x", "o"}
