"""The two pages in headless Chromium: report.html (written by vfleet.verify.record.report.write, from the
recorded H200 boot-verify runs) and the fleet page (from status JSON shaped as ansible/status.yml
writes it: tests/fixtures/pages/status-cpu-node.json is a real one). Each page is rendered to a
screenshot under .cache/pages/, its DOM is checked for the verdict and the rows, and it must raise no
console or script error and make no request beyond its own file. The harness itself is shown to
catch a page that does (a broken page written here)."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from support.browser import Browser, Rendered, browser
from support.supply import make_key

from vfleet.fleet.run import recheck as fleet_recheck
from vfleet.pages import fleet_html, html, report_html
from vfleet.verify.record import attestation, report
from vfleet.verify.record.model import CheckResult, Report

H200 = REPO / "tests" / "fixtures" / "h200-verify"
STATUS = REPO / "tests" / "fixtures" / "pages" / "status-cpu-node.json"
DIGEST = "sha256:" + "ab" * 32
META_KEYS = ("profile", "production", "url", "served_model", "image", "api_key", "docker_host", "log", "selected")


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    with browser() as b:
        yield b


def clean(r: Rendered) -> Rendered:
    assert not r.problems(), r.problems()
    assert r.screenshot.stat().st_size > 5000, r.screenshot
    return r


def write_report(out: Path, run: str = "run2", boot: str = "graph", **changes: Any) -> Path:
    """A recorded run's report written again through report.build + report.write (which writes
    report.json, report.md, the plots and report.html), with ``changes`` applied to the report."""
    src = json.loads((H200 / run / f"verify-{boot}" / "report.json").read_text())
    checks = [CheckResult.model_validate({k: v for k, v in c.items() if k != "not_applicable"}) for c in src["checks"]]
    meta = {k: src[k] for k in META_KEYS} | {"started": src["started"], "wall_s": src["wall_s"]}
    built = report.build(checks, src["pytest_exitstatus"], src["figures"], meta, not_applicable=src["not_applicable"])
    data = built.dump() | {"partial": False}
    for key, value in changes.items():
        data[key] = data[key] | value if isinstance(value, dict) and isinstance(data.get(key), dict) else value
    rep = Report.model_validate(data)
    report.write(rep, out)
    return out


def sign_report(out: Path, keys: Path) -> Path:
    """Sign OUT/report.json as `vfleet verify --sign-key` does (OUT/verification.dsse.json), with the key
    KEYS/verify.pem (made on first use); returns the public key file."""
    priv, pub = keys / "verify.pem", keys / "verify.pub"
    if not priv.is_file():
        keys.mkdir(parents=True, exist_ok=True)
        priv, pub = make_key(keys, "verify")
    attestation.write(out, Report.load(out / "report.json"), attestation.load_signer(priv), "sha256:" + "0" * 64)
    return pub


def recheck(tmp_path: Path) -> fleet_html.Recheck:
    """The recheck `vfleet fleet status --html --trusted-key verify=PUB` hands the page."""
    return fleet_recheck([f"verify={tmp_path / 'keys' / 'verify.pub'}"])


def verdict_of(r: Rendered) -> tuple[str, str]:
    """(text, state) of the verdict header, which must be the first thing on the page."""
    first = r.page.evaluate("document.body.firstElementChild.id")
    assert first == "verdict", first
    box = r.page.locator("#verdict").bounding_box()
    assert box["y"] == 0, box
    return r.page.inner_text("#verdict h1"), r.page.get_attribute("#verdict", "data-state")


@pytest.mark.parametrize(("run", "boot"), [("run1", "eager"), ("run2", "graph")])
def test_report_page_shows_verdict_checks_probe_and_load(
    chromium: Browser, tmp_path: Path, run: str, boot: str
) -> None:
    out = write_report(tmp_path / "r", run, boot)
    rep = json.loads((out / "report.json").read_text())
    r = clean(chromium.render(out / "report.html", f"report-{run}-{boot}"))
    text, state = verdict_of(r)
    want = "PASS" if rep["passed"] else "FAIL"
    assert text.startswith(f"Boot-verify {want}: {rep['profile']}"), text
    assert state == ("ok" if rep["passed"] else "bad")
    rows = r.page.locator("#checks tr[data-check]")
    assert rows.count() == len(rep["checks"])
    for c in rep["checks"]:
        row = r.page.locator(f'#checks tr[data-check="{c["id"]}"]')
        outcome = {"passed": "ok", "failed": "bad"}.get(c["outcome"], "info" if c.get("not_applicable") else "bad")
        assert row.get_attribute("data-outcome") == outcome, c["id"]
        if c["outcome"] == "failed":
            assert c["message"].splitlines()[0] in row.inner_text()
    integ = rep["figures"]["integrity"]
    assert f"{integ['num_gpu_blocks']} blocks x {integ['block_size']} tokens" in r.page.inner_text("#integrity")
    assert r.page.locator("#integrity-hits tr").count() == len(integ["hits"]) + 1
    assert r.page.locator("#integrity-mismatches tr").count() == (
        len(integ["mismatches"]) + 1 if integ["mismatches"] else 0
    )
    assert r.page.locator("#load tr").count() == len(rep["figures"]["load"]) + 1
    plots = r.page.locator("img.plot")
    assert plots.count() == len(rep["plots"]) == 2
    for i in range(2):
        assert plots.nth(i).get_attribute("src").startswith("data:image/png;base64,")
        assert plots.nth(i).evaluate("img => img.naturalWidth") > 100  # decoded, not a broken image


def test_a_failed_check_puts_fail_at_the_top_and_partial_is_not_a_pass(chromium: Browser, tmp_path: Path) -> None:
    graph = json.loads((write_report(tmp_path / "g") / "report.json").read_text())
    assert graph["passed"], "the recorded run2 graph run passes; the cases below turn it"
    rep = json.loads((H200 / "run2" / "verify-graph" / "report.json").read_text())
    failed = [
        dict(c, outcome="failed", message="KV cache size: 100 tokens < verify.min_kv_tokens")
        if c["name"] == "test_log[kv_tokens]"
        else c
        for c in rep["checks"]
    ]
    out = write_report(tmp_path / "f", checks=failed, passed=False)
    r = clean(chromium.render(out / "report.html", "report-failed-check"))
    assert verdict_of(r) == (f"Boot-verify FAIL: {rep['profile']}", "bad")
    assert "min_kv_tokens" in r.page.inner_text('#checks tr[data-check="test_6_log.py::test_log[kv_tokens]"]')
    partial = write_report(tmp_path / "p", partial=True)
    r = clean(chromium.render(partial / "report.html", "report-partial"))
    assert verdict_of(r) == (f"Boot-verify PARTIAL: {rep['profile']}", "unknown")


def test_markup_in_a_check_message_shows_as_text(chromium: Browser, tmp_path: Path) -> None:
    evil = '<script>document.title="owned"</script><img src="http://203.0.113.9/x.png">'
    rep = json.loads((H200 / "run1" / "verify-eager" / "report.json").read_text())
    checks = [dict(c, message=evil) if c["outcome"] == "failed" else c for c in rep["checks"]]
    out = write_report(tmp_path / "r", "run1", "eager", checks=checks, profile=f'tiny/cpu"><b>{evil}')
    r = clean(chromium.render(out / "report.html", "report-escaped"))
    assert r.page.locator("script").count() == 0
    assert r.page.locator('img[src^="http"]').count() == 0 and r.page.locator("b").count() == 0
    assert r.page.title() != "owned" and evil in r.text


def test_an_unreadable_report_is_unknown_not_a_pass(chromium: Browser, tmp_path: Path) -> None:
    out = write_report(tmp_path / "r")
    (out / "report.json").write_text('{"passed": true, "checks": [')
    report_html.write(out)
    r = clean(chromium.render(out / "report.html", "report-unreadable"))
    text, state = verdict_of(r)
    assert state == "unknown" and "UNKNOWN" in text and "cannot be read" in r.page.inner_text("#verdict")
    (out / "report.json").write_text(json.dumps({"checks": []}))  # no verdict at all
    report_html.write(out)
    assert 'data-state="unknown"' in (out / "report.html").read_text()


def test_the_harness_catches_requests_and_script_errors(chromium: Browser, tmp_path: Path) -> None:
    """A deliberately broken page (no CSP): an image and a stylesheet from elsewhere, a script that
    logs an error and one that throws. The harness must report each, and abort the requests."""
    bad = tmp_path / "broken.html"
    bad.write_text(
        '<!DOCTYPE html><html><head><link rel="stylesheet" href="https://203.0.113.7/s.css"></head><body>'
        '<img src="http://203.0.113.8/x.png"><script>console.error("boom")</script>'
        "<script>noSuchFunction()</script></body></html>"
    )
    r = chromium.render(bad, "harness-broken")
    assert set(r.outside_requests) >= {"https://203.0.113.7/s.css", "http://203.0.113.8/x.png"}, r.outside_requests
    assert "boom" in r.console_errors
    assert any("noSuchFunction" in e for e in r.page_errors), r.page_errors
    # Our pages carry a Content-Security-Policy: a reference that slipped through is blocked by the
    # browser and still shows, as a console error.
    page = (write_report(tmp_path / "r") / "report.html").read_text()
    leaky = tmp_path / "leaky.html"
    leaky.write_text(page.replace("<footer>", '<img src="http://203.0.113.9/y.png"><footer>'))
    assert any("Content Security Policy" in m for m in chromium.render(leaky, "harness-csp").console_errors)


# ---- the fleet page ----


def status_rows(tmp_path: Path) -> list[dict[str, Any]]:
    """Five nodes from the real status row of a vfleet-cpu container (status-cpu-node.json): one
    healthy with a passing report of its image, one whose report is gone, one whose report is
    corrupt, one whose last report failed, one unreachable (status.yml's own default row)."""
    real, unreachable = json.loads(STATUS.read_text())
    base = copy.deepcopy(real) | {
        "healthy": True,
        "balancer": "UP",
        "record_state": "deployed",
        "not_checked": [],  # a record of a deploy with every gate on (status.yml copies it from the record)
        # the weights the last rollout found, the promoted ones (status.yml copies them from the record)
        "weights": {
            "digest": "sha256:" + "77" * 32,
            "promoted": "sha256:" + "77" * 32,
            "promoted_with": "x",
            "run_id": "r",
        },
        "verify_out": str(tmp_path / "verify-out"),
    }
    rows = []
    for name in ("n1", "n2", "n3", "n4"):
        d = tmp_path / "verify-out" / "run-a" / name
        rows.append(base | {"node": name, "verify_report": str(d)})
    image = {"id": base["image_id"], "digest": DIGEST, "ref": f"registry:5000/vfleet-cpu@{DIGEST}"}
    sign_report(write_report(tmp_path / "verify-out" / "run-a" / "n1", image=image), tmp_path / "keys")
    (tmp_path / "verify-out" / "run-a" / "n3").mkdir(parents=True)
    (tmp_path / "verify-out" / "run-a" / "n3" / "report.json").write_text("{not json")
    sign_report(write_report(tmp_path / "verify-out" / "run-a" / "n4", "run1", "eager", image=image), tmp_path / "keys")
    return [*rows, unreachable | {"node": "n5"}]


def cells(r: Rendered, node: str) -> dict[str, tuple[str, str]]:
    row = r.page.locator(f'#nodes tr[data-node="{node}"]')
    out = {}
    for td in row.locator("td").all():
        out[td.get_attribute("data-col")] = (td.get_attribute("data-state"), td.inner_text())
    return out


def test_fleet_page_rows_unknowns_and_worst_of_rollup(chromium: Browser, tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    status.write_text(json.dumps(status_rows(tmp_path)))
    page = fleet_html.write(status, tmp_path / "fleet.html", recheck(tmp_path))
    r = clean(chromium.render(page, "fleet"))
    text, state = verdict_of(r)
    assert (text, state) == ("Fleet FAIL: 5 nodes", "bad")
    assert r.page.locator("#nodes tr[data-node]").count() == 5
    n1 = cells(r, "n1")
    assert n1["verify"][0] == "ok" and n1["verify"][1].startswith("PASS")
    assert r.page.locator('tr[data-node="n1"] td[data-col="verify"] a').get_attribute("href") == (
        (tmp_path / "verify-out" / "run-a" / "n1" / "report.html").as_uri()
    )
    assert n1["vllm"][0] == "ok" and n1["vllm"][1].startswith("0.30.0")
    assert "booted and boot-verified on the CPU" in n1["vllm"][1]  # what the project proved of that base
    assert "0002-kpool-tail-spec-no-slot-mapping.patch" in n1["patches"][1]
    assert n1["health"][0] == "ok" and n1["profile"][0] == "ok"
    # provenance is never green in rows no check wrote it into; neither is a digest nobody recorded
    for n in ("n1", "n2", "n3", "n4", "n5"):
        assert cells(r, n)["provenance"][0] == "unknown" and "unknown" in cells(r, n)["provenance"][1]
    assert n1["image"][0] == "unknown" and "no registry digest" in n1["image"][1]
    assert cells(r, "n2")["verify"][0] == "unknown" and "is missing" in cells(r, "n2")["verify"][1]
    assert cells(r, "n3")["verify"][0] == "unknown" and "cannot be read" in cells(r, "n3")["verify"][1]
    assert cells(r, "n4")["verify"][0] == "bad" and cells(r, "n4")["verify"][1].startswith("FAIL")
    assert all(s == "unknown" and "unreachable" in t for s, t in cells(r, "n5").values())
    assert r.page.locator('td[data-state="ok"]').count() > 0
    assert "last boot-verify: FAILED on 1 of 5 (n4)" in r.page.inner_text("#verdict")


def test_fleet_rollup_is_ok_only_when_every_cell_checks_out(chromium: Browser, tmp_path: Path) -> None:
    rows = status_rows(tmp_path)[:1]
    digest = "sha256:" + "cd" * 32
    rows[0] |= {
        "repo_digests": [f"registry:5000/vfleet-cpu@{digest}"],
        "provenance": {
            "status": "verified",
            "detail": "signed by a trusted key",
            "vulnerabilities": {"verdict": "pass", "checked": True, "line": "vulnerabilities: 0 known"},
        },
    }
    status = tmp_path / "status.json"
    status.write_text(json.dumps(rows))
    r = clean(chromium.render(fleet_html.write(status, tmp_path / "fleet.html", recheck(tmp_path)), "fleet-ok"))
    assert verdict_of(r) == ("Fleet OK: 1 node", "ok")
    # the same fleet whose report is for another image than the node runs: no longer green
    rows[0]["image_id"] = "sha256:" + "ef" * 32
    status.write_text(json.dumps(rows))
    r = clean(
        chromium.render(fleet_html.write(status, tmp_path / "fleet.html", recheck(tmp_path)), "fleet-other-image")
    )
    assert verdict_of(r)[1] == "unknown"
    assert "that report verified" in cells(r, "n1")["verify"][1]


def test_a_gate_switched_off_is_not_green(chromium: Browser, tmp_path: Path) -> None:
    """Issue 21: a deploy on a test fleet with a gate switched off says NOT CHECKED on the page, in the
    gates column and in the rollup; a record that does not say which gates ran is unknown, not green."""
    rows = status_rows(tmp_path)[:1]
    rows[0] |= {
        "repo_digests": ["registry:5000/vfleet-cpu@sha256:" + "cd" * 32],
        "provenance": {
            "status": "verified",
            "detail": "signed by a trusted key",
            "vulnerabilities": {"verdict": "pass", "checked": True, "line": "vulnerabilities: 0 known"},
        },
    }
    skipped = "promotion: the image is not checked to be promoted (vfleet_node_check_promotion false)"
    older = rows[0] | {"node": "n2"}
    del older["not_checked"]
    rows += [rows[0] | {"node": "n3", "not_checked": [skipped]}, older]
    status = tmp_path / "status.json"
    status.write_text(json.dumps(rows))
    r = clean(chromium.render(fleet_html.write(status, tmp_path / "fleet.html"), "fleet-gates"))
    assert verdict_of(r) == ("Fleet UNKNOWN: 3 nodes", "unknown")
    assert cells(r, "n1")["gates"] == ("ok", "no gate switched off")
    state, text = cells(r, "n3")["gates"]
    assert state == "unknown" and f"NOT CHECKED: {skipped}" in " ".join(text.split()), text
    assert cells(r, "n2")["gates"][0] == "unknown" and "does not say which gates ran" in cells(r, "n2")["gates"][1]
    assert "gates switched off: unknown on 2 of 3 (n3, n2)" in r.page.inner_text("#verdict")


@pytest.mark.parametrize("content", [None, "[{", '{"node": "n1"}', "[]"])
def test_an_unreadable_status_is_an_unknown_page(chromium: Browser, tmp_path: Path, content: str | None) -> None:
    status = tmp_path / "status.json"
    if content is not None:
        status.write_text(content)
    r = clean(chromium.render(fleet_html.write(status, tmp_path / "fleet.html"), "fleet-unreadable"))
    text, state = verdict_of(r)
    assert state == "unknown" and text == "Fleet UNKNOWN: 0 nodes"
    assert r.page.locator("#nodes tr[data-node]").count() == 0


def test_fleet_status_html_through_the_playbook(chromium: Browser, tmp_path: Path) -> None:
    """`vfleet fleet status --html` runs ansible/status.yml: a node on this machine whose Docker daemon does
    not answer (DOCKER_HOST names a socket that does not exist) and a node that cannot be reached; the run
    still writes every row, the page says so for each, and is not green."""
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "hosts.yml").write_text(
        json.dumps(
            {
                "all": {
                    "vars": {"vfleet_lb_kind": "none"},
                    "children": {
                        "vfleet_lb": {"hosts": {"lb": {"ansible_connection": "local"}}},
                        "vfleet_nodes": {
                            "hosts": {
                                "here": {
                                    "ansible_connection": "local",
                                    "ansible_python_interpreter": sys.executable,
                                    "vfleet_node_profile": "tiny/cpu",
                                    "vfleet_node_container_name": "vfleet-pages-no-such-container",
                                    "vfleet_node_state_dir": str(tmp_path / "state"),
                                    "vfleet_node_verify_out": str(tmp_path / "vo"),
                                },
                                "gone": {
                                    "ansible_host": "127.0.0.1",
                                    "ansible_port": 1,
                                    "ansible_connection": "ssh",
                                    "vfleet_node_profile": "tiny/cpu",
                                },
                            }
                        },
                    },
                }
            }
        )
    )
    page = tmp_path / "fleet.html"
    # An operator runs it again and again: the second run rewrites the page and its status in place.
    for run in (1, 2):
        proc = subprocess.run(
            [sys.executable, "-m", "vfleet", "fleet", "status", "-i", str(inv), "--html", str(page)],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"},
            timeout=300,
            check=False,
        )
        assert proc.returncode == 4, f"run {run}: " + proc.stdout[-3000:]  # ansible-playbook: a host was unreachable
        assert f"fleet page {page}" in proc.stdout
        rows = json.loads((tmp_path / "fleet.status.json").read_text())
        assert {r["node"] for r in rows} == {"here", "gone"}, f"run {run}: {rows}"
    r = clean(chromium.render(page, "fleet-playbook"))
    assert verdict_of(r)[1] == "bad"  # "here" serves nothing
    here, gone = cells(r, "here"), cells(r, "gone")
    assert here["health"][0] == "bad" and "container docker unreachable" in here["health"][1]
    assert "Cannot connect to the Docker daemon" in here["health"][1], here["health"]
    assert here["patches"][0] == "unknown" and "no running container" in here["patches"][1]
    assert all(s == "unknown" and "unreachable" in t for s, t in gone.values())
    shutil.rmtree(tmp_path / "state", ignore_errors=True)


def test_a_node_restored_after_a_failed_swap_is_not_green_and_links_the_evidence(tmp_path: Path) -> None:
    """restore.yml writes last_failure (target, error, the failed container's log and this run's report
    directory) on a node that went back to its previous image: serving, but the swap asked for did not
    happen. The record cell says so, fails the row, and links the report (else the log) the rescue kept."""
    report = tmp_path / "run1" / "n1"
    report.mkdir(parents=True)
    (report / "report.html").write_text("<html></html>")
    (report / "container.log").write_text("EngineCore encountered a fatal error\n")
    failure = {"target": "r/x@sha256:" + "2" * 64, "error": "Boot-verify the node: exit 1", "at": "2026-12-03T10:00Z",
               "log": str(report / "container.log"), "report": str(report)}  # fmt: skip
    row = {"node": "n1", "record_state": "deployed", "updated_at": "2026-12-03T10:01Z", "last_failure": failure}
    cell = fleet_html.node_cells(row)["record"]
    assert cell.state == "bad" and "last swap FAILED: to r/x@sha256:2222" in cell.text, cell
    assert "Boot-verify the node: exit 1" in cell.why and cell.href == (report / "report.html").resolve().as_uri()
    # No report (the start failed before boot-verify): the log is the link.
    cell = fleet_html.node_cells({**row, "last_failure": {**failure, "report": ""}})["record"]
    assert cell.href == (report / "container.log").resolve().as_uri()
    # Evidence kept on another controller: named, not linked.
    gone = {**failure, "report": "", "log": str(tmp_path / "elsewhere.log")}
    cell = fleet_html.node_cells({**row, "last_failure": gone})["record"]
    assert cell.href == "" and "is not on this controller" in cell.why
    # A later successful deploy writes a record without last_failure: green again.
    assert fleet_html.node_cells({**row, "last_failure": {}})["record"].state == "ok"
    # The record's short history (failures, oldest first, the last one included): the cell counts the earlier
    # ones and lists them newest first, and keeps them readable once the node is green again.
    older = {**failure, "target": "r/y@sha256:" + "3" * 64, "error": "Start the image: exit 125", "at": "2026-12-02"}
    cell = fleet_html.node_cells({**row, "failures": [older, failure]})["record"]
    assert cell.state == "bad" and "1 earlier failed swap(s) kept" in cell.text, cell
    assert "2026-12-02 to r/y@sha256:3333" in cell.why and "Start the image: exit 125" in cell.why, cell.why
    cell = fleet_html.node_cells({**row, "last_failure": {}, "failures": [older, failure]})["record"]
    assert cell.state == "ok" and "2 earlier failed swap(s) kept" in cell.text, cell
    first, second = cell.why.splitlines()[:2]
    assert first.startswith("2026-12-03T10:00Z to r/x") and second.startswith("2026-12-02 to r/y"), cell.why


def test_the_last_boot_verify_cell_recomputes_the_verdict_from_checks_and_signature(tmp_path: Path) -> None:
    """Issue 31: the cell showed report.json's stored PASS even when every check in it failed. It is PASS
    only when the checks pass, recomputed, and a key trusted for the verify role signed a PASSED summary of
    this very report.json; a page written without that recheck shows no PASS at all."""
    row = status_rows(tmp_path)[0]  # n1: a signed PASS of the image it runs
    d = Path(row["verify_report"])
    original = (d / "report.json").read_text()

    def cell() -> html.Cell:
        return fleet_html.node_cells(row, recheck(tmp_path))["verify"]

    assert cell().state == "ok" and cell().text.startswith("PASS"), cell()
    unchecked = fleet_html.node_cells(row)["verify"]
    assert unchecked.state == "unknown" and unchecked.why == fleet_html.NOT_RECHECKED, unchecked
    # Every check failed, `passed: true` kept, and signed again: the checks alone say FAIL.
    data = json.loads(original)
    data["checks"] = [dict(c, outcome="failed") for c in data["checks"]]
    (d / "report.json").write_text(json.dumps(data))
    sign_report(d, tmp_path / "keys")
    got = cell()
    assert got.state == "bad" and got.text.startswith("FAIL"), got
    assert "recomputed from its checks: failed: " in got.why and "(report.json says PASS)" in got.why, got.why
    # Passing checks, but report.json edited after it was signed.
    (d / "report.json").write_text(original)
    sign_report(d, tmp_path / "keys")
    (d / "report.json").write_text(original.replace('"served_model": "', '"served_model": "edited-', 1))
    got = cell()
    assert got.state == "bad" and got.text.startswith("NOT VERIFIED"), got
    assert "report.json is not the report that was signed" in got.why, got.why
    # Signed by a key not trusted for the verify role, or not signed at all.
    (d / "report.json").write_text(original)
    sign_report(d, tmp_path / "other-keys")
    assert cell().text.startswith("NOT VERIFIED") and "verification.dsse.json: " in cell().why, cell()
    (d / attestation.ATTESTATION).unlink()
    got = cell()  # nothing to check the stored PASS against: not green, and no failure either
    assert got.state == "unknown" and got.text.startswith("PASS (unsigned) "), got
    assert "no signed verification summary" in got.why, got.why
