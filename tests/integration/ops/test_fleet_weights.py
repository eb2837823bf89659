"""The node's weights against the promoted manifest (issue 34, item 3): the role's weights.yml, which deploy.yml runs
on every node of a rollout or rollback before anything is drained, run by ansible-playbook on this machine as the
node (a local connection), with the real module (vfleet_weights, vfleet's manifest code as its module_utils)
against a real model directory and its cache in the node's state directory.

The promoted weights are what `vfleet promote --check --json` gives the preflight: the digest and the file list of
the report the promotion names (tests/integration/judge/test_promotion.py checks that hand-over; the lifecycle test
walks the whole path on the test fleet with the tiny model, promotion check on). Each fault of the issue: one
flipped byte (a rewrite, then a failing disk's flip that keeps size, mtime and inode, which only the cache's sampled
blocks see), a truncated shard, an extra file, a missing tokenizer file and another model revision; then what could
not be checked: no model directory, a module that cannot run. Each stops the node naming the node, the file and both
digests; a directory put right passes again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vfleet.fleet.ansible import env as ansible_env
from vfleet.models import manifest as mm

PLAY = """- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Check the weights as deploy.yml does
      ansible.builtin.include_role:
        name: vfleet_node
        tasks_from: weights
"""
NODE = "localhost"


def _model(root: Path) -> None:
    root.mkdir(parents=True)
    rng = __import__("random").Random(34)
    # Two blocks of the cache's block size, so that a sampled look (2 blocks per file) reads every block of it.
    (root / "model-00001-of-00002.safetensors").write_bytes(rng.randbytes(mm.BLOCK + 4096))
    (root / "model-00002-of-00002.safetensors").write_bytes(rng.randbytes(200_000))
    (root / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}))
    (root / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}}))


def _promoted(root: Path) -> dict[str, Any]:
    m = mm.compute(root)
    return {"digest": m.digest, "entries": [[f.name, f.size, f.sha256] for f in m.files], "root": "/models/m"}


class Node:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.models = tmp / "models"
        self.state = tmp / "state"
        self.state.mkdir()
        _model(self.models)
        self.promoted = _promoted(self.models)
        (tmp / "play.yml").write_text(PLAY)

    def check(self, **extra: Any) -> subprocess.CompletedProcess[str]:
        variables = {
            "vfleet_node_model_dir": str(self.models),
            "vfleet_node_state_dir": str(self.state),
            "vfleet_node__promoted_weights": self.promoted,
            "ansible_python_interpreter": sys.executable,
            **extra,
        }
        (self.tmp / "vars.json").write_text(json.dumps(variables))
        argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", f"{NODE},", str(self.tmp / "play.yml")]
        argv += ["-e", f"@{self.tmp / 'vars.json'}"]
        proc = subprocess.run(argv, env=ansible_env(), capture_output=True, text=True, timeout=300, check=False)
        proc.stdout += proc.stderr
        return proc


def _stopped(proc: subprocess.CompletedProcess[str], node: Node, *named: str) -> str:
    text = " ".join(proc.stdout.split())
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert f"{NODE}: the weights in {node.models} are not the ones the image was verified and promoted with" in text
    assert f"({node.promoted['digest']})" in text, text[-3000:]
    assert "The node was not drained and goes on serving what it served" in text, text[-3000:]
    for n in named:
        assert n in text, text[-3000:]
    return text


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_the_promoted_weights_pass_first_hashed_then_from_the_cache(node: Node) -> None:
    for _ in range(3):  # the first look hashes every file and writes the cache; the next ones read it
        proc = node.check()
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert "Stop this node unless its weights are the promoted ones] *" in proc.stdout
        assert "skipping: [localhost]" in proc.stdout
    cache = json.loads((node.state / "weights-manifest-cache.json").read_text())
    assert set(cache["files"]) == {e[0] for e in node.promoted["entries"]}


@pytest.mark.parametrize("how", ["rewritten", "failing disk"])
def test_one_flipped_byte_in_a_shard_stops_the_node(node: Node, how: str) -> None:
    assert node.check().returncode == 0  # the cache of the good directory
    shard = node.models / "model-00001-of-00002.safetensors"
    st = shard.stat()
    with shard.open("r+b") as fh:  # in place: the same inode
        fh.seek(mm.BLOCK + 100)
        byte = fh.read(1)
        fh.seek(mm.BLOCK + 100)
        fh.write(bytes([byte[0] ^ 0x01]))
    if how == "failing disk":  # nothing the cache keys on moved: only the sampled blocks can see it
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
        text = _stopped(node.check(), node, f"{shard.name}: block 1 (bytes {mm.BLOCK}-")
        assert "differs from when it was hashed" in text
    else:
        _stopped(node.check(), node, f"{shard.name}: sha256 ", "(same size: altered in place)")


def test_a_truncated_shard_stops_the_node(node: Node) -> None:
    shard = node.models / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:150_000])
    _stopped(node.check(), node, f"{shard.name}: 150000 bytes where the promoted file has 200000 (truncated")


def test_an_extra_file_stops_the_node(node: Node) -> None:
    (node.models / "notes.txt").write_text("someone's local experiment\n")
    _stopped(node.check(), node, "notes.txt: an extra file, not in the promoted manifest")


def test_a_missing_tokenizer_file_stops_the_node(node: Node) -> None:
    (node.models / "tokenizer.json").unlink()
    _stopped(node.check(), node, "tokenizer.json: missing (promoted: ")


def test_another_model_revision_stops_the_node_and_the_promoted_one_passes_again(node: Node) -> None:
    good = node.tmp / "good"
    shutil.copytree(node.models, good)
    (node.models / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 96}))
    (node.models / "model-00002-of-00002.safetensors").write_bytes(b"\x02" * 200_000)
    text = _stopped(node.check(), node, "config.json: ", "model-00002-of-00002.safetensors: sha256 ")
    assert f"the node holds {_promoted(node.models)['digest']}" in text, text[-3000:]
    shutil.rmtree(node.models)
    shutil.copytree(good, node.models)  # the promoted revision put back (new inodes and times: hashed again)
    proc = node.check()
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_what_could_not_be_checked_stops_the_node(node: Node) -> None:
    """No pass where nothing was compared: a node without its model directory, and a module that cannot run on the
    node (its Python is missing), each stop the node."""
    shutil.rmtree(node.models)
    _stopped(node.check(), node, "the node holds weights that could not be read", "models: not a directory")
    _model(node.models)
    text = _stopped(node.check(ansible_python_interpreter="/nonexistent/python3"), node)
    assert "the node holds weights that could not be read" in text, text[-3000:]


def test_a_promoted_report_without_a_file_list_is_judged_by_digest_and_says_so(node: Node) -> None:
    """A promotion whose report predates the file list: equal digests pass, another digest stops the node, saying
    that only the digests were compared."""
    node.promoted = {"digest": node.promoted["digest"]}
    assert node.check().returncode == 0
    (node.models / "tokenizer.json").write_text("{}")
    _stopped(node.check(), node, "only the digests were compared")
