"""2.1: /health, /v1/models (served name, max_model_len), /version against the image's vLLM base label, and the
first sampling request against the ones after it (no compile on a served request)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from vfleet.images.refs import LABEL
from vfleet.paths import versions
from vfleet.verify.probe import firstreq, weights
from vfleet.verify.target import Target, docker_where

#: The image label that names the vLLM base an image was built on (images/Dockerfile.*).
VLLM_LABEL = f"{LABEL}.vllm.version"


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60, check=False)


def _expected_version(target: Target) -> tuple[str, str]:
    """The vLLM version the server must report. With a container (on DOCKER_HOST when set): the base its
    image was built on, from the image's label, which a 0.30.0 and a 0.34.0 image of one checkout carry
    apart; an image without the label (built before it existed) falls back to the manifest it bakes in,
    /etc/vfleet/versions.json. The two must agree when both are there. Without a container: the
    checkout's versions.json (its default base)."""
    if not target.container:
        return str(versions()["vllm"]["version"]), "versions.json"
    where = docker_where()
    # The image's own label, not the container's: `docker run --label` can set a container label to
    # anything, while the image's labels are part of its ID.
    proc = _docker("container", "inspect", "--format", "{{.Image}}", target.container)
    image = proc.stdout.strip()
    if proc.returncode == 0 and image:
        proc = _docker("image", "inspect", "--format", "{{json .Config.Labels}}", image)
    if proc.returncode != 0:
        pytest.fail(
            f"expected container {target.container} and its image ({where}); `docker inspect` said: "
            f"{proc.stderr.strip()[:300]}"
        )
    label = (json.loads(proc.stdout or "null") or {}).get(VLLM_LABEL)
    proc = _docker("exec", target.container, "cat", "/etc/vfleet/versions.json")
    pins = json.loads(proc.stdout) if proc.returncode == 0 else None
    manifest = str(pins["vllm"]["version"]) if pins else None
    if label is None and manifest is None:
        pytest.fail(
            f"expected the vLLM base of container {target.container} ({where}) in its image label {VLLM_LABEL} or "
            f"its manifest /etc/vfleet/versions.json; it has neither (`docker exec` said: {proc.stderr.strip()[:200]})"
        )
    if label is None:
        return str(manifest), f"{target.container}:/etc/vfleet/versions.json (its image has no {VLLM_LABEL} label)"
    if pins is not None and label != manifest and label not in (pins.get("bases") or {}):
        pytest.fail(
            f"container {target.container}: its image's label {VLLM_LABEL}={label} names a base its manifest "
            "/etc/vfleet/versions.json does not know: the image was built or labelled wrongly"
        )
    return str(label), f"the label {VLLM_LABEL} of the image of container {target.container}"


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


def test_weights(target: Target, figures: dict[str, Any]) -> None:
    """The weights the server loaded, named by their model manifest where it reads them (2.1b)."""
    data = target.client.get_json("/v1/models")
    root = next((m.get("root") for m in data.get("data", []) if m.get("id") == target.client.model), None)
    try:
        fig = weights.measure(root, target.container, target.url)
    except weights.WeightsError as exc:
        pytest.fail(f"expected the manifest of the served weights (vfleet model manifest); {exc}")
    figures["weights"] = fig.as_dict()
    bad = weights.problem(fig, target.profile.verify.weights_accept)
    assert bad is None, bad


def test_version(target: Target, figures: dict[str, Any]) -> None:
    data = target.client.get_json("/version")
    seen = str(data.get("version"))
    figures["vllm_version"] = seen
    expected, source = _expected_version(target)
    figures["expected_vllm_version"] = expected
    assert seen == expected, f"expected vLLM {expected} ({source}); /version says {seen}"


def test_first_request(target: Target, figures: dict[str, Any]) -> None:
    """No compile on a served request: the first sampling request against the ones after it (2.1a)."""
    fig = firstreq.measure(target.client, target.profile.verify.first_request_extra_s)
    figures["first_request"] = fig.as_dict()
    bad = firstreq.problem(fig)
    assert bad is None, bad
