"""Distilling memory items from trajectories, successes and failures alike (ReasoningBank,
Ouyang et al. 2025: lessons from both, each kept with where it came from).

``distil_rules`` fills templates from the trajectory itself: what the agent did, how it ended,
the tool errors it met. ``PolicyDistiller`` asks any policy to write the item as one JSON
object; a reply that is not one is retried and then skipped (counted), never guessed.
``build_memory`` is what ``trajforge memory build`` and an experiment's ``memory`` stage both
run: stored episodes distilled by either, written as a memory file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trajforge.judge import render_trajectory
from trajforge.memory.items import MemoryItem, MemoryKind, write_memory
from trajforge.policy import Policy, SamplingParams, load_policy
from trajforge.schema import Message, Role, Trajectory, is_success
from trajforge.store import TrajectoryStore

RULES = "rules"
HEAD_WORDS = 10
MAX_STEP_CHARS = 60
MAX_LESSON_CHARS = 400
MAX_WHEN_CHARS = 300
_OBJECT = re.compile(r"\{.*\}", re.S)
FIELDS = ("title", "applies_when", "lesson")


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _steps(traj: Trajectory) -> list[str]:
    """Each assistant turn in a few words: its tool calls, else its reply."""
    steps = []
    for m in traj.messages:
        if m.role is not Role.ASSISTANT:
            continue
        calls = [f"{c.name}({json.dumps(c.arguments, sort_keys=True)})" for c in m.tool_calls]
        steps.append(_clip("; ".join(calls) if calls else m.text or "", MAX_STEP_CHARS))
    return steps


def _tool_errors(traj: Trajectory) -> list[str]:
    return [
        _clip(m.text or "", MAX_STEP_CHARS)
        for m in traj.messages
        if m.role is Role.TOOL and (m.text or "").startswith("Error")
    ]


def succeeded(traj: Trajectory) -> bool:
    return is_success(traj.outcome.status, traj.outcome.reward)


def distil_rules(traj: Trajectory) -> MemoryItem:
    """The templated item of one trajectory: what worked, or what did not and how it ended."""
    head = " ".join(traj.task.prompt.split()[:HEAD_WORDS])
    steps = " -> ".join(_steps(traj)) or "no action"
    ok = succeeded(traj)
    if ok:
        title = f"Worked: {head}"
        lesson = f"This sequence reached the goal: {steps}."
    else:
        how = traj.outcome.reason or traj.outcome.error or traj.outcome.status.value
        errors = _tool_errors(traj)
        met = f" It met: {errors[-1]}." if errors else ""
        title = f"Failed: {head}"
        lesson = f"Avoid repeating this ({how}, reward {traj.outcome.reward}): {steps}.{met}"
    return MemoryItem(
        id=f"mem-{traj.id}",
        env=traj.env or traj.task.env or "-",
        title=_clip(title, 120),
        applies_when=_clip(traj.task.prompt, MAX_WHEN_CHARS),
        lesson=_clip(lesson, MAX_LESSON_CHARS),
        kind=MemoryKind.SUCCESS if ok else MemoryKind.FAILURE,
        sources=[traj.id],
        distiller=RULES,
    )


def distil_prompt(traj: Trajectory) -> list[Message]:
    """What a policy distiller reads: the conversation, how it ended, and the item to write."""
    convo, _ = render_trajectory(traj, 4000)
    verdict = "succeeded" if succeeded(traj) else "failed"
    system = (
        "You distil reusable lessons from an agent's attempt at a task. Answer with exactly one "
        'JSON object with the keys "title" (a few words), "applies_when" (the kind of task the '
        'lesson helps with) and "lesson" (what to do or avoid next time), and nothing else.'
    )
    user = f"Task: {traj.task.prompt}\n\nThe attempt {verdict}.\n\n{convo}\n\nYour JSON object:"
    return [Message(role=Role.SYSTEM, content=system), Message(role=Role.USER, content=user)]


def parse_item_fields(text: str) -> dict[str, str] | None:
    """The three fields from a distiller's reply, or None when it is not such an object."""
    match = _OBJECT.search(text)
    if match is None:
        return None
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or any(
        not isinstance(data.get(f), str) or not data[f].strip() for f in FIELDS
    ):
        return None
    return {f: data[f].strip() for f in FIELDS}


@dataclass
class PolicyDistiller:
    """A policy writes each item; ``skipped`` counts the trajectories it gave no item for."""

    policy: Policy
    max_retries: int = 1
    skipped: int = 0

    async def __call__(self, traj: Trajectory) -> MemoryItem | None:
        sampling = SamplingParams(temperature=0.0, max_new_tokens=256)
        for attempt in range(self.max_retries + 1):
            session = self.policy.start_session(distil_prompt(traj), [], task=traj.task)
            reply = await self.policy.respond(session, sampling, turn=attempt)
            fields = parse_item_fields(reply.text or "")
            if fields is not None:
                base = distil_rules(traj)
                return base.model_copy(
                    update={
                        "title": _clip(fields["title"], 120),
                        "applies_when": _clip(fields["applies_when"], MAX_WHEN_CHARS),
                        "lesson": _clip(fields["lesson"], MAX_LESSON_CHARS),
                        "distiller": self.policy.name,
                    }
                )
        self.skipped += 1
        return None


def stored_episodes(
    db: TrajectoryStore, runs: Sequence[str | None], env: str | None = None
) -> list[Trajectory]:
    """The episodes of ``runs`` (``None``: every run) in ``db``, of ``env`` when given: each
    episode's own side, never a simulated user's linked to it."""
    return [t for r in runs for t in db.query(run=r, env=env) if t.sample_index is not None]


async def distil(
    trajectories: Sequence[Trajectory], distiller: str
) -> tuple[list[MemoryItem], int]:
    """The items ``distiller`` (``rules`` or a policy spec) writes for ``trajectories``, and
    how many it gave none for."""
    if distiller == RULES:
        return [distil_rules(t) for t in trajectories], 0
    policy = load_policy(distiller)
    try:
        writer = PolicyDistiller(policy)
        items = [item for t in trajectories if (item := await writer(t)) is not None]
        return items, writer.skipped
    finally:
        await policy.close()


@dataclass(frozen=True)
class BuiltMemory:
    """What ``build_memory`` wrote."""

    trajectories: int
    items: int
    from_successes: int
    from_failures: int
    skipped: int
    """Trajectories the distiller gave no item for."""
    successes_seen: int

    def text(self, out: Path) -> str:
        """One line: the items written, where from and where to."""
        return (
            f"{self.items} memory items ({self.from_successes} from successes, "
            f"{self.from_failures} from "
            f"failures) from {self.trajectories} trajectories written to {out}"
            + (f"; the distiller gave no item for {self.skipped}" if self.skipped else "")
        )


async def build_memory(
    trajectories: Sequence[Trajectory], distiller: str, out: Path
) -> BuiltMemory:
    """Distil ``trajectories`` with ``distiller`` into the memory file ``out`` (replaced)."""
    items, skipped = await distil(trajectories, distiller)
    write_memory(out, items)
    wins = sum(i.kind is MemoryKind.SUCCESS for i in items)
    return BuiltMemory(
        trajectories=len(trajectories),
        items=len(items),
        from_successes=wins,
        from_failures=len(items) - wins,
        skipped=skipped,
        successes_seen=sum(succeeded(t) for t in trajectories),
    )
