"""Layer 3: policies. The contract first, then the implementations.

- ``base`` — ``Policy`` (token level ``generate``, conversation level ``start_session`` and
  ``respond``), ``ChatSession``, ``SamplingParams``, ``Completion``;
- ``renderer``, ``session``, ``tool_prompt``, ``token_policy`` — token-exact chat rendering and
  the token-level policies built on it;
- ``hf`` (a local transformers model over the decode engine in ``engine/``), ``openai_compat``
  and ``openai_session`` (any OpenAI-compatible server), ``scripted`` (a script or an expert);
- ``models/`` — the embedded SmolLM2 and the tiny test model; ``naming`` — policies by name;
- ``check`` — token exactness of stored trajectories.
"""
