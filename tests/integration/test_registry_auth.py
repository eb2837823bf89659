"""Registry login (vfleet.supply.registry): docker's config.json (auths, credHelpers, credsStore) and
the registry's two challenges, the Bearer token flow and Basic, against a small registry served here by
http.server that speaks that protocol (the 401 challenge, the token realm, the manifest with its
Docker-Content-Digest). It is a server of the real protocol, not a stand-in for vfleet's code: what is
tested is the client, through the same functions the supply-chain gate and `vfleet promote` call. The
credential helper is a real executable on PATH, as docker's are."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from vfleet.errors import VfleetError
from vfleet.supply import registry
from vfleet.supply.identity import registry_manifest_digest, resolve
from vfleet.supply.store import SupplyError
from vfleet.verify.image import registry_digest

USER, PASSWORD = "ci-bot", "s3cret-pa55"
TOKEN = "tok-" + "9" * 20
REPO = "team/vfleet-cpu"
CONFIG = "sha256:" + "c0" * 32
MANIFEST = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": CONFIG, "size": 2},
        "layers": [],
    }
).encode()
DIGEST = "sha256:" + "d1" * 32


@dataclass
class Registry:
    """What the served registry requires ('bearer', 'basic' or 'none') and what it was sent."""

    mode: str
    host: str = ""
    seen_auth: list[str] = field(default_factory=list)


def _handler(reg: Registry) -> type[BaseHTTPRequestHandler]:
    basic_ok = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        timeout = 2  # the client's https attempt sends a TLS hello this plain-http server cannot read

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            auth = self.headers.get("Authorization", "")
            reg.seen_auth.append(auth)
            if self.path.startswith("/token"):
                if auth != basic_ok:
                    self._send(401)
                    return
                assert "service=test-registry" in self.path and "scope=repository" in self.path, self.path
                self._send(200, json.dumps({"token": TOKEN}).encode(), {"Content-Type": "application/json"})
                return
            if not self.path.startswith(f"/v2/{REPO}/manifests/"):
                self._send(404)
                return
            want = {"bearer": f"Bearer {TOKEN}", "basic": basic_ok}.get(reg.mode)
            if want is not None and auth != want:
                challenge = (
                    f'Bearer realm="http://{reg.host}/token",service="test-registry",scope="repository:{REPO}:pull"'
                    if reg.mode == "bearer"
                    else 'Basic realm="test-registry"'
                )
                self._send(401, b"{}", {"WWW-Authenticate": challenge})
                return
            ref = self.path.rsplit("/", 1)[1]
            if ref not in ("v1", DIGEST):
                self._send(404)
                return
            media = "application/vnd.oci.image.manifest.v1+json"
            self._send(200, MANIFEST, {"Content-Type": media, "Docker-Content-Digest": DIGEST})

    return Handler


def _serve(mode: str) -> Iterator[Registry]:
    reg = Registry(mode)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(reg))
    reg.host = f"127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield reg
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(params=["bearer", "basic"])
def locked(request: pytest.FixtureRequest) -> Iterator[Registry]:
    yield from _serve(request.param)


@pytest.fixture
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty DOCKER_CONFIG directory (the user's own ~/.docker is never read by these tests)."""
    d = tmp_path / "docker-config"
    d.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(d))
    return d


def _write_config(d: Path, doc: dict[str, object]) -> None:
    (d / "config.json").write_text(json.dumps(doc))


def _auths(host: str, user: str = USER, password: str = PASSWORD) -> dict[str, object]:
    return {"auths": {host: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}}}


def _helper(tmp: Path, monkeypatch: pytest.MonkeyPatch, name: str, host: str) -> None:
    """docker-credential-NAME on PATH: knows HOST, answers the helpers' "not found" for anything else."""
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / f"docker-credential-{name}"
    script.write_text(
        "#!/bin/sh\n"
        '[ "$1" = get ] || exit 2\n'
        "read -r server\n"
        f'if [ "$server" = "{host}" ]; then\n'
        f'  printf \'{{"ServerURL":"%s","Username":"{USER}","Secret":"{PASSWORD}"}}\' "$server"\n'
        "else\n"
        "  echo 'credentials not found in native keychain'; exit 1\n"
        "fi\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")


def test_auths_login_answers_the_challenge(locked: Registry, docker_config: Path) -> None:
    """The Bearer token flow (token fetched with basic auth from the realm) and Basic, from auths."""
    _write_config(docker_config, _auths(locked.host))
    assert registry_manifest_digest(f"{locked.host}/{REPO}:v1") == DIGEST
    assert registry_digest(f"{locked.host}/{REPO}:v1") == DIGEST  # what `vfleet promote` resolves
    ident = resolve(f"{locked.host}/{REPO}@{DIGEST}")  # what the supply-chain gate resolves
    assert (ident.digest, ident.image_id) == (DIGEST, CONFIG)
    if locked.mode == "bearer":
        assert f"Bearer {TOKEN}" in locked.seen_auth


