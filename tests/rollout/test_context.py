"""Context policies: episodes kept within a token budget by rewriting their history, each
rewrite a new token-exact segment of the episode; a prompt that cannot fit ends the episode
with the reason, never a silent cut."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rollout_doubles import make_tasks, run_live

from context_doubles import PAGES, PagesEnv, chatter, folder, looker, summariser
from trajforge.envs.base import Env
from trajforge.envs.builtin import keydoor_compact
from trajforge.envs.registry import get_env
from trajforge.formats.tool_calls import format_tool_call
from trajforge.policy.check import MismatchKind, check_segments, check_trajectories
from trajforge.policy.forced import ForcedTurns
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.rollout import (
    ContextSpec,
    EndReason,
    Limits,
    RolloutError,
    RolloutSpec,
    Sampling,
    TaskSample,
    run_rollout,
)
from trajforge.rollout.context import FOLD, FOLD_HEADER, SUMMARY_HEADER
from trajforge.rollout.multiseat import MultiSeatRunner, scripted_seat
from trajforge.schema import ExactnessKind, Message, OutcomeStatus, Role, Task, Trajectory
from trajforge.store.sqlite import TrajectoryStore

TURN = 40
BUDGET = 650


def _episode(
    make_env: Callable[[], Env],
    policy: Any,
    context: ContextSpec,
    store: TrajectoryStore,
    **fields: Any,
) -> tuple[Trajectory, list[Trajectory]]:
    """The episode and its segments in order (the episode last)."""
    (episode,) = run_live(
        make_env,
        policy,
        make_tasks(1),
        store=store,
        run_id="r",
        context=context,
        sampling=fields.pop("sampling", Sampling(max_new_tokens=TURN)),
        limits=Limits(max_turns=20, stop_on_turn_limit=False),
        **fields,
    )
    stored = store.query(run="r")
    segments = sorted(stored, key=lambda t: t.segment.index if t.segment else 0)
    return episode, segments


def _forwards(traj: Trajectory) -> list[int]:
    """The tokens each forward of a segment held: the context up to each sampled turn's end."""
    held, sizes = 0, []
    for message in traj.messages:
        held += len(message.token_ids or ())
        if message.logprobs is not None:
            sizes.append(held)
    return sizes


def _assert_chain(episode: Trajectory, segments: list[Trajectory], renderer: Any) -> None:
    assert segments[-1].id == episode.id and len(segments) > 1
    for index, segment in enumerate(segments):
        assert segment.segment is not None
        assert (segment.segment.episode_id, segment.segment.index) == (episode.id, index)
        assert segment.outcome == episode.outcome
        assert max(_forwards(segment)) <= BUDGET
        if segment.is_earlier_segment:  # it ends with its last forward
            assert segment.num_tokens <= BUDGET
            assert segment.messages[-1].role is Role.ASSISTANT
    for before, after in itertools.pairwise(segments):
        assert after.exactness.kind is ExactnessKind.SPLIT
        assert after.exactness.split_from == before.id
    report = check_trajectories(segments, lambda _: renderer)
    assert report.ok, report.mismatches
    assert report.checked == len(segments)
    assert episode.metadata["context"]["peak_tokens"] <= BUDGET


@pytest.mark.parametrize(
    ("strategy", "options"),
    [
        ("keep_last", {"keep_turns": 1}),
        ("shorten_tools", {"keep_turns": 1, "tool_chars": 20}),
        ("summary", {"keep_turns": 0}),
    ],
)
def test_each_rewrite_keeps_the_episode_within_budget_as_exact_segments(
    tmp_path: Path, strategy: str, options: dict[str, int]
) -> None:
    policy = ScriptedPolicy(looker, load_tokenizer())
    context = ContextSpec(strategy=strategy, budget=BUDGET, **options)
    with TrajectoryStore(tmp_path / "s.db") as store:
        episode, segments = _episode(PagesEnv, policy, context, store)
    assert episode.outcome.status is OutcomeStatus.OK and episode.reward == 1.0
    _assert_chain(episode, segments, policy.renderer)
    # Every page was read once, across the segments: no turn is sampled twice.
    sampled = [m for s in segments for m in s.messages if m.logprobs is not None]
    assert len(sampled) == PAGES + 1
    later = segments[1]
    assert later.messages[0].role is Role.SYSTEM and later.messages[1].content == "task number 0"
    if strategy == "summary":
        assert later.messages[2].text.startswith(SUMMARY_HEADER)
        assert "look" in later.messages[2].text


