"""What ``trajforge rollout`` and ``trajforge eval`` share: their options (defined once; each
command sets its own defaults) and the ``RolloutSpec`` built from them, checked before a store
is opened. Starting, resuming and running the run is ``command_run.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from trajforge.cli.preflight import check_reachable
from trajforge.distributed import LOCAL, RayOptions
from trajforge.envs import get_env
from trajforge.errors import ConfigError
from trajforge.policy import check_policy_name
from trajforge.precision import Precision
from trajforge.rollout import RolloutSpec

# Where eval's defaults differ from rollout's, the option's help says so.
EnvOption = Annotated[
    str,
    typer.Option("--env", help="Environment: built-in name, module:factory or file.py:factory."),
]
ModelOption = Annotated[
    str,
    typer.Option(
        "--model", help="Policy: embedded, tiny, expert, a model folder, openai:<url>#<model>."
    ),
]
UserOption = Annotated[
    str | None,
    typer.Option(
        "--user",
        help="Simulated user of an env that has one (retail): a policy as --model takes it; "
        "expert is the env's scripted user (the default).",
    ),
]
TasksOption = Annotated[
    int, typer.Option("--tasks", help="How many tasks of the environment to run.")
]
NOption = Annotated[
    int,
    typer.Option(
        "--n", help="Samples per task (they share a group id; eval reports pass@n and pass^n)."
    ),
]
SplitOption = Annotated[
    str,
    typer.Option("--split", help="Task split: train or test (rollout: train, eval: test)."),
]
SeedOption = Annotated[
    int, typer.Option("--seed", help="Seed of the task sample and of every sampling seed.")
]
TemperatureOption = Annotated[
    float,
    typer.Option("--temperature", help="Sampling temperature (rollout: 1.0, eval: 0, greedy)."),
]
MaxTurnsOption = Annotated[
    int | None,
    typer.Option(
        "--max-turns",
        help="Assistant turns per episode (default: the environment's own limit).",
    ),
]
MaxNewTokensOption = Annotated[
    int, typer.Option("--max-new-tokens", help="Tokens per assistant turn.")
]
ConcurrencyOption = Annotated[
    int | None,
    typer.Option("--concurrency", help="Episodes running at once (default: all)."),
]
BatchSizeOption = Annotated[
    int, typer.Option("--batch-size", help="Sequences a local model decodes together.")
]
PrecisionOption = Annotated[
    Precision,
    typer.Option(
        "--precision",
        help="Weights of a local model: auto (bf16 where the hardware has native bf16, "
        "else fp32), fp32 or bf16.",
    ),
]
RunOption = Annotated[
    str | None, typer.Option("--run", help="Name of the new run (default: a fresh id).")
]
ResumeOption = Annotated[
    str | None,
    typer.Option(
        "--resume",
        metavar="RUN",
        help="Continue this run (or a unique prefix of its id) with the settings it was "
        "started with: run only its missing episodes.",
    ),
]

RayOption = Annotated[
    bool,
    typer.Option(
        "--ray",
        help="Play the episodes on Ray actors: a local cluster of this machine's CPUs, or "
        "the one --ray-address names (needs the ray extra).",
    ),
]
RayAddressOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        metavar="ADDRESS",
        help="Join this Ray cluster (auto, host:6379, ray://host:10001); implies --ray.",
    ),
]
RayActorsOption = Annotated[
    int | None,
    typer.Option(
        "--ray-actors", min=1, help="Rollout actors on Ray (default: one per CPU of the cluster)."
    ),
]
# Spec fields whose option is not simply ``--field-name``.
_OPTION_OF_FIELD = {
    "count": "--tasks",
    "name": "--model",
    "tool_timeout_s": "--tool-timeout",
    "episode_timeout_s": "--episode-timeout",
}


def _explain(err: ErrorDetails) -> str:
    ctx = err.get("ctx", {})
    got = err.get("input")
    if err["type"] == "greater_than_equal":
        return f"must be at least {ctx['ge']:g}, got {got:g}"
    if err["type"] == "greater_than":
        return f"must be greater than {ctx['gt']:g}, got {got:g}"
    if err["type"] == "literal_error":
        return f"must be {ctx['expected']}, got {got!r}"
    return str(err["msg"])


def spec_from_options(options: Mapping[str, Any]) -> RolloutSpec:
    """The spec that a fresh run's option values (a command's ``ctx.params``, every option by
    its parameter name) ask for; a bad value is a ``ConfigError`` naming its option
    (``--tasks: must be at least 1, got 0``)."""
    seed = options["seed"]
    data = {
        "env": options["env"],
        "policy": {
            "name": options["model"],
            "batch_size": options["batch_size"],
            "precision": options["precision"],
        },
        "user": None,
        "tasks": {"count": options["tasks"], "split": options["split"], "seed": seed},
        "n": options["n"],
        "limits": {
            "max_turns": options["max_turns"],
            "tool_timeout_s": options.get("tool_timeout"),
            "episode_timeout_s": options.get("episode_timeout"),
        },
        "sampling": {
            "temperature": options["temperature"],
            "max_new_tokens": options["max_new_tokens"],
        },
        "seed": seed,
        "concurrency": options["concurrency"],
        "lockstep": options.get("lockstep", False),
    }
    if options.get("user"):
        data["user"] = {**data["policy"], "name": options["user"]}
    return checked_spec(data)


def checked_spec(data: Mapping[str, Any]) -> RolloutSpec:
    """The spec ``data`` describes, a bad value a ``ConfigError`` naming its option."""
    try:
        spec = RolloutSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        # The last named part of the location: pydantic puts union tags before it.
        field = next((str(p) for p in reversed(err["loc"]) if isinstance(p, str)), "")
        option = _OPTION_OF_FIELD.get(field, "--" + field.replace("_", "-"))
        raise ConfigError(f"{option}: {_explain(err)}") from None
    # Names that name nothing, and bf16 on a machine without it, are refused before the
    # store is opened (or created) and before a run id is printed.
    if spec.env is not None:
        get_env(spec.env)
    for policy in (spec.policy, spec.user):
        if policy is not None:
            check_policy_name(policy.name)
    if spec.policy is not None:
        spec.policy.load_options(field="--precision")
    check_names(spec)
    return spec


def check_names(spec: RolloutSpec) -> None:
    """Refuse an env or policy that names nothing, or a policy or simulated user on a server
    that accepts no connection, before a store is opened or created (or a run id printed)."""
    if spec.env is not None:
        get_env(spec.env)
    for ref, option in ((spec.policy, "--model"), (spec.user, "--user")):
        if ref is not None:
            try:
                check_policy_name(ref.name)
            except ConfigError as exc:
                raise ConfigError(f"{option}: {exc}") from None
            check_reachable(ref.name, option)


def ray_options(options: Mapping[str, Any]) -> RayOptions | None:
    """Where ``--ray``, ``--ray-address`` and ``--ray-actors`` ask the episodes to be played
    (``None``: in this process)."""
    address: str | None = options.get("ray_address")
    if not options.get("ray") and address is None:
        if options.get("ray_actors") is not None:
            raise ConfigError("--ray-actors: the episodes run on Ray only with --ray")
        return None
    return RayOptions(address=address or LOCAL, actors=options.get("ray_actors"))
