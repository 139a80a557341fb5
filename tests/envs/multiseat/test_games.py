"""The built-in games: rules, rewards, hidden information and the scripted opponents."""

from __future__ import annotations

import asyncio

import pytest

from trajforge.envs.multiseat import kuhn, negotiation, tictactoe
from trajforge.envs.multiseat.base import GameResult, MultiSeatEnv, Opponent, SeatEnv, result_of
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError
from trajforge.schema import Message, Role, Task

GAMES = ("tictactoe", "kuhn-poker", "negotiation", "nim")


def play(game: MultiSeatEnv, task: Task, seats: dict[str, Opponent]) -> dict[str, float]:
    """Every seat scripted; the final rewards."""
    game.reset(task)
    for _ in range(game.max_moves):
        result = game.step(seats[game.to_move](task, game.observe(game.to_move)))
        if result.done:
            assert result.rewards is not None
            return result.rewards
    raise AssertionError(f"{game.name} ran past its {game.max_moves} moves")


def task(data: dict[str, object]) -> Task:
    return Task(id="t", prompt="", data=data)


def test_tictactoe_rows_columns_diagonals_and_draw() -> None:
    game = tictactoe.TicTacToe()
    game.reset(task({"opening": [0, 3, 1, 4]}))  # x: 1 2, o: 4 5
    assert game.observe("x") == "xx. oo. ... you x" and game.to_move == "x"
    assert game.step("3").rewards == {"x": 1.0, "o": -1.0}
    game.reset(task({"opening": [0, 1, 2, 4, 3, 5, 7, 6]}))
    assert game.step("9").rewards == {"x": 0.0, "o": 0.0}


@pytest.mark.parametrize("reply", ["1", "0", "10", "five", ""])
def test_tictactoe_illegal_move_loses(reply: str) -> None:
    game = tictactoe.TicTacToe()
    game.reset(task({"opening": [0]}))
    result = game.step(reply)
    assert result.invalid and result.rewards == {"x": 1.0, "o": -1.0}


def test_tictactoe_heuristic_wins_then_blocks() -> None:
    t = task({"opening": []})
    assert tictactoe.heuristic_move(t, "xx. oo. ... you o") == "6"  # its own win first
    assert tictactoe.heuristic_move(t, "xx. o.. ... you o") == "3"  # then a block
    assert tictactoe.heuristic_move(t, "x.. ... ... you o") == "5"  # then the centre


def test_kuhn_payoffs_follow_the_betting() -> None:
    game = kuhn.KuhnPoker()
    deal = task({"cards": {"p1": "Q", "p2": "K"}})
    for actions, rewards in [
        ("cc", {"p1": -1.0, "p2": 1.0}),
        ("bc", {"p1": -2.0, "p2": 2.0}),
        ("bf", {"p1": 1.0, "p2": -1.0}),
        ("cbc", {"p1": -2.0, "p2": 2.0}),
        ("cbf", {"p1": -1.0, "p2": 1.0}),
    ]:
        game.reset(deal)
        results = [game.step(a) for a in actions]
        assert [r.done for r in results] == [False] * (len(actions) - 1) + [True]
        assert results[-1].rewards == rewards, actions


def test_kuhn_hides_the_other_card() -> None:
    game = kuhn.KuhnPoker()
    game.reset(task({"cards": {"p1": "J", "p2": "K"}}))
    assert game.observe("p1") == "card J seen - reply c/b"
    game.step("b")
    assert game.observe("p2") == "card K seen b reply c/f"
    assert "J" not in game.observe("p2") and "J" not in game.state_key()
    assert game.step("b").invalid  # a raise is no action here


def test_kuhn_heuristic_wins_chips_from_random() -> None:
    tasks = kuhn.GAME.generate_tasks(300, seed=1)
    game = kuhn.KuhnPoker()
    bots = kuhn.GAME.opponents
    total = 0.0
    for t in tasks:
        seat = t.data["seat"]
        seats = {s: bots["heuristic"] if s == seat else bots["random"] for s in kuhn.SEATS}
        total += play(game, t, seats)[seat]
    assert total / len(tasks) > 0.0


