"""`vfleet verify --url` tied to `--container` (issue 31 item 11), decided from `docker container inspect`:
the URL reaches the container when the running container publishes the URL's port on the docker host the
URL names (the local daemon: this machine), or when the URL names the container's own address on this
machine's daemon. Anything else is refused before any traffic, naming the URL, the container and the fix.
The e2e test (tests/e2e/judge/test_verify_image_digest.py) shows the refusal on the CLI with a real container."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from vfleet.errors import VfleetError
from vfleet.verify import tie

# `docker container inspect` of a running serving container (docker 20.10), the parts the tie reads:
# published as `--publish 127.0.0.1:40123:8000`, on the default bridge.
RUNNING: dict[str, Any] = {
    "Name": "/vfleet-serve",
    "State": {"Status": "running", "Running": True, "Pid": 4242},
    "HostConfig": {
        "NetworkMode": "default",
        "PortBindings": {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "40123"}]},
    },
    "NetworkSettings": {
        "Ports": {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "40123"}]},
        "Networks": {"bridge": {"IPAddress": "172.17.0.3", "GlobalIPv6Address": ""}},
    },
}

NAMES = {"node1": {"10.0.0.5"}, "node2": {"10.0.0.6"}, "localhost": {"127.0.0.1", "::1"}}
HERE = {"127.0.0.1", "::1", "192.168.1.20"}  # this machine's addresses


def resolver(host: str) -> set[str]:
    if host in NAMES:
        return NAMES[host]
    if host[0].isdigit() or ":" in host:
        return {host}
    raise VfleetError(f"{host!r} does not resolve here ([Errno -2] Name or service not known)")


def decide(url: str, info: dict[str, Any] = RUNNING, docker_host: str | None = None) -> str:
    return tie.require(url, "vfleet-serve", info, docker_host, resolver=resolver, local=HERE.__contains__)


def published(host_ip: str, host_port: str, **over: Any) -> dict[str, Any]:
    info = copy.deepcopy(RUNNING)
    info["NetworkSettings"]["Ports"] = {"8000/tcp": [{"HostIp": host_ip, "HostPort": host_port}]}
    for key, value in over.items():
        info[key] = value
    return info


FLEET_NODE = published("0.0.0.0", "8000")  # a node as the role runs it: --publish 8000:8000


@pytest.mark.parametrize(
    ("url", "info", "docker_host", "words"),
    [
        # staging and the demo: the local daemon, published on loopback
        ("http://127.0.0.1:40123", RUNNING, None, "publishes 127.0.0.1:40123->8000/tcp"),
        ("http://127.0.0.1:40123", RUNNING, "unix:///var/run/docker.sock", "publishes 127.0.0.1:40123"),
        # the DinD test fleet: DOCKER_HOST=tcp://NODE_IP:2375, the URL http://NODE_IP:8000
        ("http://10.0.0.5:8000", FLEET_NODE, "tcp://10.0.0.5:2375", "publishes 0.0.0.0:8000->8000/tcp"),
        # a production node: ssh://USER@NODE and http://NODE:8000
        ("http://node1:8000", FLEET_NODE, "ssh://root@node1", "publishes 0.0.0.0:8000"),
        ("http://10.0.0.5:8000", FLEET_NODE, "ssh://root@node1:22", "publishes 0.0.0.0:8000"),
        # the container's own address, on this machine's daemon
        ("http://172.17.0.3:8000", RUNNING, None, "172.17.0.3 is its own address"),
    ],
)
def test_a_url_that_reaches_the_container_is_tied(
    url: str, info: dict[str, Any], docker_host: str | None, words: str
) -> None:
    assert words in decide(url, info, docker_host)


@pytest.mark.parametrize(
    ("url", "info", "docker_host", "words"),
    [
        # another server on this machine: another port than the container publishes
        ("http://127.0.0.1:9000", RUNNING, None, "port 9000 is not a port the container publishes (127.0.0.1:40123->"),
        # the published port, but on another machine than the container's docker host
        ("http://10.0.0.6:8000", FLEET_NODE, "tcp://10.0.0.5:2375", "10.0.0.6 (10.0.0.6) port 8000"),
        ("http://node2:8000", FLEET_NODE, "ssh://root@node1", "on node1"),
        # the local daemon, but the URL names another machine
        ("http://10.0.0.6:40123", published("0.0.0.0", "40123"), None, "on this machine"),
        # bound to loopback only: this machine's other address reaches something else
        ("http://192.168.1.20:40123", RUNNING, None, "port 40123 is not a port the container publishes"),
        # `localhost` also resolves to ::1, which the loopback binding does not cover
        ("http://localhost:40123", RUNNING, None, "localhost (127.0.0.1, ::1) port 40123"),
        # a bridge address of another machine's container (remote daemon): not this container
        ("http://172.17.0.3:8000", RUNNING, "tcp://10.0.0.5:2375", "nor its own address (172.17.0.3)"),
        ("http://nowhere.invalid:8000", FLEET_NODE, "tcp://10.0.0.5:2375", "host 'nowhere.invalid' does not resolve"),
        ("http://127.0.0.1:40123", {**RUNNING, "State": {"Status": "exited"}}, None, "not running (exited)"),
        ("http://127.0.0.1:8000", {**RUNNING, "HostConfig": {"NetworkMode": "host"}}, None, "network mode 'host'"),
    ],
)  # fmt: skip
def test_a_url_that_goes_elsewhere_is_refused_naming_both_and_the_fix(
    url: str, info: dict[str, Any], docker_host: str | None, words: str
) -> None:
    with pytest.raises(VfleetError) as exc:
        decide(url, info, docker_host)
    msg = str(exc.value)
    assert msg.startswith(f"--url {url} does not reach --container vfleet-serve"), msg
    assert words in msg, msg
    if "running" not in words and "network mode" not in words:
        assert "docker port vfleet-serve" in msg, msg  # the fix


def test_no_published_port_and_no_network_is_refused() -> None:
    bare = copy.deepcopy(RUNNING)
    bare["NetworkSettings"] = {"Ports": {}, "Networks": {}}
    with pytest.raises(VfleetError, match=r"publishes \(no port\) on this machine, nor its own address \(none\)"):
        decide("http://127.0.0.1:40123", bare)
