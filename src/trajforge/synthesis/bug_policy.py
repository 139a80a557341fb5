"""Bugs written by a policy instead of the rules (SWE-smith's rewrites by a language model): the
policy reads one function and answers with it rewritten to hold a bug; the answer replaces the
function when it parses as that same function, and the package's tests then decide, as for a
rule's change (``synthesis.bugs``)."""

from __future__ import annotations

import ast
import asyncio
import random
import re
import textwrap

from trajforge.policy import Policy, SamplingParams
from trajforge.schema import Message, Role, Task
from trajforge.synthesis.mutations import Mutation, Span, parses

RULE = "policy"
MAX_NEW_TOKENS = 1024
SYSTEM = (
    "You inject realistic bugs into Python code for a debugging exercise. Rewrite the function "
    "you are given with one subtle bug that its unit tests would catch: change one or two "
    "lines, keep its name and signature. Answer with the whole function in one ```python block "
    "and nothing else."
)
NO_CODE = "the policy's answer holds no function that parses"
OTHER_FUNCTION = "the policy's answer is not the same function"
UNCHANGED = "the policy's answer changes nothing"
_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def _prompt(span: Span) -> list[Message]:
    code = textwrap.dedent(span.text)
    user = f"The function `{span.function}` of {span.file}:\n```python\n{code}```"
    return [Message(role=Role.SYSTEM, content=SYSTEM), Message(role=Role.USER, content=user)]


def read_answer(span: Span, answer: str, file_text: str) -> Mutation | str:
    """The change the policy's ``answer`` makes to ``span`` (a function of ``file_text``),
    indented as the original, or why it makes none."""
    found = _BLOCK.search(answer)
    code = textwrap.dedent(found.group(1) if found else answer)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return NO_CODE
    defined = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if len(defined) != 1:
        return NO_CODE
    if defined[0].name != span.function.rsplit(".", 1)[-1]:
        return OTHER_FUNCTION
    lines = code.splitlines(keepends=True)[defined[0].lineno - 1 : defined[0].end_lineno]
    indent = span.text[: len(span.text) - len(span.text.lstrip())]
    buggy = "".join(indent + line if line.strip() else line for line in lines)
    buggy = buggy if buggy.endswith("\n") else buggy + "\n"
    change = span.changed(RULE, buggy)
    if buggy.strip() == span.text.strip():
        return UNCHANGED
    return change if parses(change.apply(file_text)) else NO_CODE


async def _ask(policy: Policy, spans: list[Span], seed: int) -> list[str]:
    answers = []
    for turn, span in enumerate(spans):
        sampling = SamplingParams(temperature=1.0, max_new_tokens=MAX_NEW_TOKENS, seed=seed + turn)
        messages = _prompt(span)
        task = Task(id=f"bug:{span.file}:{span.function}", prompt=messages[-1].text)
        session = policy.start_session(messages, [], task=task)
        answers.append((await policy.respond(session, sampling, turn=turn)).text or "")
    return answers


def policy_changes(
    policy: Policy, spans: list[Span], texts: dict[str, str], count: int, seed: int
) -> list[Mutation | str]:
    """``count`` answers of ``policy``, one function after another (shuffled by ``seed``),
    each read as a change or why it is none; ``texts`` holds each file's contents."""
    order = list(spans)
    random.Random(f"bug-policy:{seed}").shuffle(order)
    asked = [order[i % len(order)] for i in range(count)] if order else []
    answers = asyncio.run(_ask(policy, asked, seed))
    return [read_answer(s, a, texts[s.file]) for s, a in zip(asked, answers, strict=True)]
