"""Self-play in the RL trainer: who sits in each seat, a step's games, and RAE's baselines.

With ``opponent: self`` the policy being trained plays every seat of each game
(``trajforge.rollout.multiseat``) and every seat's trajectory is trained, so one step learns
both roles of a zero-sum game from the same games. With ``opponent: pool`` it plays the
task's seat against earlier weights of itself (snapshots taken every ``snapshot_every``
steps, the starting weights first, the newest ``pool_size`` kept; each step draws one), and
only its own seat is trained, so the opponent it learns to beat does not move while it learns.

On Ray (``ray:``) the actors play whole games, every seat, with their copy of the published
weights (``RayRunner.seated``), and hand back the same per-seat trajectories the local path
makes (both play through ``trajforge.rollout.multiseat.play_game``). The pool's members are
then the weights published at their step, kept in the object store (``RayRunner.snapshot``)
and loaded by each actor the first time it plays one.

Advantages are SPIRAL's role-conditioned ones (``trajforge.algos.rae``): a moving baseline
per game and seat, kept here across steps and saved with the trainer's cursor. The pool is
not saved: a resumed run starts it again from the weights it resumes with.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trajforge.algos import AdvantageInput, AdvantageOutput, rae_advantages
from trajforge.distributed import SeatPlan, Snapshot
from trajforge.envs import EnvEntry
from trajforge.errors import ConfigError
from trajforge.policy import HFPolicy, Policy
from trajforge.rollout import (
    EpisodeRunner,
    MultiSeatRunner,
    RolloutHook,
    RolloutRun,
    RolloutSpec,
    play_by_seat,
    play_facing,
    run_rollout,
)
from trajforge.schema import Trajectory
from trajforge.train.config import SelfPlayOpponent, SelfPlaySettings
from trajforge.train.rl.roles import RoleAdapters, seat_adapters

if TYPE_CHECKING:
    from trajforge.distributed import RayRunner


class _Linked(RolloutHook):
    """Keeps the trajectories recorded beside each episode's own (the other seats')."""

    def __init__(self) -> None:
        self.trajectories: list[Trajectory] = []

    def on_linked_trajectory(self, run: RolloutRun, trajectory: Trajectory) -> None:
        self.trajectories.append(trajectory)


def role_of(traj: Trajectory) -> str:
    """The role a trajectory was played in: its game and seat (``tictactoe:x``)."""
    seat = traj.metadata.get("seat")
    if seat is None:
        raise ConfigError(f"trajectory {traj.id}: no metadata.seat; it is not a game's seat")
    return f"{traj.env}:{seat}"


class SelfPlay:
    """The self-play side of an RL run.

    Args:
        cfg: The run's ``self_play`` settings.
        entry: The game (an env with ``game``).
        seed: The run's seed (which pool member plays a step).
    """

    def __init__(self, cfg: SelfPlaySettings, entry: EnvEntry, seed: int) -> None:
        if entry.game is None:
            raise ConfigError(
                f"self_play: env {entry.name!r} is no multi-seat game "
                "(tictactoe, kuhn-poker, negotiation, nim)"
            )
        self.cfg = cfg
        self.make_game = entry.game
        self.seats = entry.game().seats
        self.seed = seed
        self.baselines: dict[str, float] = {}
        self.pool: list[HFPolicy] = []
        self.remote: RayRunner | None = None
        """The Ray actors that play the games (``None``: this process plays them)."""
        self.remote_pool: list[Snapshot] = []
        """On Ray, the pool: earlier published weights, oldest first."""
        self.seat_adapters = (
            seat_adapters(cfg.per_role, self.seats, entry.name) if cfg.per_role else None
        )
        """Each seat's adapter name under ``per_role`` (else None: one policy plays them all)."""
        self.roles: RoleAdapters | None = None
        """Under ``per_role``, the adapters the seats play with (set by the trainer)."""

    def _snapshot(self, policy: HFPolicy, step: int) -> None:
        if self.remote is not None:
            # The weights published after this step's update: no copy on the driver.
            snapshot = self.remote.snapshot(f"step{step}")
            self.remote_pool = [*self.remote_pool, snapshot][-self.cfg.pool_size :]
            return
        frozen = HFPolicy(
            copy.deepcopy(policy.model),
            policy.tokenizer,
            max_batch_size=policy.max_batch_size,
            name=f"{policy.name}@step{step}",
        )
        self.pool = [*self.pool, frozen][-self.cfg.pool_size :]

    def after_update(self, step: int, policy: HFPolicy) -> None:
        """Snapshot the updated weights into the pool when one is due (on Ray, after they
        were published)."""
        if self.cfg.opponent is SelfPlayOpponent.POOL and step % self.cfg.snapshot_every == 0:
            self._snapshot(policy, step)

    def _opponent(self, policy: HFPolicy, step: int) -> Policy:
        if not self.pool:
            self._snapshot(policy, 0)
        return random.Random(f"{self.seed}:{step}").choice(self.pool)

    def _remote_opponent(self, policy: HFPolicy, step: int) -> Snapshot:
        if not self.remote_pool:
            self._snapshot(policy, 0)
        return random.Random(f"{self.seed}:{step}").choice(self.remote_pool)

    def rollout(self, spec: RolloutSpec, policy: HFPolicy, step: int) -> list[Trajectory]:
        """The step's games of ``spec``'s tasks; the trajectories to train on. On Ray,
        ``spec.policy`` names the policy the actors built."""
        if self.remote is not None:
            return self._rollout_on_ray(self.remote, spec, policy, step)
        if self.cfg.opponent is SelfPlayOpponent.SELF:
            linked = _Linked()
            seated: dict[str, Policy] = dict.fromkeys(self.seats, policy)
            if self.roles is not None:
                seated = dict(self.roles.seat_policies())
            runner = MultiSeatRunner(self.make_game, seated)
            own = run_rollout(spec, runner=runner, hooks=[linked])
            return [*own, *linked.trajectories]
        return play_facing(spec, self.make_game, policy, self._opponent(policy, step))

    def _rollout_on_ray(
        self, remote: RayRunner, spec: RolloutSpec, policy: HFPolicy, step: int
    ) -> list[Trajectory]:
        # The same runs as the local path: one of every seat, or one per seat against the pool.
        if self.cfg.opponent is SelfPlayOpponent.SELF:
            linked = _Linked()
            own = run_rollout(spec, runner=remote.seated(SeatPlan()), hooks=[linked])
            return [*own, *linked.trajectories]
        opponent = self._remote_opponent(policy, step)

        def runner_for(seat: str) -> EpisodeRunner:
            others = {s: opponent for s in self.seats if s != seat}
            return remote.seated(SeatPlan(opponents=others, primary=seat))

        return play_by_seat(spec, self.seats, runner_for)

    def advantages(self, trajs: Sequence[Trajectory], inp: AdvantageInput) -> AdvantageOutput:
        """RAE over the step's trajectories; the baselines move on."""
        out, self.baselines = rae_advantages(
            inp, [role_of(t) for t in trajs], self.baselines, alpha=self.cfg.rae_alpha
        )
        return out

    def state(self) -> dict[str, Any]:
        return {"baselines": dict(self.baselines)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.baselines = {str(k): float(v) for k, v in state.get("baselines", {}).items()}
