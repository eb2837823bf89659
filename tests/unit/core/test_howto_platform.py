"""docs/howto-platform.md, walked: adding a platform and a rule touches only the files the note names.

The platform walk follows "Add a platform" for its own example (an MI300X, arch gfx942) on a copy of
serve_configs/, with no other edit: the new profile loads, reads the family layer and not the gfx950
layer, passes every rule, and `vfleet check` counts it. The rule walk adds a rule the way "Add a rule"
says and shows `vfleet check` enforcing it on the copy.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import yaml
from conftest import REPO, ConfigTree

from vfleet import rules
from vfleet.cli import main
from vfleet.profile_schema import Profile
from vfleet.profiles import Catalog

HOWTO = REPO / "docs/howto-platform.md"


def test_every_file_the_howto_names_exists() -> None:
    text = HOWTO.read_text()
    named = re.findall(r"`((?:vfleet|tests|images|ansible|docs|serve_configs)/[^`\s]*|versions\.json)`", text)
    assert named, "the how-to names no files: the pattern is wrong"
    # Files the walk's example creates (mi300x, gfx942) and placeholders (<model>) are not expected yet.
    examples = ("<", "mi300x", "gfx942")
    missing = [rel for rel in named if not any(e in rel for e in examples) and not (REPO / rel).exists()]
    assert not missing, f"docs/howto-platform.md names files that do not exist: {missing}"


def test_every_symbol_the_howto_names_is_in_its_file() -> None:
    """`NAME` in `path`: the symbol is defined in that file (a stale note after a split fails here)."""
    pairs = re.findall(r"`([A-Za-z_]+)`(?: literal)? in\s+`((?:vfleet|images)/[^`]+)`", HOWTO.read_text())
    assert len(pairs) >= 2, pairs
    for name, rel in pairs:
        src = (REPO / rel).read_text()
        defined = re.search(rf"^\s*{name}\b\s*(?::|=)", src, re.M)
        assert defined, f"docs/howto-platform.md: {name} is not defined in {rel}"


def _add_mi300x(tree: ConfigTree) -> None:
    plat = yaml.safe_load((tree.root / "platforms/mi355x.yaml").read_text())
    plat.update(platform="mi300x", description="AMD Instinct MI300X, 8 GPUs per node (gfx942)", arch="gfx942")
    plat["detect"] = {"names": ["MI300X"]}
    tree.write("platforms/mi300x.yaml", yaml.safe_dump(plat, sort_keys=False))
    tree.edit("models/glm-5.3-flash/model.yaml", lambda d: d["platforms"].append("mi300x"))


def test_adding_a_platform_touches_only_the_named_files(config_tree: ConfigTree) -> None:
    _add_mi300x(config_tree)
    cat = Catalog(config_tree.root)
    prof = cat.load("glm-5.3-flash/mi300x")
    assert prof.platform.arch == "gfx942"
    assert "models/glm-5.3-flash/rocm.yaml" in prof.sources
    # The gfx950 arch layer (BF16 KV, AITER fused MoE off) is not inherited by another arch.
    assert "models/glm-5.3-flash/gfx950.yaml" not in prof.sources
    assert rules.evaluate(prof).violations == [], rules.evaluate(prof).violations
    assert "glm-5.3-flash/mi300x" in cat.profile_names()


def test_the_new_platform_is_counted_by_vfleet_check(
    config_tree: ConfigTree, capsys: pytest.CaptureFixture[str]
) -> None:
    before = len(Catalog(config_tree.root).profile_names())
    _add_mi300x(config_tree)
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert f"{before + 1} of {before + 1} profiles pass" in out
    assert "glm-5.3-flash/mi300x" in out


def test_a_misspelt_arch_layer_is_refused(config_tree: ConfigTree, capsys: pytest.CaptureFixture[str]) -> None:
    """Step 6 of the note: `vfleet check` fails on a layer file that no profile reads."""
    _add_mi300x(config_tree)
    config_tree.write("models/glm-5.3-flash/gfx-942.yaml", "vllm:\n  max-num-seqs: 64\n")
    assert main(["check"]) != 0
    cap = capsys.readouterr()
    assert "gfx-942.yaml" in cap.out + cap.err


@pytest.fixture
def extra_rule() -> Iterator[rules.Rule]:
    def _gfx942_batched_tokens(p: Profile) -> Iterator[rules.Finding]:
        if p.platform.arch == "gfx942" and "max-num-batched-tokens" not in p.vllm:
            yield rules.Finding("vllm.max-num-batched-tokens", "gfx942 needs an explicit max-num-batched-tokens")

    rule = rules.Rule(
        id="howto-walk-gfx942-batched-tokens",
        reason="a rule added by the how-to walk",
        source="tests/unit/core/test_howto_platform.py",
        fix="set vllm.max-num-batched-tokens in models/<model>/gfx942.yaml",
        check=_gfx942_batched_tokens,
    )
    rules.RULES.append(rule)
    try:
        yield rule
    finally:
        rules.RULES.remove(rule)


def test_adding_a_rule_is_enforced_and_fixed_in_the_arch_layer(
    config_tree: ConfigTree, extra_rule: rules.Rule, capsys: pytest.CaptureFixture[str]
) -> None:
    _add_mi300x(config_tree)
    assert main(["check"]) != 0
    cap = capsys.readouterr()
    assert extra_rule.id in cap.out + cap.err and "FAIL glm-5.3-flash/mi300x" in cap.out + cap.err
    # The fix goes where the rule's scope says: the arch layer, which only gfx942 profiles read.
    config_tree.write("models/glm-5.3-flash/gfx942.yaml", "vllm:\n  max-num-batched-tokens: 8192\n")
    assert main(["check"]) == 0, capsys.readouterr().out
    prof = Catalog(config_tree.root).load("glm-5.3-flash/mi300x")
    assert "models/glm-5.3-flash/gfx942.yaml" in prof.sources
    assert "gfx942.yaml" not in " ".join(Catalog(config_tree.root).load("glm-5.3-flash/mi355x").sources)
