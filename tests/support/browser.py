"""Headless Chromium (Debian's `chromium`, driven by Playwright over the DevTools protocol) for the
page tests: open a page from its file, keep a full-page screenshot, and report what the page did
that it must not: console errors, uncaught script errors, and every request other than the page's
own file and data: URIs (each such request is recorded, then aborted, so nothing leaves the machine).

Screenshots go to .cache/pages/ (PAGES_DIR), one PNG per rendered page, named by the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conftest import REPO

from vfleet.pages.chromium import ensure_chromium

PAGES_DIR = REPO / ".cache" / "pages"

#: Launch flags for root on a machine without a display or GPU; Playwright adds --headless and its own
#: fresh --user-data-dir.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class Rendered:
    url: str
    screenshot: Path
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    outside_requests: list[str] = field(default_factory=list)
    text: str = ""
    page: Any = None  # the live Playwright page, for DOM queries inside the `browser` context

    def problems(self) -> list[str]:
        return (
            [f"console error: {m}" for m in self.console_errors]
            + [f"script error: {m}" for m in self.page_errors]
            + [f"request leaving the file: {u}" for u in self.outside_requests]
        )


class Browser:
    def __init__(self, pw_browser: Any) -> None:
        self._b = pw_browser

    def render(self, path: Path, name: str, width: int = 1280) -> Rendered:
        """Open ``path``, wait for it to load, screenshot it to PAGES_DIR/``name``.png."""
        url = path.resolve().as_uri()
        PAGES_DIR.mkdir(parents=True, exist_ok=True)
        shot = PAGES_DIR / f"{name}.png"
        out = Rendered(url=url, screenshot=shot)
        page = self._b.new_page(viewport={"width": width, "height": 900})
        page.on("console", lambda m: m.type == "error" and out.console_errors.append(m.text))
        page.on("pageerror", lambda e: out.page_errors.append(str(e)))

        def outside(req_url: str) -> bool:
            if req_url == url or req_url.startswith("data:"):
                return False
            if req_url not in out.outside_requests:
                out.outside_requests.append(req_url)
            return True

        # Every request is seen twice: by the router (which aborts it, so it never leaves the machine)
        # and by the request event (which also sees what bypasses routing).
        page.route("**/*", lambda r: r.abort() if outside(r.request.url) else r.continue_())
        page.on("request", lambda r: outside(r.url))
        page.goto(url, wait_until="load")
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(shot), full_page=True)
        out.text = page.inner_text("body")
        out.page = page
        return out


@contextmanager
def browser() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    exe = ensure_chromium()
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=FLAGS)
        try:
            yield Browser(b)
        finally:
            b.close()
