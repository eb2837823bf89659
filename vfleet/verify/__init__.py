"""Boot-verify: checks against a live vLLM server, its report, and promotion of an image."""
