"""Layer 7, above the gateway: agent programs as rollouts. Any program, in any framework, run once per task x
sample against its own session of the gateway (``trajforge.serve``), as the episodes of a
``RolloutSpec`` that ``open_rollout`` drives like every other rollout (resume, store, hooks,
progress).

- ``program`` — the contract with the program: how it is started and told its session and
  task, its exit, its printed reward; ``launch_here`` runs it in this process tree;
- ``runner`` — ``AgentRunner``, the ``EpisodeRunner`` that plays each episode as one run;
- ``confine`` — runs confined in the bubblewrap sandbox, in folders of their own; ``relay``
  and ``forwarder`` — the gateway's one address inside; ``harnesses`` — Claude Code, Codex
  and opencode recipes; ``collected`` — the program a collection runs (a command or a harness,
  confined or not), one way for ``collect``, an experiment's stage and RL;
- ``ray_launch`` — the programs as Ray tasks (imports ray; loaded only for ``ray``).
"""

from __future__ import annotations

from trajforge.agent_programs.collected import (
    AGENT_META,
    CONFINE_META,
    HARNESS_META,
    Program,
    ProgramRunners,
    agent_program,
    agent_runners,
    program_metadata,
)
from trajforge.agent_programs.confine import Confinement, RunSetup
from trajforge.agent_programs.harnesses import HARNESSES, collected_program, harness
from trajforge.agent_programs.program import AgentExit, AgentLauncher, agent_argv, launch_here
from trajforge.agent_programs.runner import AgentRunner

__all__ = [
    "AGENT_META",
    "CONFINE_META",
    "HARNESSES",
    "HARNESS_META",
    "AgentExit",
    "AgentLauncher",
    "AgentRunner",
    "Confinement",
    "Program",
    "ProgramRunners",
    "RunSetup",
    "agent_argv",
    "agent_program",
    "agent_runners",
    "collected_program",
    "harness",
    "launch_here",
    "program_metadata",
]
