"""The live probes of boot-verify: requests sent to a running server and judged from its answers."""
