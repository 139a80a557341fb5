"""The thread that owns a local model while it samples: ``HFPolicy``'s continuous batching.

Requests wait in one queue. Between two decode steps the worker admits whatever is waiting (up
to ``max_batch_size`` live sequences) and the engine prefills those prompts together and
appends them to the running batch; finished sequences leave it at once and their completions go
back to the callers' loops. Weight changes hold admissions and wait until no sequence is in
flight (``paused``), so no sequence mixes two sets of weights.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator

import torch

from trajforge.errors import ConfigError, TrajforgeError
from trajforge.policy.base import Completion, SamplingParams, TokenSink
from trajforge.policy.engine.generation_request import GenerationRequest, completion_of
from trajforge.policy.engine.hf_engine import DecodeEngine
from trajforge.policy.engine.sampling import UniformStream


class GenerationError(TrajforgeError):
    """A generation request cannot be served (bad prompt, context full, policy closed)."""


class BatchWorker:
    """Admits requests into ``engine``'s batch on a thread of its own.

    Args:
        engine: the decoder; its ``model`` is switched to eval mode while sequences are in
            flight and its mode restored after; its prefix cache loses the entries of the
            conversations that end.
        max_batch_size: most sequences decoded together.
        weights_version: the version of the weights now, recorded on each request admitted.
    """

    def __init__(
        self, engine: DecodeEngine, max_batch_size: int, weights_version: Callable[[], int]
    ) -> None:
        self.engine = engine
        self.max_batch_size = max_batch_size
        self.weights_version = weights_version
        self._cond = threading.Condition()
        self._pending: deque[GenerationRequest] = deque()
        self._ended: list[list[int]] = []
        """Finished conversations' tokens, whose cache entries the worker drops (it alone
        touches the cache while a step runs)."""
        self._live = 0
        self._pausers = 0
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._restore_training = False

    def submit(self, request: GenerationRequest) -> None:
        """Queue ``request`` (starting the thread if it is not running)."""
        with self._cond:
            self._ensure_thread()
            self._pending.append(request)
            if self.engine.prefix_cache is not None:
                self.engine.prefix_cache.expect_outstanding(len(self._pending) + self._live)
            self._cond.notify_all()

    async def sample(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        max_new_tokens: int,
        on_token: TokenSink | None,
        adapter: str | None,
    ) -> Completion:
        """Up to ``max_new_tokens`` sampled for ``prompt_ids`` in the shared batch under
        ``adapter`` (None: the base weights), each id handed to ``on_token`` on the caller's
        loop as the decode step that sampled it ends."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Completion] = loop.create_future()

        def deliver(result: Completion | BaseException) -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop is already closed
                loop.call_soon_threadsafe(_settle, future, result)

        self.submit(
            GenerationRequest(
                prompt_ids=list(prompt_ids),
                sampling=sampling,
                max_new_tokens=max_new_tokens,
                uniforms=UniformStream.seeded(sampling.seed, self.engine.device),
                deliver=deliver,
                is_cancelled=future.cancelled,
                on_token=None if on_token is None else _on_loop(loop, on_token),
                adapter_name=adapter,
            )
        )
        return await future

    def end(self, tokens: list[int]) -> None:
        """A conversation of ``tokens`` will not continue: its cache entries can go."""
        with self._cond:
            self._ended.append(tokens)
            if not self._live:
                self._drop_ended()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hold admissions and wait until no sequence is in flight."""
        with self._cond:
            self._pausers += 1
            try:
                while self._live:
                    self._cond.wait()
                yield
            finally:
                self._pausers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def in_flight(self) -> Iterator[None]:
        """One sequence decoded outside the batch (``VisionPolicy``), counted as in flight:
        it waits for a weight change under way, and the next one waits for it."""
        with self._cond:
            while self._pausers:
                self._cond.wait()
            self._live += 1
        try:
            yield
        finally:
            with self._cond:
                self._live -= 1
                self._cond.notify_all()

    async def close(self) -> None:
        """Stop the thread; requests still waiting fail with ``GenerationError``. A later
        ``submit`` starts a new thread."""
        thread = self._thread
        if thread is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        await asyncio.to_thread(thread.join)
        self._thread = None

    def _drop_ended(self) -> None:
        """Drop the ended conversations' cache entries (holding ``_cond``, no step running)."""
        if self.engine.prefix_cache is not None:
            for tokens in self._ended:
                self.engine.prefix_cache.discard(tokens)
        self._ended.clear()

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stopping = False
            self._thread = threading.Thread(target=self._work, name="trajforge-hf", daemon=True)
            self._thread.start()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._live and not self._admissible():
                    self._cond.wait()
                if self._stopping:
                    self._abandon(GenerationError("the policy was closed"))
                    return
                self._drop_ended()
                admitted = self._admit_pending() if self._pausers == 0 else []
                self._live = len(self.engine) + len(admitted)
            try:
                with torch.inference_mode():
                    finished = self._advance(admitted)
            except Exception as exc:  # reported to every waiting caller
                failed = self.engine.fail_all()
                failed += [r for r in admitted if r not in failed]
                for request in failed:
                    self.engine.release(request)
                    request.deliver(exc)
                finished = []
            for request in finished:
                request.deliver(completion_of(request, self.engine.tokenizer, self.engine.eos_ids))
            with self._cond:
                self._live = len(self.engine)
                self._drop_ended()
                if not self._live:
                    self._set_idle()
                    self._cond.notify_all()

    def _admit_pending(self) -> list[GenerationRequest]:
        """Waiting requests that join the batch now (holding ``_cond``), in order, up to
        ``max_batch_size`` live rows. One whose adapter has no room yet stops the line (so
        admission stays in order); one whose adapter is no longer served fails."""
        admitted: list[GenerationRequest] = []
        while self._pending and len(self.engine) + len(admitted) < self.max_batch_size:
            request = self._pending[0]
            if not request.is_cancelled():
                try:
                    if not self.engine.reserve(request):
                        break
                except ConfigError as exc:
                    self._pending.popleft()
                    request.deliver(exc)
                    continue
                request.weights_version = self.weights_version()
                admitted.append(request)
            self._pending.popleft()
        return admitted

    def _admissible(self) -> bool:
        return bool(self._pending) and self._pausers == 0

    def _advance(self, admitted: list[GenerationRequest]) -> list[GenerationRequest]:
        self.engine.drop_cancelled()
        if admitted and not len(self.engine):
            self._set_busy()
        return self.engine.advance(admitted)

    def _set_busy(self) -> None:
        self._restore_training = bool(self.engine.model.training)
        if self._restore_training:
            self.engine.model.eval()

    def _set_idle(self) -> None:
        if self._restore_training:
            self.engine.model.train()
            self._restore_training = False

    def _abandon(self, error: BaseException) -> None:
        for request in [*self.engine.fail_all(), *self._pending]:
            request.deliver(error)
        self._pending.clear()
        self._live = 0
        self._drop_ended()
        self._set_idle()
        self._cond.notify_all()


def _on_loop(loop: asyncio.AbstractEventLoop, sink: TokenSink) -> TokenSink:
    """``sink`` called on ``loop`` from the engine's thread."""

    def forward(token: int) -> None:
        with contextlib.suppress(RuntimeError):  # the caller's loop is already closed
            loop.call_soon_threadsafe(sink, token)

    return forward


def _settle(future: asyncio.Future[Completion], result: Completion | BaseException) -> None:
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)
