"""A user scorer, named on the command line as ``examples/custom_env/my_scorers.py:exact_total``.

Any function ``(trajectory) -> float | Score``, sync or async, is a scorer: ``trajforge eval
--scorer``, ``trajforge judge --scorer`` and an RL stage's ``scorers:`` all take it.
"""

from trajforge.schema import Trajectory
from trajforge.schema.answers import final_answer, numbers_close, parse_number


def exact_total(trajectory: Trajectory) -> float:
    """1.0 when the last number of the final answer equals the task's answer, else 0.0."""
    answer = final_answer(trajectory.messages)
    value = parse_number(answer) if answer is not None else None
    gold = trajectory.task.answer
    if value is None or gold is None:
        return 0.0
    return 1.0 if numbers_close(value, float(gold)) else 0.0
