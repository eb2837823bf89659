"""Test-only vLLM plugin that corrupts cached KV blocks, and the harness that drives it."""