def test_a_summary_by_the_policy_is_sampled_apart_and_opens_the_next_segment(
    tmp_path: Path,
) -> None:
    policy = ScriptedPolicy(summariser, load_tokenizer())
    context = ContextSpec(strategy="summary", budget=BUDGET, keep_turns=0, summary_by="policy")
    with TrajectoryStore(tmp_path / "s.db") as store:
        episode, segments = _episode(PagesEnv, policy, context, store)
        assert len(store.query()) == len(segments)  # the summariser's session is not stored
    assert episode.outcome.status is OutcomeStatus.OK
    _assert_chain(episode, segments, policy.renderer)
    summary = segments[1].messages[2]
    assert summary.role is Role.USER
    assert summary.text == SUMMARY_HEADER + "I read up to page 2: nothing else matters"


def test_the_agents_fold_replaces_its_history_with_its_summary(tmp_path: Path) -> None:
    policy = ScriptedPolicy(folder, load_tokenizer())
    context = ContextSpec(strategy="fold", budget=BUDGET)
    with TrajectoryStore(tmp_path / "s.db") as store:
        episode, segments = _episode(PagesEnv, policy, context, store)
    assert episode.outcome.status is OutcomeStatus.OK
    _assert_chain(episode, segments, policy.renderer)
    assert [t.name for t in episode.tools] == ["look", FOLD]
    first, second = segments[0], segments[1]
    # The fold ends its segment, unanswered; the next opens on the task and the summary.
    assert first.messages[-1].tool_calls[0].name == FOLD
    assert [m.role for m in second.messages[:3]] == [Role.SYSTEM, Role.USER, Role.USER]
    assert second.messages[2].text == FOLD_HEADER + "read "
    assert second.exactness.rendered_prefix == 3


def test_an_agent_that_does_not_fold_is_cut_with_the_reason(tmp_path: Path) -> None:
    policy = ScriptedPolicy(looker, load_tokenizer())
    context = ContextSpec(strategy="fold", budget=BUDGET)
    with TrajectoryStore(tmp_path / "s.db") as store:
        episode, segments = _episode(PagesEnv, policy, context, store)
    assert len(segments) == 1 and segments[0].segment is None
    assert episode.outcome.status is OutcomeStatus.TRUNCATED
    assert episode.outcome.reason == EndReason.CONTEXT_BUDGET
    assert "the agent did not fold" in (episode.outcome.error or "")
    assert episode.num_tokens + TURN > BUDGET and max(_forwards(episode)) <= BUDGET


def _strays_then_the_expert(task: Task, messages: list[Message]) -> str | None:
    turn = sum(m.role is Role.ASSISTANT for m in messages)
    if turn == 0:
        return format_tool_call("look", {})
    if turn == 1:
        return "<tool_call>{not json</tool_call>"
    return keydoor_compact.expert(task, messages)


def test_a_stray_call_in_an_env_without_tools_is_answered_not_left_open() -> None:
    # keydoor-compact reads plain text; under fold, the fold call is the only tool call a reply
    # can make: any other is answered with an error (the env would leave it unanswered).
    policy = ScriptedPolicy(_strays_then_the_expert, load_tokenizer())
    (episode,) = run_live(
        keydoor_compact.KeyDoorCompactEnv,
        policy,
        keydoor_compact.generate_tasks(1, seed=3),
        context=ContextSpec(strategy="fold", budget=4000),
        limits=Limits(max_turns=20),
    )
    assert episode.outcome.status is OutcomeStatus.OK, episode.outcome.error
    answers = [m for m in episode.messages if m.role is Role.TOOL]
    assert [m.tool_call_id for m in answers] == [
        m.tool_calls[0].id for m in episode.messages[2:5:2]
    ]
    assert answers[0].text == "Error: unknown tool 'look'; available tools: fold"
    assert answers[1].text.startswith("Error: could not parse the tool call:")
    report = check_trajectories([episode], lambda _: policy.renderer)
    assert report.ok and report.checked == 1, report.mismatches


