"""An agent program that compacts its history mid-run, collected and rolled out for RL: its run
is one episode of segments (the last the episode's trajectory, with the sample index), the
run's reward on each, the earlier segments handed to the trainer beside the episode."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from serve_helpers import assert_token_exact

from trajforge.agent_programs import AgentRunner, agent_runners
from trajforge.rollout import RolloutSpec, run_rollout
from trajforge.schema import Segment, Task
from trajforge.serve.gateway import Gateway
from trajforge.store import TrajectoryStore
from trajforge.train.batch import encode_trajectory
from trajforge.train.rl.config import RLConfig
from trajforge.train.rl.runners import AgentRollouts
from trajforge.train.rl.segments import episode_chains, episode_input

AGENT = f"{sys.executable} {Path(__file__).parent / 'agent_program.py'}"
TASK = Task(
    id="t1",
    prompt="Add 1 and 2 and 3?",
    answer=6,
    data={"reward": "post", "compact": "Add 3 and 3? (Earlier you added one and two.)"},
)


def test_a_compacting_run_is_one_episode_of_segments(gateway: Gateway, tmp_path: Path) -> None:
    store = tmp_path / "c.db"
    spec = RolloutSpec(tasks=[TASK], run_id="gw", store=store)
    (episode,) = run_rollout(spec, runner=AgentRunner(AGENT, gateway=gateway))
    assert episode.sample_index == 0 and episode.reward == 1.0
    assert episode.segment == Segment(episode_id=episode.id, index=1)
    with TrajectoryStore(store) as db:
        stored = db.query(run="gw")
        assert db.completed_keys("gw") == {("t1", 0)}
    (earlier,) = [t for t in stored if t.id != episode.id]
    assert earlier.segment == Segment(episode_id=episode.id, index=0)
    assert earlier.sample_index is None and earlier.reward == 1.0
    assert earlier.num_turns == 2 and episode.messages[0].content == TASK.data["compact"]
    assert_token_exact(store)


def test_rl_gets_the_earlier_segments_beside_their_episode(gateway: Gateway) -> None:
    # The runners RL is given, over the (scripted) policy it would train.
    runners = agent_runners(AGENT, None)
    assert runners is not None and runners.metadata["agent"] == AGENT
    rollouts = AgentRollouts(runners, gateway.policy, RLConfig(agent=AGENT))  # type: ignore[arg-type]
    played = asyncio.run(rollouts.rollout(RolloutSpec(tasks=[TASK], n=2, run_id="rl"), step=1))
    episodes = [t for t in played if not t.is_earlier_segment]
    assert sorted(t.sample_index for t in episodes) == [0, 1]  # type: ignore[type-var]
    assert len(played) == 4
    # Each episode's rows in segment order, as a context policy's chains are trained.
    chains = episode_chains(played)
    seqs = [encode_trajectory(t, mask_rendered=True) for t in played]
    inp, _ = episode_input(played, seqs, chains)
    # One row per episode, each sampled turn once: two tool calls, then the answer after the
    # compaction (the last turn it kept was sampled, and is trained, in the earlier segment).
    assert inp.batch_size == 2 and inp.turn_mask.sum(dim=1).tolist() == [3, 3]
    sampled = sum(len(m.token_ids or ()) for t in played for m in t.messages if m.logprobs)
    assert sum(s.num_loss_tokens for s in seqs) == sampled
    assert [[played[r].segment.index for r in chain] for chain in chains] == [[0, 1], [0, 1]]  # type: ignore[union-attr]
