"""The protobuf half of the Tinker wire: ``forward_backward`` requests in, sample and
forward-backward results out.

The SDK sends ``/api/v1/forward_backward`` as a ``tinker_public.ForwardBackwardRequest`` and asks
for sample and forward-backward results as protobuf (``Accept: application/x-protobuf``); every
other call is JSON. The message classes are the SDK's own (``tinker.proto``), so both ends agree
on the schema by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tinker.proto import tinker_public_pb2 as pb

from trajforge.tinker.errors import UserError

_DTYPES: dict[int, np.dtype] = {
    pb.DTYPE_FLOAT32: np.dtype(np.float32),
    pb.DTYPE_INT64: np.dtype(np.int64),
    pb.DTYPE_INT32: np.dtype(np.int32),
}


@dataclass
class Datum:
    """One sequence of a forward-backward batch: its input ids and the loss's named inputs."""

    tokens: list[int]
    inputs: dict[str, np.ndarray]


@dataclass
class FwdBwdRequest:
    model_id: str
    seq_id: int
    loss_fn: str
    forward_only: bool
    data: list[Datum]
    config: dict[str, float] = field(default_factory=dict)


def _tensor(msg: pb.Tensor, where: str) -> np.ndarray:
    dtype = _DTYPES.get(msg.dtype)
    if dtype is None:
        raise UserError(f"{where}: dtype {msg.dtype} is not float32 or int64")
    if msg.HasField("sparse_csr"):
        raise UserError(f"{where}: sparse tensors are not supported here; send a dense one")
    array = np.frombuffer(msg.dense, dtype=dtype)
    shape = list(msg.shape)
    if shape and int(np.prod(shape)) != array.size:
        raise UserError(f"{where}: shape {shape} does not hold {array.size} values")
    return array.reshape(shape) if shape else array


def _tokens(datum: pb.Datum, where: str) -> list[int]:
    tokens: list[int] = []
    for i, chunk in enumerate(datum.model_input):
        kind = chunk.WhichOneof("chunk")
        if kind != "encoded_text":
            raise UserError(
                f"{where}.model_input.chunks[{i}]: {kind} chunks are not supported; "
                "this server takes encoded_text"
            )
        tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())
    return tokens


def parse_forward_backward(body: bytes) -> FwdBwdRequest:
    """The request's datums, loss and config; a malformed body is a ``UserError``."""
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as exc:  # protobuf raises its own DecodeError; any failure means bad bytes
        raise UserError(
            f"forward_backward: the body is not a ForwardBackwardRequest ({exc})"
        ) from None
    data = []
    for i, datum in enumerate(msg.data):
        where = f"data[{i}]"
        inputs = {
            name: _tensor(tensor, f"{where}.loss_fn_inputs[{name!r}]")
            for name, tensor in datum.loss_fn_inputs.items()
        }
        data.append(Datum(tokens=_tokens(datum, where), inputs=inputs))
    config = {k: v.number for k, v in msg.loss_fn_config_v2.items() if v.HasField("number")}
    for key, value in msg.loss_fn_config.items():
        config.setdefault(key, value)
    return FwdBwdRequest(
        model_id=msg.model_id,
        seq_id=msg.seq_id,
        loss_fn=msg.loss_fn,
        forward_only=msg.forward_only,
        data=data,
        config=config,
    )


def _batched(arrays: list[np.ndarray], dtype: pb.DType.ValueType) -> pb.BatchedTensor:
    np_dtype = _DTYPES[dtype]
    flat = [np.ascontiguousarray(a, dtype=np_dtype).reshape(-1) for a in arrays]
    sizes = [a.nbytes for a in flat]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return pb.BatchedTensor(
        data=b"".join(a.tobytes() for a in flat), offsets=offsets.tobytes(), dtype=dtype
    )


def forward_backward_output(
    outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]
) -> bytes:
    """A ``ForwardBackwardOutput``: per-datum float32 outputs (``logprobs``, ...) and metrics."""
    msg = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    for key, value in metrics.items():
        msg.metrics[key] = value
    if outputs:
        record = msg.loss_fn_outputs.add()
        record.num_datums = len(outputs)
        for name in outputs[0]:
            record.fields[name].CopyFrom(_batched([o[name] for o in outputs], pb.DTYPE_FLOAT32))
    return msg.SerializeToString()


@dataclass
class Sequence:
    tokens: list[int]
    logprobs: list[float]
    stopped: bool
    """Ended on a stop (a stop sequence or the end-of-sequence token), not on ``max_tokens``."""


def sample_response(sequences: list[Sequence], prompt_logprobs: list[float] | None) -> bytes:
    """A ``SampleResponse``; ``prompt_logprobs`` leads with NaN, which the SDK reads as None
    (the first token has nothing before it)."""
    msg = pb.SampleResponse()
    for seq in sequences:
        msg.sequences.add(
            stop_reason=pb.STOP_REASON_STOP if seq.stopped else pb.STOP_REASON_LENGTH,
            tokens=np.asarray(seq.tokens, dtype=np.int32).tobytes(),
            logprobs=np.asarray(seq.logprobs, dtype=np.float32).tobytes(),
        )
    if prompt_logprobs is not None:
        msg.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    return msg.SerializeToString()
