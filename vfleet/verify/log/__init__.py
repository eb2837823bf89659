"""The log reader of boot-verify: a vLLM server log read line by line, and the checks made of it."""