def test_kuhn_best_response_to_the_heuristic_bluffs_with_the_jack() -> None:
    tasks = kuhn.GAME.generate_tasks(3000, seed=1)
    rate, policy = kuhn.best_response(tasks, kuhn.heuristic_action)
    # Exact over the deal distribution: 11/18 (the heuristic's queen calls a bet one time in 3).
    assert abs(rate - 11 / 18) < 0.03
    assert {k: a for k, a in policy.items() if a == kuhn.BET} == {"p1 J -": "b", "p2 J c": "b"}
    # Always checking and calling wins about half.
    passive = {h: kuhn.CHECK for h in ("", "c", "b", "cb")}
    won = sum(kuhn.play_deal(t, passive, kuhn.heuristic_action) is GameResult.WIN for t in tasks)
    assert abs(won / len(tasks) - 1 / 2) < 0.03


def test_negotiation_deal_no_deal_and_forfeit() -> None:
    data = {"pool": [1, 2, 3], "values": {"a": [4, 0, 2], "b": [1, 3, 1]}, "seat": "a"}
    game = negotiation.Negotiation()
    game.reset(task(data))
    assert game.step("1 0 3").done is False
    assert game.observe("b") == "pool 1 2 3 worth 1 3 1 offer 0 2 0 left 5"
    assert game.observe("a").split()[-3:] == ["-", "left", "5"]  # its own proposal is no offer
    accepted = game.step("a")
    assert accepted.rewards == {"a": 1.0, "b": 0.6}
    assert accepted.info["deal"] == {"b": [0, 2, 0], "a": [1, 0, 3]}
    game.reset(task(data))
    assert game.step("a").rewards == {"a": -1.0, "b": 0.0}  # nothing to accept yet
    game.reset(task(data))
    assert game.step("2 0 0").invalid  # more than the pool holds
    game.reset(task(data))
    for _ in range(negotiation.MAX_MOVES - 1):
        assert not game.step("1 1 1").done
    assert game.step("0 0 0").rewards == {"a": 0.0, "b": 0.0}


def test_negotiation_pools_are_worth_ten_to_both() -> None:
    for t in negotiation.GAME.generate_tasks(50, seed=3):
        for seat in negotiation.SEATS:
            assert negotiation.worth(tuple(t.data["values"][seat]), tuple(t.data["pool"])) == 10


@pytest.mark.parametrize("name", GAMES)
def test_heuristic_beats_random_more_than_it_loses(name: str) -> None:
    entry = get_env(name)
    assert entry.game is not None and set(entry.opponents) == {"random", "heuristic"}
    game = entry.game()
    tally = dict.fromkeys(GameResult, 0)
    gain = 0.0
    for t in entry.tasks(200, seed=0):
        seat = t.data["seat"]
        seats = {s: entry.opponents["heuristic" if s == seat else "random"] for s in game.seats}
        rewards = play(game, t, seats)
        if game.zero_sum:
            assert sum(rewards.values()) == 0.0
        tally[result_of(rewards, seat)] += 1
        gain += rewards[seat] - max(r for s, r in rewards.items() if s != seat)
    assert tally[GameResult.WIN] > tally[GameResult.LOSS] and gain > 0, (tally, gain)


@pytest.mark.parametrize("name", GAMES)
def test_one_seat_as_an_env_against_a_scripted_opponent(name: str) -> None:
    entry = get_env(name)
    tasks = entry.tasks(20, seed=0, split="test")
    assert not {t.id for t in tasks} & {t.id for t in entry.tasks(200, seed=0)}

    async def episode(t: Task) -> dict[str, object]:
        env = entry.make(opponent="random")
        messages = await env.reset(t)
        assert [m.role for m in messages] == [Role.SYSTEM, Role.USER]
        while True:
            reply = entry.expert(t, messages)
            assert reply is not None
            messages.append(Message(role=Role.ASSISTANT, content=reply))
            result = await env.step(messages[-1])
            assert result.state_key is not None and result.info["seat"] == t.data["seat"]
            assert not result.info["invalid"]  # the expert only plays legal moves
            if result.done:
                assert result.reward == result.info["rewards"][t.data["seat"]]
                return result.info
            assert [m.role for m in result.observations] == [Role.USER]
            messages.extend(result.observations)

    infos = [asyncio.run(episode(t)) for t in tasks]
    for info in infos:
        rewards = info["rewards"]
        assert isinstance(rewards, dict)
        assert info["result"] == result_of(rewards, str(info["seat"])).value


def test_seat_env_refuses_unknown_seats_and_opponents() -> None:
    with pytest.raises(ConfigError, match="seat 'z' is not one of"):
        SeatEnv(tictactoe.TicTacToe(), tictactoe.random_move, seat="z")
    with pytest.raises(ConfigError, match="no opponent 'perfect'; it has heuristic, random"):
        get_env("kuhn-poker").make(opponent="perfect")
