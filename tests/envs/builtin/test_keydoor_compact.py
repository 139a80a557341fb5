"""keydoor-compact: keydoor's boards in a few tokens a turn. The expert wins every board through
the rollout engine, observations say where things are in moves, rewards and anchor states are
keydoor's, and a reply that is no move costs a turn."""

from __future__ import annotations

import asyncio

import pytest

from trajforge.envs.builtin import keydoor, keydoor_compact
from trajforge.envs.builtin.keydoor import KEY_REWARD, KeyBoard
from trajforge.envs.builtin.keydoor_compact import (
    MAX_PATH,
    MAX_TURNS,
    MIN_PATH,
    KeyDoorCompactEnv,
    observe,
    parse_move,
)
from trajforge.envs.registry import get_env
from trajforge.rollout.engine import run_rollout
from trajforge.rollout.spec import RolloutSpec
from trajforge.schema import Message, Role, Task, Trajectory

pytestmark = pytest.mark.timeout(120)

# S . a      the key is two moves right of the start; door A is below it;
# # # A      the goal is behind the door, bottom left: 6 moves in all.
# G . .
HAND = Task(id="hand", prompt="", data={"rows": ["S.a", "##A", "G.."]})


def play(env: KeyDoorCompactEnv, task: Task, replies: list[str]) -> tuple[list[Message], list]:
    """The messages and step results of ``replies`` played one per turn until the episode ends."""

    async def go() -> tuple[list[Message], list]:
        messages = await env.reset(task)
        results = []
        for reply in replies:
            action = Message(role=Role.ASSISTANT, content=reply)
            result = await env.step(action)
            messages += [action, *result.observations]
            results.append(result)
            if result.done:
                break
        return messages, results

    return asyncio.run(go())


def test_observation_names_each_thing_by_the_moves_to_it_and_the_open_moves() -> None:
    board = KeyBoard.from_task(HAND)
    assert observe(board) == "a R2 A D1 R2 G D2 + R"
    moved, _ = board.move("right")
    moved, _ = moved.move("right")  # onto the key: it is held and no longer listed
    assert observe(moved) == "A D1 G D2 L2 + D L"
    assert observe(KeyBoard(board.rows, (1, 2), keys=frozenset("a"))) == "A 0 G D1 L2 + U D"


@pytest.mark.parametrize(
    ("reply", "move"),
    [("U", "up"), ("d", "down"), (" L\n", "left"), ("right", "right"), ("UR", None), ("", None)],
)
def test_a_reply_is_one_letter_or_word(reply: str, move: str | None) -> None:
    assert parse_move(reply) == move


def test_the_hand_board_pays_the_key_then_the_goal_and_ends_there() -> None:
    messages, results = play(KeyDoorCompactEnv(), HAND, [*"RRDDLL", "R"])
    assert [r.reward for r in results] == [0.0, KEY_REWARD, 0.0, 0.0, 0.0, 1.0]
    assert results[-1].done and results[-1].info["truncated"] is False
    assert [m.content for m in messages if m.role is Role.USER][1:3] == [
        "a R1 A D1 R1 G D2 L1 + L R",
        "key A D1 G D2 L2 + D L",
    ]


def test_walls_locked_doors_and_non_moves_cost_a_turn_and_say_so() -> None:
    env = KeyDoorCompactEnv(max_turns=4)
    _, results = play(env, HAND, ["U", "D", "hello", "R"])
    events = [r.observations[0].content.split()[0] for r in results[:3]]
    assert events == ["wall", "wall", "?"]
    assert results[2].info["invalid"] is True
    last = results[-1]
    assert last.done and last.reward == 0.0 and last.info["truncated"] is True
    locked = KeyDoorCompactEnv()
    _, results = play(locked, Task(id="t", prompt="", data={"rows": ["S.", "A#", "G."]}), ["D"])
    assert results[0].observations[0].content.startswith("locked ")


def test_the_same_square_and_keys_by_different_paths_share_a_state_key() -> None:
    def keys_after(replies: list[str]) -> list[str]:
        _, results = play(KeyDoorCompactEnv(), HAND, replies)
        env_keys = [r.state_key for r in results]
        return env_keys

    # Both reach the key square, by a detour or straight; the next step starts from one state.
    detour, straight = keys_after(["U", "R", "R", "D"]), keys_after(["R", "R", "D"])
    assert detour[3] == straight[2]
    assert detour[0] == detour[1] == straight[0]  # bumping a wall leaves the state as it was


def test_expert_wins_every_board_through_the_rollout_engine_in_a_few_tokens_a_turn() -> None:
    tasks = get_env("keydoor-compact").tasks(40, seed=3)
    assert all(MIN_PATH <= t.data["shortest"] <= MAX_PATH < MAX_TURNS for t in tasks)
    spec = RolloutSpec(env="keydoor-compact", policy={"name": "expert"}, tasks=tasks)
    trajectories = run_rollout(spec)
    assert [t.outcome.reward for t in trajectories] == [1.0] * len(tasks)
    for t, task in zip(trajectories, tasks, strict=True):
        turns = [m for m in t.messages if m.role is Role.ASSISTANT]
        assert len(turns) == task.data["shortest"]
        assert all(m.state_key for m in turns)
    # The same boards as keydoor plays them (the rendered board after every move, tool calls):
    # the whole context the model sees, token for token.
    full_tasks = [
        t.model_copy(update={"prompt": keydoor.KeyBoard.from_task(t).render()}) for t in tasks
    ]
    full = run_rollout(RolloutSpec(env="keydoor", policy={"name": "expert"}, tasks=full_tasks))
    assert [t.outcome.reward for t in full] == [1.0] * len(tasks)
    compact_tokens, full_tokens = context_tokens(trajectories), context_tokens(full)
    assert compact_tokens * 3 < full_tokens  # 264 against 948 when written
    assert max(len(t.messages) for t in trajectories) <= 2 + 2 * MAX_PATH


def context_tokens(trajectories: list[Trajectory]) -> float:
    """Mean tokens of an episode's whole context."""
    return sum(len(m.token_ids or ()) for t in trajectories for m in t.messages) / len(trajectories)


def test_boards_are_keydoors_and_the_splits_never_share_one() -> None:
    train = keydoor_compact.generate_tasks(60, seed=0)
    test = keydoor_compact.generate_tasks(20, seed=0, split="test")
    assert not {t.id for t in train} & {t.id for t in test}
    for task in train[:10]:
        board = KeyBoard.from_task(task)
        assert len(board.shortest_path() or []) == task.data["shortest"]
        assert task.prompt == observe(board)
