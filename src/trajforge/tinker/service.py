"""The server's state: models offered, training models, samplers, futures and checkpoints.

Every call that does work answers at once with a request id; its result is kept until the SDK
retrieves it (``retrieve_future``). Training work runs on one thread, in the order of each
training client's ``seq_id`` (the SDK numbers its requests and may send a batch's chunks out of
order), so a client's ``forward_backward``, ``optim_step`` and saves apply in the order it made
them. Sampling runs on the event loop, batched by each sampler's ``HFPolicy``.

``tinker://<model id>/<kind>/<name>`` is the folder ``<root>/checkpoints/<model id>/<kind>/<name>``
(``kind``: ``weights`` for ``save_state``, ``sampler_weights`` for ``save_weights_for_sampler``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trajforge.store import TrajectoryStore
from trajforge.tinker.errors import NotFound, UserError
from trajforge.tinker.sampler import Sampler
from trajforge.tinker.shared_base import SharedBase
from trajforge.tinker.trainer import LoraSpec, TrainingModel, read_meta
from trajforge.train import ModelSettings, load_base_model

SCHEME = "tinker://"
SNAPSHOTS_KEPT = 2
"""Unsaved-weight samplers kept per training model: the newest, and the one before it for a
recipe still finishing its samples."""
KINDS = {"weights": "training", "sampler_weights": "sampler"}

Result = bytes | dict[str, Any]
"""A finished request: protobuf bytes (samples, forward-backward) or a JSON object."""


@dataclass
class Served:
    """A model offered: the name clients use and what ``load_base_model`` loads."""

    name: str
    spec: str
    tokenizer_dir: Path
    max_context: int = 0


@dataclass
class _Order:
    """A training client's requests waiting for their turn (by ``seq_id``)."""

    next_seq: int = 1
    waiting: dict[int, Callable[[], None]] = field(default_factory=dict)


