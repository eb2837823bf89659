"""2.1: /health, /v1/models (served name, max_model_len), /version against the image manifest."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from vfleet.paths import versions
from vfleet.verify.target import Target, docker_where


def _expected_version(target: Target) -> tuple[str, str]:
    """The vLLM version the image manifest pins: the container's /etc/vfleet/versions.json when a
    container is given (on DOCKER_HOST when set), else the checkout's versions.json (the file every
    image bakes in)."""
    if target.container:
        proc = subprocess.run(
            ["docker", "exec", target.container, "cat", "/etc/vfleet/versions.json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if proc.returncode != 0:
            pytest.fail(
                f"expected the image manifest /etc/vfleet/versions.json in container {target.container} "
                f"({docker_where()}); `docker exec` said: {proc.stderr.strip()[:300]}"
            )
        return str(json.loads(proc.stdout)["vllm"]["version"]), f"{target.container}:/etc/vfleet/versions.json"
    return str(versions()["vllm"]["version"]), "versions.json"


def test_health(target: Target) -> None:
    status, body = target.client.get("/health", timeout_s=10)
    assert status == 200, f"expected /health 200; saw {status} {body[:200]!r}"


def test_models(target: Target, figures: dict[str, Any]) -> None:
    data = target.client.get_json("/v1/models")
    models = {m["id"]: m for m in data.get("data", [])}
    want = target.client.model
    assert want in models, f"expected served model {want!r} in /v1/models; saw {sorted(models)}"
    seen = models[want].get("max_model_len")
    figures["max_model_len"] = seen
    figures["model_root"] = models[want].get("root")
    expected = target.profile.verify.max_model_len
    assert seen == expected, f"expected max_model_len {expected:,} (profile); saw {seen!r}"


def test_version(target: Target, figures: dict[str, Any]) -> None:
    data = target.client.get_json("/version")
    seen = str(data.get("version"))
    figures["vllm_version"] = seen
    expected, source = _expected_version(target)
    figures["expected_vllm_version"] = expected
    assert seen == expected, f"expected vLLM {expected} ({source}); /version says {seen}"
