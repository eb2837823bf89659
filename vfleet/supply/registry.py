"""Asking a registry for a manifest, with the credentials docker itself would use.

A registry that needs a login answers 401 with a challenge (WWW-Authenticate): `Bearer realm=..,
service=.., scope=..` (the token flow of the distribution spec: fetch a token from the realm, with
basic auth when there are credentials, then send it as a bearer token) or `Basic realm=..` (send the
credentials on each request). The credentials are docker's: $DOCKER_CONFIG/config.json, else
~/.docker/config.json, read the way the docker CLI reads them: `credHelpers[HOST]`, else `credsStore`
(the program `docker-credential-NAME get`, given HOST on stdin), else `auths[HOST].auth` (base64 of
USER:PASSWORD). So whatever `docker login HOST` set up on the controller works here, and a registry
that needs credentials and gets none is a failure that names `docker login`, never a pass.

The credentials never leave this module except in the Authorization header of a request to the
registry or its token realm: no message, exception or log line carries them or a token. They are
never sent over plain http (to a registry or a token realm).

Registries as docker treats them: a registry is asked over https, with the certificate verified; a
TLS failure is an error that names the registry and the fix, never a reason to try plain http. Only a
registry the operator declares insecure (docker's ``insecure-registries`` in /etc/docker/daemon.json,
VFLEET_INSECURE_REGISTRIES, or loopback, which docker treats as insecure by default) is asked over
https without verifying the certificate and then over plain http.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import os
import re
import socket
import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from vfleet import settings
from vfleet.supply.store import SupplyError

#: Docker Hub: the name in references and its API host; its auths key is docker's historical URL.
HUB_NAMES = ("docker.io", "index.docker.io", "registry-1.docker.io")
HUB_API = "registry-1.docker.io"
HUB_AUTH_KEY = "https://index.docker.io/v1/"

#: docker's daemon configuration, whose insecure-registries vfleet honours as docker does.
DAEMON_JSON = Path("/etc/docker/daemon.json")
#: What docker treats as insecure when nothing is declared (its default insecure-registries CIDR), and ::1.
LOOPBACK = ("127.0.0.0/8", "::1/128")
INSECURE_HOW = (
    f'declare it insecure as docker does ("insecure-registries" in {DAEMON_JSON}) or in '
    'VFLEET_INSECURE_REGISTRIES (docs/supply-chain.md, "Registries")'
)

_PARAM = re.compile(r'(\w+)="([^"]*)"|(\w+)=([^\s,]+)')


@dataclass(frozen=True)
class Credentials:
    """A login for one registry. repr hides the secret, so a traceback or a debug print cannot show it."""

    username: str
    secret: str = field(repr=False)
    source: str = ""  # where it came from (config.json, credential helper NAME), for messages


def api_host(host: str) -> str:
    """The host to send API requests to: Docker Hub's names go to its API host."""
    return HUB_API if host in HUB_NAMES else host


def config_path() -> Path:
    """docker's client config: $DOCKER_CONFIG/config.json, else ~/.docker/config.json."""
    base = os.environ.get("DOCKER_CONFIG")
    return (Path(base).expanduser() if base else Path.home() / ".docker") / "config.json"


def _auth_keys(host: str) -> list[str]:
    """The keys `auths` may hold HOST under (`docker login` writes the bare host; old clients a URL)."""
    if host in HUB_NAMES:
        return [HUB_AUTH_KEY, "docker.io", "index.docker.io", "registry-1.docker.io"]
    return [host, f"https://{host}", f"http://{host}", f"https://{host}/v1/", f"https://{host}/v2/"]


