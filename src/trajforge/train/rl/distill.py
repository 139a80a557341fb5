"""On-policy distillation inside the RL step: the advantages of a step's episodes are the
teacher's per-token reverse KL (``algos.reverse_kl_advantages``) plus ``outcome_weight`` times
the estimator's, so the rest of the update (the policy loss, its epochs, importance weights) is
RL's own. ``Distiller.advantages`` takes the place of the estimator in ``update.update``.

The student's log-probability of each token is the one recorded when it was sampled (the
trainer's forward recomputes it for an episode that has none); the teacher reads the same ids,
after the task's opening re-rendered with privileged context when it is told some (the answer
key, the expert's plan), so every student token is scored in the very context the student
produced it in, the opening aside.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trajforge.algos import (
    AdvantageInput,
    AdvantageOutput,
    compute_advantages,
    reverse_kl_advantages,
    reverse_kl_mean,
)
from trajforge.errors import ConfigError, DataError
from trajforge.policy import ChatRenderer
from trajforge.schema import ExpertFn, Message, Role, Trajectory
from trajforge.train.batch import TokenSequence, encode_trajectory
from trajforge.train.config import RLConfig
from trajforge.train.model import TrainParts
from trajforge.train.rl.distill_config import distill_problem
from trajforge.train.rl.distill_settings import DistillSettings, Privileged
from trajforge.train.rl.teachers import (
    ModelScorer,
    TokenScorer,
    build_teacher,
    load_token_map,
    map_tokens,
)

PRIVILEGED_HEADER = "Privileged context (the student does not see this):"


@dataclass
class TeacherRow:
    """One episode as the teacher reads it: its ids, and where the student's token ``t`` sits
    in them (``t + offset``)."""

    ids: list[int]
    offset: int


class Distiller:
    """Scores a step's episodes with the teacher and turns the scores into advantages."""

    def __init__(self, cfg: RLConfig, parts: TrainParts, expert: ExpertFn) -> None:
        assert cfg.distill is not None  # the trainer builds one only for a config with it
        if problem := distill_problem(cfg):
            raise ConfigError(problem)
        self.cfg = cfg
        self.settings: DistillSettings = cfg.distill
        self.expert = expert
        self.renderer = ChatRenderer(parts.tokenizer)
        self.token_map = (
            load_token_map(self.settings.token_map) if self.settings.token_map else None
        )
        # Logprobs of the tempered policy the rollouts sampled from (greedy rollouts: T = 1).
        temperature = cfg.temperature if cfg.temperature > 0 else 1.0
        self.teacher: TokenScorer = build_teacher(
            self.settings, parts, temperature, mapped=self.token_map is not None
        )
        self.student = ModelScorer(
            parts.logprob_model,
            device=parts.device,
            pad_token_id=parts.pad_token_id,
            temperature=temperature,
            max_batch_size=self.settings.max_batch_size,
            autocast=parts.accelerator.autocast,
        )

    def advantages(self, trajs: Sequence[Trajectory], inp: AdvantageInput) -> AdvantageOutput:
        """``outcome_weight`` x the estimator's advantages + the teacher's reverse-KL
        advantages, in ``inp``'s token layout (the step's batch, collated as the update
        collates it)."""
        cfg, settings = self.cfg, self.settings
        outcome = compute_advantages(cfg.estimator, inp, **cfg.estimator_kwargs)
        seqs = [
            encode_trajectory(
                t, max_length=cfg.max_seq_len, mask_rendered=True, through_last_turn=True
            )
            for t in trajs
        ]
        width = inp.token_turn_index.shape[1]
        mask = _padded([s.loss_mask for s in seqs], width, False).bool()
        mask &= inp.token_turn_index >= 0
        student = _padded(self._student_logprobs(seqs), width, 0.0)
        teacher = _padded(self.teacher_logprobs(trajs, seqs), width, 0.0)
        distill = reverse_kl_advantages(student, teacher, mask, coef=settings.coef)
        token_adv = settings.outcome_weight * outcome.token_advantages.float() + distill
        values = token_adv[mask]
        metrics = {
            **outcome.metrics,
            "adv_mean": float(values.mean()) if values.numel() else 0.0,
            "adv_std": float(values.std(unbiased=False)) if values.numel() else 0.0,
            "distill_reverse_kl": reverse_kl_mean(student, teacher, mask),
            "teacher_logprob_mean": float(teacher[mask].mean()) if values.numel() else 0.0,
            "distill_adv_mean": float(distill[mask].mean()) if values.numel() else 0.0,
        }
        return AdvantageOutput(
            token_advantages=token_adv,
            turn_advantages=settings.outcome_weight * outcome.turn_advantages.float(),
            metrics=metrics,
        )

    def teacher_logprobs(
        self, trajs: Sequence[Trajectory], seqs: Sequence[TokenSequence]
    ) -> list[list[float]]:
        """Per episode, the teacher's log-probability of each student token (0 off the mask),
        in the student's layout."""
        rows = [self.teacher_row(t, s.input_ids) for t, s in zip(trajs, seqs, strict=True)]
        masks = []
        for row, s in zip(rows, seqs, strict=True):
            m = [False] * len(row.ids)
            for t, on in enumerate(s.loss_mask):
                m[t + row.offset] = on
            masks.append(m)
        ids = [map_tokens(r.ids, self.token_map) if self.token_map else r.ids for r in rows]
        scored = self.teacher.score(ids, masks)
        return [
            values[row.offset : row.offset + len(s)]
            for values, row, s in zip(scored, rows, seqs, strict=True)
        ]

    def teacher_row(self, traj: Trajectory, ids: list[int]) -> TeacherRow:
        """``ids`` as the teacher reads them: as they are, or with the opening (the messages
        before the first assistant turn) re-rendered with the privileged context after it."""
        if self.settings.privileged is Privileged.NONE:
            return TeacherRow(ids, 0)
        first = next((i for i, m in enumerate(traj.messages) if m.role is Role.ASSISTANT), None)
        if first is None:
            return TeacherRow(ids, 0)
        opening = traj.messages[:first]
        told = Message(role=Role.USER, content=self.privileged_text(traj, opening))
        text = self.renderer.render_text([*opening, told], traj.tools, add_generation_prompt=True)
        lead = self.renderer.encode(text)
        stored = sum(len(m.token_ids or ()) for m in opening)
        return TeacherRow(lead + ids[stored:], len(lead) - stored)

    def privileged_text(self, traj: Trajectory, opening: list[Message]) -> str:
        """What the teacher is told of ``traj``'s task that the student was not."""
        task = traj.task
        if self.settings.privileged is Privileged.ANSWER:
            if task.answer is None:
                raise DataError(
                    f"distill.privileged: answer: task {task.id} has no answer to tell the teacher"
                )
            return f"{PRIVILEGED_HEADER} the correct final answer is {task.answer}."
        plan = self.expert(task, list(opening))
        if plan is None:
            raise DataError(
                f"distill.privileged: expert: the env's expert has no reply for task {task.id}"
            )
        return f"{PRIVILEGED_HEADER} an expert's first reply here would be:\n{plan}"

    def _student_logprobs(self, seqs: Sequence[TokenSequence]) -> list[list[float]]:
        """The sampler's recorded log-probabilities; the trainer's own forward for the
        episodes that have none recorded."""
        missing = [k for k, s in enumerate(seqs) if not s.has_old_logprobs]
        out = [list(s.old_logprobs) for s in seqs]
        if missing:
            scored = self.student.score(
                [seqs[k].input_ids for k in missing], [seqs[k].loss_mask for k in missing]
            )
            for k, values in zip(missing, scored, strict=True):
                out[k] = values
        return out


def _padded(
    rows: Sequence[Sequence[float] | Sequence[bool]], width: int, fill: float | bool
) -> torch.Tensor:
    """``rows`` right-padded with ``fill`` to ``width`` as one ``[B, width]`` tensor."""
    out = torch.full((len(rows), width), float(fill), dtype=torch.float32)
    for r, values in enumerate(rows):
        out[r, : len(values)] = torch.tensor([float(v) for v in values], dtype=torch.float32)
    return out