class TinkerService:
    def __init__(self, root: Path, models: dict[str, str], store: TrajectoryStore | None) -> None:
        self.root = root.resolve()
        self.store = store
        self.served: dict[str, Served] = {}
        names_by_spec: dict[str, list[str]] = {}
        for name, spec in models.items():
            names_by_spec.setdefault(spec, []).append(name)
        for spec, names in names_by_spec.items():
            self._offer(spec, names)
        self.training: dict[str, TrainingModel] = {}
        self.bases: dict[str, SharedBase] = {}
        """Per base model, the one copy of its weights every training client's adapter is on."""
        self.samplers: dict[str, Sampler] = {}
        self._sampler_ids = itertools.count()
        self._snapshots: dict[str, deque[str]] = {}
        self._released: dict[str, str] = {}
        self.futures: dict[str, asyncio.Future[Result]] = {}
        self._orders: dict[str, _Order] = {}
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tinker-train")
        self._ids = itertools.count(1)
        self._sessions = itertools.count(1)

    def _offer(self, spec: str, names: list[str]) -> None:
        """Serve ``spec`` under each of ``names``; loaded once, as a model is served under
        several names (the embedded one under three)."""
        model, tokenizer = load_base_model(ModelSettings(spec=spec))
        positions = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        for name in names:
            folder = self.root / "tokenizers" / _safe(name)
            tokenizer.save_pretrained(folder)
            self.served[name] = Served(name, spec, tokenizer_dir=folder, max_context=positions)

    # --- sessions and ids -----------------------------------------------------------------

    def new_session(self) -> str:
        return f"session-{next(self._sessions)}-{uuid.uuid4().hex[:8]}"

    def model(self, model_id: str) -> TrainingModel:
        found = self.training.get(model_id)
        if found is None:
            raise UserError(f"model_id: no training model {model_id!r} on this server")
        return found

    def base(self, name: str) -> Served:
        found = self.served.get(name)
        if found is None:
            offered = ", ".join(self.served)
            raise UserError(f"base_model: {name!r} is not served here; served: {offered}")
        return found

    # --- futures ----------------------------------------------------------------------------

    def submit(self, work: Callable[[], Result]) -> str:
        """Run ``work`` on the training thread now; its request id."""
        loop = asyncio.get_running_loop()
        return self._track(asyncio.wrap_future(self._worker.submit(work), loop=loop))

    def submit_ordered(self, model_id: str, seq_id: int | None, work: Callable[[], Result]) -> str:
        """Run ``work`` on the training thread once ``model_id``'s earlier requests have."""
        self.model(model_id)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        request_id = self._track(future)

        def start() -> None:
            inner = asyncio.wrap_future(self._worker.submit(work), loop=loop)
            inner.add_done_callback(lambda done: _settle(future, done))

        order = self._orders.setdefault(model_id, _Order())
        if seq_id is None or seq_id < order.next_seq:
            start()
            return request_id
        order.waiting[seq_id] = start
        while order.next_seq in order.waiting:
            order.waiting.pop(order.next_seq)()
            order.next_seq += 1
        return request_id

    def submit_async(self, work: Awaitable[Result]) -> str:
        return self._track(asyncio.ensure_future(work))

    def _track(self, future: asyncio.Future[Result]) -> str:
        request_id = f"req-{next(self._ids)}"
        self.futures[request_id] = future
        return request_id

    async def retrieve(self, request_id: str, wait_s: float) -> Result | None:
        """The result (kept until now), or None while it is still running after ``wait_s``."""
        future = self.futures.get(request_id)
        if future is None:
            raise NotFound(f"request_id: no request {request_id!r} (unknown or already retrieved)")
        try:
            await asyncio.wait_for(asyncio.shield(future), wait_s)
        except TimeoutError:
            return None
        except Exception:  # the error is the result: handed back below, once
            pass
        del self.futures[request_id]
        return future.result()

    # --- checkpoints --------------------------------------------------------------------------

    def path_for(self, model_id: str, kind: str, name: str) -> tuple[str, Path]:
        if not name or "/" in name or name in (".", ".."):
            raise UserError(f"path: {name!r} is not a checkpoint name (no slashes)")
        folder = self.root / "checkpoints" / _safe(model_id) / kind / name
        return f"{SCHEME}{model_id}/{kind}/{name}", folder

    def resolve(self, path: str) -> Path:
        """The folder of a ``tinker://`` path; one that names no saved checkpoint is refused."""
        if not path.startswith(SCHEME):
            raise UserError(f"path: {path!r} is not a tinker:// path")
        parts = path.removeprefix(SCHEME).split("/")
        if len(parts) != 3 or parts[1] not in KINDS:
            raise UserError(
                f"path: {path!r} is not tinker://<model id>/<weights|sampler_weights>/<name>"
            )
        folder = self.root / "checkpoints" / _safe(parts[0]) / parts[1] / parts[2]
        read_meta(folder)
        return folder

    def checkpoints(self, model_id: str) -> list[dict[str, Any]]:
        found = []
        base = self.root / "checkpoints" / _safe(model_id)
        for kind, label in KINDS.items():
            for folder in sorted((base / kind).glob("*/checkpoint.json")):
                folder = folder.parent
                size = sum(f.stat().st_size for f in folder.iterdir())
                found.append(
                    {
                        "checkpoint_id": f"{kind}/{folder.name}",
                        "checkpoint_type": label,
                        "time": datetime.fromtimestamp(folder.stat().st_mtime, UTC).isoformat(),
                        "tinker_path": f"{SCHEME}{model_id}/{kind}/{folder.name}",
                        "size_bytes": size,
                    }
                )
        return found

    # --- training models --------------------------------------------------------------------

    def create_model(self, model_id: str, base_model: str, lora: LoraSpec) -> TrainingModel:
        served = self.base(base_model)
        model = self.new_training_model(model_id, served.name, lora)
        self.training[model_id] = model
        return model

    def new_training_model(self, model_id: str, base_model: str, lora: LoraSpec) -> TrainingModel:
        """A training model whose adapter joins the other clients' on ``base_model``'s weights
        (run on the training thread)."""
        spec = self.base(base_model).spec
        shared = self.bases.setdefault(spec, SharedBase(spec))
        return TrainingModel(model_id, base_model, spec, lora, shared)

    def log_metrics(self, model: TrainingModel, record: dict[str, Any]) -> None:
        """Append an optimizer step's metrics to the model's ``metrics.jsonl`` (one line per
        step, what ``trajforge view`` plots); the first step names the run in the store."""
        folder = self.root / "runs" / _safe(model.model_id)
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "metrics.jsonl").open("a") as out:
            out.write(json.dumps({"step": model.steps, **record}) + "\n")
        if self.store is not None and model.steps == 1:
            self.store.set_run(
                "tinker-" + _safe(model.model_id),
                {"kind": "tinker-train", "model": model.base, "output_dir": str(folder)},
            )

    # --- samplers -----------------------------------------------------------------------------

    def add_sampler(
        self,
        session_id: str,
        model: Any,
        tokenizer: Any,
        base: str,
        path: str | None,
        version: int,
        snapshot_of: str | None = None,
    ) -> str:
        """A new sampler's id. ``snapshot_of``: the training model whose unsaved weights it
        samples; such a snapshot is a whole copy of the model, and a recipe asks for one every
        step, so only the newest ``SNAPSHOTS_KEPT`` of each training model stay (runs on the
        training thread, which closes the ones let go)."""
        sampler_id = f"{session_id}:sample:{next(self._sampler_ids)}"
        self.samplers[sampler_id] = Sampler(
            sampler_id,
            base,
            model,
            tokenizer,
            model_path=path,
            weights_version=version,
            store=self.store,
        )
        if snapshot_of is not None:
            kept = self._snapshots.setdefault(snapshot_of, deque())
            kept.append(sampler_id)
            while len(kept) > SNAPSHOTS_KEPT:
                released = kept.popleft()
                self._released[released] = snapshot_of
                asyncio.run(self.samplers.pop(released).policy.close())
        return sampler_id

    def sampler(self, sampler_id: str | None) -> Sampler:
        found = self.samplers.get(sampler_id or "")
        if found is not None:
            return found
        if sampler_id in self._released:
            raise UserError(
                f"sampling_session_id: sampler {sampler_id!r} was let go: only the newest "
                f"{SNAPSHOTS_KEPT} snapshots of {self._released[sampler_id]!r} are kept "
                "(save_weights_for_sampler with a name keeps weights as a path)"
            )
        raise UserError(f"sampling_session_id: no sampler {sampler_id!r} on this server")

    async def close(self) -> None:
        for sampler in self.samplers.values():
            await sampler.policy.close()
        self._worker.shutdown(wait=True, cancel_futures=True)


def _settle(future: asyncio.Future[Result], done: asyncio.Future[Result]) -> None:
    if future.done():
        return
    if done.exception() is not None:
        future.set_exception(done.exception())  # type: ignore[arg-type]
    else:
        future.set_result(done.result())


def _safe(name: str) -> str:
    """A name as one path component."""
    return name.replace("/", "--").replace(":", "-")