def _helper(name: str, host: str, path: Path) -> Credentials | None:
    """`docker-credential-NAME get` for HOST; None when it has no credentials for HOST."""
    program = f"docker-credential-{name}"
    server = HUB_AUTH_KEY if host in HUB_NAMES else host
    try:
        proc = subprocess.run([program, "get"], input=server, capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError as exc:
        raise SupplyError(
            f"{path} names the credential helper {name!r} for {host}, but {program} is not on PATH; install it "
            f"or remove it from {path}"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise SupplyError(f"credential helper {program} did not answer for {host} within 60 s") from exc
    if proc.returncode != 0:
        # The helpers' own wording for "no entry" (docker-credential-helpers' ErrCredentialsNotFound).
        if "credentials not found" in (proc.stdout + proc.stderr).lower():
            return None
        # Its output is not shown: a broken helper may have printed part of a secret.
        raise SupplyError(
            f"credential helper {program} failed for {host} (exit {proc.returncode}); run `{program} get` by hand "
            f"with {server} on stdin to see why, or `docker login {host}` again"
        )
    try:
        data = json.loads(proc.stdout)
        username, secret = str(data["Username"]), str(data["Secret"])
    except (ValueError, KeyError, TypeError) as exc:
        raise SupplyError(f"credential helper {program} gave no Username and Secret for {host}") from exc
    if username == "<token>":
        raise SupplyError(
            f"credential helper {program} holds an identity token for {host} (an OAuth refresh token), which vfleet "
            f"cannot use; `docker login {host}` with a user name and a password or access token"
        )
    return Credentials(username, secret, f"credential helper {name}")


def credentials(host: str) -> Credentials | None:
    """The login docker would use for HOST, or None when docker has none (no config.json, no entry).
    A config.json that cannot be read, a helper that fails and an `auth` that is not base64 of
    USER:PASSWORD are errors naming the file or the helper and the fix, never silently anonymous."""
    path = config_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SupplyError(f"cannot read docker's client config {path}: {exc.strerror}") from exc
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SupplyError(f"docker's client config {path} is not JSON ({exc.msg}, line {exc.lineno}); fix it") from exc
    if not isinstance(config, dict):
        raise SupplyError(f"docker's client config {path} is not a JSON object; fix it")
    helpers = config.get("credHelpers") or {}
    keys = _auth_keys(host)
    for key in keys:
        if isinstance(helpers, dict) and helpers.get(key):
            return _helper(str(helpers[key]), host, path)
    if config.get("credsStore"):
        found = _helper(str(config["credsStore"]), host, path)
        if found is not None:
            return found
    auths = config.get("auths") or {}
    for key in keys:
        entry = auths.get(key) if isinstance(auths, dict) else None
        if not isinstance(entry, dict):
            continue
        if entry.get("identitytoken"):
            raise SupplyError(
                f"{path}: auths[{key!r}] holds an identity token, which vfleet cannot use; `docker login {host}` "
                "with a user name and a password or access token"
            )
        if not entry.get("auth"):
            continue
        try:
            user, sep, secret = base64.b64decode(str(entry["auth"]), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            sep = ""
        if not sep or not user:
            raise SupplyError(
                f"{path}: auths[{key!r}].auth is not base64 of USER:PASSWORD; `docker login {host}` again"
            )
        return Credentials(user, secret, str(path))
    return None


def declared_insecure() -> list[tuple[str, str]]:
    """(entry, where it is declared) of every registry declared insecure: docker's daemon.json
    insecure-registries, then VFLEET_INSECURE_REGISTRIES. A daemon.json that cannot be read as docker
    reads it is an error naming the file."""
    out: list[tuple[str, str]] = []
    try:
        text = DAEMON_JSON.read_text()
    except FileNotFoundError:
        text = ""
    except OSError as exc:
        raise SupplyError(f"cannot read docker's daemon configuration {DAEMON_JSON}: {exc.strerror or exc}") from exc
    if text.strip():
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SupplyError(f"{DAEMON_JSON} is not JSON ({exc.msg}, line {exc.lineno}); fix it") from exc
        entries = doc.get("insecure-registries") if isinstance(doc, dict) else None
        out += [(str(e), f"insecure-registries in {DAEMON_JSON}") for e in entries or [] if isinstance(entries, list)]
    given = settings.load().insecure_registries or ""
    out += [(e, "VFLEET_INSECURE_REGISTRIES") for e in re.split(r"[,\s]+", given) if e]
    return out


def _addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The IP addresses of HOST[:PORT] (a literal, else what the resolver says; none when it cannot)."""
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    name = name.strip("[]")
    try:
        return [ipaddress.ip_address(name)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(name, None)
    except OSError:
        return []
    return [ipaddress.ip_address(str(i[4][0]).split("%", 1)[0]) for i in infos]


def insecure(host: str) -> str:
    """Where HOST (as an image reference names it, HOST[:PORT]) is declared insecure; '' when it is not.
    An entry matches the host exactly, or is a CIDR holding one of its addresses, as docker matches them."""
    entries = [*declared_insecure(), *((c, "loopback, which docker treats as insecure") for c in LOOPBACK)]
    nets = []
    for entry, where in entries:
        if entry == host or entry.removeprefix("http://") == host:
            return where
        try:
            nets.append((ipaddress.ip_network(entry, strict=False), where))
        except ValueError:
            continue
    for addr in _addresses(host) if nets else []:
        for net, where in nets:
            if addr.version == net.version and addr in net:
                return where
    return ""


def is_tls_error(exc: BaseException) -> bool:
    """Whether EXC (an httpx error) is a TLS failure: a certificate not trusted, or a server that does
    not speak TLS."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError) or "SSL" in str(seen) or "TLS" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def tls_failure(host: str, url: str, exc: BaseException) -> SupplyError:
    return SupplyError(
        f"registry {host}: the TLS connection to {url} failed ({exc}); vfleet asks a registry over https only. "
        f"Fix: if {host} serves https with a certificate of a private CA, make this controller trust that CA "
        f"(SSL_CERT_FILE=CA.pem); if it serves plain http, {INSECURE_HOW}"
    )


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    """(scheme, parameters) of a WWW-Authenticate header: `Bearer realm="..",service="..",scope=".."`."""
    scheme, _, rest = header.strip().partition(" ")
    params = {m.group(1) or m.group(3): m.group(2) if m.group(1) else m.group(4) for m in _PARAM.finditer(rest)}
    return scheme.lower(), params


class Session:
    """GETs against one registry host that answer its challenge once and reuse the token. Credentials
    are looked up only when the registry asks for them."""

    def __init__(self, host: str, scheme: str, timeout: float = 15, verify: bool = True) -> None:
        self.host = host
        self.base = f"{scheme}://{api_host(host)}"
        self.timeout = timeout
        self.verify = verify  # False only for a registry declared insecure (as docker skips it there)
        self._auth: dict[str, str] = {}
        self._creds: Credentials | None = None
        self._looked_up = False

    def _credentials(self, url: str = "") -> Credentials | None:
        """docker's login for the host, for a request to URL (default the registry); never where it, or a
        token got with it, would travel over plain http."""
        if not (self.base.startswith("https://") and (url or self.base).startswith("https://")):
            return None
        if not self._looked_up:
            self._creds, self._looked_up = credentials(self.host), True
        return self._creds

    def _need_login(self, why: str, url: str = "") -> SupplyError:
        """The error for a registry that wants a login: over plain http (the registry's or the token realm's
        URL), that vfleet sends none there; else that docker has none for it."""
        plain = next((u for u in (self.base, url) if u and not u.startswith("https://")), "")
        if plain:
            return SupplyError(
                f"registry {self.host} asks for a login over plain http ({plain}); vfleet never sends "
                f"credentials over http: serve {self.host} (and its token service) over https"
            )
        return SupplyError(
            f"registry {self.host} {why}; log in on this controller with `docker login {self.host}` (vfleet reads "
            f"docker's credentials from {config_path()}: auths, credHelpers or credsStore)"
        )

    def _basic(self, creds: Credentials) -> str:
        return "Basic " + base64.b64encode(f"{creds.username}:{creds.secret}".encode()).decode()

    def _token(self, params: dict[str, str]) -> str:
        realm = params.get("realm")
        if not realm:
            raise SupplyError(f"registry {self.host} asked for a bearer token but named no realm to get it from")
        query = {k: v for k, v in params.items() if k in ("service", "scope")}
        creds = self._credentials(realm)
        headers = {"Authorization": self._basic(creds)} if creds else {}
        try:
            resp = httpx.get(realm, params=query, headers=headers, timeout=self.timeout, verify=self.verify)
        except httpx.HTTPError as exc:
            raise SupplyError(f"cannot reach the token service {realm} of registry {self.host}: {exc}") from exc
        if resp.status_code in (401, 403):
            if creds is None:
                raise self._need_login(f"refuses an anonymous token ({resp.status_code} from {realm})", realm)
            raise SupplyError(
                f"the token service {realm} of registry {self.host} refused the login of {creds.username} from "
                f"{creds.source} ({resp.status_code}); `docker login {self.host}` again"
            )
        if resp.status_code != 200:
            raise SupplyError(f"the token service {realm} of registry {self.host} answered {resp.status_code}")
        try:
            body = resp.json()
            token = str(body.get("token") or body.get("access_token") or "")
        except (ValueError, AttributeError):
            token = ""
        if not token:
            raise SupplyError(f"the token service {realm} of registry {self.host} gave no token")
        return "Bearer " + token

    def get(self, path: str, headers: dict[str, str]) -> httpx.Response:
        """GET BASE/PATH; on a 401 answer the challenge once and ask again. httpx.HTTPError when the
        host does not answer; SupplyError when the registry refuses the login or needs one."""
        url = self.base + path
        resp = httpx.get(url, headers={**headers, **self._auth}, timeout=self.timeout, verify=self.verify)
        if resp.status_code != 401:
            return self._checked(resp)
        scheme, params = _challenge(resp.headers.get("www-authenticate", ""))
        if scheme == "bearer":
            self._auth = {"Authorization": self._token(params)}
        elif scheme == "basic":
            creds = self._credentials()
            if creds is None:
                raise self._need_login("needs a login (Basic) and docker has none for it")
            self._auth = {"Authorization": self._basic(creds)}
        else:
            raise SupplyError(
                f"registry {self.host} asked for authentication vfleet does not speak "
                f"({scheme or 'no WWW-Authenticate challenge'}); it speaks the Bearer token flow and Basic"
            )
        again = httpx.get(url, headers={**headers, **self._auth}, timeout=self.timeout, verify=self.verify)
        return self._checked(again)

    def _checked(self, resp: httpx.Response) -> httpx.Response:
        if resp.status_code == 401:
            creds = self._credentials() if "Authorization" in self._auth else None
            if creds is None:
                raise self._need_login("needs a login (401) and docker has none for it")
            raise SupplyError(
                f"registry {self.host} refused the login of {creds.username} from {creds.source} (401); "
                f"`docker login {self.host}` again"
            )
        if resp.status_code == 403:
            raise SupplyError(f"registry {self.host} denies access (403) to {resp.request.url.path}")
        return resp
