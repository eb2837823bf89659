"""The fleet status page (`vfleet fleet status --html FILE`), built from the status JSON that
ansible/status.yml writes (one row per node) and the boot-verify report directories it names.

Per node: the image and its registry digest, the vLLM version, the patch manifest, the profile and its
digest, health (container, /health, balancer), the deployment record, the gates its deploy did not check
(NOT CHECKED on a test fleet), the weights (the model manifest its last rollout found, against the promoted
one), the last boot-verify verdict with a link to its report.html (recomputed from its checks and its signed
summary: a stored PASS alone is never shown as one), and provenance.
What could not be read (an unreachable node, a missing or unreadable report, a report of another image,
provenance nobody checked, a record that does not say which gates ran) is an explicit "unknown" with its
reason, never a green cell; the rollup at the top is the worst cell of the fleet.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet import pins
from vfleet.errors import VfleetError
from vfleet.pages import fleet_record, html
from vfleet.pages.html import Cell
from vfleet.pages.report_html import verdict as report_verdict
from vfleet.paths import versions

NAME = "fleet.html"

COLUMNS = [
    ("image", "image / registry digest"),
    ("vllm", "vLLM"),
    ("patches", "patch manifest"),
    ("profile", "profile / profiles digest"),
    ("health", "health"),
    ("record", "deployment record"),
    ("gates", "gates switched off"),
    ("weights", "weights (model manifest)"),
    ("verify", "last boot-verify"),
    ("provenance", "provenance"),
]

TEMPLATE = """{% extends "frame.html" %}
{% block body %}
<table id="nodes"><tr><th>node</th>{% for key, title in columns %}<th>{{ title }}</th>{% endfor %}</tr>
{% for n in nodes %}<tr data-node="{{ n.name }}" data-state="{{ n.state }}"><th class="{{ n.state }}">{{ n.name }}</th>
{% for key, title in columns %}{% set c = n.cells[key] %}
<td class="{{ c.state }}" data-col="{{ key }}" data-state="{{ c.state }}">
{% if c.href %}<a href="{{ c.href }}">{{ c.text }}</a>{% else %}<span class="mono">{{ c.text }}</span>{% endif %}
{% if c.why %}<span class="why">{{ c.why }}</span>{% endif %}</td>
{% endfor %}</tr>
{% endfor %}
</table>
<p class="why">Status from {{ source }}; page written {{ written }}.</p>
{% endblock %}
"""

ENV = html.environment({NAME: TEMPLATE})

#: A report directory -> (why its checks fail, why its signed summary shows no pass, whether it had no summary
#: to check): vfleet.verify.record.standing.recheck with the trusted keys, handed down by the page's command.
Recheck = Callable[[Path], tuple[list[str], list[str], bool]]
NOT_RECHECKED = (
    "report.json says PASS, but its checks and its signed summary were not rechecked (the page was written "
    "without them); `vfleet fleet status --html FILE --trusted-key verify=PUB` rechecks both"
)


def _image(row: dict[str, Any]) -> Cell:
    ref = str(row.get("image") or "")
    if not ref:
        return html.unknown("no serving container: no image")
    digests = [str(d) for d in row.get("repo_digests") or []]
    if "@sha256:" in ref:
        digests.insert(0, ref)
    text = f"{ref}\nid {html.short_digest(str(row.get('image_id') or '–'))}"
    if not digests:
        return Cell(text, "unknown", "no registry digest: the image has no RepoDigests (built or loaded on the node)")
    return Cell(text if digests[0] == ref else f"{text}\n{digests[0].partition('@')[2]}", "ok")


def _label(row: dict[str, Any], key: str, what: str) -> Cell:
    value = str(row.get(key) or "")
    if not value or value == "unknown":
        return html.unknown(f"the image carries no {what} label" if "image" in row else f"status has no {key}")
    return Cell(value, "ok")


def _vllm(row: dict[str, Any]) -> Cell:
    """The node's vLLM base (its image label), with what the project has proven about that base
    (versions.json `bases.V.proven`): booted and verified where, or built and kernel-tested only."""
    cell = _label(row, "vllm_version", "org.vfleet.vllm.version")
    if cell.state != "ok":
        return cell
    try:
        bases = pins.parse(versions()).bases
    except VfleetError as exc:
        return html.unknown(f"{cell.text}: {exc}")
    if cell.text not in bases:
        return html.unknown(
            f"vLLM {cell.text} is not a base of this checkout's versions.json ({', '.join(bases)}): "
            "the gates of this controller cannot check it",
            cell.text,
        )
    proven = bases[cell.text].proven
    return Cell(cell.text, "ok", f"vLLM {cell.text}: {proven}" if proven else "")


def _patches(row: dict[str, Any]) -> Cell:
    if row.get("patches_error"):
        return html.unknown(f"manifest not read: {row['patches_error']}")
    if "patches" not in row:
        return html.unknown("the status JSON has no patch manifest (written by an older status.yml)")
    names = [str(p) for p in row.get("patches") or []]
    digest = str(row.get("patches_digest") or "")
    text = "\n".join(names) if names else "(no patches)"
    return Cell(f"{text}\nseries {html.short_digest(digest)}" if digest else text, "ok")


def _profile(row: dict[str, Any]) -> Cell:
    profile = str(row.get("profile") or "")
    digest = str(row.get("profiles_digest") or "")
    if not profile or profile == "?":
        return html.unknown("no profile label on the container and none in the inventory")
    if not digest or digest == "unknown":
        return Cell(profile, "unknown", "the image carries no profiles digest label")
    return Cell(f"{profile}\n{html.short_digest(digest)}", "ok")


def _health(row: dict[str, Any]) -> Cell:
    container = str(row.get("container") or "?")
    balancer = str(row.get("balancer") or "n/a")
    text = f"container {container}, balancer {balancer}"
    held = row.get("out_of_pool") or {}
    if isinstance(held, dict) and held.get("why") == "verify" and container == "running":
        # A fleet verify took it out (roles/vfleet_node/tasks/verify.yml): on purpose, for a while.
        return Cell(
            f"out for a verify\n{text}",
            "unknown",
            f"fleet verify run {held.get('run_id') or '?'} since {held.get('since') or '?'}",
        )
    if isinstance(held, dict) and held.get("why") == "failed verify":
        report = str(held.get("report") or "")
        page = Path(report) / "report.html"
        href = page.resolve().as_uri() if report and page.exists() else ""
        return Cell(
            f"out of the pool: failed verify\n{text}",
            "bad",
            f"fleet verify run {held.get('run_id') or '?'}: {report}",
            href,
        )
    if row.get("docker_error"):
        return Cell(f"not healthy\n{text}", "bad", str(row["docker_error"]))
    if row.get("healthy") is True and container == "running" and balancer in ("UP", "n/a"):
        return Cell(f"healthy\n{text}", "ok")
    if row.get("healthy") is True and container == "running":
        return Cell(f"healthy, out of the pool\n{text}", "bad", f"the balancer reports {balancer}")
    return Cell(f"not healthy\n{text}", "bad", "/health did not answer 200 on the node")


def _read_report(d: Path) -> tuple[dict[str, Any] | None, str]:
    src = d / "report.json"
    try:
        data = json.loads(src.read_text())
    except FileNotFoundError:
        return None, f"{src} is missing"
    except (OSError, ValueError) as e:
        return None, f"{src} cannot be read: {e}"
    if not isinstance(data, dict):
        return None, f"{src} is not a JSON object"
    return data, ""


def _verify(row: dict[str, Any], recheck: Recheck | None = None) -> Cell:
    """The newest readable report of this node among the record's and those under verify_out/*/NODE,
    preferring one of the image the node runs now; its verdict recomputed (_standing), never its stored
    `passed` alone."""
    node = str(row.get("node") or "")
    dirs: list[Path] = [Path(str(row["verify_report"]))] if row.get("verify_report") else []
    if row.get("verify_out") and node:
        dirs += sorted(Path(str(row["verify_out"])).glob(f"*/{node}"))
    if not dirs:
        return html.unknown("no boot-verify report recorded for this node")
    reports: list[tuple[Path, dict[str, Any]]] = []
    reasons: list[str] = []
    for d in dict.fromkeys(dirs):
        rep, why = _read_report(d)
        if rep is None:
            reasons.append(why)
        else:
            reports.append((d, rep))
    if not reports:
        return html.unknown("; ".join(reasons))
    image_id = str(row.get("image_id") or "")
    same = [r for r in reports if image_id and ((r[1].get("image") or {}).get("id") == image_id)]
    d, rep = max(same or reports, key=lambda r: str(r[1].get("started") or ""))
    page = d / "report.html"
    href = (page if page.is_file() else d / "report.json").resolve().as_uri()
    v = _standing(report_verdict(rep), d, recheck)
    text = f"{v.text} {rep.get('started') or ''}".strip()
    if not same:
        seen = (rep.get("image") or {}).get("id") or "no image id"
        why = f"that report verified {html.short_digest(str(seen))}; the node runs {html.short_digest(image_id or '?')}"
        return Cell(text, "unknown", why, href)
    return Cell(text, v.state, v.why, href)


def _standing(stored: Cell, d: Path, recheck: Recheck | None) -> Cell:
    """The verdict of the report in D: a PASS only when its checks pass (recomputed) and a trusted key
    signed a PASSED summary of it; the stored verdict otherwise only where it is no PASS."""
    if recheck is None:
        return html.unknown(NOT_RECHECKED, "PASS?") if stored.state == "ok" else stored
    checks, signature, unsigned = recheck(d)
    said = f" (report.json says {stored.text})" if stored.state == "ok" else ""
    if checks:
        return Cell("FAIL", "bad", f"recomputed from its checks: {'; '.join(checks)}{said}")
    if stored.state != "ok":
        return stored
    if signature and unsigned:
        # Nothing to check the stored PASS against (a run that signed nothing, or no verify-role key
        # declared): not green, and no failure either.
        return html.unknown(f"its checks pass, but {'; '.join(signature)}{said}", "PASS (unsigned)")
    if signature:
        return Cell("NOT VERIFIED", "bad", f"its checks pass, but {'; '.join(signature)}{said}")
    return stored


def _provenance(row: dict[str, Any]) -> Cell:
    prov = row.get("provenance")
    if not isinstance(prov, dict):
        return html.unknown("no provenance check ran for this image", "unknown (not checked)")
    status, detail = str(prov.get("status") or ""), str(prov.get("detail") or "")
    if status == "verified":
        return _vulnerabilities(prov.get("vulnerabilities"), detail)
    if status == "failed":
        return Cell("failed", "bad", detail)
    return html.unknown(detail or f"provenance status {status!r}", status or "unknown")


def _vulnerabilities(vulns: Any, detail: str) -> Cell:
    """A verified image is green only when the vulnerability policy passed a report that was checked: a
    warning, an unchecked report (the database was unreachable) or a row that does not say is not."""
    if not isinstance(vulns, dict):
        return html.unknown(f"{detail}; the vulnerability policy's verdict is not recorded", "verified, vulns ?")
    verdict, line = str(vulns.get("verdict") or ""), str(vulns.get("line") or "")
    if verdict == "fail":
        return Cell("vulnerable", "bad", line)
    if verdict == "pass" and vulns.get("checked") is True:
        return Cell("\n".join(["verified", *_excused(vulns)]), "ok", f"{detail}")
    if verdict == "warn" and vulns.get("checked") is True:
        return html.unknown(line, "verified, vulns WARN")
    return html.unknown(line or f"vulnerability verdict {verdict!r}", "verified, vulns NOT CHECKED")


def _excused(vulns: dict[str, Any]) -> list[str]:
    """Each finding the policy let through, with its expiry: an allow entry's or an ignore rule's."""
    allowed = [f"allowed: {a}" for a in vulns.get("allowed") or []]
    return allowed + [f"ignored: {i}" for i in vulns.get("ignored") or []]


def node_cells(row: dict[str, Any], recheck: Recheck | None = None) -> dict[str, Cell]:
    """The cells of one status row; an unreachable node has every cell unknown, with the reason."""
    if row.get("container") == "unreachable":
        why = "node unreachable: status.yml could not read it"
        return {key: html.unknown(why) for key, _ in COLUMNS}
    return {
        "image": _image(row),
        "vllm": _vllm(row),
        "patches": _patches(row),
        "profile": _profile(row),
        "health": _health(row),
        "record": fleet_record.record(row),
        "gates": fleet_record.gates(row),
        "weights": fleet_record.weights(row),
        "verify": _verify(row, recheck),
        "provenance": _provenance(row),
    }


def load(path: Path) -> tuple[list[dict[str, Any]], str]:
    """The rows of a status JSON, or no rows and the reason it could not be read."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return [], f"{path} is missing (did the status playbook run to its end?)"
    except (OSError, ValueError) as e:
        return [], f"{path} cannot be read: {e}"
    if not isinstance(data, list) or not all(isinstance(r, dict) and r.get("node") for r in data):
        return [], f"{path} is not a list of node rows (as ansible/status.yml writes)"
    return data, ""


