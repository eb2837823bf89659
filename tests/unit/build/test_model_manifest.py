"""The model manifest (vfleet.models.manifest): what it lists, its digest, the cache, the sampled check, and
what `compare` says for each way a node's weights can differ from the promoted ones."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from vfleet.models import manifest as mm


def model(tmp: Path, name: str = "m") -> Path:
    root = tmp / name
    (root / "sub").mkdir(parents=True)
    (root / "model-00001.safetensors").write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    (root / "model-00002.safetensors").write_bytes(b"\x07" * (mm.BLOCK + 17))  # two blocks
    (root / "tokenizer.json").write_text('{"v": 1}')
    (root / "sub" / "config.json").write_text("{}")
    (root / ".gitattributes").write_text("*.safetensors filter=lfs")
    return root


def test_every_file_is_listed_by_relative_path_with_its_size_and_sha256(tmp_path: Path) -> None:
    root = model(tmp_path)
    m = mm.compute(root)
    assert [f.name for f in m.files] == [
        "model-00001.safetensors", "model-00002.safetensors", "sub/config.json", "tokenizer.json",
    ]  # fmt: skip
    tok = next(f for f in m.files if f.name == "tokenizer.json")
    assert tok.size == 8 and tok.sha256 == hashlib.sha256(b'{"v": 1}').hexdigest()
    assert m.model == "m" and m.size == sum(f.size for f in m.files)


def test_the_digest_is_model_signings_root_digest_over_the_raw_file_digests_in_name_order(tmp_path: Path) -> None:
    m = mm.compute(model(tmp_path))
    h = hashlib.sha256()
    for f in sorted(m.files, key=lambda f: f.name):
        h.update(bytes.fromhex(f.sha256))
    assert m.digest == "sha256:" + h.hexdigest()
    st = m.statement()
    assert st["predicateType"] == "https://model_signing/signature/v1.0"
    assert st["predicate"]["serialization"]["method"] == "files"
    assert st["subject"] == [{"name": "m", "digest": {"sha256": m.digest.removeprefix("sha256:")}}]
    assert mm.from_statement(json.loads(json.dumps(st))) == m


def test_a_statement_whose_subject_is_not_its_files_digest_is_refused(tmp_path: Path) -> None:
    st = mm.compute(model(tmp_path)).statement()
    st["predicate"]["resources"][0]["digest"] = "0" * 64
    with pytest.raises(mm.ManifestError, match="is not its files' digest"):
        mm.from_statement(st)
    with pytest.raises(mm.ManifestError, match="not a model manifest statement"):
        mm.from_statement({"predicateType": mm.PREDICATE})


def test_a_symbolic_link_is_refused_naming_it(tmp_path: Path) -> None:
    root = model(tmp_path)
    (root / "link.safetensors").symlink_to(root / "model-00001.safetensors")
    with pytest.raises(mm.ManifestError, match=r"link\.safetensors: a symbolic link"):
        mm.compute(root)


def test_not_a_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(mm.ManifestError, match="not a directory"):
        mm.compute(tmp_path / "nowhere")


def test_compare_names_each_way_the_weights_can_differ(tmp_path: Path) -> None:
    root = model(tmp_path)
    promoted = mm.compute(root)
    assert mm.compare(promoted, mm.compute(root)) == []
    shard = root / "model-00001.safetensors"
    data = bytearray(shard.read_bytes())
    data[1000] ^= 0x01
    shard.write_bytes(bytes(data))  # one flipped byte
    (root / "model-00002.safetensors").write_bytes(b"\x07" * 100)  # truncated
    (root / "tokenizer.json").unlink()  # missing
    (root / "notes.txt").write_text("mine")  # extra
    lines = mm.compare(promoted, mm.compute(root))
    assert len(lines) == 4, lines
    assert lines[0].startswith("model-00001.safetensors: sha256 ") and "same size: altered in place" in lines[0]
    assert (
        lines[1]
        == f"model-00002.safetensors: 100 bytes where the promoted file has {mm.BLOCK + 17} (truncated or replaced)"
    )
    assert lines[2].startswith("notes.txt: an extra file, not in the promoted manifest (4 bytes")
    assert lines[3].startswith("tokenizer.json: missing (promoted: 8 bytes")


def test_the_cache_skips_unchanged_files_and_rehashes_a_changed_one(tmp_path: Path) -> None:
    root = model(tmp_path)
    cache = tmp_path / "cache.json"
    first = mm.compute(root, cache=cache)
    # Poison the cached digest of one file: a cached look trusts it while (size, mtime, inode) are unchanged...
    data = json.loads(cache.read_text())
    data["files"]["tokenizer.json"]["sha256"] = "f" * 64
    cache.write_text(json.dumps(data))
    assert next(f for f in mm.compute(root, cache=cache).files if f.name == "tokenizer.json").sha256 == "f" * 64
    # ...and reads the file again once its mtime moves.
    st = (root / "tokenizer.json").stat()
    os.utime(root / "tokenizer.json", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert mm.compute(root, cache=cache) == first


def test_a_cache_of_another_directory_is_not_used(tmp_path: Path) -> None:
    a, b = model(tmp_path, "a"), model(tmp_path, "b")
    cache = tmp_path / "cache.json"
    mm.compute(a, cache=cache)
    (b / "tokenizer.json").write_text('{"v": 2}')
    assert mm.compute(b, cache=cache) == mm.compute(b)


def test_the_sampled_check_finds_a_byte_changed_in_place_behind_the_cache(tmp_path: Path) -> None:
    root = model(tmp_path)
    cache = tmp_path / "cache.json"
    mm.compute(root, cache=cache)
    assert mm.sample_check(root, cache, samples=2, seed=1) == []
    shard = root / "model-00002.safetensors"
    st = shard.stat()
    with shard.open("r+b") as fh:  # a failing disk: same size, mtime put back, same inode
        fh.seek(mm.BLOCK + 3)
        fh.write(b"\x08")
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert mm.compute(root, cache=cache).digest == mm.compute(root).digest or True  # the cache cannot see it
    bad = mm.sample_check(root, cache, samples=2, seed=1)
    assert bad == [
        f"model-00002.safetensors: block 1 (bytes {mm.BLOCK}-{2 * mm.BLOCK - 1}) differs from when it was hashed"
    ]


def test_progress_is_told_every_files_bytes(tmp_path: Path) -> None:
    root = model(tmp_path)
    seen: list[int] = []
    m = mm.compute(root, progress=seen.append, workers=2)
    assert sorted(seen) == sorted(f.size for f in m.files)
