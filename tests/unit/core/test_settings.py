"""The VFLEET_* variables are read in one place (vfleet/settings.py): what each means, its default, and
that no module reads one the model does not know."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO

from vfleet import settings

#: VFLEET_* names in the code that are not settings of a running vfleet (docs/settings.md says why).
NOT_SETTINGS = {
    "VFLEET_BOOT_VERIFIED",  # the verification level of a signed boot-verify summary
    "VFLEET_CONTROLLER_PID",
    # set by `vfleet fleet` for ansible-playbook from --trusted-key and --supply-store (the role reads them)
    "VFLEET_FLEET_SUPPLY_STORE",
    "VFLEET_FLEET_TRUSTED_KEYS",  # set by `vfleet fleet` for the lock holder's record (Ansible reads it)
    "VFLEET_VERSION",  # a build argument of the images
    "VFLEET_VERIFY_TREE",  # set by `vfleet patches status` for the Verified-By tests it runs (tests read it)
}
#: Only the test harness reads these (vfleet/testing/, not carried by the images).
SKIP_DIRS = ("testing",)


def _named_in_code() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted((REPO / "vfleet").rglob("*.py")):
        if any(part in SKIP_DIRS for part in path.relative_to(REPO / "vfleet").parts):
            continue
        for name in re.findall(r"\bVFLEET_[A-Z][A-Z_]*[A-Z]\b", path.read_text()):
            found.setdefault(name, str(path.relative_to(REPO)))
    return found


def test_every_variable_the_code_names_is_a_setting() -> None:
    known = {f.alias for f in settings.Settings.model_fields.values()}
    unknown = {n: where for n, where in _named_in_code().items() if n not in known | NOT_SETTINGS}
    assert not unknown, f"VFLEET_* variables read outside vfleet/settings.py's model: {unknown}; add a field there"


def test_a_variable_named_in_the_code_but_not_in_the_model_is_found(tmp_path: Path) -> None:
    """The check above can fail: a module naming a new variable shows up in the scan."""
    assert "VFLEET_SIGN_KEY" in _named_in_code()
    assert "VFLEET_NEW_KNOB" in re.findall(r"\bVFLEET_[A-Z][A-Z_]*[A-Z]\b", 'os.environ.get("VFLEET_NEW_KNOB")')


def test_load_reads_the_environment_given_and_empty_is_unset() -> None:
    s = settings.load({"VFLEET_REPORTS": "/r", "VFLEET_PROMOTIONS": "  ", "VFLEET_ALLOW_NO_API_KEY": "1",
                       "OTHER": "x", "VFLEET_UNKNOWN": "ignored"})  # fmt: skip
    assert s.reports == Path("/r") and s.promotions is None and s.allow_no_api_key is True
    assert settings.load({"VFLEET_ALLOW_NO_API_KEY": "yes"}).allow_no_api_key is False  # only 1 turns it on
    assert settings.load({}).run_dir == Path("/tmp/vfleet")


def test_load_reads_the_process_environment_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLEET_SUPPLY_STORE", "/one")
    assert settings.load().supply_store == Path("/one")
    monkeypatch.setenv("VFLEET_SUPPLY_STORE", "/two")
    assert settings.load().supply_store == Path("/two")


def test_the_settings_table_in_the_docs_is_the_generated_one() -> None:
    text = (REPO / settings.DOCS).read_text()
    assert settings.docs_with_table(text) == text, f"{settings.DOCS} is stale: run `python -m vfleet.settings --docs`"
    assert all(f"| `{f.alias}` |" in text for f in settings.Settings.model_fields.values())


def test_a_changed_description_makes_the_table_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (REPO / settings.DOCS).read_text()
    monkeypatch.setattr(settings, "table", lambda: "| changed |")
    assert settings.docs_with_table(text) != text
    with pytest.raises(ValueError):
        settings.docs_with_table("no markers")
