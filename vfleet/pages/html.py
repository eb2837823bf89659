"""What both pages share: the cell states and their worst-of, the Jinja2 environment (autoescape on,
undefined names are errors), the page frame with its inline CSS and Content-Security-Policy, PNGs as
data: URIs, and an atomic write (a page is whole or absent, never half-written)."""

from __future__ import annotations

import base64
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jinja2

from vfleet import __version__

State = Literal["ok", "unknown", "bad", "info"]

#: worst last: a page's rollup is the worst state of its cells; "info" never counts.
RANK: dict[str, int] = {"info": -1, "ok": 0, "unknown": 1, "bad": 2}

#: The browser may load nothing but the page's own inline CSS and data: images: no script runs, and
#: nothing is fetched from elsewhere even if a value ever slipped through unescaped.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 24px 32px; color: #1d232a; }
header.verdict { margin: 0 -24px 16px; padding: 14px 24px; color: #fff; }
header.verdict h1 { margin: 0; font-size: 22px; }
header.verdict p { margin: 4px 0 0; }
.v-ok { background: #1f7a3d; } .v-bad { background: #b3261e; } .v-unknown { background: #8a5a00; }
table { border-collapse: collapse; margin: 8px 0 16px; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f5f7; }
td.ok, th.ok { background: #e3f4e8; }
td.bad, th.bad { background: #fbe3e1; } td.unknown, th.unknown { background: #fff3d6; }
td.msg, td .msg { white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 12px; max-width: 70ch; }
code, .mono { font-family: ui-monospace, monospace; font-size: 12px; overflow-wrap: anywhere; }
td .mono { white-space: pre-line; }
header.verdict p { font-size: 13px; }
.why { display: block; font-size: 12px; color: #5a4200; }
img.plot { max-width: 100%; border: 1px solid #d0d7de; margin: 4px 0; }
h2 { margin-top: 24px; font-size: 17px; }
"""

FRAME = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>{{ css }}</style></head>
<body>
<header class="verdict v-{{ verdict.state }}" id="verdict" data-state="{{ verdict.state }}">
<h1>{{ verdict.text }}</h1>{% for line in verdict_lines %}<p>{{ line }}</p>{% endfor %}
</header>
{% block body %}{% endblock %}
<footer><p class="why">written by vfleet {{ generator }}</p></footer>
</body></html>
"""


@dataclass(frozen=True)
class Cell:
    """One table cell: what it shows, how it is judged, why (for anything not ok), and a link."""

    text: str
    state: State = "info"
    why: str = ""
    href: str = ""


def unknown(why: str, text: str = "unknown") -> Cell:
    return Cell(text, "unknown", why)


def worst(states: Iterable[str]) -> State:
    """The worst of the states ("info" ignored); nothing judged at all is "unknown", not "ok"."""
    judged = [s for s in states if RANK.get(s, 1) >= 0]
    if not judged:
        return "unknown"
    top = max(judged, key=lambda s: RANK.get(s, 1))
    return "bad" if top == "bad" else ("ok" if top == "ok" else "unknown")


def environment(templates: dict[str, str]) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.DictLoader({"frame.html": FRAME, **templates}),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(env: jinja2.Environment, name: str, **context: Any) -> str:
    return env.get_template(name).render(csp=CSP, css=CSS, generator=__version__, **context)


def png_data_uri(path: Path) -> str:
    """The PNG at ``path`` as a data: URI (the page carries its plots)."""
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def short_digest(digest: str) -> str:
    """A digest shortened for a table cell: its first 19 and last 4 characters."""
    return digest if len(digest) <= 23 else digest[:19] + "…" + digest[-4:]
