"""Images of the test fleet, all made locally (no registry is reachable):

* the node image: Debian minbase (debootstrap) with docker.io, python3 and docker-registry. It runs
  as a Docker-in-Docker fleet node (its own dockerd and image store) and as the local registry;
* light "fake server" images (a static busybox serving /health, /metrics and /verify) that the
  fault scenarios deploy: they boot in a second, so a fault test does not pay for a vLLM boot.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from lab.docker import docker, docker_bin, image_exists
from vfleet import PACKAGE_DIR
from vfleet.errors import VfleetError
from vfleet.images.base import debian_image

#: Bump the recipe tag whenever the node image recipe changes.
NODE_IMAGE = "vfleet-fleet-node:bookworm-r4"
DEBIAN_SUITE = "bookworm"
NODE_PACKAGES = [
    "docker.io",
    "python3",
    "python3-apt",
    "iptables",
    "docker-registry",
    "ca-certificates",
    "busybox-static",
    # The test fleet's balancer runs from the same image (the vfleet_lb role finds them installed).
    "haproxy",
    "socat",
]
#: The revision suffix changes with FAKE_START: images are rebuilt only when their tag is missing.
FAKE_REPO = "vfleet-fake-r3"
#: variant -> (serves /health, serves /verify, vllm:num_requests_running)
FAKE_VARIANTS: dict[str, tuple[bool, bool, int]] = {
    "good-1": (True, True, 0),
    "good-2": (True, True, 0),
    "good-3": (True, True, 0),
    "noverify": (True, False, 0),
    "unhealthy": (False, False, 0),
    "busy": (True, True, 2),
}

NODE_INIT = """#!/bin/sh
# Fleet node init: a nested dockerd. VFLEET_DOCKERD_ARGS carries e.g. --insecure-registry HOST:PORT.
# It also listens on TCP 2375 of the fleet's own test network, so that the controller's docker CLI
# reaches it (DOCKER_HOST=tcp://NODE:2375) as it would reach a production node over SSH.
mkdir -p /etc/vfleet /srv/models /var/lib/vfleet
# A node that was stopped or killed and started again keeps its files but none of its processes:
# the daemons' pid files are stale (dockerd refuses to start over one).
rm -f /var/run/docker.pid /var/run/docker/containerd/containerd.pid
exec dockerd --host unix:///var/run/docker.sock --host tcp://0.0.0.0:2375 $VFLEET_DOCKERD_ARGS \\
    >/var/log/dockerd.log 2>&1
"""

REGISTRY_CONFIG = """version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: /var/lib/vfleet-registry
  delete:
    enabled: true
http:
  addr: :5000
"""

FAKE_START = """#!/bin/busybox sh
# Stand-in server of the fault scenarios: not vLLM. Variant {variant}.
/bin/busybox mkdir -p /www
{health}
{verify}
echo 'vllm:num_requests_running{{model_name="tiny"}} {running}' > /www/metrics
echo 'vllm:num_requests_waiting{{model_name="tiny"}} 0' >> /www/metrics
echo '{variant}' > /www/variant
{log}
/bin/busybox httpd -f -p 8000 -h /www &
# PID 1 ignores a signal it has no handler for: stop on SIGTERM as a server would.
trap 'kill $!; exit 0' TERM INT
wait
"""


def cache_dir() -> Path:
    path = PACKAGE_DIR.parent / ".cache" / "fleet"
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_node_image(tag: str = NODE_IMAGE) -> str:
    """Build the node image once (about 2 minutes); later calls return at once."""
    if image_exists(tag):
        return tag
    return debian_image(
        tag,
        DEBIAN_SUITE,
        NODE_PACKAGES,
        labels={"org.vfleet.role": "fleet-node"},
        changes=[
            'ENTRYPOINT ["/usr/local/sbin/vfleet-node-init"]',
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ],
        drop=["usr/share/doc", "usr/share/man", "usr/share/locale", "var/cache/apt/archives"],
        files={
            "usr/local/sbin/vfleet-node-init": (NODE_INIT, 0o755),
            "etc/vfleet-registry.yml": (REGISTRY_CONFIG, 0o644),
        },
    )


def build_fake_images(tag_prefix: str = FAKE_REPO, node_image: str = NODE_IMAGE) -> dict[str, str]:
    """Build every fake-server variant as TAG_PREFIX:VARIANT; two layers, the busybox one shared."""
    refs = {v: f"{tag_prefix}:{v}" for v in FAKE_VARIANTS}
    if all(image_exists(r) for r in refs.values()):
        return refs
    with tempfile.TemporaryDirectory(prefix="fake-", dir=cache_dir()) as tmp:
        ctx = Path(tmp)
        cid = docker("create", "--label", "org.vfleet.role=scratch", node_image).strip()
        try:
            docker("cp", f"{cid}:/bin/busybox", str(ctx / "busybox"))
        finally:
            docker("rm", "--force", cid, check=False)
        for variant, (health, verify, running) in FAKE_VARIANTS.items():
            app = ctx / f"app-{variant}"
            app.mkdir()
            (app / "start.sh").write_text(
                FAKE_START.format(
                    variant=variant,
                    health="echo ok > /www/health" if health else "# no /health: never becomes healthy",
                    verify="echo verified > /www/verify" if verify else "# no /verify: boot-verify stand-in fails",
                    running=running,
                    # A server log on both streams: a variant that fails boot-verify writes a fault line on
                    # stderr between two stdout lines, as vLLM would (the kept log's order, the first fault).
                    log="\n".join(
                        [
                            f"echo 'INFO 12-06 00:00:00 [standin.py:1] stand-in {variant} starting'",
                            "/bin/busybox sleep 0.01",
                            "echo 'ERROR 12-06 00:00:00 [standin.py:2] stand-in fault: this variant fails "
                            "boot-verify' >&2"
                            if not verify
                            else "# no fault line: this variant passes boot-verify",
                            "/bin/busybox sleep 0.01",
                            f"echo 'INFO 12-06 00:00:00 [standin.py:3] stand-in {variant} serving on port 8000'",
                        ]
                    ),
                )
            )
            (ctx / f"Dockerfile.{variant}").write_text(
                "FROM scratch\nCOPY busybox /bin/busybox\n"
                f"COPY app-{variant}/ /\n"
                'ENTRYPOINT ["/bin/busybox", "sh", "/start.sh"]\n'
                f"LABEL org.vfleet.role=fake-server org.vfleet.fake-variant={variant}\n"
            )
            proc = subprocess.run(
                [
                    docker_bin(),
                    "build",
                    "--quiet",
                    "-f",
                    str(ctx / f"Dockerfile.{variant}"),
                    "-t",
                    refs[variant],
                    str(ctx),
                ],
                capture_output=True,
                timeout=300,
                check=False,
                env={**os.environ, "DOCKER_BUILDKIT": "0"},
            )
            if proc.returncode != 0:
                raise VfleetError(
                    f"building fake image {refs[variant]} failed: {proc.stderr.decode(errors='replace')[-500:]}"
                )
    return refs
