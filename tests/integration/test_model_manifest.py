"""`vfleet model manifest DIR` as an operator runs it: the digest printed, the statement written, the cache used
on the second run, and a clear error for a directory that is not one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from vfleet.models import manifest as mm


def vfleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vfleet", "model", "manifest", *args],
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
