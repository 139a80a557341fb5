"""Checks that an RL step's rollouts were sampled the way the trainer scores them.

The trainer's log-probabilities are those of the policy tempered by the RL config's
``temperature``; an agent program chooses its own sampling, so a program that samples at
another temperature would be trained as if it had not. The gateway records each call's
temperature (``metadata["gateway"]["temperatures"]``) and a mismatch is refused, not trained on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from trajforge.errors import ConfigError
from trajforge.schema import Trajectory


def check_sampled_temperature(trajs: Sequence[Trajectory], temperature: float) -> None:
    """Raise ``ConfigError`` naming the first trajectory a model call of which was sampled at
    another temperature than ``temperature`` (calls the gateway did not record pass)."""
    for traj in trajs:
        sampled = traj.metadata.get("gateway", {}).get("temperatures", [])
        for t in sampled:
            if not math.isclose(t, temperature, rel_tol=0, abs_tol=1e-6):
                raise ConfigError(
                    f"rl.temperature is {temperature:g} but the agent program sampled at {t:g} "
                    f"(trajectory {traj.id}): the trainer scores the policy at the temperature "
                    "the rollouts were sampled at, so make them equal (the program is told it "
                    "as TRAJFORGE_TEMPERATURE)"
                )
