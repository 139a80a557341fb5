"""keydoor: the BFS expert wins every seeded board, doors need keys, key pickups are rewarded
once per key, and states reached by different episodes share a key."""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial

import pytest

from episodes import assistant_turns, play, reward, rewards, state_keys
from trajforge.envs.builtin import keydoor
from trajforge.envs.builtin.gridworld import MOVES
from trajforge.envs.builtin.keydoor import KEY_REWARD, MAX_PATH, MIN_PATH, KeyBoard
from trajforge.envs.registry import get_env
from trajforge.formats.tool_calls import format_tool_call
from trajforge.rollout import EndReason
from trajforge.schema import Message, OutcomeStatus, Role, Task, Trajectory
from trajforge.schema.evidence import Evidence

pytestmark = pytest.mark.timeout(120)

# S . a      the key is two moves right of the start; door A is below it;
# # # A      the goal is behind the door, bottom left: 6 moves in all.
# G . .
HAND = Task(id="hand", prompt="Reach G.", data={"rows": ["S.a", "##A", "G.."]})
SOLUTION = ["right", "right", "down", "down", "left", "left"]
Reply = Callable[[Task, list[Message]], str | None]


def scripted(moves: list[str]) -> Reply:
    """Plays ``moves`` one per turn, then answers without a tool call."""

    def reply(task: Task, messages: list[Message]) -> str:
        turn = sum(1 for m in messages if m.role is Role.ASSISTANT)
        if turn < len(moves):
            return format_tool_call("move", {"direction": moves[turn]})
        return "Done."

    return reply


def played(task: Task, reply: Reply) -> Trajectory:
    return play(keydoor.make_env, task, reply)


def turn_rewards(episode: Trajectory) -> list[float | None]:
    """Each turn's reward; the last turn's is the outcome's (the engine stores none there)."""
    *turns, last = assistant_turns(episode)
    assert last.reward is None
    return [m.reward for m in turns] + [episode.outcome.reward]


def test_expert_wins_every_one_of_300_train_and_50_test_boards() -> None:
    tasks = keydoor.generate_tasks(300, seed=0) + keydoor.generate_tasks(50, seed=0, split="test")

    assert rewards(keydoor.make_env, tasks, keydoor.expert) == [1.0] * 350


def test_boards_need_6_to_20_moves_and_the_goal_is_unreachable_without_keys() -> None:
    tasks = keydoor.generate_tasks(300, seed=2)
    lengths = [len(KeyBoard.from_task(t).shortest_path() or []) for t in tasks]
    assert lengths == [t.data["shortest"] for t in tasks]
    assert min(lengths) >= MIN_PATH and max(lengths) <= MAX_PATH
    assert len(set(lengths)) >= 10  # a spread of horizons, not one length
    for task in tasks:
        keyless = [row.replace("a", ".").replace("b", ".") for row in task.data["rows"]]
        board = KeyBoard.from_task(task.model_copy(update={"data": {"rows": keyless}}))
        assert board.shortest_path() is None, task.id


def test_generation_is_deterministic_and_splits_are_disjoint() -> None:
    first = keydoor.generate_tasks(40, seed=5)
    assert first == keydoor.generate_tasks(40, seed=5)
    assert first != keydoor.generate_tasks(40, seed=6)
    test = keydoor.generate_tasks(40, seed=5, split="test")
    assert not {t.id for t in first} & {t.id for t in test}
    assert {t.split for t in first} == {"train"} and {t.split for t in test} == {"test"}
    assert get_env("keydoor").tasks(3, seed=5) == first[:3]


def test_rules_locked_door_key_pickup_and_render() -> None:
    board = KeyBoard.from_task(HAND)
    assert board.shortest_path() == SOLUTION
    _, what = board.move("right")[0].move("down")
    assert what == "You hit a wall and did not move."
    stepped, _ = board.move("right")
    holding, what = stepped.move("right")
    assert what == "You moved right. You picked up key a." and holding.keys == {"a"}
    assert holding.render() == "..@\n##A\nG..\nKeys held: a"
    no_key = KeyBoard(("S..", "##A", "G.."), (0, 2))
    same, what = no_key.move("down")
    assert same == no_key and what == "Door A is locked: you need key a. You did not move."
    through, _ = holding.move("down")
    assert through.pos == (1, 2)


def test_a_wrong_sequence_earns_the_key_reward_once_and_no_outcome() -> None:
    # Picks the key up, walks away and back over its square (no second reward), bumps a wall.
    moves = ["right", "right", "left", "right", "up", "left"]
    episode = played(HAND, scripted(moves))
    assert reward(episode) == 0.0
    assert turn_rewards(episode) == [0.0, KEY_REWARD, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_the_episode_ends_on_the_turn_that_reaches_the_goal() -> None:
    episode = played(HAND, scripted(SOLUTION))
    assert reward(episode) == 1.0 and episode.outcome.status is OutcomeStatus.OK
    assert turn_rewards(episode) == [0.0, KEY_REWARD, 0.0, 0.0, 0.0, 1.0]
    assert episode.messages[-1].content.startswith("You reached the goal!")
    assert keydoor.verify(Evidence(HAND, episode.messages)) == 1.0
    # Reached on the last turn allowed, the goal is still a win, not a cut-off episode.
    last = play(partial(keydoor.make_env, max_turns=len(SOLUTION)), HAND, scripted(SOLUTION))
    assert reward(last) == 1.0 and last.outcome.status is OutcomeStatus.OK
    early = play(partial(keydoor.make_env, max_turns=5), HAND, scripted(SOLUTION))
    assert reward(early) == 0.0 and early.outcome.reason == EndReason.ENV_TRUNCATED


def test_state_keys_repeat_across_episodes_reaching_the_same_state() -> None:
    detour = state_keys(played(HAND, scripted(["right", "left", *SOLUTION])))
    direct = state_keys(played(HAND, scripted(SOLUTION)))
    assert detour[0] == detour[2] == direct[0]
    assert detour[1] == direct[1] != detour[0]
    assert detour[2:] == direct
    # The same square with and without the key is a different state.
    back = state_keys(played(HAND, scripted(["right", "right", "left", "right", "left"])))
    assert back[1] == direct[1] and back[3] != back[1]


def test_random_moves_rarely_win() -> None:
    tasks = keydoor.generate_tasks(100, seed=1)
    rng = random.Random(0)
    moves = list(MOVES)

    def reply(task: Task, messages: list[Message]) -> str:
        return format_tool_call("move", {"direction": rng.choice(moves)})

    won = rewards(partial(keydoor.make_env, max_turns=20), tasks, reply)
    assert sum(won) / len(tasks) <= 0.1
