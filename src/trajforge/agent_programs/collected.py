"""What a collection of agent runs runs, made one way for ``trajforge collect``, an
experiment's ``collect`` stage and RL's agent runs (``agent_runners``): a command (``agent``)
or a harness (``harness``), confined or not, and how the run's metadata records it (``agent``,
``harness``, ``confine``: the confinement asked for, ``None`` where the runs are not
confined)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajforge.agent_programs.confine import Confinement, Setup
from trajforge.agent_programs.harnesses import collected_program
from trajforge.agent_programs.runner import AgentRunner, Told
from trajforge.distributed import RayOptions
from trajforge.envs import stored_env_name
from trajforge.policy import TokenPolicy
from trajforge.serve import ChatGateway, Gateway
from trajforge.store import TrajectoryStore

AGENT_META = "agent"
"""The run's metadata key of the program's command line (what ``--resume`` runs again)."""
HARNESS_META = "harness"
CONFINE_META = "confine"
"""The run's metadata keys of its harness and its confinement (``--resume`` keeps both)."""


def program_metadata(
    agent: str | None, harness: str | None, confinement: Confinement | None
) -> dict[str, Any]:
    """What the run's metadata records of the program its runs are."""
    confine = None if confinement is None else confinement.model_dump(mode="json")
    return {AGENT_META: agent, HARNESS_META: harness, CONFINE_META: confine}


@dataclass(frozen=True)
class Program:
    """An agent program as its runs are made: the command, its confinement and its runs'
    setup (``collected_program``), and the run's metadata."""

    command: str
    confinement: Confinement | None
    setup: Setup | None
    metadata: dict[str, Any]

    def runner(
        self,
        *,
        gateway: ChatGateway | None = None,
        ray: RayOptions | None = None,
        told: Told | None = None,
    ) -> AgentRunner:
        """The runner of its runs (``AgentRunner``'s options)."""
        return AgentRunner(
            self.command,
            gateway=gateway,
            ray=ray,
            told=told,
            confine=self.confinement,
            setup=self.setup,
        )

    def record(self, store: Path, run_id: str, metadata: dict[str, Any]) -> None:
        """Add the program to run ``run_id``'s metadata in ``store`` (``metadata``: the run's
        own, where it has none yet)."""
        with TrajectoryStore(store) as db:
            db.set_run(run_id, {**(db.get_run(run_id) or metadata), **self.metadata})


def agent_program(
    agent: str | None, harness: str | None, confine: bool | Confinement | None
) -> Program:
    """The program ``agent`` or the harness ``harness`` (one of them), confined where
    ``confine`` says (``True``: by default; a harness always is).

    Raises:
        ConfigError: as ``collected_program``.
    """
    confinement = Confinement() if confine is True else confine or None
    command, confining, setup = collected_program(agent, harness, confinement)
    return Program(command, confining, setup, program_metadata(agent, harness, confinement))


@dataclass(frozen=True)
class ProgramRunners:
    """What RL plays an agent program's episodes with (``RLTrainer(agent_runner=...)``): per
    step, a runner of the program against a gateway over the live policy, so every model call
    samples from the weights being trained; ``metadata`` goes into each step's run."""

    program: Program
    env: str | None

    @property
    def metadata(self) -> dict[str, Any]:
        return self.program.metadata

    def __call__(self, policy: TokenPolicy) -> AgentRunner:
        gateway = Gateway(policy, None, "", env=stored_env_name(self.env))
        return self.program.runner(gateway=gateway)


def agent_runners(
    agent: str | None, env: str | None, *, harness: str | None = None, confine: bool = False
) -> ProgramRunners | None:
    """The runners of RL's agent program ``agent`` or harness ``harness`` in ``env``, confined
    where ``confine`` says, as ``agent_program`` makes them (``None`` without either: env episodes)."""
    if agent is None and harness is None:
        return None
    return ProgramRunners(agent_program(agent, harness, confine), env)
