"""Production floors (issue 31, item 7): what a production profile cannot declare away.

Each bound of vfleet.profile_floors, broken in a production profile of a copy of serve_configs/: loading
the profile is refused, naming the profile, the key, the bound and the fix; at the bound it loads; a profile
that is not production (tiny/cpu) is not bound; no waiver lifts a floor. The CLI walk (a subprocess
`vfleet check` and render) is tests/integration/core/test_check_floors.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import ConfigTree

from vfleet import checkids
from vfleet.cli import main
from vfleet.errors import ProfileError
from vfleet.profile_floors import FLOORS, INTEGRITY_BOUNDS, SOURCE_FORMS, Bound, names_a_source
from vfleet.profiles import Catalog, IntegritySpec
from vfleet.rules import RULES_BY_ID, evaluate

GLM = "models/glm-5.3-flash/model.yaml"
KIMI = "models/kimi-k3/model.yaml"
TINY = "models/tiny/model.yaml"
#: The 9 checks of 16 the finding declared not applicable in a production profile: every one main let it
#: declare (all but the log checks and GPU health), at one load level.
DECLARED_AWAY = tuple(
    c.replace("<n>", "1") for c in checkids.CHECK_IDS if not c.startswith("test_log[") and c != "test_gpu_health"
)


def _verify(tree: ConfigTree, rel: str, **keys: Any) -> None:
    tree.edit(rel, lambda d: d.setdefault("verify", {}).update(keys))


def _refused(profile: str, *parts: str) -> str:
    with pytest.raises(ProfileError) as exc:
        Catalog().load(profile)
    msg = str(exc.value)
    for part in parts:
        assert part in msg, msg
    return msg


def _the_issue_profile(d: dict[str, Any]) -> None:
    """The finding: 9 checks not applicable, a pass valid for 36,500 days, a load floor of 0.001 tok/s, an
    integrity tolerance of 1,000 nats, and a rule waived, each with a ten-character reason."""
    d["verify"]["not_applicable"] = dict.fromkeys(DECLARED_AWAY, "not needed")
    d["verify"]["report_max_age_days"] = 36500
    d["verify"]["load"]["min_output_tok_per_s"] = {1: 0.001, 32: 0.001}
    d["verify"]["integrity"] = {"logprob_tolerance": 1000.0}
    d["waivers"] = [{"rule": "no-enforce-eager", "reason": "not needed"}]
    d["vllm"]["enforce-eager"] = True


def test_the_issues_profile_is_refused_naming_each_bound(config_tree: ConfigTree) -> None:
    config_tree.edit(GLM, _the_issue_profile)
    msg = _refused(
        "glm-5.3-flash/h200",
        "glm-5.3-flash/h200: rule production-checks-run: verify.not_applicable.test_health: declares not "
        "applicable a check production runs",
        "glm-5.3-flash/h200: rule production-report-max-age: verify.report_max_age_days: is 36500 days, "
        "production maximum 30",
        "Fix: set verify.report_max_age_days to 30 or less",
        "verify.load.min_output_tok_per_s.32: is 0.001 output tok/s at C32, production minimum 160",
        "verify.integrity.logprob_tolerance: is 1000, production maximum 0.015625",
        "rule production-waiver-source: waivers[0] (no-enforce-eager).source: is not set",
        "glm-5.3-flash/h200: its layers: models/glm-5.3-flash/model.yaml,",
    )
    assert msg.count("rule production-checks-run: verify.not_applicable.") == len(DECLARED_AWAY), msg
    # Every line is one floor broken, with its fix: none is lifted by the waiver the profile carries.
    for line in msg.splitlines()[:-1]:
        assert " Fix: " in line and "no waiver lifts it" in line, line


def test_a_profile_that_is_not_production_is_not_bound(config_tree: ConfigTree) -> None:
    def loosen(d: dict[str, Any]) -> None:
        _the_issue_profile(d)
        d["verify"]["min_kv_tokens"] = 1
        d["verify"]["warnings"] = {"new_fails": False}
        d["verify"]["integrity"].update(noise_factor=50.0, questions=1)

    config_tree.edit(TINY, loosen)
    prof = Catalog().load("tiny/cpu")
    assert not prof.production and prof.verify.report_max_age_days == 36500
    assert [v.rule.id for v in evaluate(prof).waived] == ["no-enforce-eager"]


# -- production-checks-run ----------------------------------------------------------------------------


@pytest.mark.parametrize("check", [c.replace("<n>", "32") for c in checkids.CHECK_IDS if checkids.guards_production(c)])
def test_no_check_but_the_prefix_cache_ones_is_excused_in_production(config_tree: ConfigTree, check: str) -> None:
    config_tree.edit(GLM, lambda d: d["verify"].setdefault("not_applicable", {}).update({check: "not needed here"}))
    _refused(
        "glm-5.3-flash/b200",
        f"glm-5.3-flash/b200: rule production-checks-run: verify.not_applicable.{check}: declares not applicable",
        "Fix: remove the not_applicable entry",
    )


def test_the_prefix_cache_checks_are_excused_only_without_a_prefix_cache(config_tree: ConfigTree) -> None:
    excused = set(checkids.PREFIX_CACHE_CHECKS)
    # Kimi-K3 serves with enable-prefix-caching: false, so it may declare them.
    assert set(Catalog().load("kimi-k3/b200").verify.not_applicable) == excused
    # GLM serves with prefix caching: the same declarations are refused.
    config_tree.edit(GLM, lambda d: d["verify"].__setitem__("not_applicable", dict.fromkeys(excused, "not needed")))
    _refused(
        "glm-5.3-flash/b200",
        "verify.not_applicable.test_prefix_cache_integrity: declares a prefix-cache check not applicable while vllm "
        "serves with prefix caching",
    )
    # Without the vllm line (vLLM's default is on) Kimi's declarations are refused too, and so is a verify
    # section that says prefix_cache: false by itself.
    config_tree.edit(KIMI, lambda d: d["vllm"].pop("enable-prefix-caching"))
    _refused("kimi-k3/b200", "verify.not_applicable.test_prefix_cache_hit: declares a prefix-cache check")
    _verify(config_tree, KIMI, prefix_cache=False)
    _refused("kimi-k3/b200", "verify.prefix_cache: is false while vllm serves with prefix caching (its default)")


def test_production_lists_probes_and_keeps_the_integrity_probe(config_tree: ConfigTree) -> None:
    _verify(config_tree, GLM, probes=[])
    _refused("glm-5.3-flash/mi355x", "rule production-checks-run: verify.probes: lists no probe")
    config_tree.edit(GLM, lambda d: d["verify"].pop("probes"))
    _refused("glm-5.3-flash/mi355x", "verify.probes: lists no probe, so test_probes would skip")
    config_tree.edit(GLM, lambda d: d["verify"].update(probes=[{"prompt": "2+2? One digit.", "expect": "4"}]))
    assert Catalog().load("glm-5.3-flash/mi355x").verify.probes
    _verify(config_tree, GLM, integrity={"enabled": False})
    _refused("glm-5.3-flash/mi355x", "verify.integrity.enabled: is false while vllm serves with prefix caching")


# -- production-report-max-age, production-load-floor, production-kv-floor -----------------------------


def test_a_pass_promotes_for_thirty_days_at_most(config_tree: ConfigTree) -> None:
    _verify(config_tree, GLM, report_max_age_days=30.5)
    _refused("glm-5.3-flash/b200", "verify.report_max_age_days: is 30.5 days, production maximum 30")
    _verify(config_tree, GLM, report_max_age_days=30)
    assert Catalog().load("glm-5.3-flash/b200").verify.report_max_age_days == 30
    _verify(config_tree, GLM, report_max_age_days=7)  # shorter is tighter
    assert Catalog().load("glm-5.3-flash/b200").verify.report_max_age_days == 7


def test_the_load_floor_is_at_least_five_tok_s_per_stream(config_tree: ConfigTree) -> None:
    def floors(value: dict[int, float]) -> None:
        config_tree.edit(GLM, lambda d: d["verify"]["load"].update(levels=[1, 8, 32], min_output_tok_per_s=value))

    floors({1: 5.0, 8: 39.9, 32: 160.0})
    _refused(
        "glm-5.3-flash/gb300",
        "glm-5.3-flash/gb300: rule production-load-floor: verify.load.min_output_tok_per_s.8: is 39.9 output tok/s "
        "at C8, production minimum 40 (5 per stream x 8)",
        "Fix: set verify.load.min_output_tok_per_s at every verify.load.levels level, at least 5 x the level",
    )
    floors({1: 5.0, 8: 40.0, 32: 160.0})
    assert Catalog().load("glm-5.3-flash/gb300").verify.load.min_output_tok_per_s[8] == 40.0


def test_the_kv_floor_holds_one_full_length_request(config_tree: ConfigTree) -> None:
    _verify(config_tree, KIMI, min_kv_tokens=16383)
    _refused("kimi-k3/b200", "verify.min_kv_tokens: is 16383, production minimum verify.max_model_len 16384")
    _verify(config_tree, KIMI, min_kv_tokens=16384)
    assert Catalog().load("kimi-k3/b200").verify.min_kv_tokens == 16384


# -- production-integrity-bounds ---------------------------------------------------------------------


def _beyond(b: Bound) -> float:
    default = getattr(IntegritySpec(), b.key)
    if b.upper:
        return b.value * 2
    return b.value - 1 if isinstance(default, int) else b.value / 2


@pytest.mark.parametrize("bound", INTEGRITY_BOUNDS, ids=[b.key for b in INTEGRITY_BOUNDS])
def test_every_integrity_bound(config_tree: ConfigTree, bound: Bound) -> None:
    _verify(config_tree, GLM, integrity={bound.key: _beyond(bound)})
    word = "maximum" if bound.upper else "minimum"
    _refused(
        "glm-5.3-flash/h200",
        f"glm-5.3-flash/h200: rule production-integrity-bounds: verify.integrity.{bound.key}: is "
        f"{_beyond(bound):g}, production {word} {bound.value:g} ({bound.why})",
        f"{bound.key} {'<=' if bound.upper else '>='} {bound.value:g}",  # the fix lists every bound
    )
    at = bound.value if isinstance(bound.value, float) and not bound.value.is_integer() else int(bound.value)
    _verify(config_tree, GLM, integrity={bound.key: at})
    assert getattr(Catalog().load("glm-5.3-flash/h200").verify.integrity, bound.key) == at


def test_the_defaults_are_within_every_integrity_bound() -> None:
    spec = IntegritySpec()
    for b in INTEGRITY_BOUNDS:
        value = getattr(spec, b.key)
        assert (value <= b.value) if b.upper else (value >= b.value), b


# -- production-new-warnings-fail ----------------------------------------------------------------------


def test_new_warnings_keep_failing_a_production_promotion(config_tree: ConfigTree) -> None:
    _verify(config_tree, GLM, warnings={"new_fails": False})
    _refused("glm-5.3-flash/mi350x", "rule production-new-warnings-fail: verify.warnings.new_fails: is false")
    _verify(config_tree, GLM, warnings={"new_fails": True})
    assert Catalog().load("glm-5.3-flash/mi350x").verify.warnings.new_fails is True


# -- production-waiver-source, and no waiver of a floor ---------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "https://github.com/vllm-project/vllm/issues/1",
        "ROCm/aiter#5049",
        "issue 31",
        "seed 000 MI350X table",
        "docs/upstream.md",
    ],
)
def test_a_production_waiver_names_its_source(config_tree: ConfigTree, source: str) -> None:
    """Each form of SOURCE_FORMS lifts a rule in production; the waiver is shown by evaluate (and render)."""
    assert len({form for form, rx in SOURCE_FORMS if rx.search(source)}) >= 1

    def waive(d: dict[str, Any]) -> None:
        d["vllm"]["enforce-eager"] = True
        d["waivers"] = [{"rule": "no-enforce-eager", "reason": "eager on purpose here", "source": source}]

    config_tree.edit(GLM, waive)
    assert [v.rule.id for v in evaluate(Catalog().load("glm-5.3-flash/b200")).waived] == ["no-enforce-eager"]


@pytest.mark.parametrize("source", [None, "my own tests", "the team agreed", "http://nowhere"])
def test_a_production_waiver_without_a_source_form_is_refused(config_tree: ConfigTree, source: str | None) -> None:
    assert source is None or not names_a_source(source)

    def waive(d: dict[str, Any]) -> None:
        d["vllm"]["enforce-eager"] = True
        entry = {"rule": "no-enforce-eager", "reason": "eager on purpose here"}
        d["waivers"] = [entry if source is None else {**entry, "source": source}]

    config_tree.edit(GLM, waive)
    shown = "is not set" if source is None else f"{source!r} names no source"
    _refused(
        "glm-5.3-flash/b200",
        f"glm-5.3-flash/b200: rule production-waiver-source: waivers[0] (no-enforce-eager).source: {shown}",
        "Fix: add `source:` to the waiver",
    )


@pytest.mark.parametrize("rule", [r.id for r in FLOORS])
def test_no_waiver_lifts_a_floor(config_tree: ConfigTree, rule: str) -> None:
    assert not RULES_BY_ID[rule].waivable
    waiver = {"rule": rule, "reason": "we measured it ourselves", "source": "issue 31"}
    config_tree.edit(GLM, lambda d: d.__setitem__("waivers", [waiver]))
    with pytest.raises(ProfileError, match=rf"glm-5.3-flash/b200: waivers: rule '{rule}' is a production floor: no "):
        evaluate(Catalog().load("glm-5.3-flash/b200"))
    # A broken floor stays refused with the waiver in place: the load names the floor.
    _verify(config_tree, GLM, report_max_age_days=365)
    _refused("glm-5.3-flash/b200", "rule production-report-max-age: verify.report_max_age_days: is 365 days")


def test_every_floor_is_listed_by_check_rules_and_refused_by_render(
    config_tree: ConfigTree, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--rules"]) == 0
    out = capsys.readouterr().out
    for r in FLOORS:
        shown = f"{r.id}\n  why:    {r.reason}\n  source: {r.source}\n  fix:    {r.fix}\n  waiver: none lifts it ("
        assert shown in out, r.id
    _verify(config_tree, GLM, report_max_age_days=36500)
    assert main(["render", "glm-5.3-flash/mi355x"]) == 2
    err = capsys.readouterr().err
    assert "glm-5.3-flash/mi355x: rule production-report-max-age: verify.report_max_age_days: is 36500 days" in err
