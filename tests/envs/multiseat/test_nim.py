"""One-pile Nim: rules, the heuristic opponent, tasks and the greedy ceiling."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from trajforge.envs.multiseat import nim
from trajforge.envs.multiseat.base import GameResult
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError
from trajforge.schema import Message, Role, Task


def task(pile: int, seat: str = "p1", task_id: str = "t") -> Task:
    return Task(id=task_id, prompt="", data={"pile": pile, "seat": seat, "seed": 0})


def test_views_list_only_the_legal_takes() -> None:
    game = nim.Nim()
    game.reset(task(6))
    assert game.observe("p1") == game.observe("p2") == "pile 6 take 1/2/3"
    assert game.to_move == "p1" and game.state_key() == "p1:6"
    assert game.step("3").done is False
    assert game.to_move == "p2" and game.observe("p2") == "pile 3 take 1/2/3"
    assert game.step(" 1\n").done is False  # whitespace around the digit is no fault
    assert game.observe("p1") == "pile 2 take 1/2" and game.state_key() == "p1:2"
    assert nim.parse_view("pile 2 take 1/2") == (2, [1, 2])
    with pytest.raises(ConfigError, match="not a nim view"):
        nim.parse_view("pile two take 1/2")


def test_taking_the_last_stone_wins_and_the_game_is_zero_sum() -> None:
    game = nim.Nim()
    game.reset(task(5))
    assert not game.step("1").done and not game.step("1").done  # 3 left, p1 to move
    result = game.step("3")
    assert result.done and not result.invalid
    assert result.rewards == {"p1": 1.0, "p2": -1.0}
    game.reset(task(5))
    game.step("2")
    final = game.step("3")  # p2 takes the last three
    assert final.rewards == {"p1": -1.0, "p2": 1.0}
    assert final.rewards is not None and sum(final.rewards.values()) == 0.0


@pytest.mark.parametrize("reply", ["4", "0", "-1", "three", "", "1 2", "3"])
def test_an_illegal_take_forfeits(reply: str) -> None:
    game = nim.Nim()
    game.reset(task(7))
    game.step("1")
    game.step("1")
    game.step("3")  # 2 left, p2 to move: "3" is more than remain
    result = game.step(reply)
    assert result.done and result.invalid
    assert result.rewards == {"p1": 1.0, "p2": -1.0}


def test_heuristic_takes_the_last_stones_and_otherwise_plays_at_random() -> None:
    t = task(9)
    for pile in (1, 2, 3):
        view = f"pile {pile} take {'/'.join(map(str, nim.legal(pile)))}"
        assert nim.heuristic_action(t, view) == str(pile)
    # At 4 stones or more it does not plan: over many tasks it takes every count, the winning
    # take no more than the others, and the same task and view always get the same take.
    takes = [
        nim.heuristic_action(task(9, task_id=f"t{i}"), "pile 9 take 1/2/3") for i in range(300)
    ]
    counts = {k: takes.count(k) for k in ("1", "2", "3")}
    assert all(60 < c < 140 for c in counts.values()), counts
    assert nim.heuristic_action(t, "pile 9 take 1/2/3") == nim.heuristic_action(
        t, "pile 9 take 1/2/3"
    )


def test_optimal_play_beats_the_heuristic_far_more_than_random_play() -> None:
    tasks = nim.GAME.generate_tasks(300, seed=2)
    optimal = {p: nim.winning_take(p) or 1 for p in range(1, nim.MAX_PILE + 1)}
    timid = dict.fromkeys(range(1, nim.MAX_PILE + 1), 1)  # one stone a move
    won = sum(nim.play_task(t, optimal, nim.heuristic_action) is GameResult.WIN for t in tasks)
    slow = sum(nim.play_task(t, timid, nim.heuristic_action) is GameResult.WIN for t in tasks)
    # Every start not a multiple of 4 in the agent's turn is a sure win, and the heuristic
    # blunders from most of the rest: the room a learned policy has over a weak one.
    assert won / len(tasks) > 0.85 and slow / len(tasks) < 0.5, (won, slow)


def perfect(t: Task, view: str) -> str:
    """Leaves a multiple of 4 where it can, else takes one."""
    pile, _ = nim.parse_view(view)
    return str(nim.winning_take(pile) or 1)


def test_best_response_on_hand_checked_cases() -> None:
    # Against perfect play the agent wins exactly the games it starts on a pile that is no
    # multiple of 4: p1 at 9 (takes 1), and p2 at 8 (the opponent must leave 7, 6 or 5).
    # p1 at 8 and p2 at 6 (the opponent leaves 4) are lost whatever the agent takes.
    tasks = [task(8, "p1", "a"), task(9, "p1", "b"), task(6, "p2", "c"), task(8, "p2", "d")]
    rate, policy = nim.best_response(tasks, perfect)
    assert rate == 0.5
    assert [policy[p] for p in (9, 7, 6, 5, 3, 2, 1)] == [1, 3, 2, 1, 3, 2, 1]
    # Against the heuristic, p1 at 4 is lost (any take leaves it the rest) and p2 at 5 is won
    # unless the heuristic's first take leaves 4.
    lost, open_ = task(4, "p1", "e"), task(5, "p2", "f")
    won_f = nim.heuristic_action(open_, "pile 5 take 1/2/3") != "1"
    assert nim.best_response([lost, open_], nim.heuristic_action)[0] == won_f / 2


def test_best_response_equals_an_exhaustive_search_on_small_piles() -> None:
    # Up to 9 stones every policy (3^7 x 2 x 1 of them) is cheap to play.
    tasks = [t for t in nim.GAME.generate_tasks(400, seed=5) if t.data["pile"] <= 9][:20]
    assert len(tasks) == 20
    rate, _ = nim.best_response(tasks, nim.heuristic_action)
    best = 0
    for takes in itertools.product(*(nim.legal(p) for p in range(1, 10))):
        policy = dict(zip(range(1, 10), takes, strict=True))
        best = max(
            best,
            sum(nim.play_task(t, policy, nim.heuristic_action) is GameResult.WIN for t in tasks),
        )
    assert rate == best / len(tasks)


def test_tasks_are_reproducible_and_the_splits_disjoint() -> None:
    train = nim.GAME.generate_tasks(300, seed=0)
    test = nim.GAME.generate_tasks(100, seed=0, split="test")
    assert [t.id for t in train] == [t.id for t in nim.GAME.generate_tasks(300, seed=0)]
    assert [t.id for t in train] != [t.id for t in nim.GAME.generate_tasks(300, seed=1)]
    assert not {t.id for t in train} & {t.id for t in test}
    assert len({t.id for t in train}) == 300
    for t in [*train, *test]:
        assert nim.MIN_PILE <= t.data["pile"] <= nim.MAX_PILE and t.data["seat"] in nim.SEATS
    assert {t.data["seat"] for t in test} == set(nim.SEATS)
    with pytest.raises(ConfigError, match="pile"):
        nim.Nim().reset(task(nim.MAX_PILE + 1))


@pytest.mark.parametrize("seat", nim.SEATS)
def test_seat_env_plays_a_whole_game_with_the_expert(seat: str) -> None:
    entry = get_env("nim")
    t = next(t for t in entry.tasks(50, seed=0, split="test") if t.data["seat"] == seat)

    async def episode() -> tuple[int, dict[str, object]]:
        env = entry.make()
        messages = await env.reset(t)
        assert messages[1].content.startswith("pile ")
        moves = 0
        while True:
            reply = entry.expert(t, messages)
            assert reply is not None and reply in {"1", "2", "3"}
            messages.append(Message(role=Role.ASSISTANT, content=reply))
            result = await env.step(messages[-1])
            moves += 1
            assert not result.info["invalid"] and result.state_key.startswith(seat)
            if result.done:
                return moves, result.info
            messages.extend(result.observations)

    moves, info = asyncio.run(episode())
    assert 1 <= moves <= t.data["pile"]
    assert info["result"] in {"win", "loss"} and info["seat"] == seat
