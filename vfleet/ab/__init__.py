"""A/B comparison of two live vLLM servers: alternating arms, paired rounds, a bootstrap interval per
metric and a verdict against a minimum effect (`vfleet ab`, docs/ab.md)."""
