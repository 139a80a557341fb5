"""Layer 7, above the gateway: agent programs as rollouts. Any program, in any framework, run once per task x
sample against its own session of the gateway (``trajforge.serve``), as the episodes of a
``RolloutSpec`` that ``open_rollout`` drives like every other rollout (resume, store, hooks,
progress).

- ``program`` — the contract with the program: how it is started and told its session and
  task, its exit, its printed reward; ``launch_here`` runs it in this process tree;
- ``runner`` — ``AgentRunner``, the ``EpisodeRunner`` that plays each episode as one run;
- ``ray_launch`` — the programs as Ray tasks (imports ray; loaded only for ``ray``).
"""

from __future__ import annotations

from trajforge.agent_programs.program import AgentExit, AgentLauncher, agent_argv, launch_here
from trajforge.agent_programs.runner import AgentRunner, agent_runners

__all__ = [
    "AgentExit",
    "AgentLauncher",
    "AgentRunner",
    "agent_argv",
    "agent_runners",
    "launch_here",
]
