"""The HTTP routes the ``tinker`` SDK calls (``/api/v1/...``), over a ``TinkerService``.

Request bodies are read as the SDK's own pydantic request types, so a field the SDK sends is
checked as the SDK defines it. Errors: a bad request answers 400 (``tinker.BadRequestError``), an
id that names nothing 404 (``tinker.NotFoundError``); work that fails once accepted is a failed
future, which the SDK raises as ``tinker.RequestFailedError`` (category ``user`` for the caller's
mistakes), its message naming the field.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError

from tinker import types
from trajforge.configfile import first_problem
from trajforge.tinker.errors import NotFound, UserError
from trajforge.tinker.service import TinkerService
from trajforge.tinker.trainer import (
    LoraSpec,
    build_lora_model,
    load_adapter,
    read_meta,
)
from trajforge.tinker.wire import (
    forward_backward_output,
    parse_forward_backward,
    sample_response,
)
from trajforge.train import ModelSettings, load_base_model

PROTO = "application/x-protobuf"
RETRIEVE_WAIT_S = 30.0
"""How long ``retrieve_future`` holds a request open before answering ``try_again``."""

M = TypeVar("M", bound=BaseModel)


async def _body(request: Request, model: type[M]) -> M:
    try:
        return model.model_validate(await request.json())
    except ValidationError as exc:
        where, msg = first_problem(exc, "body")
        raise UserError(f"{where}: {msg}") from None


def _error(exc: Exception) -> dict[str, Any]:
    category = "user" if isinstance(exc, UserError) else "server"
    return {
        "error": f"{type(exc).__name__}: {exc}" if category == "server" else str(exc),
        "category": category,
    }


def tinker_app(service: TinkerService) -> FastAPI:
    app = FastAPI(title="trajforge tinker")

    @app.exception_handler(UserError)
    async def _bad(_: Request, exc: UserError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.exception_handler(NotFound)
    async def _missing(_: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    def accepted(request_id: str, model_id: str | None = None) -> dict[str, Any]:
        return {"request_id": request_id, "model_id": model_id}

    def ordered(model_id: str, seq_id: int | None, work: Callable[[], Any]) -> dict[str, Any]:
        """``work`` queued on model ``model_id`` in its ``seq_id`` order, as accepted."""
        return accepted(service.submit_ordered(model_id, seq_id, work), model_id)

    # --- service --------------------------------------------------------------------------

    @app.get("/api/v1/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/api/v1/client/config")
    async def client_config() -> dict[str, Any]:
        # Plain API keys, httpx, one forward-backward chunk after another, results as futures.
        return types.ClientConfigResponse(
            pjwt_auth_enabled=False, use_pyqwest_transport=False, parallel_fwdbwd_chunks=False
        ).model_dump()

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config() -> dict[str, Any]:
        return types.ClientDynamicConfigResponse().model_dump()

    @app.post("/api/v1/telemetry")
    async def telemetry() -> dict[str, str]:
        return {"status": "accepted"}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities() -> dict[str, Any]:
        return {
            "supported_models": [
                {
                    "model_name": s.name,
                    "max_context_length": s.max_context or None,
                    "trainable": True,
                    "sampleable": True,
                }
                for s in service.served.values()
            ]
        }

    @app.post("/api/v1/create_session")
    async def create_session() -> dict[str, Any]:
        return {"type": "create_session", "session_id": service.new_session()}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat() -> dict[str, str]:
        return {"type": "session_heartbeat"}

    # --- training models ---------------------------------------------------------------------

    @app.post("/api/v1/create_model")
    async def create_model(request: Request) -> dict[str, Any]:
        body = await _body(request, types.CreateModelRequest)
        model_id = f"{body.session_id}:train:{body.model_seq_id}"
        lora = body.lora_config or types.LoraConfig(rank=32)

        def work() -> dict[str, Any]:
            service.create_model(model_id, body.base_model, LoraSpec(**lora.model_dump()))
            return {"type": "create_model", "model_id": model_id}

        return accepted(service.submit(work), model_id)

    @app.post("/api/v1/get_info")
    async def get_info(request: Request) -> dict[str, Any]:
        body = await _body(request, types.GetInfoRequest)
        model = service.model(body.model_id)
        served = service.base(model.base)
        return {
            "type": "get_info",
            "model_id": model.model_id,
            "model_data": {
                "arch": type(model.model.get_base_model()).__name__,
                "model_name": model.base,
                "tokenizer_id": str(served.tokenizer_dir),
            },
            "is_lora": True,
            "lora_rank": model.lora.rank,
            "model_name": model.base,
        }

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request) -> dict[str, Any]:
        req = parse_forward_backward(await request.body())
        model = service.model(req.model_id)

        def work() -> bytes:
            step = model.forward_backward(
                req.data, req.loss_fn, req.config, backward=not req.forward_only
            )
            return forward_backward_output(step.outputs, step.metrics)

        return ordered(req.model_id, req.seq_id, work)

    @app.post("/api/v1/optim_step")
    async def optim_step(request: Request) -> dict[str, Any]:
        body = await _body(request, types.OptimStepRequest)
        model = service.model(body.model_id)
        p = types.AdamParams.model_validate(body.optim_params.model_dump())

        def work() -> dict[str, Any]:
            metrics = model.optim_step(
                p.learning_rate, (p.beta1, p.beta2), p.eps, p.weight_decay, p.grad_clip_norm
            )
            service.log_metrics(model, metrics)
            return {"metrics": metrics}

        return ordered(body.model_id, body.seq_id, work)

    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request) -> dict[str, Any]:
        body = await _body(request, types.SaveWeightsRequest)
        model = service.model(body.model_id)
        path, folder = service.path_for(
            body.model_id, "weights", body.path or f"step-{model.steps}"
        )

        def work() -> dict[str, Any]:
            model.save(folder, optimizer=True)
            return {"type": "save_weights", "path": path}

        return ordered(body.model_id, body.seq_id, work)

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_for_sampler(request: Request) -> dict[str, Any]:
        body = await _body(request, types.SaveWeightsForSamplerRequest)
        model = service.model(body.model_id)
        session = body.model_id.split(":train:")[0]

        def work() -> dict[str, Any]:
            if body.path is None:  # an ephemeral snapshot straight into a new sampler
                sampler_id = service.add_sampler(
                    session,
                    model.merged(),
                    model.tokenizer,
                    model.base,
                    None,
                    model.steps,
                    snapshot_of=model.model_id,
                )
                return {"type": "save_weights_for_sampler", "sampling_session_id": sampler_id}
            path, folder = service.path_for(body.model_id, "sampler_weights", body.path)
            model.save(folder, optimizer=False)
            return {"type": "save_weights_for_sampler", "path": path}

        return ordered(body.model_id, body.seq_id, work)

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request) -> dict[str, Any]:
        body = await _body(request, types.LoadWeightsRequest)
        folder = service.resolve(body.path)
        if body.model_id is not None:  # load_state into an existing training client
            model = service.model(body.model_id)

            def into_existing() -> dict[str, Any]:
                model.load(folder, optimizer=body.optimizer)
                return {"type": "load_weights", "path": body.path, "model_id": model.model_id}

            return accepted(service.submit_ordered(body.model_id, body.seq_id, into_existing))
        model_id = f"{body.session_id}:train:{body.model_seq_id}"

        def new_model() -> dict[str, Any]:
            meta = read_meta(folder)
            from_meta = service.new_training_model(model_id, meta.base, meta.lora)
            from_meta.load(folder, optimizer=body.optimizer)
            service.training[model_id] = from_meta
            return {"type": "load_weights", "path": body.path, "model_id": model_id}

        return accepted(service.submit(new_model), model_id)

    @app.get("/api/v1/training_runs/{model_id}/checkpoints")
    async def list_checkpoints(model_id: str) -> dict[str, Any]:
        return {"checkpoints": service.checkpoints(model_id), "cursor": None}

    # --- sampling ---------------------------------------------------------------------------

    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request) -> dict[str, Any]:
        body = await _body(request, types.CreateSamplingSessionRequest)

        def work() -> str:
            if body.model_path is not None:
                folder = service.resolve(body.model_path)
                meta = read_meta(folder)
                model, tokenizer = build_lora_model(service.base(meta.base).spec, meta.lora)
                load_adapter(model, folder)
                merged = model.merge_and_unload().eval()
                return service.add_sampler(
                    body.session_id, merged, tokenizer, meta.base, body.model_path, meta.steps
                )
            served = service.base(body.base_model or "")
            model, tokenizer = load_base_model(ModelSettings(spec=served.spec))
            return service.add_sampler(
                body.session_id, model.eval(), tokenizer, served.name, None, 0
            )

        request_id = service.submit(lambda: {"id": work()})
        result = await service.retrieve(request_id, wait_s=600)
        assert isinstance(result, dict)
        return {"type": "create_sampling_session", "sampling_session_id": result["id"]}

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str) -> dict[str, Any]:
        try:
            sampler = service.sampler(sampler_id)
        except UserError as exc:
            raise NotFound(str(exc)) from None
        return {
            "sampler_id": sampler_id,
            "base_model": sampler.base,
            "model_path": sampler.model_path,
        }

    @app.post("/api/v1/asample")
    async def asample(request: Request) -> dict[str, Any]:
        body = await _body(request, types.SampleRequest)
        sampler = service.sampler(body.sampling_session_id)
        prompt = body.prompt.to_ints()
        params = body.sampling_params.model_dump()
        group = uuid.uuid4().hex

        async def work() -> bytes:
            sequences = await sampler.sample(prompt, body.num_samples, params, group=group)
            logprobs = None
            if body.prompt_logprobs:  # a whole forward: off the event loop
                logprobs = await asyncio.to_thread(sampler.prompt_logprobs, prompt)
            return sample_response(sequences, logprobs)

        request_id = service.submit_async(work())
        ids = [f"{group}-{i}" for i in range(body.num_samples)]
        return {**accepted(request_id), "sample_sequence_ids": ids}

    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request) -> Response:
        body = await _body(request, types.FutureRetrieveRequest)
        try:
            result = await service.retrieve(body.request_id, RETRIEVE_WAIT_S)
        except NotFound:
            raise
        except Exception as exc:  # the request's own failure, handed to the SDK as its result
            return JSONResponse(_error(exc))
        if result is None:
            return JSONResponse(
                {"type": "try_again", "request_id": body.request_id, "queue_state": "active"}
            )
        if isinstance(result, bytes):
            return Response(result, media_type=PROTO)
        return JSONResponse(result)

    return app
