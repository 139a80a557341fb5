"""On-policy distillation on the tiny model: each token's advantage is the teacher-student
log-ratio, a teacher that tokenizes otherwise is refused unless mapped, a privileged teacher
reads the student's very tokens after its own opening, a server teacher's prompt
log-probabilities are a local one's, and one step moves the student toward the teacher."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from train_helpers import qa_trajectory, small_rl_config

from trajforge.algos import AdvantageInput, AdvantageOutput, reverse_kl_advantages
from trajforge.errors import ConfigError
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.schema import Role, Trajectory
from trajforge.train.batch import TokenBatch, encode_trajectory
from trajforge.train.config import DistillConfig, parse_config
from trajforge.train.logprobs import TokenLogprobModel, token_logprobs
from trajforge.train.rl import RLTrainer, advantage_input
from trajforge.train.rl.distill import Distiller
from trajforge.train.rl.teachers import EndpointTeacher, ModelScorer


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model of other random weights than the student's, with the same tokenizer."""
    folder = tmp_path_factory.mktemp("teacher")
    model, tok = tiny_model_and_tokenizer(seed=1)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _logprobs(model: Any, rows: Sequence[list[int]], masks: Sequence[list[bool]]) -> list[list[float]]:  # fmt: skip
    """The masked tokens' log-probabilities under ``model``, one row at a time."""
    out = []
    for ids, mask in zip(rows, masks, strict=True):
        t = torch.tensor([ids])
        with torch.no_grad():
            lp = token_logprobs(model, t, torch.ones_like(t), torch.tensor([mask])).logprobs
        out.append(lp[0].tolist())
    return out


def _batch(tok: Any) -> list[Trajectory]:
    return [
        qa_trajectory(tok, "What is 2 plus 3?", "It is 5.", group_id="g", reward=1.0),
        qa_trajectory(tok, "What is 2 plus 3?", "Six.", group_id="g", reward=0.0, tool_result="6"),
    ]


def _advantages(distiller: Distiller, trajs: list[Trajectory]) -> AdvantageOutput:
    """The distiller's advantages in the layout the update collates ``trajs`` into."""
    full = TokenBatch.collate([encode_trajectory(t) for t in trajs])
    return distiller.advantages(trajs, advantage_input(trajs, full.token_turn_index))


def test_reverse_kl_advantage_is_the_negated_log_ratio_on_the_mask() -> None:
    student = torch.tensor([[0.0, -1.0, -2.0], [-0.5, -0.25, 0.0]])
    teacher = torch.tensor([[0.0, -1.5, -1.0], [-3.0, -0.25, -9.0]])
    mask = torch.tensor([[False, True, True], [True, True, False]])
    adv = reverse_kl_advantages(student, teacher, mask, coef=2.0)
    assert torch.equal(adv, torch.tensor([[0.0, -1.0, 2.0], [-5.0, 0.0, 0.0]]))


def test_each_token_advantage_equals_the_teacher_student_log_ratio(
    tmp_path: Path, teacher_dir: Path
) -> None:
    cfg = small_rl_config(tmp_path, distill={"teacher": str(teacher_dir)})
    trainer = RLTrainer(cfg)
    assert trainer.distiller is not None
    trajs = _batch(trainer.parts.tokenizer)
    out = _advantages(trainer.distiller, trajs)
    teacher = tiny_model_and_tokenizer(seed=1)[0]
    for row, traj in enumerate(trajs):
        seq = encode_trajectory(traj)
        t_lp = _logprobs(teacher, [seq.input_ids], [seq.loss_mask])[0]
        for pos, on in enumerate(seq.loss_mask):
            got = float(out.token_advantages[row, pos])
            if on:  # the student's recorded log-probability against the teacher's
                assert got == pytest.approx(-(seq.old_logprobs[pos] - t_lp[pos]), abs=1e-5)
            else:
                assert got == 0.0
    assert out.metrics["distill_reverse_kl"] == pytest.approx(-out.metrics["distill_adv_mean"])


def test_a_teacher_that_tokenizes_otherwise_is_refused_unless_mapped(
    tmp_path: Path, teacher_dir: Path
) -> None:
    model, shared = tiny_model_and_tokenizer(seed=1)
    tok = copy.deepcopy(shared)  # the loaded tokenizer is shared by every model of the process
    tok.add_tokens(["<distill-only-token>"])
    other = tmp_path / "other"
    model.save_pretrained(other)
    tok.save_pretrained(other)
    cfg = small_rl_config(tmp_path / "run", distill={"teacher": str(other)})
    with pytest.raises(ConfigError, match="tokenizes unlike the student") as refused:
        RLTrainer(cfg)
    assert "\n" not in str(refused.value) and "token_map" in str(refused.value)
    identity = tmp_path / "map.json"
    identity.write_text(json.dumps({str(i): i for i in range(len(tok))}))
    mapped = small_rl_config(
        tmp_path / "mapped", distill={"teacher": str(other), "token_map": str(identity)}
    )
    assert RLTrainer(mapped).distiller is not None


