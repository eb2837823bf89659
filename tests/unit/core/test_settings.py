"""The VFLEET_* variables are read in one place (vfleet/settings.py): what each means, its default, and
that no module reads one the model does not know."""

from __future__ import annotations

import re
import shutil
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


def _named_in_code(root: Path = REPO / "vfleet") -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        for name in re.findall(r"\bVFLEET_[A-Z][A-Z_]*[A-Z]\b", path.read_text()):
            found.setdefault(name, str(path.relative_to(root.parent)))
    return found


def _unknown(root: Path = REPO / "vfleet") -> dict[str, str]:
    """VFLEET_* names the code under ROOT uses that are no field of the settings model (nor NOT_SETTINGS)."""
    known = {f.alias for f in settings.Settings.model_fields.values()}
    return {n: where for n, where in _named_in_code(root).items() if n not in known | NOT_SETTINGS}


def test_every_variable_the_code_names_is_a_setting() -> None:
    unknown = _unknown()
    assert not unknown, f"VFLEET_* variables read outside vfleet/settings.py's model: {unknown}; add a field there"


def test_a_variable_named_in_the_code_but_not_in_the_model_is_found(tmp_path: Path) -> None:
    """The check above fails on a tree where one module reads a variable the model lacks, and names the module.
    (The lab's own switches are read under lab/, outside the tree it reads.)"""
    tree = tmp_path / "vfleet"
    shutil.copytree(REPO / "vfleet", tree, ignore=shutil.ignore_patterns("__pycache__"))
    assert _unknown(tree) == {}
    (tree / "commands" / "knob.py").write_text('import os\nKNOB = os.environ.get("VFLEET_NEW_KNOB")\n')
    assert _unknown(tree) == {"VFLEET_NEW_KNOB": "vfleet/commands/knob.py"}


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
