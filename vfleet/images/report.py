"""What an image is made of (layers and their sizes), and removing an image vfleet made."""

from __future__ import annotations

import json
from typing import Any

from vfleet.dockerd import DockerError, docker
from vfleet.images.refs import ImageError


def _makes_layer(created_by: str) -> bool:
    """Whether a history row made a filesystem layer: the imported base, RUN, COPY, ADD, WORKDIR."""
    step = created_by.replace("/bin/sh -c #(nop) ", "").strip()
    if not step:
        return True  # `docker import`
    return step.split(" ", 1)[0].upper() in {"RUN", "COPY", "ADD", "WORKDIR", "/BIN/SH"}


def layers(ref: str) -> list[dict[str, Any]]:
    """The image's history, oldest first: created_by, size in bytes, and the layer digest where one exists."""
    hist = docker("history", "--no-trunc", "--human=false", "--format", "{{json .}}", ref).stdout
    rows = [json.loads(line) for line in hist.splitlines() if line.strip()]
    rows.reverse()
    inspect = json.loads(docker("image", "inspect", ref).stdout)[0]
    diff_ids: list[str] = list(inspect["RootFS"]["Layers"])
    makers = [r for r in rows if _makes_layer(str(r.get("CreatedBy", "")))]
    if len(makers) != len(diff_ids):
        raise ImageError(f"{ref}: {len(makers)} layer-making history rows but {len(diff_ids)} layers")
    it = iter(diff_ids)
    out: list[dict[str, Any]] = []
    for row in rows:
        created_by = str(row.get("CreatedBy", ""))
        out.append(
            {
                "created_by": created_by,
                "size": int(row.get("Size", 0)),
                "layer": next(it) if _makes_layer(created_by) else None,
            }
        )
    return out


def layer_report(ref: str) -> str:
    rows = layers(ref)
    total = sum(r["size"] for r in rows)
    lines = [f"{ref}: {total:,} bytes in {sum(1 for r in rows if r['size'])} non-empty layers"]
    for r in rows:
        if r["size"] == 0:
            continue
        step = " ".join(r["created_by"].split())[:90] or "(imported base filesystem)"
        lines.append(f"{r['size']:>15,}  {step}")
    return "\n".join(lines)


def remove_image(ref: str) -> None:
    """Remove one image by exact name, only if vfleet made it."""
    res = docker("image", "inspect", "--format", '{{index .Config.Labels "org.vfleet.managed"}}', ref, check=False)
    if res.returncode != 0:
        return
    if res.stdout.strip() != "true":
        raise DockerError(f"{ref} is not labelled org.vfleet.managed=true; not removing it")
    docker("image", "rm", ref, check=False)