@pytest.mark.parametrize("strategy", ["none", "keep_last"])
def test_a_prompt_that_cannot_fit_fails_the_episode_with_its_token_counts(
    tmp_path: Path, strategy: str
) -> None:
    policy = ScriptedPolicy(looker, load_tokenizer())
    long_task = [Task(id="long", prompt=" ".join(["word"] * 400))]
    context = ContextSpec(strategy=strategy, budget=200)
    with TrajectoryStore(tmp_path / "s.db") as store:
        (episode,) = run_live(PagesEnv, policy, long_task, store=store, context=context, run_id="r")
        assert len(store.query(run="r")) == 1
    assert episode.outcome.status is OutcomeStatus.TRUNCATED
    assert episode.outcome.reason == EndReason.CONTEXT_BUDGET
    held = episode.num_tokens
    assert f"holds {held} tokens" in (episode.outcome.error or "")
    assert "context budget of 200" in (episode.outcome.error or "")
    assert episode.num_turns == 0 and episode.reward == 0.0


def test_the_tiny_model_samples_every_segment_exactly_across_keep_last_and_a_fold(
    tmp_path: Path,
) -> None:
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    sampler = HFPolicy(model, tokenizer)

    def fold_third(task: Task | None, messages: list[Message]) -> str | None:
        turns = sum(m.role is Role.ASSISTANT for m in messages)
        return (
            '<tool_call>{"name": "fold", "arguments": {"summary": "so far"}}</tool_call>'
            if (turns == 2)
            else None
        )

    sampling = Sampling(max_new_tokens=24, temperature=1.0)
    try:
        for strategy, policy in (
            ("keep_last", sampler),
            ("fold", ForcedTurns(sampler, fold_third)),
        ):
            context = ContextSpec(strategy=strategy, budget=BUDGET, keep_turns=1)
            with TrajectoryStore(tmp_path / f"{strategy}.db") as store:
                episode, segments = _episode(
                    lambda: chatter(6), policy, context, store, sampling=sampling
                )
            assert episode.outcome.status is OutcomeStatus.OK, episode.outcome
            _assert_chain(episode, segments, sampler.renderer)
    finally:
        asyncio.run(sampler.close())


def test_check_reports_a_broken_segment_and_a_broken_chain(tmp_path: Path) -> None:
    policy = ScriptedPolicy(looker, load_tokenizer())
    context = ContextSpec(strategy="keep_last", budget=BUDGET, keep_turns=1)
    with TrajectoryStore(tmp_path / "s.db") as store:
        _, segments = _episode(PagesEnv, policy, context, store)
    assert check_segments(segments) == []
    # A token changed in one segment: that segment, and only it, fails.
    first = segments[0]
    tampered = first.model_copy(deep=True)
    ids = tampered.messages[-1].token_ids or []
    ids[0] = ids[0] + 1
    report = check_trajectories([tampered, *segments[1:]], lambda _: policy.renderer)
    assert {m.trajectory_id for m in report.mismatches} == {first.id}
    # A segment missing from the chain, or split from the wrong one, is named.
    missing = check_segments(segments[1:])
    assert [m.kind for m in missing] == [MismatchKind.SEGMENT]
    assert "segment 0 of episode" in missing[0].detail and "0 times" in missing[0].detail
    wrong = segments[-1].model_copy(deep=True)
    wrong.exactness.split_from = "elsewhere"
    found = check_segments([*segments[:-1], wrong])
    assert found and "does not split from" in found[0].detail


def test_a_multi_seat_game_refuses_a_context_policy() -> None:
    entry = get_env("tictactoe")
    assert entry.game is not None
    policies = {s: scripted_seat(entry, "random") for s in ("x", "o")}
    spec = RolloutSpec(
        env="tictactoe",
        tasks=TaskSample(count=1),
        context=ContextSpec(strategy="keep_last", budget=BUDGET),
    )
    with pytest.raises(RolloutError, match=r"spec\.context: a multi-seat game"):
        run_rollout(spec, runner=MultiSeatRunner(entry.game, policies))
