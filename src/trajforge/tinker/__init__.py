"""``trajforge serve --tinker``: the Tinker training API, served on this machine.

Contract: code written against the ``tinker`` SDK (pinned: 0.38.0, the ``tinker`` extra) runs
unchanged but for ``tinker.ServiceClient(base_url="http://HOST:PORT", api_key="tml-local")``
(any key that starts with ``tml-``; nothing checks it). What it gets:

- models: the embedded SmolLM2 (``smollm2-135m-instruct``, also under its safetensors folder's
  path), ``tiny`` and any model folder given on the command line (under its folder name and its
  path: tinker-cookbook loads a tokenizer by the model's name), each trainable (LoRA) and
  sampleable;
- ``create_lora_training_client(base_model, rank, seed, train_mlp, train_attn,
  train_unembed)``: trajforge's own model loading and PEFT LoRA (alpha 32), fp32 on the CPU,
  every client's adapter on one copy of its base model (``shared_base``);
  ``get_info``; ``get_tokenizer`` offline: ``model_data.tokenizer_id`` is the folder
  (``<dir>/tokenizers/<name>``) where the server saved the model's tokenizer;
- ``forward``, ``forward_backward`` with ``cross_entropy``, ``importance_sampling``, ``ppo``,
  ``cispo``, ``dro`` (sums over tokens and datums, as Tinker defines them; ``gspo`` and
  ``stable_reinforce`` are refused by name), ``forward_backward_custom`` (the SDK runs it as a
  forward and a weighted ``cross_entropy``), ``optim_step(AdamParams)`` (AdamW, clipping);
- ``save_state`` / ``load_state`` / ``load_state_with_optimizer`` /
  ``create_training_client_from_state[_with_optimizer]``, ``save_weights_for_sampler``,
  ``save_weights_and_get_sampling_client``, checkpoint listing: ``tinker://<model id>/weights/N``
  and ``tinker://<model id>/sampler_weights/N`` are folders under ``<dir>/checkpoints``;
- sampling clients (``sample``: ``num_samples``, ``max_tokens``, ``temperature``, ``top_p``, ``top_k``,
  ``stop`` as strings or token ids, ``seed``; tokens and logprobs; ``compute_logprobs``), decoded
  by trajforge's ``HFPolicy``; every sequence is stored as a token-exact trajectory, one run per
  sampling client with its weights' path and version; of the samplers over a training client's
  unsaved weights (``save_weights_and_get_sampling_client``, each a whole copy of the model)
  only the newest two are kept, and an older one is refused by name;
- futures: every call answers a request id at once; the result is kept until retrieved; a
  training client's requests run in the order it made them. Losses and optimizer steps are
  appended to ``<dir>/runs/<model id>/metrics.jsonl``.

Errors are the SDK's own exceptions with one line naming the field: ``RequestFailedError``
(category ``user``) for a request refused once accepted (unknown model, rank out of range,
``loss_fn_inputs`` that do not match the tokens, an unknown loss), ``NotFoundError`` for a future
id that names nothing, ``BadRequestError`` for a body that is not the SDK's request type.
"""

from typing import TYPE_CHECKING

from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.tinker.run import serve_tinker

__all__ = [
    "serve_tinker",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "serve_tinker": "run",
    },
)
