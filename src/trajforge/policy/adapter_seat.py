"""A seat's view of a policy serving many LoRA adapters: every turn sampled under the seat's.

Per-role self-play (``train.rl.roles``) gives each seat of a game its own adapter on one base
model. ``AdapterSeat`` is what sits in a seat: the serving policy's renderer and sessions, each
completion decoded under the seat's adapter (``HFPolicy.generate_with_adapter``), in the same
batch as the other seats' rows. Without a fixed seat it plays the seat its task names
(``data["seat"]``): a game env's single-seat episodes, as validation and evaluation play them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trajforge.errors import ConfigError
from trajforge.policy.base import Completion, SamplingParams
from trajforge.policy.hf import HFPolicy
from trajforge.policy.session import RenderedSession
from trajforge.policy.token_policy import TokenPolicy, TurnRequest
from trajforge.schema import Message


class AdapterSeat(TokenPolicy):
    """``policy`` under the adapter of ``seat`` (None: of each session's task's seat).

    Args:
        policy: A policy serving each adapter ``adapters`` names (``add_adapter``).
        adapters: Each seat's adapter name.
        seat: The seat it plays (None: the task's ``data["seat"]``).
    """

    def __init__(
        self, policy: HFPolicy, adapters: Mapping[str, str], seat: str | None = None
    ) -> None:
        what = adapters[seat] if seat is not None else "+".join(dict.fromkeys(adapters.values()))
        super().__init__(policy.tokenizer, name=f"{policy.name}:{what}")
        # The sessions must be the policy's own: its renderer, and with it its cache keys.
        self.renderer = policy.renderer
        self.policy = policy
        self.adapters = dict(adapters)
        self.seat = seat
        self.max_context_tokens = policy.max_context_tokens

    @property
    def precision(self) -> str | None:
        return self.policy.precision

    def adapter_for(self, session: RenderedSession) -> str:
        """The adapter ``session``'s turns decode under."""
        seat = self.seat
        if seat is None:
            task = session.task
            seat = None if task is None else task.data.get("seat")
        if seat not in self.adapters:
            raise ConfigError(
                f"{self.name}: seat {seat!r} has no adapter (seats: {', '.join(self.adapters)})"
            )
        return self.adapters[seat]

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        *,
        messages: Sequence[Message] | None = None,
    ) -> Completion:
        if self.seat is None:
            raise ConfigError(f"{self.name}: a seat's adapter is chosen by its session's task")
        return await self.policy.generate_with_adapter(
            self.adapters[self.seat], prompt_ids, sampling
        )

    async def complete(self, turn: TurnRequest) -> Completion:
        adapter = self.adapter_for(turn.session)
        return await self.policy.generate_with_adapter(
            adapter, turn.prompt_ids, turn.sampling, on_token=turn.on_token
        )

    async def close(self) -> None:
        """The serving policy is its owner's to close."""
