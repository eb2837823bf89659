#!/usr/bin/python
# Copyright: the vfleet authors. Apache-2.0.
"""The model manifest of a node's model directory, compared with the manifest of the weights the target image
was verified and promoted with (issue 34): run on the node, before the node is drained.

The manifest is vfleet's own (vfleet/models/manifest.py, shipped to the node as this role's module_utils
vfleet_model_manifest, the same file): every file's path, size and sha256 and one digest over them. It is kept
in O(cache) on the node, keyed by (path, size, mtime, inode), so the first look hashes every file and the next
ones read only what changed; a look that used the cache then reads O(samples) random blocks of every file again
(a file altered in place that kept its size, mtime and inode: a failing disk).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: vfleet_weights
short_description: Compare a node's model directory with the promoted model manifest
options:
  root:
    description: The node's model directory (the role's vfleet_node_model_dir), mounted into the serving container.
    type: path
    required: true
  cache:
    description: The node's manifest cache, a JSON file (under the role's vfleet_node_state_dir).
    type: path
    required: true
  promoted:
    description: >-
      The weights the target image's promotion names: digest (sha256:HEX) and entries ([path, size, sha256] per
      file; absent from reports older than the entries, when only the digests can be compared).
    type: dict
    required: true
  samples:
    description: Blocks of every file read again when the cache was used.
    type: int
    default: 2
"""

RETURN = r"""
digest: {description: the node's manifest digest, type: str}
files: {description: files in the node's manifest, type: int}
bytes: {description: their bytes, type: int}
cached: {description: whether a cache was there to use (then blocks were sampled), type: bool}
seconds: {description: how long the look took, type: float}
problems: {description: one line per file that differs, is missing or extra, or failed its sampled blocks, type: list}
"""

import time
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vfleet_model_manifest import (
    FileEntry,
    Manifest,
    ManifestError,
    compare,
    compute,
    sample_check,
)

UNLISTED = (
    "the promoted report names no file list (a report of an older vfleet): only the digests were compared; "
    "`vfleet model manifest DIR` on the node and on the staging copy shows which files differ"
)


def differences(promoted: dict, seen: Manifest) -> list:
    digest = str(promoted.get("digest") or "")
    if seen.digest == digest:
        return []
    entries = promoted.get("entries") or []
    if not entries:
        return [UNLISTED]
    want = Manifest("promoted", tuple(FileEntry(str(n), int(s), str(h)) for n, s, h in entries))
    if want.digest != digest:
        return [f"the promoted file list has digest {want.digest}, not the promoted {digest}: the report is damaged"]
    # Equal file digests under other names give the same manifest digest (model signing's): compare says nothing
    # then, and the digests above would have been equal.
    return compare(want, seen) or [f"the manifests differ ({seen.digest} against {digest})"]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "cache": {"type": "path", "required": True},
            "promoted": {"type": "dict", "required": True},
            "samples": {"type": "int", "default": 2},
        },
        supports_check_mode=True,
    )
    root, cache = Path(module.params["root"]), Path(module.params["cache"])
    promoted = module.params["promoted"]
    t0 = time.monotonic()
    had_cache = cache.is_file()
    try:
        seen = compute(root, cache)
        sampled = sample_check(root, cache, module.params["samples"]) if had_cache else []
    except (OSError, ManifestError) as exc:
        module.fail_json(msg=f"{root}: cannot read the node's model directory: {exc}", problems=[str(exc)])
    module.exit_json(
        changed=False,
        digest=seen.digest,
        files=len(seen.files),
        bytes=seen.size,
        cached=had_cache,
        seconds=round(time.monotonic() - t0, 3),
        problems=sampled + differences(promoted, seen),
    )


if __name__ == "__main__":
    main()
