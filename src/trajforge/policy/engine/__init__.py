"""The local decode engine behind ``HFPolicy``: continuous batching over a row-wise KV cache.

``hf_engine.DecodeEngine`` admits requests, prefills them (``prefill``; what prompts admitted
together begin with once, ``shared_prefix``), steps the live batch (``llama_decode`` for Llama
models, else the transformers forward) with a padding mask grown in place (``decode_mask``),
samples per sequence (``sampling``) and keeps finished sequences' keys and values for the next
turn (``prefix_cache``, ``kv_cache``); ``generation_request`` holds a request and its counters.
Nothing outside ``trajforge.policy`` uses it directly.
"""
