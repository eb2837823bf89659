"""Test-only vLLM plugin that changes a running server's numerics, and the harness that drives it."""
