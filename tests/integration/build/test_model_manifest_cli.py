"""`vfleet model manifest DIR` as an operator runs it: the digest printed, the statement written, the cache used
on the second run, and a clear error for a directory that is not one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.supply import make_key

from vfleet.models import manifest as mm


def vfleet(*args: str, action: str = "manifest") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vfleet", "model", action, *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_the_manifest_is_printed_and_written_and_a_second_run_reads_the_cache(tmp_path: Path) -> None:
    root = tmp_path / "weights"
    root.mkdir()
    (root / "model.safetensors").write_bytes(b"\x01" * (3 * mm.BLOCK))
    (root / "tokenizer.json").write_text("{}")
    cache, out = tmp_path / "cache.json", tmp_path / "manifest.json"
    first = vfleet(str(root), "--cache", str(cache), "--out", str(out))
    assert first.returncode == 0, first.stderr[-2000:]
    digest = mm.compute(root).digest
    assert first.stdout.startswith(f"{digest}  {root} (2 files, {3 * mm.BLOCK + 2:,} bytes,"), first.stdout
    assert "manifest " in first.stderr and "100%" in first.stderr  # tqdm's progress, on stderr
    assert mm.from_statement(json.loads(out.read_text())).digest == digest
    cached = json.loads(cache.read_text())
    assert sorted(cached["files"]) == ["model.safetensors", "tokenizer.json"]
    # The second run trusts the cache for unchanged files: a poisoned cached digest shows through...
    cached["files"]["tokenizer.json"]["sha256"] = "e" * 64
    cache.write_text(json.dumps(cached))
    second = vfleet(str(root), "--cache", str(cache))
    assert second.returncode == 0 and not second.stdout.startswith(digest), second.stdout
    # ...and --no-cache reads every file again.
    third = vfleet(str(root), "--no-cache")
    assert third.returncode == 0 and third.stdout.startswith(digest), third.stdout


def test_a_directory_that_is_not_there_is_named(tmp_path: Path) -> None:
    proc = vfleet(str(tmp_path / "nowhere"))
    assert proc.returncode != 0
    assert f"{tmp_path / 'nowhere'}: not a directory (give the model directory the server loads)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_signed_manifest_compares_the_same_weights_and_names_each_file_of_other_ones(tmp_path: Path) -> None:
    """`vfleet model manifest --sign-key` signs in the model role; `vfleet model compare` trusts only a key of that
    role, exits 0 for the same weights and 1 naming the file and both digests for others."""
    root = tmp_path / "weights"
    root.mkdir()
    (root / "model.safetensors").write_bytes(b"\x02" * 4096)
    (root / "tokenizer.json").write_text("{}")
    priv, pub = make_key(tmp_path, "controller")
    signed = tmp_path / "manifest.dsse.json"
    proc = vfleet(str(root), "--no-cache", "--sign-key", str(priv), "--out", str(signed))
    assert proc.returncode == 0 and json.loads(signed.read_text())["payloadType"] == "application/vnd.in-toto+json"
    assert str(priv) not in proc.stdout + proc.stderr and "PRIVATE" not in signed.read_text()
    same = vfleet(str(signed), str(root), "--trusted-key", f"model={pub}", action="compare")
    assert same.returncode == 0 and same.stdout.startswith(f"the same weights: {mm.compute(root).digest}"), same
    data = bytearray((root / "model.safetensors").read_bytes())
    data[7] ^= 0x10
    (root / "model.safetensors").write_bytes(bytes(data))
    seen = tmp_path / "seen.json"
    seen.write_text(vfleet(str(root), "--no-cache", "--json").stdout)
    other = vfleet(str(signed), str(seen), "--trusted-key", f"model={pub}", action="compare")
    assert other.returncode == 1, other
    assert f"other weights: {mm.compute(root).digest}, promoted " in other.stdout
    assert "model.safetensors: sha256 " in other.stdout and "(same size: altered in place)" in other.stdout
    # A key trusted for another role does not make a model manifest; no key is no pass either.
    wrong = vfleet(str(signed), str(root), "--trusted-key", f"verify={pub}", action="compare")
    assert wrong.returncode == 2 and "cannot be trusted" in wrong.stderr, wrong
    none = vfleet(str(signed), str(root), action="compare")
    assert none.returncode == 2 and "no key is trusted for the model role" in none.stderr, none
