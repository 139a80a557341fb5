"""python: small computational problems solved by running code in the sandbox.

Each task's gold answer is computed in-process when the task is generated; the task also carries
a reference program that prints the answer. The expert runs that program with ``run_python``
and answers with what it printed: ``The answer is X.``
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from typing import Any

from trajforge.envs.sandbox import SandboxConfig, SandboxResult, run_python
from trajforge.envs.taskset import TRAIN, generate_unique
from trajforge.envs.tool import Tool, ToolError
from trajforge.envs.tool_env import ERROR_PREFIX, ToolEnv
from trajforge.formats import format_tool_call
from trajforge.schema import Evidence, Message, Role, Task

NAME = "python"
DESCRIPTION = "Computational problems solved by running Python in a sandbox (run_python tool)."
SYSTEM_PROMPT = (
    "Solve the problem by writing Python code and running it with the run_python tool; print "
    "the result. When you know the answer, reply: The answer is X."
)
MAX_STREAM_CHARS = 4000
MAX_EXPERT_ATTEMPTS = 3
WORDS = (
    "apple", "river", "stone", "cloud", "forest", "silver", "garden", "planet", "window",
    "candle", "marble", "harbor", "meadow", "thunder", "lantern", "pepper", "violet", "zephyr",
)  # fmt: skip

Problem = tuple[str, str, int | str]


def _primes_below(n: int) -> list[int]:
    sieve = bytearray([1]) * n
    sieve[:2] = bytes(2)
    for i in range(2, math.isqrt(n) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytes(len(range(i * i, n, i)))
    return [i for i, flag in enumerate(sieve) if flag]


def _sum_primes(rng: random.Random) -> Problem:
    n = rng.randint(100, 20_000)
    code = (
        f"n = {n}\n"
        "sieve = [True] * n\n"
        "sieve[0] = sieve[1] = False\n"
        "for i in range(2, int(n ** 0.5) + 1):\n"
        "    if sieve[i]:\n"
        "        for j in range(i * i, n, i):\n"
        "            sieve[j] = False\n"
        "print(sum(i for i in range(n) if sieve[i]))\n"
    )
    return f"What is the sum of all prime numbers below {n}?", code, sum(_primes_below(n))


def _fibonacci_mod(rng: random.Random) -> Problem:
    n, m = rng.randint(20, 500), rng.choice([97, 1000, 10_007, 65_536, 1_000_000_007])
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    prompt = f"With F(0) = 0 and F(1) = 1, what is the {n}th Fibonacci number F({n}) modulo {m}?"
    code = f"a, b = 0, 1\nfor _ in range({n}):\n    a, b = b, a + b\nprint(a % {m})\n"
    return prompt, code, a % m


def _divisible_count(rng: random.Random) -> Problem:
    n, a, b = rng.randint(1000, 100_000), rng.randint(2, 13), rng.randint(14, 40)
    gold = n // a + n // b - n // math.lcm(a, b)
    prompt = f"How many integers from 1 to {n} (inclusive) are divisible by {a} or by {b}?"
    code = f"print(sum(1 for i in range(1, {n} + 1) if i % {a} == 0 or i % {b} == 0))\n"
    return prompt, code, gold


def _digit_sum_power(rng: random.Random) -> Problem:
    base, exp = rng.choice([2, 3, 7]), rng.randint(50, 600)
    gold = sum(int(d) for d in str(base**exp))
    prompt = f"What is the sum of the decimal digits of {base}**{exp}?"
    return prompt, f"print(sum(int(d) for d in str({base} ** {exp})))\n", gold


def _collatz_steps(rng: random.Random) -> Problem:
    start = rng.randint(10, 100_000)
    n, steps = start, 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    prompt = (
        f"Starting from {start}, repeatedly halve the number if it is even, or replace it by "
        "3n + 1 if it is odd. How many steps does it take to reach 1?"
    )
    code = (
        f"n, steps = {start}, 0\n"
        "while n != 1:\n"
        "    n = n // 2 if n % 2 == 0 else 3 * n + 1\n"
        "    steps += 1\n"
        "print(steps)\n"
    )
    return prompt, code, steps


def _lcm_range(rng: random.Random) -> Problem:
    k = rng.randint(8, 40)
    prompt = f"What is the least common multiple of all integers from 1 to {k}?"
    code = f"import math\nprint(math.lcm(*range(1, {k} + 1)))\n"
    return prompt, code, math.lcm(*range(1, k + 1))


def _reverse_upper(rng: random.Random) -> Problem:
    words = rng.sample(WORDS, rng.randint(2, 4))
    text = "".join(words)
    prompt = (
        f"Take the string '{text}', reverse it and convert it to upper case. What is the result?"
    )
    return prompt, f"print({text!r}[::-1].upper())\n", text[::-1].upper()


def _vowel_count(rng: random.Random) -> Problem:
    sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12)))
    gold = sum(ch in "aeiou" for ch in sentence)
    prompt = f"How many vowels (a, e, i, o, u) are in the text '{sentence}'?"
    return prompt, f"print(sum(ch in 'aeiou' for ch in {sentence!r}))\n", gold


def _sorted_letters(rng: random.Random) -> Problem:
    word = "".join(rng.sample(WORDS, 2))
    gold = "".join(sorted(set(word)))
    prompt = f"List the distinct letters of '{word}' in alphabetical order, as one string."
    return prompt, f"print(''.join(sorted(set({word!r}))))\n", gold


TEMPLATES: tuple[Callable[[random.Random], Problem], ...] = (
    _sum_primes,
    _fibonacci_mod,
    _divisible_count,
    _digit_sum_power,
    _collatz_steps,
    _lcm_range,
    _reverse_upper,
    _vowel_count,
    _sorted_letters,
)


def _make_one(rng: random.Random) -> Task:
    prompt, code, answer = rng.choice(TEMPLATES)(rng)
    return Task(id="draft", prompt=prompt, answer=answer, data={"code": code})


def generate_tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
    """``n`` distinct problems; train and test never share one."""
    return generate_unique(NAME, _make_one, n, seed, split)


_ANSWER = re.compile(r"answer is\s*:?\s*(.+)", re.I)


def parse_answer(text: str) -> str | None:
    """The text after "answer is" (else the last non-empty line), stripped of quotes and a
    trailing period; None when the reply is empty."""
    match = _ANSWER.search(text)
    lines = [line for line in text.strip().splitlines() if line.strip()]
    found = match.group(1).splitlines()[0] if match else (lines[-1] if lines else None)
    if found is None:
        return None
    return found.strip().rstrip(".").strip().strip("`'\"*").strip()


def verify(evidence: Evidence) -> float:
    """1.0 when the final reply's answer equals the gold answer (integers compared as numbers)."""
    task = evidence.task
    found = parse_answer(evidence.answer or "")
    if found is None or task.answer is None:
        return 0.0
    if isinstance(task.answer, int):
        try:
            return 1.0 if int(found.replace(",", "").replace("_", "")) == task.answer else 0.0
        except ValueError:
            return 0.0
    return 1.0 if found == str(task.answer) else 0.0


