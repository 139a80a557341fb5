"""A trained model folder deployed in plain transformers: does it render and call its tool as
it does inside trajforge?

The held-out tasks of an environment (``--env``, ``--split``, ``--tasks``, ``--seed``: the
sample an experiment's eval stage draws) are answered greedily twice, in fp32:

- by trajforge: a rollout of the folder as the eval stage runs it, cut after the first reply
  (``--max-new-tokens`` per reply), which is where the model decides to call the tool or to
  answer in its head;
- by plain transformers, as a user deploying the folder would: ``AutoTokenizer`` and
  ``AutoModelForCausalLM`` from the folder, each task's opening messages (system and user, as
  OpenAI chat dicts) and the environment's tools rendered with
  ``apply_chat_template(messages, tools=..., add_generation_prompt=True)``, ``generate``
  without sampling, and the reply's ``<tool_call>{json}</tool_call>`` read with a regular
  expression and ``json.loads``, not with trajforge.

It reports how many prompts render to the same token ids both ways, each side's tool-call rate
(replies holding a well-formed call of one of the tools), how many tasks get the same decision
and the same reply text, and, last, one JSON line whose headline ``ratio`` is the transformers
tool-call rate over trajforge's.

    python bench/deployed_tool_use.py runs/calculator/rl/final --tasks 100
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trajforge.precision import Precision
from trajforge.rollout import Limits, PolicyRef, RolloutSpec, Sampling, TaskSample, run_rollout
from trajforge.schema import Role, Trajectory

CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def calls_a_tool(text: str, tool_names: set[str]) -> bool:
    """Whether ``text`` holds a ``<tool_call>`` whose JSON names one of ``tool_names``."""
    for body in CALL.findall(text):
        try:
            call = json.loads(body)
        except ValueError:
            continue
        if isinstance(call, dict) and call.get("name") in tool_names:
            return True
    return False


def trajforge_first_replies(args: argparse.Namespace) -> list[Trajectory]:
    spec = RolloutSpec(
        env=args.env,
        policy=PolicyRef(name=str(args.model), precision=Precision.FP32, batch_size=args.batch),
        tasks=TaskSample(count=args.tasks, split=args.split, seed=args.seed),
        limits=Limits(max_turns=1, max_new_tokens=args.max_new_tokens),
        sampling=Sampling(temperature=0.0, max_new_tokens=args.max_new_tokens),
        seed=args.seed,
    )
    return run_rollout(spec)


def opening(traj: Trajectory) -> list[dict[str, Any]]:
    """The messages before the first reply, as OpenAI chat dicts."""
    out = []
    for message in traj.messages:
        if message.role is Role.ASSISTANT:
            break
        out.append({"role": message.role.value, "content": message.content})
    return out


def trajforge_prompt_ids(traj: Trajectory) -> list[int]:
    ids: list[int] = []
    for message in traj.messages:
        if message.role is Role.ASSISTANT:
            break
        ids += message.token_ids or []
    return ids


def first_reply(traj: Trajectory, tokenizer: Any) -> tuple[str, bool]:
    """trajforge's first reply's text (its sampled ids, decoded as transformers decodes its
    own) and whether trajforge read a well-formed tool call in it."""
    reply = next(m for m in traj.messages if m.role is Role.ASSISTANT)
    called = any(c.parse_error is None for c in reply.tool_calls)
    return tokenizer.decode(reply.token_ids or [], skip_special_tokens=True), called


def transformers_replies(
    folder: Path, prompts: list[list[int]], max_new_tokens: int, batch: int
) -> list[str]:
    """Greedy replies of plain transformers to ``prompts`` (left-padded batches)."""
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    replies: list[str] = []
    for start in range(0, len(prompts), batch):
        chunk = prompts[start : start + batch]
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=pad,
            )
        replies += tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    return replies


def rendered_ids(tokenizer: Any, messages: list[dict[str, Any]], tools: list[Any]) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True)
    return list(out["input_ids"] if not isinstance(out, list) else out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="a model folder trajforge saved")
    parser.add_argument("--env", default="calculator")
    parser.add_argument("--split", default="test")
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=25)
    args = parser.parse_args()

    trajectories = trajforge_first_replies(args)
    tokenizer = AutoTokenizer.from_pretrained(str(args.model))
    prompts, same_ids = [], 0
    for traj in trajectories:
        ids = rendered_ids(tokenizer, opening(traj), [t.to_openai() for t in traj.tools])
        same_ids += ids == trajforge_prompt_ids(traj)
        prompts.append(ids)
    replies = transformers_replies(args.model, prompts, args.max_new_tokens, args.batch)

    hf_calls = tf_calls = same_decision = same_text = 0
    for traj, reply in zip(trajectories, replies, strict=True):
        text, tf_called = first_reply(traj, tokenizer)
        hf_called = calls_a_tool(reply, {t.name for t in traj.tools})
        hf_calls += hf_called
        tf_calls += tf_called
        same_decision += hf_called == tf_called
        same_text += reply.strip() == text.strip()
    n = len(trajectories)
    result = {
        "bench": "deployed_tool_use",
        "model": str(args.model),
        "env": args.env,
        "tasks": n,
        "same_prompt_ids": same_ids,
        "trajforge_tool_call_rate": round(tf_calls / n, 3),
        "transformers_tool_call_rate": round(hf_calls / n, 3),
        "same_decision": same_decision,
        "same_reply_text": same_text,
        "ratio": round(hf_calls / tf_calls, 3) if tf_calls else None,
    }
    print(
        f"{n} held-out {args.env} tasks: {same_ids}/{n} prompts render to the same ids; tool "
        f"called on the first reply by trajforge {tf_calls}/{n}, by plain transformers "
        f"{hf_calls}/{n}; same decision on {same_decision}/{n}, same reply text on {same_text}/{n}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