@dataclass(frozen=True)
class Node:
    name: str
    cells: dict[str, Cell]
    state: str


def page(rows: list[dict[str, Any]], source: str, error: str = "", recheck: Recheck | None = None) -> str:
    nodes = []
    for row in rows:
        cells = node_cells(row, recheck)
        nodes.append(Node(str(row["node"]), cells, html.worst(c.state for c in cells.values())))
    state = html.worst(n.state for n in nodes) if nodes and not error else "unknown"
    lines = [error] if error else ([] if nodes else ["the status names no node"])
    for key, title in COLUMNS:
        for s, word in (("bad", "FAILED"), ("unknown", "unknown")):
            hit = [n.name for n in nodes if n.cells[key].state == s]
            if hit:
                lines.append(f"{title}: {word} on {len(hit)} of {len(nodes)} ({', '.join(hit)})")
    word = {"ok": "OK", "bad": "FAIL", "unknown": "UNKNOWN"}[state]
    return html.render(
        ENV,
        NAME,
        title=f"fleet {word}",
        verdict=Cell(f"Fleet {word}: {len(nodes)} node{'s' if len(nodes) != 1 else ''}", state),
        verdict_lines=lines,
        columns=COLUMNS,
        nodes=nodes,
        source=source,
        written=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
    )


def write(status_json: Path, out: Path, recheck: Recheck | None = None) -> Path:
    """Write the fleet page for ``status_json`` to ``out``, each last boot-verify rechecked by RECHECK
    (none: no report shows as PASS); returns ``out``."""
    rows, error = load(status_json)
    return html.write_atomic(out, page(rows, str(status_json), error, recheck))
