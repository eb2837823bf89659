"""One home for keys, signing and verifying (issue 35 item 4): vfleet/supply/statements.py makes, reads, signs
with and checks every key, by role (provenance, verify, ab, deploy, model). The modules of each statement type
(supply/attest, ab/attest, verify/record/attestation, supply/deployrecord, models/manifest) build and judge
their statements and hand the cryptography to it: no other module imports cryptography or securesystemslib
outside a type annotation."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

HOME = "vfleet/supply/statements.py"
CRYPTO = ("cryptography", "securesystemslib")


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def crypto_imports(root: Path) -> list[str]:
    """`path:line module` of each import of a cryptography library under ROOT outside the home and outside
    `if TYPE_CHECKING:`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root.parent))
        if rel == HOME:
            continue
        tree = ast.parse(path.read_text())
        typing_only = _type_checking_lines(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            else:
                continue
            hits = [n for n in names if n.split(".")[0] in CRYPTO]
            if hits and node.lineno not in typing_only:
                found += [f"{rel}:{node.lineno} {n}" for n in hits]
    return found


def test_only_the_home_touches_keys_and_signatures() -> None:
    assert crypto_imports(REPO / "vfleet") == [], f"sign, verify and load keys through {HOME}"


def test_a_module_that_signs_on_its_own_is_named(tmp_path: Path) -> None:
    pkg = tmp_path / "vfleet"
    (pkg / "supply").mkdir(parents=True)
    (pkg / "supply" / "statements.py").write_text("from securesystemslib.dsse import Envelope\n")
    (pkg / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from securesystemslib.signer import Key\n"
    )
    (pkg / "rogue.py").write_text("def f():\n    from cryptography.hazmat.primitives import hashes\n")
    assert crypto_imports(pkg) == ["vfleet/rogue.py:2 cryptography.hazmat.primitives"]
