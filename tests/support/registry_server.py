"""A small registry served here by http.server that speaks the registry protocol (the 401 challenge, the
token realm, the manifest with its Docker-Content-Digest), over TLS or plain http:
tests/integration/build/test_registry_auth.py tests vfleet's registry client against it, and the supply-chain
and rollback gate tests resolve through it."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

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
    scheme: str = "http"


@dataclass(frozen=True)
class Tls:
    ca: Path  # the CA certificate a controller would trust (SSL_CERT_FILE)
    cert: Path  # the registry's certificate (for 127.0.0.1) and its key
    key: Path


def handler(reg: Registry) -> type[BaseHTTPRequestHandler]:
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
                    f'Bearer realm="{reg.scheme}://{reg.host}/token",service="test-registry",'
                    f'scope="repository:{REPO}:pull"'
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


def serve(mode: str, tls: Tls | None = None) -> Iterator[Registry]:
    """A registry on 127.0.0.1: over TLS with TLS's certificate, else plain http."""
    reg = Registry(mode, scheme="https" if tls else "http")
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(reg))
    if tls is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tls.cert, tls.key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    reg.host = f"127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield reg
    finally:
        server.shutdown()
        server.server_close()
