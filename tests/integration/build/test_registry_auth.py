"""Registry login (vfleet.supply.registry): docker's config.json (auths, credHelpers, credsStore) and
the registry's two challenges, the Bearer token flow and Basic, against a small registry served here by
http.server that speaks that protocol (the 401 challenge, the token realm, the manifest with its
Docker-Content-Digest), over TLS with a certificate of a CA made here (trusted through SSL_CERT_FILE, as
an operator trusts a private CA) or over plain http. It is a server of the real protocol, not a stand-in
for vfleet's code: what is tested is the client, through the same functions the supply-chain gate and
`vfleet promote` call. The credential helper is a real executable on PATH, as docker's are.

Loopback registries are insecure by docker's default, and so by vfleet's; the tests of the https-only
rule take that default away (registry.LOOPBACK) and point docker's daemon.json at a file of their own."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.registry_server import CONFIG, DIGEST, PASSWORD, REPO, TOKEN, USER, Registry, Tls, serve

from vfleet.errors import VfleetError
from vfleet.supply import registry
from vfleet.supply.identity import registry_manifest_digest, resolve
from vfleet.supply.store import SupplyError
from vfleet.verify.record.image import registry_digest


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    """A CA and a server certificate it signed for 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d = tmp_path_factory.mktemp("tls")
    now = dt.datetime.now(dt.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "vfleet test registry CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    out = Tls(d / "ca.pem", d / "cert.pem", d / "key.pem")
    out.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    out.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return out


@pytest.fixture
def https_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No registry declared insecure: loopback not by default, an empty daemon.json (returned, to write
    insecure-registries into), no VFLEET_INSECURE_REGISTRIES."""
    daemon = tmp_path / "daemon.json"
    daemon.write_text("{}")
    monkeypatch.setattr(registry, "LOOPBACK", ())
    monkeypatch.setattr(registry, "DAEMON_JSON", daemon)
    monkeypatch.delenv("VFLEET_INSECURE_REGISTRIES", raising=False)
    return daemon


@pytest.fixture(params=["bearer", "basic"])
def locked(
    request: pytest.FixtureRequest, tls: Tls, https_only: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Registry]:
    """A registry that needs a login, over https with a certificate this controller trusts (SSL_CERT_FILE)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca))
    yield from serve(request.param, tls)


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
    for reg in serve("none"):
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


def test_image_resolve_prints_the_digest_reference_the_registry_names(docker_config: Path, tls: Tls) -> None:
    """`vfleet image resolve REF --json`: the tag resolved at the registry, with the login; and a
    reference it cannot resolve is exit 1 with the reason, never a digest."""
    for reg in serve("bearer", tls):
        _write_config(docker_config, _auths(reg.host))
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3]), "SSL_CERT_FILE": str(tls.ca)}
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


def test_a_tls_failure_is_an_error_naming_the_registry_and_the_fix(
    https_only: Path, tls: Tls, docker_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31: a registry whose https fails is not asked over plain http (where anyone on the path could
    answer with a digest). A plain-http registry and an https one whose CA this controller does not trust
    are both TLS failures, named with the registry and the fix; the plain-http one is never asked."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    for reg in serve("none"):
        with pytest.raises(SupplyError) as err:
            registry_manifest_digest(f"{reg.host}/{REPO}:v1")
        text = str(err.value)
        assert text.startswith(f"registry {reg.host}: the TLS connection to https://{reg.host}/v2/{REPO}/manifests/v1")
        assert '"insecure-registries" in' in text and "VFLEET_INSECURE_REGISTRIES" in text, text
        assert not reg.seen_auth, "the registry was asked over plain http"
    for reg in serve("none", tls):
        with pytest.raises(SupplyError) as err:
            resolve(f"{reg.host}/{REPO}:v1")
        assert f"registry {reg.host}: the TLS connection" in str(err.value), err.value
        assert "SSL_CERT_FILE=CA.pem" in str(err.value) and "CERTIFICATE_VERIFY_FAILED" in str(err.value)
        monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca))  # the fix it names
        assert registry_manifest_digest(f"{reg.host}/{REPO}:v1") == DIGEST


@pytest.mark.parametrize("how", ["setting", "setting-cidr", "daemon.json", "loopback"])
def test_plain_http_only_for_a_registry_declared_insecure(
    https_only: Path, docker_config: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """An http registry is asked over http only when declared insecure: by VFLEET_INSECURE_REGISTRIES (its
    HOST:PORT or a CIDR holding it), by docker's daemon.json insecure-registries, or as loopback (docker's
    default); the error when it is not says how it was asked."""
    for reg in serve("none"):
        if how == "setting":
            monkeypatch.setenv("VFLEET_INSECURE_REGISTRIES", f"other.example:5000, {reg.host}")
        elif how == "setting-cidr":
            monkeypatch.setenv("VFLEET_INSECURE_REGISTRIES", "127.0.0.0/8")
        elif how == "daemon.json":
            https_only.write_text(json.dumps({"insecure-registries": [reg.host]}))
        else:
            monkeypatch.setattr(registry, "LOOPBACK", ("127.0.0.0/8",))
        assert registry.insecure(reg.host), how
        assert registry_manifest_digest(f"{reg.host}/{REPO}:v1") == DIGEST
        assert reg.seen_auth == [""], reg.seen_auth  # one request over http, after https failed


def test_a_bad_daemon_json_is_named(https_only: Path) -> None:
    https_only.write_text("{not json")
    with pytest.raises(SupplyError, match=f"{https_only} is not JSON"):
        registry.insecure("reg.example:5000")


@pytest.mark.parametrize("mode", ["basic", "bearer"])
def test_no_credentials_are_sent_over_http(
    https_only: Path, docker_config: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Issue 31: a registry declared insecure that answers a challenge over http gets no login, neither
    Basic nor a token fetched with it; the error names the registry and that vfleet sends none over http."""
    for reg in serve(mode):
        monkeypatch.setenv("VFLEET_INSECURE_REGISTRIES", reg.host)
        _write_config(docker_config, _auths(reg.host))
        with pytest.raises(SupplyError) as err:
            registry_manifest_digest(f"{reg.host}/{REPO}:v1")
        text = str(err.value)
        assert f"registry {reg.host} asks for a login over plain http" in text, text
        assert "vfleet never sends credentials over http" in text and PASSWORD not in text
        assert reg.seen_auth and all(a == "" for a in reg.seen_auth), reg.seen_auth


def test_a_test_fleet_declares_its_registry_insecure(https_only: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test fleet's registry and mirror serve plain http on the fleet network; starting or loading the
    fleet declares them (VFLEET_INSECURE_REGISTRIES, kept beside what the operator set), nothing else."""
    from lab.testfleet import Fleet, declare_insecure

    monkeypatch.setenv("VFLEET_INSECURE_REGISTRIES", "mine.example:5000")
    fleet = Fleet("t", "reg", "10.213.9.2:5000", "127.0.0.1:1", mirror_addr="10.213.9.4:5000")
    assert not registry.insecure(fleet.registry_addr)
    declare_insecure(fleet)
    declare_insecure(fleet)  # once each
    assert os.environ["VFLEET_INSECURE_REGISTRIES"] == "mine.example:5000,10.213.9.2:5000,10.213.9.4:5000"
    for host in (fleet.registry_addr, fleet.mirror_addr, "mine.example:5000"):
        assert registry.insecure(host) == "VFLEET_INSECURE_REGISTRIES", host
    assert not registry.insecure("10.213.9.3:5000")
