"""Whether `vfleet verify --url` reaches the container `--container` names (issue 31 item 11).

The report attests the image the container runs and judges the log the container wrote, so the
traffic must go to that container, not to another server. Before any traffic, from `docker container
inspect` of the container (on `--docker-host`), the URL is tied to it in one of two ways, else verify
refuses, naming both and the fix:

- published: the running container publishes the URL's port (`--publish [IP:]PORT:CPORT`), and every
  address the URL's host resolves to is the docker host's: an address its name in `--docker-host`
  resolves to, or, for the local daemon, an address of this machine (and the binding's own address when
  it is bound to one);
- its own address: every address the URL's host resolves to is the container's own address on one of
  its networks, and the daemon is this machine's (a bridge address of another machine names another
  container there). What listens on the container's own address is in its network namespace.

A container that is not running serves nothing, and one on the host's network (`--network host`) or
another container's publishes nothing to check: each is refused.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from vfleet.errors import VfleetError

#: what a host name resolves to (its IP addresses); a name that does not resolve raises VfleetError
Resolver = Callable[[str], set[str]]
#: whether an IP address is one of this machine's
IsLocal = Callable[[str], bool]

WILDCARD = {"", "0.0.0.0", "::"}
LOCAL_SCHEMES = {"unix", "fd", "npipe"}


@dataclass(frozen=True)
class Binding:
    """One published port: HOST_IP:HOST_PORT -> the container's PORT/PROTO."""

    host_ip: str
    host_port: int
    container_port: str

    def __str__(self) -> str:
        ip = self.host_ip or "0.0.0.0"
        return f"{'[' + ip + ']' if ':' in ip else ip}:{self.host_port}->{self.container_port}"


def resolve(host: str) -> set[str]:
    """The IP addresses HOST resolves to here (as the suite's HTTP client would connect)."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise VfleetError(f"{host!r} does not resolve here ({exc})") from exc
    return {_norm(str(info[4][0])) for info in infos}


def is_local(addr: str) -> bool:
    """Whether ADDR is this machine's: a loopback address, or one a socket can be bound to."""
    ip = ipaddress.ip_address(addr)
    if ip.is_loopback:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((addr, 0))
    except OSError:
        return False
    return True


def _norm(addr: str) -> str:
    return str(ipaddress.ip_address(addr.split("%", 1)[0]))


def url_host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if not parts.hostname:
        raise VfleetError(f"--url {url!r}: names no host; expected http://HOST:PORT")
    try:
        port = parts.port
    except ValueError as exc:
        raise VfleetError(f"--url {url!r}: {exc}") from exc
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def bindings(info: dict[str, Any]) -> list[Binding]:
    """The container's published TCP ports, as docker reports them for the running container."""
    ports = (info.get("NetworkSettings") or {}).get("Ports") or {}
    out: list[Binding] = []
    for cport, binds in sorted(ports.items()):
        if not str(cport).endswith("/tcp"):
            continue
        for b in binds or []:
            if str(b.get("HostPort") or "").isdigit():
                out.append(Binding(str(b.get("HostIp") or ""), int(b["HostPort"]), str(cport)))
    return out


def own_addresses(info: dict[str, Any]) -> set[str]:
    """The container's own addresses on its networks."""
    nets = (info.get("NetworkSettings") or {}).get("Networks") or {}
    found = {str(n.get(k) or "") for n in nets.values() for k in ("IPAddress", "GlobalIPv6Address")}
    return {_norm(a) for a in found if a}


def daemon_host(docker_host: str | None) -> str | None:
    """The machine of the docker daemon: the host of a tcp:// or ssh:// DOCKER_HOST; None for this machine's
    (no --docker-host, unix://, fd://)."""
    if not docker_host:
        return None
    parts = urlsplit(docker_host)
    if parts.scheme in LOCAL_SCHEMES:
        return None
    if not parts.hostname:
        raise VfleetError(f"--docker-host {docker_host!r}: names no host")
    return parts.hostname


def _where(docker_host: str | None) -> str:
    return f"DOCKER_HOST={docker_host}" if docker_host else "the local docker"


def require(
    url: str,
    container: str,
    info: dict[str, Any],
    docker_host: str | None,
    resolver: Resolver = resolve,
    local: IsLocal = is_local,
) -> str:
    """How URL reaches CONTAINER (a sentence for the report), or VfleetError naming both and the fix.
    ``info`` is `docker container inspect CONTAINER` (on ``docker_host``)."""
    host, port = url_host_port(url)
    head = f"--url {url} does not reach --container {container} ({_where(docker_host)})"
    fix = (
        f"point --url at the port the container publishes on its docker host (docker port {container}), "
        f"with the host named as in --docker-host, or at the container's own address on this machine"
    )
    state = info.get("State") or {}
    if not state.get("Running"):
        raise VfleetError(
            f"{head}: the container is not running ({state.get('Status') or 'no state'}), so nothing it runs "
            f"answers there; start it, or name the container that serves {url}"
        )
    mode = str((info.get("HostConfig") or {}).get("NetworkMode") or "")
    if mode == "host" or mode.startswith("container:"):
        raise VfleetError(
            f"{head}: the container uses network mode {mode!r} and publishes no port, so what answers on port "
            f"{port} cannot be tied to it; run it with --publish HOST_PORT:PORT"
        )
    try:
        addrs = resolver(host)
    except VfleetError as exc:
        raise VfleetError(f"{head}: --url's host {exc}; {fix}") from exc
    daemon = daemon_host(docker_host)
    tied = _published(port, addrs, bindings(info), daemon, resolver, local)
    if tied:
        return f"{url} reaches container {container}: it publishes {tied}"
    own = own_addresses(info)
    if own and addrs <= own and _daemon_is_here(daemon, resolver, local):
        return f"{url} reaches container {container}: {host} is its own address ({', '.join(sorted(own))})"
    published = ", ".join(str(b) for b in bindings(info)) or "no port"
    raise VfleetError(
        f"{head}: {host} ({', '.join(sorted(addrs))}) port {port} is not a port the container publishes "
        f"({published}) on {daemon or 'this machine'}, nor its own address ({', '.join(sorted(own)) or 'none'}); "
        f"the traffic would go to another server than the one whose image and log the report names. {fix}"
    )


def _daemon_is_here(daemon: str | None, resolver: Resolver, local: IsLocal) -> bool:
    if daemon is None:
        return True
    try:
        return all(local(a) for a in resolver(daemon))
    except VfleetError:
        return False


def _published(
    port: int, addrs: set[str], binds: list[Binding], daemon: str | None, resolver: Resolver, local: IsLocal
) -> str | None:
    """The binding of PORT that ADDRS reach on the daemon's machine, or None."""
    mine = [b for b in binds if b.host_port == port]
    if not mine:
        return None
    if daemon is None:
        on_host = all(local(a) for a in addrs)
    else:
        try:
            on_host = addrs <= resolver(daemon)
        except VfleetError:
            return None
    if not on_host:
        return None
    for b in mine:
        if b.host_ip in WILDCARD or addrs <= {_norm(b.host_ip)}:
            return str(b)
    return None