def _clip(text: str, keep_tail: bool) -> str:
    if len(text) <= MAX_STREAM_CHARS:
        return text
    cut = len(text) - MAX_STREAM_CHARS
    if keep_tail:
        return f"[... {cut} characters cut]\n{text[-MAX_STREAM_CHARS:]}"
    return f"{text[:MAX_STREAM_CHARS]}\n[... {cut} characters cut]"


def format_result(result: SandboxResult) -> str:
    """What the model reads: stdout, then stderr if any; failures raise ``ToolError``."""
    parts = [_clip(result.stdout, keep_tail=False).rstrip("\n")] if result.stdout else []
    if result.stderr:
        parts.append("[stderr]\n" + _clip(result.stderr, keep_tail=True).rstrip("\n"))
    body = "\n".join(parts)
    if not result.ok:
        raise ToolError(f"the code did not finish cleanly ({result.summary()})\n{body}".rstrip())
    return body or "(no output; print the values you need)"


def make_run_python_tool(config: SandboxConfig) -> Tool:
    """The ``run_python`` tool bound to one sandbox configuration."""

    async def run_python_tool(code: str) -> str:
        """Run a Python program in a sandbox (no network, no files outside /tmp) and return
        what it printed.

        Args:
            code: A complete Python program; print the values you want to see.
        """
        return format_result(await run_python(code, config))

    return Tool(run_python_tool, name="run_python")


def expert(task: Task, messages: list[Message]) -> str | None:
    """Run the reference program; answer with its output (retrying a failed run, twice)."""
    results = [m.text for m in messages if m.role is Role.TOOL]
    if results and not results[-1].startswith(ERROR_PREFIX):
        return f"The answer is {results[-1].strip()}."
    if len(results) >= MAX_EXPERT_ATTEMPTS:
        return "I could not run the code, so I cannot give an answer."
    return format_tool_call("run_python", {"code": task.data["code"]})


def make_env(sandbox: SandboxConfig | None = None, **kwargs: Any) -> ToolEnv:
    """The ``python`` environment; ``sandbox`` sets the limits of each run."""
    config = sandbox or SandboxConfig()
    options: dict[str, Any] = {
        "max_turns": 6,
        "tool_timeout": config.timeout_s + 5.0,
        "system_prompt": SYSTEM_PROMPT,
    }
    options.update(kwargs)
    return ToolEnv(
        [make_run_python_tool(config)],
        verifier=verify,
        name=NAME,
        description=DESCRIPTION,
        expert=expert,
        **options,
    )
