"""On-policy multi-turn RL: the trainer, its config, and the reward and advantage input it trains
on.

``trainer.py`` is one step read top to bottom. Where a step's episodes come from is a
``StepRunner`` chosen once when the trainer starts (``runners.py``: this process, Ray actors, an
agent program, a multi-seat game), beside the weights they sample with; the optimisation pass is
the plain function ``update.update`` over a step's batch; ``advantages.py`` holds the one reward
figure (``episode_reward``) and the one ``advantage_input``, which the viewer uses too; a step
that trains nothing says so (``idle.py``). Self-play (``self_play.py``), task revisits
(``task_revisit.py``), replay (``replay.py``) and difficulty filtering with its curriculum
(``difficulty.py``) are RL's alone.

Like ``trajforge.algos``, the names below load their module on first access: reading a config
(``trajforge.train.rl.config``) or the viewer's advantages never imports the trainer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.train.rl.advantages import advantage_input, episode_reward
    from trajforge.train.rl.config import RLConfig
    from trajforge.train.rl.runners import AgentRunners, StepRunner
    from trajforge.train.rl.trainer import RLTrainer

_HOMES = {
    "advantage_input": "advantages",
    "episode_reward": "advantages",
    "RLConfig": "config",
    "AgentRunners": "runners",
    "StepRunner": "runners",
    "RLTrainer": "trainer",
}

__all__ = [
    "AgentRunners",
    "RLConfig",
    "RLTrainer",
    "StepRunner",
    "advantage_input",
    "episode_reward",
]


__getattr__ = lazy_names(__name__, _HOMES)