def test_a_credential_helper_login_answers_the_challenge(
    locked: Registry, docker_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _helper(tmp_path, monkeypatch, "vfleettest", locked.host)
    _write_config(docker_config, {"credHelpers": {locked.host: "vfleettest"}, "auths": {}})
    assert registry_manifest_digest(f"{locked.host}/{REPO}:v1") == DIGEST


def test_creds_store_is_asked_and_its_not_found_falls_back_to_auths(
    docker_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _helper(tmp_path, monkeypatch, "vfleetstore", "reg.example:5000")
    _write_config(docker_config, {"credsStore": "vfleetstore"})
    creds = registry.credentials("reg.example:5000")
    assert creds is not None and (creds.username, creds.secret) == (USER, PASSWORD)
    assert PASSWORD not in repr(creds)
    assert registry.credentials("other.example") is None  # the store's "credentials not found"
    _write_config(docker_config, {"credsStore": "vfleetstore", **_auths("other.example", "u2", "p2")})
    other = registry.credentials("other.example")
    assert other is not None and (other.username, other.secret) == ("u2", "p2")


def test_no_login_for_a_registry_that_needs_one_fails_naming_docker_login(
    locked: Registry, docker_config: Path
) -> None:
    with pytest.raises(SupplyError) as err:
        registry_manifest_digest(f"{locked.host}/{REPO}:v1")
    assert f"docker login {locked.host}" in str(err.value) and str(docker_config / "config.json") in str(err.value)
    with pytest.raises(VfleetError, match=f"cannot find the registry digest of {locked.host}/{REPO}:v1"):
        registry_digest(f"{locked.host}/{REPO}:v1")


def test_a_refused_login_is_named_without_its_password(locked: Registry, docker_config: Path) -> None:
    _write_config(docker_config, _auths(locked.host, USER, "wrong-" + PASSWORD))
    with pytest.raises(SupplyError) as err:
        registry_manifest_digest(f"{locked.host}/{REPO}:v1")
    text = str(err.value)
    assert f"refused the login of {USER}" in text and f"docker login {locked.host}" in text, text
    assert PASSWORD not in text and base64.b64encode(f"{USER}:wrong-{PASSWORD}".encode()).decode() not in text


def test_an_open_registry_is_asked_without_credentials(docker_config: Path) -> None:
    """A registry that asks for nothing gets nothing: the login is looked up only on a challenge."""
    _write_config(docker_config, _auths("127.0.0.1"))  # wrong host: would not be sent anyway
    for reg in _serve("none"):
        assert registry_manifest_digest(f"{reg.host}/{REPO}:v1") == DIGEST
        assert reg.seen_auth and all(a == "" for a in reg.seen_auth)


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ("{not json", "is not JSON"),
        (json.dumps({"auths": {"reg.example": {"auth": "bm8tY29sb24="}}}), "is not base64 of USER:PASSWORD"),
        (json.dumps({"auths": {"reg.example": {"auth": "%%%"}}}), "is not base64 of USER:PASSWORD"),
        (
            json.dumps({"credHelpers": {"reg.example": "vfleet-absent"}}),
            "docker-credential-vfleet-absent is not on PATH",
        ),
        (json.dumps({"auths": {"reg.example": {"identitytoken": "x"}}}), "identity token"),
    ],
)
def test_a_config_that_cannot_be_used_is_named(docker_config: Path, doc: str, words: str) -> None:
    (docker_config / "config.json").write_text(doc)
    with pytest.raises(SupplyError, match=words) as err:
        registry.credentials("reg.example")
    assert "reg.example" in str(err.value) or str(docker_config) in str(err.value)


def test_no_config_and_no_entry_mean_anonymous(docker_config: Path) -> None:
    assert registry.credentials("reg.example") is None
    _write_config(docker_config, _auths("https://index.docker.io/v1/"))
    assert registry.credentials("reg.example") is None
    hub = registry.credentials("docker.io")  # Docker Hub's login is stored under docker's old URL
    assert hub is not None and hub.username == USER


def test_a_failing_helper_is_an_error_that_does_not_echo_its_output(
    docker_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "docker-credential-broken"
    script.write_text(f"#!/bin/sh\necho 'partial {PASSWORD}'; exit 3\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    _write_config(docker_config, {"credsStore": "broken"})
    with pytest.raises(SupplyError, match=r"docker-credential-broken failed for reg.example \(exit 3\)") as err:
        registry.credentials("reg.example")
    assert PASSWORD not in str(err.value)


@pytest.mark.parametrize("ref", ["vfleet-rocm@sha256:" + "ab" * 32, "vfleet-rocm:0.30.0", "team/vfleet-rocm:1"])
def test_a_reference_without_a_registry_is_refused_naming_the_fix(ref: str) -> None:
    with pytest.raises(VfleetError) as err:
        registry_digest(ref)
    assert f"{ref} names no registry" in str(err.value) and "REGISTRY/REPO@sha256:DIGEST" in str(err.value)
    with pytest.raises(SupplyError, match="names no registry"):
        registry_manifest_digest(ref)


def test_image_resolve_prints_the_digest_reference_the_registry_names(docker_config: Path) -> None:
    """`vfleet image resolve REF --json`: the tag resolved at the registry, with the login; and a
    reference it cannot resolve is exit 1 with the reason, never a digest."""
    for reg in _serve("bearer"):
        _write_config(docker_config, _auths(reg.host))
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        argv = [sys.executable, "-m", "vfleet", "image", "resolve"]
        ok = subprocess.run(
            [*argv, f"{reg.host}/{REPO}:v1", "--json"], capture_output=True, text=True, env=env, check=False
        )
        assert ok.returncode == 0, ok.stdout + ok.stderr
        got = json.loads(ok.stdout)
        assert (got["resolved"], got["digest"], got["image"]) == (True, DIGEST, f"{reg.host}/{REPO}@{DIGEST}")
        assert PASSWORD not in ok.stdout + ok.stderr and TOKEN not in ok.stdout + ok.stderr
        bad = subprocess.run(
            [*argv, f"{reg.host}/{REPO}:v2", "--json"], capture_output=True, text=True, env=env, check=False
        )
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert json.loads(bad.stdout)["digest"] == "" and "has no manifest team/vfleet-cpu:v2 (404)" in bad.stdout