def test_a_privileged_teacher_reads_the_student_tokens_after_its_own_opening(
    tmp_path: Path,
) -> None:
    cfg = small_rl_config(tmp_path, distill={"teacher": "self", "privileged": "answer"})
    trainer = RLTrainer(cfg)
    distiller = trainer.distiller
    assert distiller is not None
    tok = trainer.parts.tokenizer
    traj = _batch(tok)[1]
    traj = traj.model_copy(update={"task": traj.task.model_copy(update={"answer": 5})})
    seq = encode_trajectory(traj)
    row = distiller.teacher_row(traj, seq.input_ids)
    first = next(i for i, m in enumerate(traj.messages) if m.role is Role.ASSISTANT)
    opening = sum(len(m.token_ids or ()) for m in traj.messages[:first])
    # Every token from the first assistant turn on is the student's, shifted by the offset.
    assert row.ids[opening + row.offset :] == seq.input_ids[opening:]
    assert "the correct final answer is 5" in tok.decode(row.ids[: opening + row.offset])
    out = _advantages(distiller, [traj])
    masks = [[False] * len(row.ids)]
    for pos, on in enumerate(seq.loss_mask):
        masks[0][pos + row.offset] = on
    t_lp = _logprobs(trainer.parts.model, [row.ids], masks)[0]
    pos = next(p for p, on in enumerate(seq.loss_mask) if on)
    expected = -(seq.old_logprobs[pos] - t_lp[pos + row.offset])
    assert float(out.token_advantages[0, pos]) == pytest.approx(expected, abs=1e-5)
    no_answer = _batch(tok)[0]
    with pytest.raises(Exception, match="has no answer"):
        distiller.teacher_row(no_answer, encode_trajectory(no_answer).input_ids)


def _server(model: Any, tok: Any, decoded: Any) -> httpx.MockTransport:
    """An OpenAI-compatible ``/completions`` that echoes each prompt's token log-probabilities."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert body["echo"] is True and body["logprobs"] == 0
        choices = []
        for index, ids in enumerate(body["prompt"]):
            [lp] = _logprobs(model, [ids], [[p > 0 for p in range(len(ids))]])
            values: list[float | None] = [None, *lp[1:], -0.5]  # and the one generated token
            tokens = [decoded(tok, i) for i in ids] + ["x"]
            choices.append({"index": index, "logprobs": {"token_logprobs": values, "tokens": tokens}})  # fmt: skip
        return httpx.Response(200, json={"choices": choices[::-1]})

    return httpx.MockTransport(handle)


def test_a_server_teacher_scores_as_the_same_model_run_here() -> None:
    model, tok = tiny_model_and_tokenizer(seed=1)
    rows = [encode_trajectory(t) for t in _batch(tok)]
    ids, masks = [s.input_ids for s in rows], [s.loss_mask for s in rows]
    local = ModelScorer(TokenLogprobModel(model), device=torch.device("cpu"), pad_token_id=0, temperature=1.0, max_batch_size=1)  # fmt: skip

    def decode(ids: list[int]) -> str:
        return str(tok.decode(ids))

    client = httpx.Client(transport=_server(model, tok, lambda t, i: t.decode([i])))
    remote = EndpointTeacher("openai:http://teacher/v1#t", max_batch_size=2, timeout_s=5, decode=decode, client=client)  # fmt: skip
    for got, want in zip(remote.score(ids, masks), local.score(ids, masks), strict=True):
        assert got == pytest.approx(want, abs=1e-5)
    other = httpx.Client(transport=_server(model, tok, lambda t, i: f"<{i}>"))
    wrong = EndpointTeacher("openai:http://teacher/v1#t", max_batch_size=2, timeout_s=5, decode=decode, client=other)  # fmt: skip
    with pytest.raises(ConfigError, match="another tokenizer"):
        wrong.score(ids, masks)


def test_an_opd_step_moves_the_student_toward_the_teacher(tmp_path: Path, teacher_dir: Path) -> None:  # fmt: skip
    cfg = small_rl_config(
        tmp_path,
        distill={"teacher": str(teacher_dir)},
        max_new_tokens=16,
        optim={"lr": 1e-3},
        recompute_old_logprobs=True,
    )
    trainer = RLTrainer(cfg)
    distiller = trainer.distiller
    assert distiller is not None
    seen: list[list[Trajectory]] = []
    scores = distiller.advantages

    def recorded(trajs: Sequence[Trajectory], inp: AdvantageInput) -> AdvantageOutput:
        seen.append(list(trajs))
        return scores(trajs, inp)

    distiller.advantages = recorded  # type: ignore[method-assign]
    before = {k: v.clone() for k, v in trainer.parts.model.state_dict().items()}
    [metrics] = trainer.train().history
    assert metrics["distill_reverse_kl"] != 0 and metrics["trained_trajectories"] == 4
    [trajs] = seen
    seqs = [encode_trajectory(t) for t in trajs]
    rows, masks = [s.input_ids for s in seqs], [s.loss_mask for s in seqs]
    teacher = _logprobs(tiny_model_and_tokenizer(seed=1)[0], rows, masks)
    after = _logprobs(trainer.parts.model, rows, masks)
    model = trainer.parts.model
    model.load_state_dict(before)
    start = _logprobs(model, rows, masks)

    def gap(student: list[list[float]]) -> float:
        pairs = [
            (s, t)
            for srow, trow, mrow in zip(student, teacher, masks, strict=True)
            for s, t, on in zip(srow, trow, mrow, strict=True)
            if on
        ]
        return sum((s - t) ** 2 for s, t in pairs) / len(pairs)

    # The advantage -(log p_s - log p_t) is the descent direction of (log p_s - log p_t)^2 / 2.
    assert gap(after) < gap(start)


def test_a_distill_config_needs_a_teacher_and_refuses_a_silent_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="distill"):
        parse_config({"output_dir": str(tmp_path)}, DistillConfig)
    with pytest.raises(ConfigError, match="every advantage 0"):
        parse_config({"distill": {"teacher": "self"}}, DistillConfig)
    with pytest.raises(ConfigError, match="set refill: false"):
        parse_config(
            {"distill": {"teacher": "tiny"}, "difficulty": {"refill": True}}, DistillConfig
        )
    with pytest.raises(ConfigError, match="leave out context"):
        parse_config(
            {"distill": {"teacher": "tiny"}, "context": {"strategy": "keep_last", "budget": 512}},
            DistillConfig,
        )
