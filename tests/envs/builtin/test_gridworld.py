"""gridworld: the BFS expert wins 100 seeded boards, random moves rarely do, states group by key."""

from __future__ import annotations

import asyncio
import random

import pytest

from episodes import play, rewards, state_keys
from trajforge.envs.builtin import gridworld
from trajforge.envs.builtin.gridworld import Board, Status
from trajforge.formats.tool_calls import format_tool_call
from trajforge.schema import ExpertFn, Task

pytestmark = pytest.mark.timeout(120)


def run_all(tasks: list[Task], reply: ExpertFn) -> list[float]:
    return rewards(gridworld.make_env, tasks, reply)


def test_expert_wins_100_seeded_boards() -> None:
    assert run_all(gridworld.generate_tasks(100, seed=0), gridworld.expert) == [1.0] * 100


def test_empty_and_random_policies_score_near_zero() -> None:
    tasks = gridworld.generate_tasks(100, seed=1)
    assert sum(run_all(tasks, lambda t, m: "I don't know.")) == 0.0
    rng = random.Random(0)
    moves = list(gridworld.MOVES)
    rewards = run_all(
        tasks, lambda t, m: format_tool_call("move", {"direction": rng.choice(moves)})
    )
    assert sum(rewards) / len(rewards) <= 0.15


def test_board_moves_walls_holes_goal() -> None:
    board = Board(rows=("S.#", ".HG", "..."), pos=(0, 0))
    same, what = board.move("up")
    assert same == board and "wall" in what
    same, _ = board.move("right")[0].move("right")
    assert same.pos == (0, 1)
    fell, what = board.move("down")[0].move("right")
    assert fell.status is Status.FELL and "hole" in what
    assert board.shortest_path() == ["down", "down", "right", "right", "up"]
    assert board.render() == "@.#\n.HG\n..."


def test_state_key_is_the_board_so_revisited_states_share_a_key() -> None:
    task = gridworld.generate_tasks(1, seed=7)[0]
    path = Board.from_task(task).shortest_path()
    assert path is not None
    back = {"up": "down", "down": "up", "left": "right", "right": "left"}
    plan = [path[0], back[path[0]], *path]
    other_plan = list(path)

    def scripted(moves: list[str]) -> object:
        def reply(t: Task, messages: list[object]) -> str:
            turn = sum(1 for m in messages if getattr(m, "role", None) == "assistant")
            return (
                format_tool_call("move", {"direction": moves[turn]})
                if turn < len(moves)
                else "Done."
            )

        return reply

    def keys(moves: list[str]) -> tuple[list[str | None], float | None]:
        episode = play(gridworld.make_env, task, scripted(moves))
        return state_keys(episode), episode.outcome.reward

    detour, reward = keys(plan)
    direct, reward2 = keys(other_plan)
    assert reward == reward2 == 1.0
    assert detour[0] == detour[2] == direct[0]
    assert detour[1] != detour[0]
    assert detour[3:] == direct[1:]


def test_moves_after_the_game_ends_are_errors() -> None:
    task = gridworld.generate_tasks(1, seed=3)[0]
    env = gridworld.make_env()

    async def go() -> str:
        await env.reset(task)
        for direction in Board.from_task(task).shortest_path() or []:
            await env.call_tool("move", {"direction": direction})
        return await env.call_tool("move", {"direction": "up"})

    assert asyncio.run(go()) == "Error: the game is over: you already reached the goal"
    assert asyncio.run(env.call_tool("move", {"direction": "north"})).startswith(
        "Error: invalid arguments for tool 'move': argument 'direction': expected 'up', 'down', 'left' or 'right'"
    )


def test_several_moves_in_one_turn_apply_in_order_and_match_the_verifier() -> None:
    task = gridworld.generate_tasks(1, seed=11)[0]
    path = Board.from_task(task).shortest_path() or []
    text = "".join(format_tool_call("move", {"direction": d}) for d in path)

    def reply(t: Task, messages: list[object]) -> str:
        return text if len(messages) == 2 else "I reached the goal."

    episode = play(gridworld.make_env, task, reply)  # type: ignore[arg-type]
    results = [m.content for m in episode.messages if m.role == "tool"]
    assert len(results) == len(path) and results[-1].startswith("You reached the goal!")
    assert episode.outcome.reward == 1.0
