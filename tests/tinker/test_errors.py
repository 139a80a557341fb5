"""Bad input reaches the caller as the tinker SDK's own exceptions, naming the field."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from tinker._client import AsyncTinker
from tinker.types.future_retrieve_request import FutureRetrieveRequest

import tinker
from tinker import types
from trajforge.tinker.service import TinkerService

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trainer(client: tinker.ServiceClient) -> tinker.TrainingClient:
    return client.create_lora_training_client(base_model="tiny", rank=2).result()


def datum(n: int, **inputs: np.ndarray) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(list(range(10, 10 + n))),
        loss_fn_inputs={"target_tokens": np.arange(11, 11 + n, dtype=np.int64), **inputs},
    )


def test_an_unknown_model_names_the_field_and_the_models_served(
    client: tinker.ServiceClient,
) -> None:
    with pytest.raises(tinker.RequestFailedError) as caught:
        client.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=4).result()
    assert caught.value.category is types.RequestErrorCategory.User
    assert "base_model: 'Qwen/Qwen3-8B' is not served here; served: tiny" in str(caught.value)


def test_a_rank_out_of_range_names_the_range(client: tinker.ServiceClient) -> None:
    with pytest.raises(tinker.RequestFailedError, match=r"rank: 65 is out of range .*1 to 64"):
        client.create_lora_training_client(base_model="tiny", rank=65).result()


def test_loss_inputs_that_do_not_match_the_tokens_are_refused(
    trainer: tinker.TrainingClient,
) -> None:
    short = datum(5, weights=np.ones(4, dtype=np.float32))
    with pytest.raises(tinker.RequestFailedError) as caught:
        trainer.forward_backward([datum(3), short], "cross_entropy").result()
    assert caught.value.category is types.RequestErrorCategory.User
    assert (
        "data[1].loss_fn_inputs['weights']: shape [4] does not match model_input, which has 5"
        in (str(caught.value))
    )
    with pytest.raises(
        tinker.RequestFailedError, match=r"data\[0\].loss_fn_inputs: .* 'advantages'"
    ):
        trainer.forward_backward([datum(3, logprobs=np.zeros(3, np.float32))], "ppo").result()


def test_an_unknown_loss_lists_the_losses(trainer: tinker.TrainingClient) -> None:
    with pytest.raises(tinker.RequestFailedError, match=r"loss_fn: unknown loss 'hinge'; .*ppo"):
        trainer.forward_backward([datum(3)], "hinge").result()  # type: ignore[arg-type]
    with pytest.raises(tinker.RequestFailedError, match="loss_fn: 'gspo' is not supported"):
        trainer.forward_backward([datum(3)], "gspo").result()


def test_the_training_client_works_after_refused_requests(trainer: tinker.TrainingClient) -> None:
    out = trainer.forward_backward([datum(3)], "cross_entropy").result()
    assert out.metrics["loss:sum"] > 0


def test_a_future_id_that_does_not_exist_is_not_found(
    served: tuple[str, TinkerService],
) -> None:
    url, _ = served

    async def retrieve() -> None:
        async with AsyncTinker(base_url=url, api_key="tml-local") as raw:
            await raw.futures.retrieve(request=FutureRetrieveRequest(request_id="req-999999"))

    with pytest.raises(tinker.NotFoundError, match="request_id: no request 'req-999999'"):
        asyncio.run(retrieve())
